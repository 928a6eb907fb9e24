/**
 * The webhook behind a real kube-apiserver, registered with the chart's own
 * MutatingWebhookConfiguration (a `url` clientConfig, since a Service cannot
 * reach loopback; see service.test.ts for the Service route):
 *
 * - every pod of the corpus (each workload fixture's pod templates, the real
 *   renders', and the pods operators build, fixtures/pods/) created with
 *   kubectl: the pod the API server stores has exactly the container starts
 *   the post-renderer gives the same pod; the annotations are there; kubectl
 *   prints the warnings of the pods it did not wrap; a pod the API server
 *   accepts unwrapped it accepts wrapped (the patch applies, the patched pod
 *   validates), and one it refuses it refuses either way;
 * - cases with their own options run against a webhook started with them;
 * - a Deployment: kube-controller-manager creates the ReplicaSet and the Pod,
 *   and that Pod is wrapped;
 * - dry runs have no side effects; a namespace outside the selector, and a pod
 *   labelled to skip, are never sent.
 */
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_OPTIONS, type Options } from '../../src/core/options.js';
import { fixturePodCorpus, renderPod, wrappedBefore } from '../support/doors.js';
import { readdirSync, readFileSync } from 'node:fs';
import * as k from './harness.js';

const SUITE = 'admission';
// A namespace of an earlier run may still be terminating: each run has its own names.
const RUN = Date.now().toString(36);
const NS = `vpt-admission-${RUN}`;
const PLAIN_NS = `vpt-admission-plain-${RUN}`;
const dir = k.tempDir(SUITE);
let bundle: string;
let tls: { caCert: string; cert: string; key: string };
let webhook: k.WebhookProcess;
const extraWebhooks: k.WebhookProcess[] = [];

/** Objects the corpus's pods name and the API server checks exist at admission (RuntimeClass, PriorityClass, ServiceAccount plugins). */
function prerequisites(pods: readonly k.Plain[], ns: string): k.Plain[] {
  const out: k.Plain[] = [];
  const seen = new Set<string>();
  for (const pod of pods) {
    const spec = pod.spec ?? {};
    const add = (key: string, object: k.Plain) => {
      if (!seen.has(key)) (seen.add(key), out.push(object));
    };
    if (spec.runtimeClassName) add(`rc/${spec.runtimeClassName}`, { apiVersion: 'node.k8s.io/v1', kind: 'RuntimeClass', metadata: { name: spec.runtimeClassName }, handler: spec.runtimeClassName });
    if (spec.priorityClassName) add(`pc/${spec.priorityClassName}`, { apiVersion: 'scheduling.k8s.io/v1', kind: 'PriorityClass', metadata: { name: spec.priorityClassName }, value: 1000 });
    const sa = spec.serviceAccountName ?? spec.serviceAccount;
    if (sa && sa !== 'default') add(`sa/${sa}`, { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: sa, namespace: ns } });
  }
  return out;
}

interface CorpusPod {
  name: string;
  pod: k.Plain;
  options: Options;
  optionArgs: string[];
}

const ROOT = k.ROOT;

/** The pods of the corpus, each with the options its case renders with (as webhook flags too). */
function corpus(): CorpusPod[] {
  const out: CorpusPod[] = [];
  for (const c of fixturePodCorpus()) {
    const argsFile = path.join(ROOT, 'fixtures/cases', c.name, 'args.txt');
    let optionArgs: string[] = [];
    try {
      optionArgs = readFileSync(argsFile, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((a) => (a.startsWith('--config=') ? `--config=${path.resolve(path.dirname(argsFile), a.slice('--config='.length))}` : a));
      // `--config FILE` as two words
      optionArgs = optionArgs.map((a, i) => (optionArgs[i - 1] === '--config' ? path.resolve(path.dirname(argsFile), a) : a));
    } catch {
      // no args.txt: default options
    }
    c.pods.forEach((pod, i) => out.push({ name: `${c.name}#${i}`, pod: pod as k.Plain, options: c.options, optionArgs }));
  }
  const podsDir = path.join(ROOT, 'fixtures/pods');
  // A pod whose DRA claims lie beside it (<name>.claims.json) needs them in the cluster: test/apiserver/dra.test.ts has those.
  const files = readdirSync(podsDir);
  for (const f of files.filter((f) => f.endsWith('.json') && !f.endsWith('.expected.json') && !f.endsWith('.claims.json') && !files.includes(f.replace(/\.json$/, '.claims.json')))) {
    out.push({ name: `pods/${f}`, pod: JSON.parse(readFileSync(path.join(podsDir, f), 'utf8')) as k.Plain, options: DEFAULT_OPTIONS, optionArgs: [] });
  }
  return out;
}

/** The pod as this test creates it: a fixed name (to find it again), the namespace, a label naming the case. */
function asCreated(c: CorpusPod, index: number, ns: string): k.Plain {
  const pod = structuredClone(c.pod);
  pod.metadata = { ...(pod.metadata ?? {}), name: `p${index}`, namespace: ns, labels: { ...(pod.metadata?.labels ?? {}), 'vram-preflight.test/case': String(index) } };
  delete pod.metadata.generateName;
  delete pod.metadata.uid;
  delete pod.metadata.resourceVersion;
  delete pod.metadata.creationTimestamp;
  // An owner that does not exist in this cluster: the garbage collector would delete the pod at once.
  delete pod.metadata.ownerReferences;
  delete pod.status;
  return pod;
}

const start = (c: k.Plain | undefined) => ({ command: c?.command ?? null, args: c?.args ?? null });

beforeAll(async () => {
  k.cluster();
  bundle = k.buildBundle(dir);
  tls = k.servingPki(dir);
  // No registry: an image only its registry can place is admitted unchanged, as the post-renderer without one refuses it.
  webhook = await k.startWebhook(bundle, tls, ['--registry-lookup', 'never']);
  await k.namespace(NS, { 'vram-preflight.io/inject': 'enabled', 'vram-preflight.test/suite': SUITE });
  await k.namespace(PLAIN_NS, { 'vram-preflight.test/suite': SUITE });
  k.applyObjects([k.chartWebhookConfiguration(`vpt-${SUITE}-${RUN}`, SUITE, webhook.url, tls.caCert, { labels: { 'vram-preflight.test/run': RUN } })]);
  await k.waitForWebhook(NS, webhook, tls.caCert);
}, 40 * 60_000);

afterAll(async () => {
  k.kubectl(['delete', 'mutatingwebhookconfiguration', '-l', `vram-preflight.test/run=${RUN}`, '--wait=false']);
  await Promise.all([k.deleteNamespace(NS), k.deleteNamespace(PLAIN_NS), ...[...Array(20).keys()].map((i) => k.deleteNamespace(`${NS}-o${i}`))]);
  await Promise.all([webhook, ...extraWebhooks].map((w) => k.stopWebhook(w)));
  k.closeApi();
  k.removeDir(dir);
});

describe('pods created through a real kube-apiserver, with the chart\'s webhook configuration', () => {
  it('every corpus pod: stored with the post-renderer\'s container starts; annotated; warned; never made invalid', async () => {
    const all = corpus();
    const groups = new Map<string, CorpusPod[]>();
    for (const c of all) {
      const key = c.optionArgs.join('\u0000');
      groups.set(key, [...(groups.get(key) ?? []), c]);
    }
    expect(all.length).toBeGreaterThan(100);

    // Cases with options of their own get a webhook started with those options, a namespace and a configuration each.
    const nsOf = new Map<string, string>([['', NS]]);
    const extra: k.Plain[] = [];
    let o = 0;
    for (const key of groups.keys()) {
      if (key === '') continue;
      const ns = `${NS}-o${o++}`;
      const suite = `${SUITE}-o${o}`;
      const w = await k.startWebhook(bundle, tls, ['--registry-lookup', 'never', ...key.split('\u0000')]);
      extraWebhooks.push(w);
      await k.namespace(ns, { 'vram-preflight.io/inject': 'enabled', 'vram-preflight.test/suite': suite });
      const mwc = k.chartWebhookConfiguration(`vpt-${SUITE}-${RUN}-options-${o}`, suite, w.url, tls.caCert, { labels: { 'vram-preflight.test/run': RUN } });
      extra.push(mwc);
      nsOf.set(key, ns);
    }
    k.applyObjects(extra);

    const pods = all.map((c, i) => ({ c, i, ns: nsOf.get(c.optionArgs.join('\u0000'))! }));
    for (const ns of new Set(pods.map((p) => p.ns))) k.applyObjects(prerequisites(pods.filter((p) => p.ns === ns).map((p) => p.c.pod), ns));
    const webhookOf = new Map<string, k.WebhookProcess>([[NS, webhook]]);
    extraWebhooks.forEach((w, j) => webhookOf.set(`${NS}-o${j}`, w));
    for (const ns of new Set(pods.map((p) => p.ns))) await k.waitForWebhook(ns, webhookOf.get(ns)!, tls.caCert);

    // What the API server does with each pod unwrapped: a server-side dry run in a namespace the webhook never sees.
    k.applyObjects(prerequisites(all.map((c) => c.pod), PLAIN_NS));
    const unwrapped = await Promise.all(pods.map(({ c, i }) => k.api('POST', `/api/v1/namespaces/${PLAIN_NS}/pods?dryRun=All`, asCreated(c, i, PLAIN_NS))));

    // Created for real, by kubectl, one List per namespace; kubectl prints the admission warnings on stderr.
    // kubectl's own schema check refuses a whole List for one bad item: the pods the API server refuses
    // unwrapped are sent apart, straight to the API server, where the webhook sees them too.
    const valid = pods.filter(({ i }) => unwrapped[i]!.status === 201);
    const invalid = pods.filter(({ i }) => unwrapped[i]!.status !== 201);
    const invalidAnswers = await Promise.all(invalid.map(({ c, i, ns }) => k.api('POST', `/api/v1/namespaces/${ns}/pods`, asCreated(c, i, ns))));
    invalidAnswers.forEach((answer, j) => expect(answer.status, `${invalid[j]!.c.name}: refused unwrapped, refused wrapped`).toBe(unwrapped[invalid[j]!.i]!.status));
    let stderr = '';
    for (const ns of new Set(pods.map((p) => p.ns))) {
      const items = valid.filter((p) => p.ns === ns).map(({ c, i }) => asCreated(c, i, ns));
      const run = k.kubectl(['create', '-f', '-', '-o', 'name'], { input: JSON.stringify({ apiVersion: 'v1', kind: 'List', items }) });
      stderr += run.stderr;
      expect(run.status, `kubectl create in ${ns}: ${run.stderr}`).toBe(0);
    }
    const stored = new Map<string, k.Plain>();
    for (const ns of new Set(pods.map((p) => p.ns))) {
      for (const item of JSON.parse(k.kubectlOk(['get', 'pods', '-n', ns, '-o', 'json'])).items as k.Plain[]) stored.set(`${ns}/${item.metadata.name}`, item);
    }

    let wrappedContainers = 0;
    let notWrappedPods = 0;
    let refusedBoth = 0;
    const notWrappedNames: string[] = [];
    for (const { c, i, ns } of pods) {
      const label = `${c.name} (p${i} in ${ns})`;
      const said = stderr.split('\n').filter((l) => l.includes(`"p${i}"`) || l.includes(`/p${i} `)).join('\n');
      const got = stored.get(`${ns}/p${i}`);
      if (unwrapped[i]!.status !== 201) {
        // Invalid as it is: refused with the webhook too, never stored.
        expect(got, `${label}: refused unwrapped (${unwrapped[i]!.status}), so refused wrapped`).toBeUndefined();
        refusedBoth++;
        continue;
      }
      expect(got, `${label}: accepted unwrapped, so it must be accepted wrapped; kubectl said:\n${said}`).toBeDefined();
      const { rendered, pod: oracle } = renderPod(c.pod, c.options);
      const before = c.pod.spec.containers as k.Plain[];
      const after = got!.spec.containers as k.Plain[];
      const annotations = (got!.metadata.annotations ?? {}) as Record<string, string>;
      // Refused (error), or reported as one that cannot be wrapped (a MIG instance): admitted unchanged, said so.
      const notWrapped = (r: { action: string }) => r.action === 'error' || r.action === 'cannot-wrap';
      const refused = new Set(rendered.containers.filter(notWrapped).map((r) => r.container));
      const changed: string[] = [];
      before.forEach((container, j) => {
        const what = `${label}: container ${container.name}`;
        if (wrappedBefore(container)) expect(start(after[j]), `${what} was wrapped at render time`).toEqual(start(container));
        else if (oracle) expect(start(after[j]), what).toEqual(start(((oracle.spec as k.Plain).containers as k.Plain[])[j]));
        else if (refused.has(String(container.name))) {
          expect(start(after[j]), `${what}: refused by the post-renderer, admitted unchanged`).toEqual(start(container));
          expect(annotations['vram-preflight.io/not-wrapped'] ?? '', `${what} named in the not-wrapped annotation`).toContain(String(container.name));
        }
        if (JSON.stringify(start(after[j])) !== JSON.stringify(start(container))) changed.push(String(container.name));
      });
      wrappedContainers += changed.length;
      if (changed.length) expect((annotations['vram-preflight.io/wrapped'] ?? '').split(',').sort(), `${label}: the wrapped annotation`).toEqual([...changed].sort());
      else expect(annotations['vram-preflight.io/wrapped'], `${label}: nothing wrapped, no wrapped annotation`).toBeUndefined();
      if (annotations['vram-preflight.io/not-wrapped']) {
        notWrappedPods++;
        for (const r of rendered.containers.filter(notWrapped)) notWrappedNames.push(r.container);
      }
    }
    // kubectl prints each admission warning as `Warning: …`, one per container the webhook did not
    // wrap; it prints a text it has printed already once only (client-go's deduplicating warning writer).
    const warned = [...stderr.matchAll(/^Warning: vram-preflight: container "([^"]*)"/gm)].map((m) => m[1]!);
    expect(new Set(warned), 'kubectl printed a warning for each container not wrapped').toEqual(new Set(notWrappedNames));
    expect(warned.length).toBeLessThanOrEqual(notWrappedNames.length);
    expect(wrappedContainers).toBeGreaterThan(50);
    expect(notWrappedPods).toBeGreaterThan(0);
    // The figure is printed for the record (which pods the API server itself refuses is the API server's business).
    console.log(`apiserver corpus: ${pods.length} pods, ${wrappedContainers} containers wrapped, ${notWrappedPods} pods not wrapped with a reason, ${refusedBoth} refused by the API server with or without the webhook`);
  }, 300_000);

  it('a Deployment: kube-controller-manager creates the ReplicaSet and its Pod, and that Pod is wrapped', async () => {
    const deployment = {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name: 'qwen', namespace: NS },
      spec: {
        replicas: 1,
        selector: { matchLabels: { 'vram-preflight.test/deployment': 'qwen' } },
        template: { metadata: { labels: { 'vram-preflight.test/deployment': 'qwen' } }, spec: k.vllmPod('x').spec },
      },
    };
    k.applyObjects([deployment]);
    let pod: k.Plain | undefined;
    for (let i = 0; i < 300 && !pod; i++) {
      pod = (await k.api('GET', `/api/v1/namespaces/${NS}/pods?labelSelector=vram-preflight.test%2Fdeployment%3Dqwen`)).json().items[0];
      if (!pod) await k.sleep(100);
    }
    expect(pod, 'the ReplicaSet controller created a pod').toBeDefined();
    expect(pod!.metadata.ownerReferences?.[0]?.kind).toBe('ReplicaSet');
    expect(k.isWrapped(pod!.spec.containers[0]), 'the controller\'s pod is wrapped').toBe(true);
    expect(pod!.spec.containers[0].args.slice(1)).toEqual(['--', ...k.vllmPod('x').spec.containers[0].command]);
    expect(pod!.metadata.annotations['vram-preflight.io/wrapped']).toBe('vllm');
    // The template is never changed: only pods are mutated.
    const stored = (await k.api('GET', `/apis/apps/v1/namespaces/${NS}/deployments/qwen`)).json();
    expect(k.isWrapped(stored.spec.template.spec.containers[0])).toBe(false);
  }, 60_000);

  it('a server-side dry run shows the wrapped pod and stores nothing; the webhook counts it apart', async () => {
    const before = sumDryRun(await webhookMetrics());
    const run = k.kubectl(['create', '--dry-run=server', '-o', 'json', '-n', NS, '-f', '-'], { input: JSON.stringify(k.vllmPod('dry')) });
    expect(run.status, run.stderr).toBe(0);
    const shown = JSON.parse(run.stdout);
    expect(k.isWrapped(shown.spec.containers[0])).toBe(true);
    expect((await k.api('GET', `/api/v1/namespaces/${NS}/pods/dry`)).status).toBe(404);
    expect(sumDryRun(await webhookMetrics())).toBe(before + 1);
  });

  it('a namespace outside the selector, and a pod labelled vram-preflight.io/skip, are never sent', async () => {
    const before = await webhookMetrics();
    const outside = (await k.api('POST', `/api/v1/namespaces/${PLAIN_NS}/pods`, k.vllmPod('outside'))).json();
    const skipped = (await k.api('POST', `/api/v1/namespaces/${NS}/pods`, k.vllmPod('skipped', { labels: { 'vram-preflight.io/skip': 'true' } }))).json();
    for (const pod of [outside, skipped]) {
      expect(pod.metadata?.name, JSON.stringify(pod)).toBeDefined();
      expect(k.isWrapped(pod.spec.containers[0])).toBe(false);
      expect(pod.metadata.annotations?.['vram-preflight.io/wrapped']).toBeUndefined();
    }
    expect(admissionsCounted(await webhookMetrics())).toBe(admissionsCounted(before));
  });
});

const webhookMetrics = () => k.webhookMetrics(webhook, tls.caCert);

const samples = (text: string, name: string) => [...text.matchAll(new RegExp(`^${name}\\{([^}]*)\\} (\\S+)$`, 'gm'))].map((m) => ({ labels: m[1]!, value: Number(m[2]) }));
const sumDryRun = (text: string) => samples(text, 'vram_preflight_webhook_admissions_total').filter((s) => s.labels.includes('dry_run="true"')).reduce((a, s) => a + s.value, 0);
const admissionsCounted = (text: string) => samples(text, 'vram_preflight_webhook_admissions_total').reduce((a, s) => a + s.value, 0);
