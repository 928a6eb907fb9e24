/**
 * KubeRay's own operator (ray-operator v1.5.0, built from its Go module by
 * scripts/cluster.sh) against the real API server, with its CRDs: the pods it
 * makes from RayClusters and RayServices serving vLLM (fixtures/cases/
 * kuberay-start-rule) are decided right.
 *
 * - Without the webhook, the operator's real pods are the ground truth: the
 *   post-renderer's decision on each of them (the oracle) is what the webhook
 *   must do, and in a namespace the webhook is called for, the pods the
 *   operator makes are stored exactly so.
 * - The post-rendered RayCluster: KubeRay really rewrites each Ray
 *   container's start (its join of command and args under bash, then `ray
 *   start`); the start of each real pod, run in a real bash with a fake
 *   nvidia-smi, vllm and ray first on PATH, waits, then gives vLLM the argv the
 *   unwrapped start gives it, then runs ray start.
 * - The container a render wrapped and the container the webhook wraps in the
 *   operator's pod are the same containers.
 *
 * Pods stay Pending (no kubelet): admission is what is tested here.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_OPTIONS } from '../../src/core/options.js';
import { transform } from '../../src/core/transform.js';
import { renderPod } from '../support/doors.js';
import * as k from './harness.js';

const SUITE = 'kuberay';
const RUN = Date.now().toString(36);
const PLAIN = `vpt-kuberay-plain-${RUN}`;
const RENDERED = `vpt-kuberay-rendered-${RUN}`;
const WRAP = `vpt-kuberay-wrap-${RUN}`;
const CASE = path.join(k.ROOT, 'fixtures/cases/kuberay-start-rule/input.yaml');
const dir = k.tempDir(SUITE);
let operator: ChildProcess;
let operatorLog = '';
let webhook: k.WebhookProcess;
let tls: { caCert: string; cert: string; key: string };
let fakes: string;

/**
 * The objects of the fixture, for one namespace. The fixture's worker groups leave out the
 * sizes KubeRay's CRD requires (minReplicas, maxReplicas): one pod each.
 */
function objectsOf(text: string, ns: string): k.Plain[] {
  return k.parseYamlStream(text).map((o) => {
    const cluster = o.kind === 'RayService' ? o.spec.rayClusterConfig : o.spec;
    for (const group of (cluster?.workerGroupSpecs ?? []) as k.Plain[]) Object.assign(group, { replicas: 1, minReplicas: 1, maxReplicas: 1, ...group });
    return { ...o, metadata: { ...o.metadata, namespace: ns } };
  });
}

/** Pods of a namespace by a key that is the same in every namespace: cluster (without RayService's suffix), node type, group. */
async function podsByKey(ns: string): Promise<Map<string, k.Plain>> {
  const items = (await k.api('GET', `/api/v1/namespaces/${ns}/pods`)).json().items as k.Plain[];
  const out = new Map<string, k.Plain>();
  for (const item of items) {
    // A list's items carry no kind: the pod as the API server sends it to a webhook does.
    const pod: k.Plain = { apiVersion: 'v1', kind: 'Pod', ...item };
    const l = pod.metadata.labels ?? {};
    const cluster = String(l['ray.io/cluster'] ?? '').replace(/-[a-z0-9]{5}$/, '');
    out.set(`${cluster}/${l['ray.io/node-type']}/${l['ray.io/group']}`, pod);
  }
  return out;
}

/** Waits until each namespace has the same, stable, non-zero number of pods. */
async function settled(namespaces: readonly string[]): Promise<Map<string, Map<string, k.Plain>>> {
  let last = '';
  let stableSince = Date.now();
  for (let i = 0; i < 600; i++) {
    const maps = await Promise.all(namespaces.map(podsByKey));
    const keys = maps.map((m) => [...m.keys()].sort().join(','));
    const now = keys.join('|');
    if (now !== last) (last = now), (stableSince = Date.now());
    if (maps[0]!.size > 0 && keys.every((x) => x === keys[0]) && Date.now() - stableSince > 3000) return new Map(namespaces.map((ns, j) => [ns, maps[j]!]));
    await k.sleep(100);
  }
  throw new Error(`KubeRay's pods did not settle: ${last}\n${operatorLog.slice(-3000)}`);
}

const startOf = (c: k.Plain | undefined) => ({ command: c?.command ?? null, args: c?.args ?? null });

/** KubeRay writes the namespace and the RayService's generated cluster name into a start: the same start in every namespace reads the same here. */
const sameAnywhere = <T>(value: T): T =>
  JSON.parse(
    JSON.stringify(value)
      .replaceAll(PLAIN, 'NAMESPACE')
      .replaceAll(WRAP, 'NAMESPACE')
      .replaceAll(RENDERED, 'NAMESPACE')
      .replace(/serve-app-[a-z0-9]{5}/g, 'serve-app-CLUSTER'),
  ) as T;

/** Runs a container's start as the kubelet would (the image's ENTRYPOINT when there is no command) in a real bash with the fakes first on PATH. */
function runStart(container: k.Plain): { status: number | null; stdout: string; stderr: string } {
  const argv = [...(container.command ?? ['vllm', 'serve']), ...(container.args ?? [])];
  const r = spawnSync(argv[0]!, argv.slice(1), { encoding: 'utf8', env: { PATH: `${fakes}:/usr/bin:/bin`, HOME: fakes, MODEL_NAME: 'qwen' }, timeout: 60_000 });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

beforeAll(async () => {
  const c = k.cluster();
  const version = spawnSync('bash', [path.join(k.ROOT, 'scripts/cluster.sh'), 'env'], { encoding: 'utf8' }).stdout.match(/VRAM_PREFLIGHT_KUBERAY_VERSION=(\S+)/)![1]!;
  await k.establishCrds(k.crdsOf('github.com/ray-project/kuberay/ray-operator', version, 'config/crd/bases'));
  operator = spawn(path.join(c.bin, 'ray-operator'), ['--metrics-addr=127.0.0.1:0', '--health-probe-bind-address=127.0.0.1:0', '--enable-leader-election=false'], {
    env: { PATH: process.env.PATH, HOME: dir, KUBECONFIG: c.kubeconfig },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  operator.stdout!.on('data', (d: Buffer) => (operatorLog += d.toString()));
  operator.stderr!.on('data', (d: Buffer) => (operatorLog += d.toString()));

  const bundle = k.buildBundle(dir);
  tls = k.servingPki(dir);
  webhook = await k.startWebhook(bundle, tls, ['--registry-lookup', 'never']);
  await k.namespace(PLAIN, {});
  await k.namespace(RENDERED, {});
  await k.namespace(WRAP, { 'vram-preflight.io/inject': 'enabled', 'vram-preflight.test/suite': SUITE });
  k.applyObjects([k.chartWebhookConfiguration(`vpt-kuberay-${RUN}`, SUITE, webhook.url, tls.caCert, { labels: { 'vram-preflight.test/run': RUN } })]);
  await k.waitForWebhook(WRAP, webhook, tls.caCert);

  // Fakes for running a start: one idle 80 GiB GPU (each field nvidia-smi is asked for), vllm and ray that print their argv.
  fakes = k.fakeCommands(path.join(dir, 'fakes'), { 'nvidia-smi': k.fakeNvidiaSmi('81000', '559'), vllm: 'echo "VLLM-RAN $*"', ray: 'echo "RAY-RAN $1"' });

  const input = readFileSync(CASE, 'utf8');
  const rendered = transform(input, DEFAULT_OPTIONS);
  expect(rendered.errors).toEqual([]);
  k.applyObjects(objectsOf(input, PLAIN));
  k.applyObjects(objectsOf(rendered.output, RENDERED));
  k.applyObjects(objectsOf(input, WRAP));
}, 40 * 60_000);

afterAll(async () => {
  k.kubectl(['delete', 'mutatingwebhookconfiguration', '-l', `vram-preflight.test/run=${RUN}`, '--wait=false']);
  for (const ns of [PLAIN, RENDERED, WRAP]) k.kubectl(['delete', 'rayservices,rayclusters', '--all', '-n', ns, '--wait=false']);
  await Promise.all([PLAIN, RENDERED, WRAP].map((ns) => k.deleteNamespace(ns)));
  operator?.kill('SIGTERM');
  await k.stopWebhook(webhook);
  k.closeApi();
  k.removeDir(dir);
});

describe('KubeRay\'s operator makes the pods; the webhook and the post-renderer decide them', () => {
  it('in a namespace the webhook is called for, every pod KubeRay makes is stored as the post-renderer decides that same pod', async () => {
    const pods = await settled([PLAIN, WRAP]);
    const plain = pods.get(PLAIN)!;
    const wrapped = pods.get(WRAP)!;
    expect(plain.size, 'the operator made head and worker pods of the RayCluster and of the RayService\'s cluster').toBeGreaterThanOrEqual(6);
    let wrappedContainers = 0;
    for (const [key, real] of plain) {
      const { pod: oracle } = renderPod(real, DEFAULT_OPTIONS);
      expect(oracle, `${key}: the post-renderer decides the operator's pod`).toBeDefined();
      const stored = wrapped.get(key)!;
      (real.spec.containers as k.Plain[]).forEach((container, j) => {
        expect(sameAnywhere(startOf(stored.spec.containers[j])), `${key}: ${container.name}`).toEqual(sameAnywhere(startOf((oracle!.spec as k.Plain).containers[j])));
        if (k.isWrapped(stored.spec.containers[j])) wrappedContainers++;
      });
    }
    expect(wrappedContainers, 'vLLM containers in the operator\'s pods are wrapped').toBeGreaterThan(0);
  }, 120_000);

  it('the containers a render wraps are the ones the webhook wraps in the operator\'s pods', async () => {
    const pods = await settled([RENDERED, WRAP]);
    for (const [key, fromRender] of pods.get(RENDERED)!) {
      const fromWebhook = pods.get(WRAP)!.get(key)!;
      const renderWrapped = (fromRender.spec.containers as k.Plain[]).map((c) => JSON.stringify(c.command ?? []).includes('vram-preflight') || String(c.args ?? '').includes('# vram-preflight '));
      const webhookWrapped = (fromWebhook.spec.containers as k.Plain[]).map((c) => k.isWrapped(c));
      expect(webhookWrapped, `${key}: the same containers wrapped`).toEqual(renderWrapped);
    }
  }, 120_000);

  it('KubeRay rewrites the post-rendered starts for real, and each still waits, then runs vLLM with its argv, then ray start', async () => {
    const pods = await settled([PLAIN, RENDERED]);
    let ran = 0;
    for (const [key, rendered] of pods.get(RENDERED)!) {
      const plain = pods.get(PLAIN)!.get(key)!;
      const container = rendered.spec.containers[0] as k.Plain;
      const unwrapped = plain.spec.containers[0] as k.Plain;
      const before = runStart(unwrapped);
      if (!before.stdout.includes('VLLM-RAN')) continue; // a Ray node: the start runs ray only
      const after = runStart(container);
      expect(after.stderr, `${key}: the preflight ran`).toContain('vram-preflight');
      expect({ key, status: after.status, stdout: after.stdout }, 'the same vLLM argv and the same ray start as without the wrap').toEqual({ key, status: before.status, stdout: before.stdout });
      ran++;
    }
    expect(ran, 'pods whose start runs vLLM were run').toBeGreaterThanOrEqual(3);
  }, 120_000);
});
