/**
 * LeaderWorkerSet's own controller (sigs.k8s.io/lws, built from its Go module
 * by scripts/cluster.sh) against the real API server, with its CRDs and its
 * own webhooks: the pods it makes from LeaderWorkerSets and from llm-d's
 * DisaggregatedSet (through the LeaderWorkerSets that makes) are decided right.
 *
 * LWS's pod webhook is a real second mutating webhook: it adds labels and the
 * LWS_* env vars to every container of the pods it makes. The API server calls
 * configurations in the order of their names, so both orders are tested, each
 * in its own namespace:
 * - ours after LWS's (the order of the two projects' default names,
 *   "lws-…" before "vram-preflight-…"): the stored pod is exactly what the
 *   post-renderer decides for LWS's real pod (the oracle: that same pod from a
 *   namespace ours is not called for);
 * - ours first: LWS changes the pod after ours has wrapped it, the API server
 *   calls ours again (`reinvocationPolicy: IfNeeded`), and the pod is still
 *   wrapped once, as decided on the pod ours saw first (without LWS's env);
 *   run as a kubelet runs it, each start waits for the same memory and gives
 *   vLLM the same argv as in the other order.
 * The post-rendered workloads: LWS's validating webhook accepts the rewritten
 * templates, and the containers a render wraps are those the webhook wraps,
 * except the one place docs/webhook.md says they differ: an annotation on the
 * workload's own metadata, which LWS (like every controller) never copies to
 * its pods.
 *
 * Pods stay Pending (no kubelet, no scheduler): admission is what is tested here.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { DEFAULT_OPTIONS } from '../../src/core/options.js';
import { transform } from '../../src/core/transform.js';
import { renderPod } from '../support/doors.js';
import * as k from './harness.js';

const SUITE = 'lws';
const RUN = Date.now().toString(36);
const PLAIN = `vpt-lws-plain-${RUN}`;
const RENDERED = `vpt-lws-rendered-${RUN}`;
/** Ours called after LWS's webhook. */
const AFTER = `vpt-lws-after-${RUN}`;
/** Ours called before LWS's webhook, and again after it. */
const BEFORE = `vpt-lws-before-${RUN}`;
const NAMESPACES = [PLAIN, RENDERED, AFTER, BEFORE];
// Configurations are called in the order of their names: a… (ours, for BEFORE), m… (LWS's), z… (ours, for AFTER).
const OURS_FIRST = `vpt-lws-a-vram-preflight-${RUN}`;
const THEIRS = `vpt-lws-m-lws-${RUN}`;
const OURS_LAST = `vpt-lws-z-vram-preflight-${RUN}`;
const ORDER_LABEL = 'vram-preflight.test/order';
const CASES = ['lws-workload-annotation-names-worker', 'lws-worker-unwrapped-warns', 'disaggregatedset'].map((name) => path.join(k.ROOT, 'fixtures/cases', name, 'input.yaml'));
/** LWS's vLLM example, with vram-preflight.io/containers on the worker's pod template, where the webhook sees it. */
const TEMPLATE_ANNOTATED = 'vllm-template-annotated';
/** The LWS whose vram-preflight.io/containers annotation is on its own metadata: a render reads it, the pods never carry it. */
const WORKLOAD_ANNOTATED = 'vllm';
/** The env vars LWS's pod webhook adds to every container (pkg/utils/pod.AddLWSVariables). */
const LWS_ENV = ['LWS_LEADER_ADDRESS', 'LWS_GROUP_SIZE', 'LWS_WORKER_INDEX'];
// Pods: the vLLM example twice (2 groups of 2), the multi-node set (1 group of 2), the DisaggregatedSet's two roles (1 group of 2 each).
const EXPECTED_PODS = 4 + 4 + 2 + 4;
const dir = k.tempDir(SUITE);
let controller: ChildProcess;
let controllerLog = '';
let webhook: k.WebhookProcess;
let auditStart = 0;
let fakes: string;

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as net.AddressInfo;
      s.close(() => resolve(port));
    });
  });
}

/** The fixtures' workloads, and the vLLM example once more with the annotation where the webhook reads it. */
function workloads(): k.Plain[] {
  const objects = CASES.flatMap((file) => k.parseYamlStream(readFileSync(file, 'utf8')));
  // LWS's example (from its main branch) sets networkConfig.leaderServicePort, which the CRD of the released controller
  // does not have yet (nor does it default networkConfig.subdomainPolicy without it): left out, it changes no pod's start.
  for (const o of objects) if (o.spec?.networkConfig?.leaderServicePort) delete o.spec.networkConfig;
  // The DisaggregatedSet fixture keeps llm-d's prefill role only; the CRD wants two roles: decode as a copy of it.
  for (const o of objects.filter((x) => x.kind === 'DisaggregatedSet' && x.spec.roles.length === 1)) {
    o.spec.roles.push(JSON.parse(JSON.stringify(o.spec.roles[0]).replaceAll('prefill', 'decode')));
  }
  const example = structuredClone(objects.find((o) => o.metadata.name === WORKLOAD_ANNOTATED)!);
  const containers = example.metadata.annotations['vram-preflight.io/containers'];
  delete example.metadata.annotations;
  example.metadata.name = TEMPLATE_ANNOTATED;
  const worker = example.spec.leaderWorkerTemplate.workerTemplate;
  worker.metadata = { ...worker.metadata, annotations: { 'vram-preflight.io/containers': containers } };
  return [...objects, example];
}

const inNamespace = (objects: readonly k.Plain[], ns: string): k.Plain[] => objects.map((o) => ({ ...o, metadata: { ...o.metadata, namespace: ns } }));

/** LWS's webhook configurations from its module, pointed at the controller on loopback and limited to this file's namespaces. */
function lwsWebhookConfigurations(lwsModuleDir: string, url: string, caCert: string): k.Plain[] {
  const objects = k.parseYamlStream(readFileSync(path.join(lwsModuleDir, 'config/webhook/manifests.yaml'), 'utf8'));
  return objects.map((config) => {
    config.metadata = { name: `${THEIRS}-${config.kind === 'MutatingWebhookConfiguration' ? 'mutating' : 'validating'}`, labels: { 'vram-preflight.test/run': RUN } };
    for (const hook of config.webhooks as k.Plain[]) {
      hook.clientConfig = { url: `${url}${hook.clientConfig.service.path}`, caBundle: readFileSync(caCert).toString('base64') };
      // As config/webhook/{mutating,validating}-patch.yaml narrow them: pods of a LeaderWorkerSet only.
      if (hook.name === 'mpod.kb.io' || hook.name === 'vpod.kb.io') hook.objectSelector = { matchExpressions: [{ key: 'leaderworkerset.sigs.k8s.io/name', operator: 'Exists' }] };
      hook.namespaceSelector = { matchExpressions: [{ key: 'vram-preflight.test/suite', operator: 'In', values: [SUITE] }] };
    }
    return config;
  });
}

/** The chart's configuration for the namespaces of one order. */
function ours(name: string, order: 'first' | 'last', url: string, caCert: string): k.Plain {
  const mwc = k.chartWebhookConfiguration(name, SUITE, url, caCert, { labels: { 'vram-preflight.test/run': RUN } });
  for (const hook of mwc.webhooks as k.Plain[]) hook.namespaceSelector.matchExpressions.push({ key: ORDER_LABEL, operator: 'In', values: [order] });
  return mwc;
}

/**
 * Pods of a namespace by a name that is the same in every namespace: StatefulSets name their pods after the
 * LeaderWorkerSet, and the DisaggregatedSet names its LeaderWorkerSets with a hash of its spec (which a render changes).
 */
async function podsByName(ns: string): Promise<Map<string, k.Plain>> {
  const items = (await k.api('GET', `/api/v1/namespaces/${ns}/pods`)).json().items as k.Plain[];
  return new Map(items.map((item) => [String(item.metadata.name).replace(/-[0-9a-f]{8}-(prefill|decode)-/, '-HASH-$1-'), { apiVersion: 'v1', kind: 'Pod', ...item }]));
}

/** Waits until each namespace has the same, stable set of pods, all of them. */
async function settled(namespaces: readonly string[]): Promise<Map<string, Map<string, k.Plain>>> {
  let last = '';
  let stableSince = Date.now();
  for (let i = 0; i < 900; i++) {
    const maps = await Promise.all(namespaces.map(podsByName));
    const keys = maps.map((m) => [...m.keys()].sort().join(','));
    const now = keys.join('|');
    if (now !== last) (last = now), (stableSince = Date.now());
    if (maps[0]!.size >= EXPECTED_PODS && keys.every((x) => x === keys[0]) && Date.now() - stableSince > 2000) return new Map(namespaces.map((ns, j) => [ns, maps[j]!]));
    await k.sleep(100);
  }
  throw new Error(`LWS's pods did not settle: ${last}\n${controllerLog.slice(-3000)}`);
}

const startOf = (c: k.Plain | undefined) => ({ command: c?.command ?? null, args: c?.args ?? null });
/** LWS's leader address names the namespace: the same pod in two namespaces reads the same here. */
const sameAnywhere = <T>(x: T): T => JSON.parse(NAMESPACES.reduce((text, ns) => text.replaceAll(ns, 'NS'), JSON.stringify(x ?? null))) as T;
/** The LeaderWorkerSet a pod belongs to. */
const setOf = (pod: k.Plain): string => pod.metadata.labels?.['leaderworkerset.sigs.k8s.io/name'] ?? '';
/** Worker pods carry a worker index other than 0. */
const isWorker = (pod: k.Plain): boolean => (pod.metadata.labels?.['leaderworkerset.sigs.k8s.io/worker-index'] ?? '0') !== '0';
/** How many preflights a container's start holds: exactly one for a wrapped container. */
const preflights = (c: k.Plain): number => JSON.stringify(startOf(c)).split('# vram-preflight ').length - 1;

/** The pod as ours saw it first when called before LWS's webhook: LWS's env not yet there. */
function withoutLwsEnv(pod: k.Plain, template: k.Plain): k.Plain {
  const copy = structuredClone(pod);
  (copy.spec.containers as k.Plain[]).forEach((c, j) => {
    const env = (c.env ?? []).filter((e: k.Plain) => !LWS_ENV.includes(e.name));
    if (template.spec.containers[j].env === undefined && env.length === 0) delete c.env;
    else c.env = env;
  });
  return copy;
}

/** The kubelet's expansion of $(VAR) in command and args (a defined var is replaced, $$ is a $, the rest is kept). */
function expand(text: string, env: Record<string, string>): string {
  return text.replace(/\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)/g, (m, name: string | undefined) => (m === '$$' ? '$' : name !== undefined && name in env ? env[name]! : m));
}

/**
 * Runs a container's start as a kubelet would (its env, $(VAR) expanded) with fakes first on PATH: nvidia-smi (one
 * 80 GiB GPU with `freeMiB` free), vllm and python3 that print their argv, ray and find that do nothing. Stopped after
 * `ms`: what it printed by then.
 */
function runStart(container: k.Plain, freeMiB: number, ms: number): { status: number | null; stdout: string; stderr: string } {
  const env: Record<string, string> = Object.fromEntries(((container.env ?? []) as k.Plain[]).filter((e) => typeof e.value === 'string').map((e) => [e.name, e.value]));
  const argv = [...(container.command ?? []), ...(container.args ?? [])].map((a: string) => expand(a, env));
  const r = spawnSync(argv[0]!, argv.slice(1), { encoding: 'utf8', env: { ...env, PATH: `${fakes}:/usr/bin:/bin`, HOME: fakes, FAKE_FREE_MIB: String(freeMiB) }, timeout: ms, killSignal: 'SIGKILL' });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

beforeAll(async () => {
  const c = k.cluster();
  const version = spawnSync('bash', [path.join(k.ROOT, 'scripts/cluster.sh'), 'env'], { encoding: 'utf8' }).stdout.match(/VRAM_PREFLIGHT_LWS_VERSION=(\S+)/)![1]!;
  const lwsModuleDir = k.goModuleDir('sigs.k8s.io/lws', version);
  await k.establishCrds(k.crdsOf('sigs.k8s.io/lws', version, 'config/crd/bases'));

  // LWS's controller with its webhooks on loopback, serving a certificate of the test's own CA
  // (its internal certificate management writes a Secret for a Service, which loopback has not).
  const lwsTls = k.servingPki(k.tempDir(`${SUITE}-controller`));
  const [webhookPort, probePort] = [await freePort(), await freePort()];
  const config = path.join(dir, 'lws-configuration.yaml');
  writeFileSync(
    config,
    JSON.stringify({
      apiVersion: 'config.lws.x-k8s.io/v1alpha1',
      kind: 'Configuration',
      leaderElection: { leaderElect: false },
      internalCertManagement: { enable: false },
      webhook: { host: '127.0.0.1', port: webhookPort, certDir: path.dirname(lwsTls.cert) },
      metrics: { bindAddress: '0' },
      health: { healthProbeBindAddress: `127.0.0.1:${probePort}` },
    }),
  );
  controller = spawn(path.join(c.bin, 'lws-controller'), [`--config=${config}`], { env: { PATH: process.env.PATH, HOME: dir, KUBECONFIG: c.kubeconfig }, stdio: ['ignore', 'pipe', 'pipe'] });
  controller.stdout!.on('data', (d: Buffer) => (controllerLog += d.toString()));
  controller.stderr!.on('data', (d: Buffer) => (controllerLog += d.toString()));
  for (let i = 0; ; i++) {
    const ready = await fetch(`http://127.0.0.1:${probePort}/readyz`).then((r) => r.status, () => 0);
    if (ready === 200) break;
    if (i > 300 || controller.exitCode !== null) throw new Error(`LWS's controller did not become ready:\n${controllerLog.slice(-3000)}`);
    await k.sleep(100);
  }

  const tls = k.servingPki(dir);
  webhook = await k.startWebhook(k.buildBundle(dir), tls, ['--registry-lookup', 'never']);
  await k.namespace(PLAIN, { 'vram-preflight.test/suite': SUITE });
  await k.namespace(RENDERED, { 'vram-preflight.test/suite': SUITE });
  await k.namespace(AFTER, { 'vram-preflight.io/inject': 'enabled', 'vram-preflight.test/suite': SUITE, [ORDER_LABEL]: 'last' });
  await k.namespace(BEFORE, { 'vram-preflight.io/inject': 'enabled', 'vram-preflight.test/suite': SUITE, [ORDER_LABEL]: 'first' });
  k.applyObjects([...lwsWebhookConfigurations(lwsModuleDir, `https://127.0.0.1:${webhookPort}`, lwsTls.caCert), ours(OURS_FIRST, 'first', webhook.url, tls.caCert), ours(OURS_LAST, 'last', webhook.url, tls.caCert)]);
  await k.waitForWebhook(AFTER, webhook, tls.caCert);
  await k.waitForWebhook(BEFORE, webhook, tls.caCert);

  fakes = k.fakeCommands(path.join(dir, 'fakes'), {
    'nvidia-smi': k.fakeNvidiaSmi('$FAKE_FREE_MIB', '$((81559 - FAKE_FREE_MIB))'),
    vllm: 'echo "VLLM-RAN vllm $*"',
    python3: 'echo "VLLM-RAN python3 $*"',
    find: ':',
    ray: ':',
  });

  const inputs = workloads();
  // Block YAML, as helm renders (the post-renderer does not edit flow mappings).
  const rendered = transform(inputs.map((o) => stringify(o)).join('---\n'), DEFAULT_OPTIONS);
  expect(rendered.errors).toEqual([]);
  auditStart = k.auditLogSize();
  // LWS's webhooks (failurePolicy: Fail) default and validate each workload: applying also proves they accept the rewritten templates.
  for (let i = 0; ; i++) {
    const applied = k.kubectl(['apply', '--server-side', '--field-manager=vram-preflight-test', '-f', '-'], {
      input: JSON.stringify({ apiVersion: 'v1', kind: 'List', items: [...inNamespace(inputs, PLAIN), ...inNamespace(k.parseYamlStream(rendered.output), RENDERED), ...inNamespace(inputs, AFTER), ...inNamespace(inputs, BEFORE)] }),
    });
    if (applied.status === 0) break;
    // LWS's configurations reach the admission plugin through an informer: until then a call may find no endpoint.
    if (i > 50) throw new Error(`kubectl apply: ${applied.stderr}\n${controllerLog.slice(-3000)}`);
    await k.sleep(200);
  }
}, 40 * 60_000);

afterAll(async () => {
  k.kubectl(['delete', 'mutatingwebhookconfiguration,validatingwebhookconfiguration', '-l', `vram-preflight.test/run=${RUN}`, '--wait=false']);
  await Promise.all(NAMESPACES.map((ns) => k.deleteNamespace(ns)));
  controller?.kill('SIGTERM');
  await k.stopWebhook(webhook);
  k.closeApi();
  k.removeDir(dir);
});

/** The template of the workload a pod was made from: the leader's, or the worker's. */
function templateOf(pod: k.Plain, inputs: readonly k.Plain[]): k.Plain {
  const set = setOf(pod);
  const lws = inputs.find((o) => o.kind === 'LeaderWorkerSet' && o.metadata.name === set);
  const role = lws ? undefined : inputs.find((o) => o.kind === 'DisaggregatedSet')!.spec.roles.find((r: k.Plain) => set.endsWith(`-${r.name}`));
  const lwt = lws ? lws.spec.leaderWorkerTemplate : role.spec.leaderWorkerTemplate;
  return isWorker(pod) ? lwt.workerTemplate : (lwt.leaderTemplate ?? lwt.workerTemplate);
}

describe("LeaderWorkerSet's controller makes the pods; its webhook and ours both change them", () => {
  it('ours after LWS\'s: every pod LWS makes is stored exactly as the post-renderer decides LWS\'s real pod', async () => {
    const pods = await settled([PLAIN, AFTER]);
    const plain = pods.get(PLAIN)!;
    expect(plain.size, 'leaders and workers of every set, and of the LeaderWorkerSets the DisaggregatedSet made').toBe(EXPECTED_PODS);
    expect([...plain.values()].filter((p) => setOf(p).startsWith('wide-ep-lws')), "the DisaggregatedSet's LeaderWorkerSets made pods").toHaveLength(4);
    let wrapped = 0;
    for (const [name, real] of plain) {
      expect(real.spec.containers[0].env?.map((e: k.Plain) => e.name), `${name}: LWS's webhook added its env`).toEqual(expect.arrayContaining(LWS_ENV));
      const { pod: oracle } = renderPod(real, DEFAULT_OPTIONS);
      expect(oracle, `${name}: the post-renderer decides LWS's pod`).toBeDefined();
      const stored = pods.get(AFTER)!.get(name)!;
      (real.spec.containers as k.Plain[]).forEach((container, j) => {
        const c = stored.spec.containers[j] as k.Plain;
        expect(sameAnywhere(startOf(c)), `${name}: ${container.name}`).toEqual(sameAnywhere(startOf((oracle!.spec as k.Plain).containers[j])));
        expect(sameAnywhere(c.env), `${name}: ${container.name}: the same env`).toEqual(sameAnywhere(container.env));
        if (k.isWrapped(c)) wrapped++;
      });
    }
    // The example's leaders (2), the template-annotated example's leaders and workers (4), the multi-node leader (1), every pod of both roles (4).
    expect(wrapped, "leaders of every set, the template-annotated workers and the roles' pods are wrapped").toBe(2 + 4 + 1 + 4);
  }, 180_000);

  it('ours first: LWS changes each pod after ours, the API server calls ours again, and the pod is wrapped once, as decided on the pod ours saw first', async () => {
    const pods = await settled([PLAIN, BEFORE]);
    const inputs = workloads();
    const creates = k.auditEvents(auditStart).events.filter((e) => e.verb === 'create' && e.objectRef?.resource === 'pods' && e.objectRef?.namespace === BEFORE && e.stage === 'ResponseComplete' && e.responseStatus?.code === 201);
    expect(creates.length, 'every pod create is in the audit log').toBe(EXPECTED_PODS);
    for (const event of creates) {
      const calls = Object.entries(event.annotations ?? {})
        .filter(([key]) => key.startsWith('mutation.webhook.admission.k8s.io/round_'))
        .map(([key, value]) => ({ round: Number(key.match(/round_(\d+)/)![1]), ...(JSON.parse(value as string) as { configuration: string; mutated: boolean }) }));
      const name = event.objectRef.name;
      expect(calls.filter((x) => x.configuration === `${THEIRS}-mutating` && x.round === 0 && x.mutated), `${name}: LWS's webhook changed the pod`).toHaveLength(1);
      expect(calls.filter((x) => x.configuration === OURS_FIRST).map((x) => x.round).sort(), `${name}: ours before LWS's, and once more after it`).toEqual([0, 1]);
      expect(Object.keys(event.annotations ?? {}).filter((key) => key.startsWith('failed-open.')), `${name}: no webhook failed open`).toEqual([]);
    }
    for (const [name, real] of pods.get(PLAIN)!) {
      const { pod: oracle } = renderPod(withoutLwsEnv(real, templateOf(real, inputs)), DEFAULT_OPTIONS);
      const stored = pods.get(BEFORE)!.get(name)!;
      (real.spec.containers as k.Plain[]).forEach((container, j) => {
        const c = stored.spec.containers[j] as k.Plain;
        expect(sameAnywhere(startOf(c)), `${name}: ${container.name}`).toEqual(sameAnywhere(startOf((oracle!.spec as k.Plain).containers[j])));
        expect(sameAnywhere(c.env), `${name}: ${container.name}: the same env, LWS's once`).toEqual(sameAnywhere(container.env));
        expect(preflights(c), `${name}: ${container.name}: one preflight if wrapped`).toBe(k.isWrapped(c) ? 1 : 0);
      });
    }
  }, 180_000);

  it('either order, run as a kubelet runs it: each wrapped start waits for the same memory, then gives vLLM the same argv', async () => {
    const pods = await settled([AFTER, BEFORE]);
    let ran = 0;
    let ranVllm = 0;
    const differ: string[] = [];
    for (const [name, after] of pods.get(AFTER)!) {
      const before = pods.get(BEFORE)!.get(name)!;
      (after.spec.containers as k.Plain[]).forEach((a, j) => {
        const b = before.spec.containers[j] as k.Plain;
        expect(k.isWrapped(b), `${name}: the same containers wrapped in either order`).toBe(k.isWrapped(a));
        if (!k.isWrapped(a)) return;
        if (JSON.stringify(sameAnywhere(startOf(a))) !== JSON.stringify(sameAnywhere(startOf(b)))) differ.push(name);
        // Short of memory: the first line of the wait names what it waits for.
        const [waitA, waitB] = [a, b].map((c) => runStart(c, 1000, 1500).stderr.split('\n').find((l) => l.startsWith('vram-preflight: waiting')));
        expect(waitA, `${name}: the wait says what it needs`).toMatch(/MiB/);
        expect(sameAnywhere(waitB), `${name}: the same wait`).toEqual(sameAnywhere(waitA));
        // Memory free: the start goes on, the same way in either order (a Ray worker's script is not in this image-less run: its failure is the same too).
        const [runA, runB] = [a, b].map((c) => runStart(c, 81000, 20_000)) as [ReturnType<typeof runStart>, ReturnType<typeof runStart>];
        expect(runA.stderr, `${name}: the wait ended`).toMatch(/^vram-preflight: .*; starting$/m);
        expect(sameAnywhere({ status: runB.status, stdout: runB.stdout }), `${name}: the same outcome, the same vLLM argv`).toEqual(sameAnywhere({ status: runA.status, stdout: runA.stdout }));
        ran++;
        if (runA.stdout.includes('VLLM-RAN')) ranVllm++;
      });
    }
    expect(ran, 'every wrapped container').toBe(2 + 4 + 1 + 4);
    // Ours first sees the DisaggregatedSet's starts before LWS_LEADER_ADDRESS exists: the preflight then reads that variable
    // at run time (it is expanded into vLLM's command line); after LWS's, the decision reads its literal value. Different
    // scripts, the same wait and argv (above): the equivalence is not vacuous.
    expect(differ.sort(), 'the starts that differ between the orders: those expanding a variable LWS defines').toEqual([...pods.get(AFTER)!.entries()].filter(([, p]) => setOf(p).startsWith('wide-ep-lws')).map(([n]) => n).sort());
    expect(ranVllm, 'all but the template-annotated workers (Ray nodes: vLLM runs in actors their head schedules) start vLLM themselves').toBe(ran - 2);
  }, 300_000);

  it('the containers a render wraps are those the webhook wraps, except a worker named only by an annotation on the workload itself', async () => {
    const pods = await settled([RENDERED, AFTER]);
    const differ: string[] = [];
    for (const [name, fromRender] of pods.get(RENDERED)!) {
      const fromWebhook = pods.get(AFTER)!.get(name)!;
      const renderWrapped = (fromRender.spec.containers as k.Plain[]).map((c) => k.isWrapped(c));
      const webhookWrapped = (fromWebhook.spec.containers as k.Plain[]).map((c) => k.isWrapped(c));
      if (JSON.stringify(renderWrapped) !== JSON.stringify(webhookWrapped)) differ.push(name);
      for (const c of fromRender.spec.containers as k.Plain[]) expect(preflights(c), `${name}: ${c.name}: one preflight if wrapped`).toBe(k.isWrapped(c) ? 1 : 0);
    }
    const workloadAnnotatedWorkers = [...pods.get(AFTER)!.entries()].filter(([, p]) => setOf(p) === WORKLOAD_ANNOTATED && isWorker(p)).map(([name]) => name).sort();
    expect(workloadAnnotatedWorkers, 'two groups, one worker each').toHaveLength(2);
    expect(differ.sort(), "the render wraps the worker the workload's own annotation names; the pod never carries that annotation, so the webhook does not").toEqual(workloadAnnotatedWorkers);
    for (const name of workloadAnnotatedWorkers) {
      expect(k.isWrapped(pods.get(RENDERED)!.get(name)!.spec.containers[0]), `${name}: the render wrapped it`).toBe(true);
      expect(pods.get(AFTER)!.get(name)!.metadata.annotations?.['vram-preflight.io/containers'], `${name}: LWS did not copy the workload's annotation`).toBeUndefined();
    }
    const templateAnnotatedWorkers = [...pods.get(AFTER)!.values()].filter((p) => setOf(p) === TEMPLATE_ANNOTATED && isWorker(p));
    expect(templateAnnotatedWorkers.map((p) => k.isWrapped(p.spec.containers[0])), 'with the annotation on the pod template, the webhook wraps the workers too').toEqual([true, true]);
  }, 180_000);
});
