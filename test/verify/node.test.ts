/**
 * `vram-preflight verify --yes` on the test cluster's real node (a kubelet
 * with containerd and runc, fake GPUs, the vLLM stand-in: test/README.md),
 * where the kubelet itself restarts the container: the ticket's test plan,
 * both ways.
 *
 * - A wrapped Deployment of the stand-in passes, 3 times in a row: restartCount
 *   +1 each time, no BackOff, the preflight's waiting lines found (the old
 *   engine's memory outlives the SIGTERM for a few seconds, so the new start
 *   waits), no vLLM error.
 * - The same Deployment unwrapped fails as in the incident: vLLM's "Free
 *   memory on device" error (the failed start's log, logs --previous), the
 *   BackOff, restartCount +2; exit 3.
 * - A wrapped pod whose memory never comes back never becomes Ready: verify
 *   ends at --timeout, exit 3, with the evidence so far (the container's
 *   state, the preflight still waiting).
 *
 * It needs the node: without one (scripts/cluster.sh env says why, in
 * VRAM_PREFLIGHT_NODE_ERROR, or says nothing of a node at all) every test
 * here fails with that reason. It never skips.
 */
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { api, applyObjects, cluster, kubectl, namespace, parseYamlStream, ROOT, sleep, type Plain } from '../apiserver/harness.js';
import { bundle, removeTempDirs, runBundle, tempDir } from '../audit/harness.js';

const RUN = Date.now().toString(36);
const NS = `verify-node-${RUN}`;

interface NodeEnv {
  name: string;
  image: string;
  optIn: [string, string];
  ledger: string;
}

/** The node's contract (test/README.md), read from scripts/cluster.sh env; throws why there is none. */
function nodeEnv(): NodeEnv {
  cluster();
  const r = spawnSync('bash', [path.join(ROOT, 'scripts/cluster.sh'), 'env'], { encoding: 'utf8' });
  const env = Object.fromEntries(r.stdout.trim().split('\n').map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]));
  if (!env.VRAM_PREFLIGHT_NODE) {
    throw new Error(`the test cluster has no node, which verify's restarts need (a kubelet runs them): ${env.VRAM_PREFLIGHT_NODE_ERROR ?? 'scripts/cluster.sh env names no VRAM_PREFLIGHT_NODE (this checkout\'s scripts/cluster.sh starts no node)'}`);
  }
  for (const name of ['VLLM_STANDIN_IMAGE', 'VRAM_PREFLIGHT_NODE_OPT_IN_LABEL', 'VRAM_PREFLIGHT_FAKE_GPU_DIR']) if (!env[name]) throw new Error(`scripts/cluster.sh env has a node but no ${name}`);
  const [key, value] = env.VRAM_PREFLIGHT_NODE_OPT_IN_LABEL!.split('=');
  return { name: env.VRAM_PREFLIGHT_NODE, image: env.VLLM_STANDIN_IMAGE!, optIn: [key!, value!], ledger: env.VRAM_PREFLIGHT_FAKE_GPU_DIR! };
}

let node: NodeEnv;
let file = '';

/** A Deployment of the stand-in as a vLLM chart renders one; its engine keeps its memory `release` seconds after a SIGTERM. */
function deployment(name: string, release: string): Plain {
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name, namespace: NS },
    spec: {
      replicas: 1,
      strategy: { type: 'Recreate' },
      selector: { matchLabels: { app: name } },
      template: {
        metadata: { labels: { app: name } },
        spec: {
          runtimeClassName: 'nvidia',
          nodeSelector: { 'nvidia.com/gpu.present': 'true' },
          terminationGracePeriodSeconds: 5,
          containers: [
            {
              name: 'model',
              image: node.image,
              imagePullPolicy: 'IfNotPresent',
              args: ['Qwen/Qwen3-0.6B', '--gpu-memory-utilization', '0.9', '--port', '8000'],
              env: [{ name: 'VLLM_STANDIN_RELEASE_SECONDS', value: release }],
              ports: [{ name: 'http', containerPort: 8000 }],
              resources: { requests: { cpu: '10m', memory: '64Mi' }, limits: { memory: '256Mi', 'nvidia.com/gpu': '1' } },
              readinessProbe: { httpGet: { path: '/health', port: 8000 }, periodSeconds: 1, failureThreshold: 1 },
            },
          ],
        },
      },
    },
  };
}

/** The built CLI on a manifest, as `helm --post-renderer` would install it. */
function wrap(manifest: Plain): Plain {
  const r = runBundle(file, ['--registry-lookup=never', '--poll-interval-seconds', '0.5', '--log-interval-seconds', '1'], { HOME: tempDir('render') }, stringify(manifest));
  if (r.status !== 0) throw new Error(`vram-preflight exited ${r.status}: ${r.stderr}`);
  return parseYamlStream(r.stdout)[0]!;
}

/** The Ready pod of a Deployment, by its app label. */
async function readyPod(app: string, ms = 120_000): Promise<Plain> {
  const deadline = Date.now() + ms;
  for (;;) {
    const items = (await api('GET', `/api/v1/namespaces/${NS}/pods?labelSelector=${encodeURIComponent(`app=${app}`)}`)).json().items as Plain[];
    const pod = items.find((p) => !p.metadata.deletionTimestamp && (p.status?.containerStatuses ?? []).every((s: Plain) => s.ready));
    if (pod && pod.status?.containerStatuses?.length) return pod;
    if (Date.now() > deadline) throw new Error(`no Ready pod of ${app} within ${ms / 1000} s: ${JSON.stringify(items.map((p) => p.status))}`);
    await sleep(500);
  }
}

function verify(args: readonly string[]): { status: number | null; stdout: string; stderr: string; report: Plain } {
  const r = runBundle(file, ['verify', '--namespace', NS, '--registry-lookup=never', '--output', 'json', ...args], { KUBECONFIG: cluster().kubeconfig, HOME: tempDir('home') });
  return { ...r, report: r.stdout ? (JSON.parse(r.stdout) as Plain) : {} };
}

const checksOf = (round: Plain): Record<string, boolean | null> => Object.fromEntries(round.checks.map((c: Plain) => [c.name, c.ok]));

/** Gives back what stopped engines still hold on every fake GPU (a holder file whose release is not `held`). */
function releaseStopped(): void {
  for (const gpu of readdirSync(node.ledger)) {
    const dir = path.join(node.ledger, gpu, 'holders');
    let names: string[] = [];
    try {
      names = readdirSync(dir);
    } catch {
      continue;
    }
    for (const name of names.filter((n) => !n.startsWith('.'))) {
      const text = readFileSync(path.join(dir, name), 'utf8');
      if (!/^release=held$/m.test(text)) rmSync(path.join(dir, name), { force: true });
    }
  }
}

let setup: Promise<void> | undefined;

/**
 * The node, the bundle and the three Deployments Ready, once for the file;
 * each test awaits it first, so that without a node each test fails with
 * the reason (a failing beforeAll would leave them reported as skipped).
 */
function nodeReady(): Promise<void> {
  setup ??= (async () => {
    node = nodeEnv();
    file = bundle();
    await namespace(NS, { [node.optIn[0]]: node.optIn[1] });
    applyObjects([wrap(deployment('wrapped', '4')), deployment('plain', '4'), wrap(deployment('stuck', 'never'))]);
    await Promise.all(['wrapped', 'plain', 'stuck'].map((app) => readyPod(app)));
  })();
  return setup;
}

afterAll(async () => {
  if (node) {
    kubectl(['delete', 'deployments', '--all', '-n', NS, '--wait=true', '--timeout=60s']);
    releaseStopped();
  }
  kubectl(['delete', 'namespace', NS, '--wait=false']);
  removeTempDirs();
});

describe('verify --yes on the real node', () => {
  it('a wrapped pod passes 3 times in a row: restartCount +1 each, no BackOff, the preflight waited, no vLLM error; exit 0', async () => {
    await nodeReady();
    const pod = await readyPod('wrapped');
    const run = verify(['--selector', 'app=wrapped', '--yes', '--repeat', '3', '--timeout', '2m']);
    expect(run.stderr).toBe('');
    expect(run.status, run.stdout).toBe(0);
    const report = run.report;
    expect(report.result).toBe('passed');
    expect(report.target.pod).toBe(pod.metadata.name);
    expect(report.rounds).toHaveLength(3);
    report.rounds.forEach((round: Plain, i: number) => {
      expect(checksOf(round)).toMatchObject({ 'ready-again': true, 'one-restart': true, 'no-backoff': true, 'preflight-ran': true, 'no-vllm-error': true });
      expect(round.restartCount).toEqual({ before: i, after: i + 1 });
      expect(round.backOff).toEqual([]);
      // The old engine held its memory for 4 s after the SIGTERM: the new start waited for it.
      expect(round.preflight.waitingLines).toBeGreaterThanOrEqual(1);
      expect(round.preflight.waitedSeconds).toBeGreaterThan(0);
      expect(round.preflight.firstShort.needMiB).toBeGreaterThan(round.preflight.firstShort.freeMiB);
      expect(round.failedStarts).toEqual([]);
      expect(round.previousFreeMemory).toEqual([]);
      expect(round.signal.protocol).toBe('v5.channel.k8s.io');
    });
  }, 720_000);

  it('the same pod unwrapped fails as in the incident: vLLM\'s error, the BackOff, restartCount +2; exit 3', async () => {
    await nodeReady();
    await readyPod('plain');
    const refused = verify(['--selector', 'app=plain', '--yes']);
    expect([refused.status, refused.report.result, refused.report.rounds]).toEqual([3, 'not-wrapped', []]);
    const run = verify(['--selector', 'app=plain', '--yes', '--allow-unwrapped', '--timeout', '2m']);
    expect(run.status, run.stderr).toBe(3);
    expect(run.report.result).toBe('failed');
    const [round] = run.report.rounds;
    expect(checksOf(round)).toMatchObject({ 'one-restart': false, 'no-backoff': false, 'no-vllm-error': false, 'preflight-ran': false });
    expect(round.restartCount.after - round.restartCount.before).toBeGreaterThanOrEqual(2);
    expect(round.backOff[0].message).toMatch(/Back-off restarting failed container model/);
    expect(round.failedStarts[0]).toMatchObject({ exitCode: 1 });
    expect(round.failedStarts[0].freeMemory[0]).toMatch(/Free memory on device cuda:0 \(\d+\.\d+\/\d+\.\d+ GiB\) on startup is less than desired GPU memory utilization/);
  }, 480_000);

  it('a pod that never becomes Ready again ends at --timeout with the evidence so far: the preflight still waiting; exit 3', async () => {
    await nodeReady();
    await readyPod('stuck');
    const started = Date.now();
    const run = verify(['--selector', 'app=stuck', '--yes', '--timeout', '20s']);
    expect(Date.now() - started).toBeLessThan(20_000 + 60_000);
    expect(run.status, run.stderr).toBe(3);
    const [round] = run.report.rounds;
    expect(checksOf(round)).toMatchObject({ 'ready-again': false, 'preflight-ran': false });
    expect(round.readySeconds).toBeNull();
    expect(round.stateAtEnd).toMatch(/^running since .*, not ready$/);
    expect(round.preflight.waitingLines).toBeGreaterThanOrEqual(1);
    expect(round.preflight.start).toBeNull();
    expect(round.restartCount.after).toBe(round.restartCount.before + 1);
  }, 420_000);
});
