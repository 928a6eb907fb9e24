/**
 * `vram-preflight verify` against the real control plane of scripts/cluster.sh,
 * up to where a kubelet is needed: pods made with the real kubectl (wrapped
 * by the built post-renderer, or not), their status written as a kubelet
 * writes it (Running, Ready, a start time), identities of service accounts
 * bound to Roles as an operator would bind them, and the API server's audit
 * log (which logs pods and their exec and log subresources) to see which
 * requests verify made. What needs a node (the restart itself) is in
 * test/verify/node.test.ts.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { Ajv } from 'ajv';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { existsSync } from 'node:fs';
import { loadConnection } from '../../src/kubernetes/kubeconfig.js';
import { KubernetesClient } from '../../src/kubernetes/client.js';
import { restartOnce } from '../../src/verify/restart.js';
import type { Target } from '../../src/verify/model.js';
import { api, sleep } from '../apiserver/harness.js';
import { auditEvents, bundle, cluster, kubectl, kubectlOk, namespace, removeTempDirs, ROOT, runBundle, tempDir, type Cluster, type Plain, type Run } from '../audit/harness.js';

const id = `${process.pid.toString(36)}${Date.now().toString(36).slice(-5)}`;
const NS = `verify-${id}`;

let c: Cluster;
let file = '';
/** Kubeconfigs of the service accounts: `verifier` has the Role of the docs, `narrow` a Role without exec and events. */
const kubeconfigs: Record<'verifier' | 'narrow', string> = { verifier: '', narrow: '' };

const schema = JSON.parse(readFileSync(path.join(ROOT, 'src/verify.schema.json'), 'utf8'));
const validate = new Ajv({ strict: true, allErrors: true }).compile(schema);

const vllm = (extra: Plain = {}): Plain => ({
  name: 'model',
  image: 'vllm/vllm-openai:v0.10.1',
  args: ['--model', 'Qwen/Qwen3-8B', '--gpu-memory-utilization', '0.9'],
  resources: { limits: { 'nvidia.com/gpu': '1' } },
  ...extra,
});
const sidecar: Plain = { name: 'metrics', image: 'busybox:1.36', command: ['sleep', 'infinity'] };
const pod = (name: string, containers: Plain[], labels: Record<string, string> = {}): Plain => ({ apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace: NS, labels }, spec: { containers } });

/** The built post-renderer's output for a pod: what a chart rendered through it holds. */
function wrapped(p: Plain): string {
  const r = runBundle(file, ['--registry-lookup=never'], { HOME: tempDir('render') }, stringify(p));
  if (r.status !== 0) throw new Error(`post-renderer: ${r.stderr}`);
  return r.stdout;
}

/** The status a kubelet writes for a running, ready pod: started at 12:00:00, Ready 90 s later. */
function markRunning(name: string, containers: string[], { ready = true, restarts = 0 } = {}): void {
  const status = {
    phase: 'Running',
    startTime: '2026-12-05T12:00:00Z',
    conditions: [{ type: 'Ready', status: ready ? 'True' : 'False', lastTransitionTime: '2026-12-05T12:01:30Z' }],
    containerStatuses: containers.map((container, i) => ({
      name: container,
      ready,
      restartCount: restarts,
      image: 'vllm/vllm-openai:v0.10.1',
      imageID: '',
      containerID: `containerd://${id}${i}`,
      started: true,
      state: { running: { startedAt: '2026-12-05T12:00:05Z' } },
    })),
  };
  kubectlOk(['-n', NS, 'patch', 'pod', name, '--subresource=status', '--type=merge', '-p', JSON.stringify({ status })]);
}

/** A kubeconfig holding a service account's token, as an operator's would for a bound identity. */
function tokenKubeconfig(serviceAccount: string): string {
  const token = kubectlOk(['-n', NS, 'create', 'token', serviceAccount, '--duration=1h']).trim();
  const file = path.join(tempDir(`kubeconfig-${serviceAccount}`), 'config');
  writeFileSync(file, stringify({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [{ name: 'c', cluster: { server: c.api, 'certificate-authority-data': readFileSync(c.caCert).toString('base64') } }],
    users: [{ name: serviceAccount, user: { token } }],
    contexts: [{ name: 'c', context: { cluster: 'c', user: serviceAccount } }],
    'current-context': 'c',
  }));
  return file;
}

function verify(args: readonly string[], as: keyof typeof kubeconfigs = 'verifier'): Run {
  return runBundle(file, ['verify', '--namespace', NS, '--registry-lookup=never', ...args], { KUBECONFIG: kubeconfigs[as], HOME: tempDir('home') });
}

/** The audit log's requests by a service account of this namespace since `from`. */
function requestsBy(serviceAccount: string, from: number): Plain[] {
  return auditEvents(from).events.filter((e) => e.user?.username === `system:serviceaccount:${NS}:${serviceAccount}` && e.stage === 'ResponseComplete');
}
const logSize = (): number => auditEvents().end;

const restartCount = (name: string): number => JSON.parse(kubectlOk(['-n', NS, 'get', 'pod', name, '-o', 'json'])).status.containerStatuses[0].restartCount;

/** The Role of docs/restart-race.md ("With vram-preflight verify"), as the doc gives it. */
function docsRole(): Plain {
  const doc = readFileSync(path.join(ROOT, 'docs/restart-race.md'), 'utf8');
  const block = /```yaml\n(# The Role verify needs[\s\S]*?)```/.exec(doc);
  if (!block) throw new Error('docs/restart-race.md has no Role block for verify');
  return parse(block[1]!) as Plain;
}

beforeAll(async () => {
  c = cluster();
  file = bundle();
  await namespace(NS, {});
  const role = docsRole();
  expect(role.kind).toBe('Role');
  kubectlOk(['-n', NS, 'apply', '-f', '-'], { input: JSON.stringify({ ...role, metadata: { ...role.metadata, namespace: NS } }) });
  kubectlOk(['-n', NS, 'create', 'role', 'narrow', '--verb=get,list,watch', '--resource=pods,pods/log']);
  for (const sa of ['verifier', 'narrow'] as const) {
    kubectlOk(['-n', NS, 'create', 'serviceaccount', sa]);
    kubectlOk(['-n', NS, 'create', 'rolebinding', sa, `--role=${sa === 'verifier' ? String(role.metadata.name) : 'narrow'}`, `--serviceaccount=${NS}:${sa}`]);
    kubeconfigs[sa] = tokenKubeconfig(sa);
  }
  kubectlOk(['create', '-f', '-'], {
    input: [
      wrapped(pod('wrapped', [vllm()], { app: 'one' })),
      wrapped(pod('with-sidecar', [sidecar, vllm()], { app: 'two' })),
      wrapped(pod('with-sidecar-2', [sidecar, vllm()], { app: 'two' })),
      stringify(pod('plain', [vllm()])),
      wrapped(pod('played-1', [vllm()])),
      wrapped(pod('played-2', [vllm()])),
      wrapped(pod('played-3', [vllm()])),
      wrapped(pod('pending', [vllm()])),
      wrapped(pod('restarted', [vllm()])),
    ].join('---\n'),
  });
  markRunning('wrapped', ['model']);
  markRunning('with-sidecar', ['metrics', 'model']);
  markRunning('with-sidecar-2', ['metrics', 'model']);
  markRunning('plain', ['model']);
  markRunning('restarted', ['model'], { restarts: 2 });
  for (const name of ['played-1', 'played-2', 'played-3']) markRunning(name, ['model']);
}, 120_000);

afterAll(() => {
  kubectl(['delete', 'namespace', NS, '--wait=false']);
  removeTempDirs();
});

describe('without --yes: the checks and the plan, and nothing done', () => {
  it('a wrapped, Ready pod: every check holds, the plan, exit 0; restartCount unchanged and no exec in the audit log', () => {
    const from = logSize();
    const run = verify(['--pod', 'wrapped', '--repeat', '3']);
    expect(run.stderr).toBe('');
    expect(run.status).toBe(0);
    const out = run.stdout;
    expect(out).toContain(`verify: pod ${NS}/wrapped, container "model" (image vllm/vllm-openai:v0.10.1)`);
    expect(out).toMatch(/\n {2}ok {5}wrapped: container "model" is wrapped: its start runs the vram-preflight wait/);
    expect(out).toMatch(/\n {2}ok {5}ready: {3}pod \S+\/wrapped is Running and Ready; container "model" running since 2026-12-05T12:00:05Z, ready, restartCount 0/);
    expect(out).toContain('ok     rbac:    RBAC allows all it does in namespace');
    expect(out).toContain('cold start: 90.0 s (status.startTime 2026-12-05T12:00:00Z to Ready 2026-12-05T12:01:30Z)');
    expect(out).toContain("Plan: kill -TERM 1 in container \"model\" (/bin/sh -c 'kill -TERM 1', through the exec API), 3 times, one after the other, each after the first --round-gap 10m15s after the previous restart, as the kubelet backs off any exit of a container within 10m of its last restart");
    expect(out.trimEnd().split('\n').at(-1)).toBe('result: plan only, nothing was done; run the same with --yes to do it (exit code 0)');
    expect(restartCount('wrapped')).toBe(0);
    const requests = requestsBy('verifier', from);
    // The audit log saw verify read the pod (so it would see an exec too), and nothing else of pods.
    expect(requests.some((e) => e.verb === 'get' && e.objectRef?.name === 'wrapped' && e.objectRef?.subresource === undefined)).toBe(true);
    expect(requests.filter((e) => e.objectRef?.subresource !== undefined || !['get', 'list', 'watch'].includes(e.verb))).toEqual([]);
  });

  it('--output json: the same, valid against src/verify.schema.json', () => {
    const run = verify(['--pod', 'wrapped', '--output', 'json']);
    expect(run.status).toBe(0);
    const report = JSON.parse(run.stdout);
    expect(validate(report), JSON.stringify(validate.errors)).toBe(true);
    expect(report.result).toBe('plan');
    expect(report.before.map((c: Plain) => [c.name, c.ok])).toEqual([['wrapped', true], ['ready', true], ['rbac', true]]);
    expect(report.target.coldStart).toEqual({ seconds: 90, source: 'pod', from: '2026-12-05T12:00:00Z', to: '2026-12-05T12:01:30Z' });
    expect(report.rounds).toEqual([]);
  });

  it('a selector that matches one pod; the only vLLM container of a pod with a sidecar; a cold start that cannot be read says so', () => {
    const one = verify(['--selector', 'app=one', '--output', 'json']);
    expect(JSON.parse(one.stdout).target).toMatchObject({ pod: 'wrapped', podChosenBy: '--selector app=one (the one pod it matches)' });
    const sidecarPod = JSON.parse(verify(['--pod', 'with-sidecar', '--output', 'json']).stdout);
    expect(sidecarPod.target).toMatchObject({ container: 'model', containerChosenBy: "the pod's only vLLM container" });
    const restarted = verify(['--pod', 'restarted']);
    expect(restarted.status).toBe(0);
    expect(restarted.stdout).toContain('cold start: unknown: its containers have restarted 2 time(s) since the pod started, so its Ready time is not a cold start\'s: give one with --cold-start');
    expect(verify(['--pod', 'restarted', '--cold-start', '2m']).stdout).toContain('cold start: 120.0 s (--cold-start)');
  });
});

describe('what stops it before anything happens', () => {
  it('a container that is not wrapped: the report says why and the fix, exit 3; with --yes nothing is done either', () => {
    const from = logSize();
    for (const args of [[], ['--yes']]) {
      const run = verify(['--pod', 'plain', ...args]);
      expect(run.status).toBe(3);
      expect(run.stderr).toBe('');
      expect(run.stdout).toMatch(/FAILED wrapped: container "model" is not wrapped \(unprotected\): no vram-preflight admission webhook is installed/);
      expect(run.stdout).toMatch(/fix: install it \(helm install vram-preflight deploy\/webhook, docs\/webhook.md\)/);
      expect(run.stdout.trimEnd().split('\n').at(-1)).toMatch(/^result: not wrapped/);
    }
    expect(requestsBy('verifier', from).filter((e) => e.objectRef?.subresource === 'exec')).toEqual([]);
    expect(restartCount('plain')).toBe(0);
  });

  it('missing RBAC is named, with what each permission is for, before any action: exit 1, nothing on stdout, no exec', () => {
    const from = logSize();
    const run = verify(['--pod', 'wrapped', '--yes'], 'narrow');
    expect(run.status).toBe(1);
    expect(run.stdout).toBe('');
    expect(run.stderr).toContain(`FAILED rbac: RBAC does not allow create pods/exec (to send the signal (the exec WebSocket: create, from Kubernetes 1.35)), get pods/exec (to send the signal (the exec WebSocket is a GET)), list events (to find BackOff events) in namespace ${NS}`);
    expect(run.stderr).toContain('error CANNOT_VERIFY: pod');
    expect(run.stderr).toContain('rbac failed (above); nothing was done');
    expect(requestsBy('narrow', from).filter((e) => e.objectRef?.subresource === 'exec')).toEqual([]);
  });

  it('a pod that is not Running and Ready: exit 1, the state and the fix', () => {
    const run = verify(['--pod', 'pending', '--yes']);
    expect(run.status).toBe(1);
    expect(run.stdout).toBe('');
    expect(run.stderr).toMatch(/FAILED ready: pod \S+\/pending is not Running and Ready: phase Pending, Ready False, container "model" not started/);
    expect(run.stderr).toContain(`fix: wait until it is (kubectl -n ${NS} wait --for=condition=Ready pod/pending --timeout=10m), then run verify again`);
  });

  it('a selector that matches no pod (exit 1) or two (exit 2, both listed); a pod that does not exist (exit 1)', () => {
    const none = verify(['--selector', 'app=nothing']);
    expect([none.status, none.stdout]).toEqual([1, '']);
    expect(none.stderr).toContain(`error CANNOT_VERIFY: --selector app=nothing matches no running pod in namespace ${NS}`);
    const two = verify(['--selector', 'app=two']);
    expect([two.status, two.stdout]).toEqual([2, '']);
    expect(two.stderr).toContain(`error USAGE: --selector app=two matches 2 pods in namespace ${NS}: with-sidecar (Running), with-sidecar-2 (Running); verify restarts one pod, and does not pick one for you`);
    expect(two.stderr).toContain('fix: name one with --pod (e.g. --pod with-sidecar), or narrow the selector');
    const missing = verify(['--pod', 'nope']);
    expect(missing.status).toBe(1);
    expect(missing.stderr).toContain(`error CANNOT_VERIFY: pod ${NS}/nope does not exist`);
  });

  it('usage: no namespace, no pod or both, a container that is not there or runs no vLLM, a bad duration or repeat (exit 2)', () => {
    const bare = runBundle(file, ['verify', '--pod', 'wrapped'], { KUBECONFIG: kubeconfigs.verifier, HOME: tempDir('home') });
    expect([bare.status, bare.stderr]).toEqual([2, "vram-preflight: error USAGE: no --namespace\n  fix: name the pod's namespace: --namespace NS (verify restarts a container and does not take a default)\n"]);
    expect(verify([]).stderr).toContain('error USAGE: no pod: give --pod or --selector');
    expect(verify(['--pod', 'a', '--selector', 'b=c']).stderr).toContain('error USAGE: --pod and --selector both given');
    const absent = verify(['--pod', 'with-sidecar', '--container', 'nope']);
    expect([absent.status, absent.stdout]).toEqual([2, '']);
    expect(absent.stderr).toContain(`error USAGE: pod ${NS}/with-sidecar has no container "nope" (its containers: metrics, model)`);
    const notVllm = verify(['--pod', 'with-sidecar', '--container', 'metrics']);
    expect(notVllm.status).toBe(2);
    expect(notVllm.stderr).toContain('container "metrics" of pod');
    expect(notVllm.stderr).toContain('fix: name the vLLM container: --container model');
    expect(verify(['--pod', 'wrapped', '--timeout', '10']).stderr).toContain('error USAGE: --timeout is "10", not a duration\n  fix: write it as kubectl does: a number and a unit (ms, s, m, h), e.g. --timeout=90s or --timeout=10m');
    expect(verify(['--pod', 'wrapped', '--repeat', '0']).status).toBe(2);
    expect(verify(['--pod', 'wrapped', '--yes=true']).stderr).toContain('option --yes takes no value');
  });
});

describe('with --yes, without a kubelet: the exec the API server cannot open', () => {
  it('the signal goes to the API server (the audit log has the exec) and its refusal is the error, exit 1, nothing on stdout', () => {
    const from = logSize();
    const run = verify(['--pod', 'wrapped', '--yes']);
    expect(run.status).toBe(1);
    expect(run.stdout).toBe('');
    expect(run.stderr).toMatch(/error CANNOT_VERIFY: the API server could not run the signal in container "model" on node \(none\): HTTP 400 BadRequest: pod wrapped does not have a host assigned \(no restart was done\)/);
    const execs = requestsBy('verifier', from).filter((e) => e.objectRef?.subresource === 'exec');
    expect(execs.map((e) => [e.verb, e.objectRef.name, e.responseStatus?.code])).toEqual([['get', 'wrapped', 400]]);
    expect(execs[0]!.requestURI).toContain('command=%2Fbin%2Fsh&command=-c&command=kill+-TERM+1&container=model');
    expect(restartCount('wrapped')).toBe(0);
  });
});

/**
 * The round after the signal, against the real API server: its watch, its
 * events and the evidence it assembles. Without a node no kubelet restarts
 * the container, so the test plays the kubelet's part: it writes the pod's
 * status as the kubelet does through a restart (the container terminated,
 * a new one with restartCount + 1, then ready) and, for a failed start, the
 * BackOff event the kubelet records. Without a node the API server gives an
 * empty log: the round says the preflight's lines are missing. On the node,
 * test/verify/node.test.ts runs the same with the real kubelet.
 */
describe('the round after the signal: the watch, the events, the evidence (the kubelet\'s part played by the test)', () => {
  let client: KubernetesClient;
  const targetOf = async (name: string): Promise<Target> => {
    const p = (await api('GET', `/api/v1/namespaces/${NS}/pods/${name}`)).json();
    return { namespace: NS, pod: name, uid: p.metadata.uid, container: 'model', podChosenBy: '--pod', containerChosenBy: '--container', restartCount: 0, coldStart: { ms: 90_000, source: 'pod' } };
  };
  const status = (name: string, s: Plain) => kubectlOk(['-n', NS, 'patch', 'pod', name, '--subresource=status', '--type=merge', '-p', JSON.stringify({ status: s })]);
  const container = (extra: Plain) => ({ name: 'model', image: 'vllm/vllm-openai:v0.10.1', imageID: '', started: true, ...extra });
  const ready = (isReady: boolean) => [{ type: 'Ready', status: isReady ? 'True' : 'False', lastTransitionTime: new Date().toISOString().replace(/\.\d+Z$/, 'Z') }];
  const noExec = async () => ({ protocol: 'v5.channel.k8s.io', stdout: '', stderr: '', status: { status: 'Success' }, exitCode: 0 });

  beforeAll(() => {
    client = new KubernetesClient(loadConnection({ kubeconfig: c.kubeconfig, env: {}, readFile: (f) => readFileSync(f, 'utf8'), exists: existsSync }), { requestTimeoutMs: 10_000, env: {}, maxBodyBytes: 8 << 20, maxSockets: 4, userAgent: 'vram-preflight-test' });
  });
  afterAll(() => client?.close());

  it('a clean restart: the watch sees the new container Ready, restartCount +1, no BackOff; a log without the preflight\'s lines fails its check', async () => {
    const target = await targetOf('played-1');
    const kubelet = async (): Promise<void> => {
      await sleep(300);
      status('played-1', { conditions: ready(false), containerStatuses: [container({ ready: false, restartCount: 0, containerID: `containerd://${id}0`, state: { terminated: { exitCode: 0, reason: 'Completed', containerID: `containerd://${id}0` } } })] });
      await sleep(300);
      status('played-1', { containerStatuses: [container({ ready: false, restartCount: 1, containerID: `containerd://${id}n`, state: { running: { startedAt: new Date().toISOString() } }, lastState: { terminated: { exitCode: 0, reason: 'Completed', containerID: `containerd://${id}0` } } })] });
      await sleep(700);
      status('played-1', { conditions: ready(true), containerStatuses: [container({ ready: true, restartCount: 1, containerID: `containerd://${id}n`, state: { running: { startedAt: new Date().toISOString() } }, lastState: { terminated: { exitCode: 0, reason: 'Completed', containerID: `containerd://${id}0` } } })] });
    };
    let played: Promise<void> | undefined;
    const round = await restartOnce(client, { target, round: 1, readyBy: Date.now() + 30_000, timeoutMs: 30_000, marginMs: 30_000, signal: async () => ((played = kubelet()), noExec()) }, true);
    await played;
    expect(round.restartCount).toEqual({ before: 0, after: 1 });
    expect(round.readyAfterMs).toBeGreaterThanOrEqual(1200);
    expect(round.readyAfterMs).toBeLessThan(30_000);
    expect(round.backOff).toEqual([]);
    expect(round.failedStarts).toEqual([]);
    // Without a node the API server has no log to give (an empty one): no line of the preflight, which the check says.
    expect(round.preflight.lines).toEqual([]);
    expect(round.checks.find((ch) => ch.name === 'preflight-ran')!.detail).toBe("no line of the preflight in the new container's log");
    const checks = Object.fromEntries(round.checks.map((ch) => [ch.name, ch.ok]));
    expect(checks).toEqual({ 'ready-again': true, 'one-restart': true, 'no-backoff': true, 'preflight-ran': false, 'no-vllm-error': true, 'restart-time': true });
  });

  it('a failed start on the way: restartCount +2, the failed start\'s exit, and the BackOff event counted since the signal only', async () => {
    const target = await targetOf('played-2');
    const event = (count: number) => ({
      apiVersion: 'v1',
      kind: 'Event',
      metadata: { name: `played-2.backoff`, namespace: NS },
      involvedObject: { kind: 'Pod', namespace: NS, name: 'played-2', uid: target.uid, fieldPath: 'spec.containers{model}' },
      reason: 'BackOff',
      message: 'Back-off restarting failed container model in pod played-2',
      type: 'Warning',
      count,
      lastTimestamp: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
      source: { component: 'kubelet' },
    });
    // A BackOff from before the signal: not this round's.
    expect((await api('POST', `/api/v1/namespaces/${NS}/events`, event(2))).status).toBe(201);
    const kubelet = async (): Promise<void> => {
      await sleep(300);
      status('played-2', { conditions: ready(false), containerStatuses: [container({ ready: false, restartCount: 1, containerID: `containerd://${id}f`, state: { terminated: { exitCode: 1, reason: 'Error', message: 'the first start failed', containerID: `containerd://${id}f` } }, lastState: { terminated: { exitCode: 0, containerID: `containerd://${id}1` } } })] });
      await sleep(300);
      const e = (await api('GET', `/api/v1/namespaces/${NS}/events/played-2.backoff`)).json();
      expect((await api('PUT', `/api/v1/namespaces/${NS}/events/played-2.backoff`, { ...e, count: 3 })).status).toBe(200);
      status('played-2', { containerStatuses: [container({ ready: false, restartCount: 2, containerID: `containerd://${id}g`, state: { running: { startedAt: new Date().toISOString() } }, lastState: { terminated: { exitCode: 1, reason: 'Error', containerID: `containerd://${id}f` } } })] });
      await sleep(300);
      status('played-2', { conditions: ready(true), containerStatuses: [container({ ready: true, restartCount: 2, containerID: `containerd://${id}g`, state: { running: { startedAt: new Date().toISOString() } }, lastState: { terminated: { exitCode: 1, reason: 'Error', containerID: `containerd://${id}f` } } })] });
    };
    status('played-2', { containerStatuses: [container({ ready: true, restartCount: 0, containerID: `containerd://${id}1`, state: { running: { startedAt: '2026-12-05T12:00:05Z' } } })] });
    let played: Promise<void> | undefined;
    const round = await restartOnce(client, { target, round: 1, readyBy: Date.now() + 30_000, timeoutMs: 30_000, marginMs: 30_000, signal: async () => ((played = kubelet()), noExec()) }, true);
    await played;
    expect(round.restartCount).toEqual({ before: 0, after: 2 });
    expect(round.failedStarts).toEqual([{ containerId: `containerd://${id}f`, exitCode: 1, reason: 'Error', message: 'the first start failed', freeMemory: [] }]);
    expect(round.backOff.map((e) => [e.message, e.count])).toEqual([['Back-off restarting failed container model in pod played-2', 1]]);
    const checks = Object.fromEntries(round.checks.map((ch) => [ch.name, ch.ok]));
    expect(checks).toMatchObject({ 'ready-again': true, 'one-restart': false, 'no-backoff': false });
  });

  it('never Ready again: the round ends at its deadline with the state so far', async () => {
    const target = await targetOf('played-3');
    const kubelet = async (): Promise<void> => {
      await sleep(300);
      status('played-3', { conditions: ready(false), containerStatuses: [container({ ready: false, restartCount: 1, containerID: `containerd://${id}s`, state: { running: { startedAt: '2026-12-05T12:30:00Z' } }, lastState: { terminated: { exitCode: 0, containerID: `containerd://${id}0` } } })] });
    };
    let played: Promise<void> | undefined;
    const started = Date.now();
    const round = await restartOnce(client, { target, round: 1, readyBy: Date.now() + 3000, timeoutMs: 3000, marginMs: 30_000, signal: async () => ((played = kubelet()), noExec()) }, true);
    await played;
    expect(Date.now() - started).toBeLessThan(3000 + 15_000);
    expect(round.readyAfterMs).toBeUndefined();
    expect(round.stateAtEnd).toBe('running since 2026-12-05T12:30:00Z, not ready');
    expect(round.restartCount).toEqual({ before: 0, after: 1 });
    const check = round.checks.find((ch) => ch.name === 'ready-again')!;
    expect([check.ok, check.detail]).toEqual([false, 'container "model" not Ready again within 3.0 s (--timeout): running since 2026-12-05T12:30:00Z, not ready']);
  });
});
