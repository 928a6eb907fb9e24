/**
 * `vram-preflight verify --yes` on the test cluster's real node (a kubelet
 * with containerd and runc, fake GPUs, the vLLM stand-in: test/README.md),
 * where the kubelet itself restarts the container: the ticket's test plan,
 * both ways. The three tests run side by side, each on its own pod and GPU.
 *
 * - A wrapped Deployment of the stand-in passes: restartCount +1, no BackOff,
 *   the preflight's waiting lines found with what held the memory (the old
 *   engine's memory outlives the SIGTERM for a few seconds, so the new start
 *   waits), no vLLM error. At once again (--round-gap 0s), the restart falls in
 *   the kubelet's back-off window: its BackOff is reported as the kubelet's, not
 *   judged, and the round still passes (src/verify/backoff.ts). One round each:
 *   the default gap (10 minutes between rounds) is unit-tested, not waited for.
 * - The same Deployment unwrapped fails as in the incident: vLLM's "Free
 *   memory on device" error (the failed start's log, logs --previous), the
 *   BackOff, restartCount +2; exit 3.
 * - A wrapped pod whose memory never comes back never becomes Ready: verify
 *   ends at --timeout, exit 3, with the evidence so far (the container's
 *   state, the preflight still waiting, what holds the memory).
 *
 * It needs the node: without one (scripts/cluster.sh env says why, in
 * VRAM_PREFLIGHT_NODE_ERROR) every test here fails with that reason. It never
 * skips.
 */
import { spawn } from 'node:child_process';
import { afterAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { api, applyObjects, cluster, kubectl, parseYamlStream, sleep, type Plain } from '../apiserver/harness.js';
import { bundle, removeTempDirs, runBundle, tempDir } from '../audit/harness.js';
import { idleGpus, node, nodeNamespace, releaseStopped, type TestNode } from '../node/harness.js';
import { readdirSync } from 'node:fs';

const RUN = Date.now().toString(36);
const NS = `verify-node-${RUN}`;

let n: TestNode;
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
              image: n.image,
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

/** verify --output json, as a child process that does not block the other tests of this file (they run side by side). */
function verify(args: readonly string[]): Promise<{ status: number | null; stdout: string; stderr: string; report: Plain }> {
  const child = spawn(process.execPath, [file, 'verify', '--namespace', NS, '--registry-lookup=never', '--output', 'json', ...args], {
    env: { PATH: process.env.PATH, KUBECONFIG: cluster().kubeconfig, HOME: tempDir('home') },
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (status) => resolve({ status, stdout, stderr, report: stdout ? (JSON.parse(stdout) as Plain) : {} }));
  });
}

const checksOf = (round: Plain): Record<string, boolean | null> => Object.fromEntries(round.checks.map((c: Plain) => [c.name, c.ok]));

let setup: Promise<void> | undefined;

/**
 * The node, the bundle and the three Deployments Ready, once for the file;
 * each test awaits it first, so that without a node each test fails with
 * the reason (a failing beforeAll would leave them reported as skipped).
 */
function nodeReady(): Promise<void> {
  setup ??= (async () => {
    n = node();
    file = bundle();
    await nodeNamespace(NS);
    // Three GPUs of the four: wait for an earlier file's pods to leave the node, and take back what their engines still hold.
    await idleGpus(NS);
    applyObjects([wrap(deployment('wrapped', '4')), deployment('plain', '4'), wrap(deployment('stuck', 'never'))]);
    await Promise.all(['wrapped', 'plain', 'stuck'].map((app) => readyPod(app)));
  })();
  return setup;
}

afterAll(async () => {
  if (n) {
    kubectl(['delete', 'deployments', '--all', '-n', NS, '--wait=true', '--timeout=60s']);
    for (const uuid of readdirSync(n.ledger)) releaseStopped(uuid);
  }
  kubectl(['delete', 'namespace', NS, '--wait=false']);
  removeTempDirs();
});

describe.concurrent('verify --yes on the real node', () => {
  it('a wrapped pod passes: restartCount +1, no BackOff, the preflight waited and names what held the memory; at once again, the kubelet\'s own BackOff is reported as such', async () => {
    await nodeReady();
    const pod = await readyPod('wrapped');
    const run = await verify(['--selector', 'app=wrapped', '--yes', '--timeout', '2m']);
    expect(run.stderr).toBe('');
    expect(run.status, run.stdout).toBe(0);
    const report = run.report;
    expect(report.result).toBe('passed');
    expect(report.target.pod).toBe(pod.metadata.name);
    expect(report.plan).toMatchObject({ repeat: 1, roundGapSeconds: 615, firstSignalAt: null });
    expect(report.rounds).toHaveLength(1);
    const [round] = report.rounds;
    expect(checksOf(round)).toEqual({ 'ready-again': true, 'one-restart': true, 'no-backoff': true, 'preflight-ran': true, 'no-vllm-error': true, 'restart-time': true });
    expect(round.restartCount).toEqual({ before: 0, after: 1 });
    expect(round.backOff).toEqual([]);
    expect(round.kubeletBackOff).toBeNull();
    // The old engine held its memory for 4 s after the SIGTERM: the new start waited for it, and its line named the engine.
    expect(round.preflight.waitingLines).toBeGreaterThanOrEqual(1);
    expect(round.preflight.waitedSeconds).toBeGreaterThan(0);
    expect(round.preflight.firstShort.needMiB).toBeGreaterThan(round.preflight.firstShort.freeMiB);
    expect(round.preflight.heldBy).toHaveLength(1);
    expect(round.preflight.heldBy[0].mib).toBeGreaterThan(round.preflight.firstShort.needMiB - round.preflight.firstShort.freeMiB);
    expect(round.preflight.lines[0]).toMatch(/; holding GPU memory: pid \d+ \(\d+ MiB\)$/);
    expect(round.failedStarts).toEqual([]);
    expect(round.previousFreeMemory).toEqual([]);
    expect(round.signal.protocol).toBe('v5.channel.k8s.io');

    // The container restarted moments ago: the plan (no --yes) says round 1 waits for the default gap.
    const plan = await verify(['--selector', 'app=wrapped', '--repeat', '2']);
    expect(plan.status, plan.stderr).toBe(0);
    expect(Date.parse(plan.report.plan.firstSignalAt) - Date.now()).toBeGreaterThan(500_000);

    // At once again, inside the kubelet's window: the kubelet backs the restart off; verify says whose BackOff it is.
    const again = await verify(['--selector', 'app=wrapped', '--yes', '--timeout', '2m', '--round-gap', '0s']);
    expect(again.status, again.stdout + again.stderr).toBe(0);
    const [backedOff] = again.report.rounds;
    expect(backedOff.restartCount).toEqual({ before: 1, after: 2 });
    expect(backedOff.kubeletBackOff.secondsBefore).toBeLessThan(120);
    expect(backedOff.backOff[0].message).toMatch(/Back-off restarting failed container model/);
    const backOffCheck = backedOff.checks.find((c: Plain) => c.name === 'no-backoff');
    expect(backOffCheck).toMatchObject({ ok: null });
    expect(backOffCheck.detail).toMatch(/the kubelet's crash-loop back-off, expected, not the race/);
    expect(checksOf(backedOff)).toMatchObject({ 'ready-again': true, 'one-restart': true, 'preflight-ran': true, 'no-vllm-error': true });
    expect(backedOff.failedStarts).toEqual([]);
  }, 300_000);

  it('the same pod unwrapped fails as in the incident: vLLM\'s error, the BackOff, restartCount +2; exit 3', async () => {
    await nodeReady();
    await readyPod('plain');
    const refused = await verify(['--selector', 'app=plain', '--yes']);
    expect([refused.status, refused.report.result, refused.report.rounds]).toEqual([3, 'not-wrapped', []]);
    const run = await verify(['--selector', 'app=plain', '--yes', '--allow-unwrapped', '--timeout', '2m']);
    expect(run.status, run.stderr).toBe(3);
    expect(run.report.result).toBe('failed');
    const [round] = run.report.rounds;
    expect(round.kubeletBackOff).toBeNull();
    expect(checksOf(round)).toMatchObject({ 'one-restart': false, 'no-backoff': false, 'no-vllm-error': false, 'preflight-ran': false });
    expect(round.restartCount.after - round.restartCount.before).toBeGreaterThanOrEqual(2);
    expect(round.backOff[0].message).toMatch(/Back-off restarting failed container model/);
    expect(round.failedStarts[0]).toMatchObject({ exitCode: 1 });
    expect(round.failedStarts[0].freeMemory[0]).toMatch(/Free memory on device cuda:0 \(\d+\.\d+\/\d+\.\d+ GiB\) on startup is less than desired GPU memory utilization/);
  }, 300_000);

  it('a pod that never becomes Ready again ends at --timeout with the evidence so far: the preflight still waiting, and what holds the memory; exit 3', async () => {
    await nodeReady();
    await readyPod('stuck');
    const started = Date.now();
    const run = await verify(['--selector', 'app=stuck', '--yes', '--timeout', '20s']);
    expect(Date.now() - started).toBeLessThan(20_000 + 60_000);
    expect(run.status, run.stderr).toBe(3);
    const [round] = run.report.rounds;
    expect(checksOf(round)).toMatchObject({ 'ready-again': false, 'preflight-ran': false });
    expect(round.readySeconds).toBeNull();
    expect(round.stateAtEnd).toMatch(/^running since .*, not ready$/);
    expect(round.preflight.waitingLines).toBeGreaterThanOrEqual(1);
    expect(round.preflight.heldBy.length).toBeGreaterThanOrEqual(1);
    expect(round.preflight.start).toBeNull();
    expect(round.restartCount.after).toBe(round.restartCount.before + 1);
  }, 300_000);
});
