/**
 * AdmissionReviews over real TLS, HTTP/1.1 and HTTP/2, as the API server
 * sends them; every returned patch applied by python3-jsonpatch and the
 * wrapped containers compared with what the post-renderer makes of the same
 * pod. Each answer allowed, the uid echoed, a patch only where there is
 * something to do.
 */
import https from 'node:https';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { Ajv } from 'ajv';
import * as h from './harness.js';

h.requireTools();

const dir = h.tempDir('admission');
let pki: h.Pki;
let started: h.Started;
let agent: https.Agent;
let session: ReturnType<typeof h.h2session>;

type Send = (body: string) => Promise<h.Answer>;
const protocols: [string, () => Send][] = [
  ['HTTP/1.1', () => (body) => h.h1(started.url, pki.caCert, { body }, agent)],
  ['HTTP/2', () => (body) => session.request({ body })],
];

beforeAll(async () => {
  pki = h.makePki(path.join(dir, 'pki'));
  const leaf = pki.leaf('webhook');
  // No registry here: an image only its registry could place is refused at once.
  started = await h.start({ certFile: leaf.cert, keyFile: leaf.key, flags: [{ flag: '--registry-lookup', value: 'never' }] });
  agent = new https.Agent({ keepAlive: true, ca: readFileSync(pki.caCert) });
  session = h.h2session(started.url, pki.caCert);
});

afterAll(async () => {
  session?.close();
  agent?.destroy();
  await started?.webhook.drain();
  h.removeDir(dir);
});

const containerOf = (object: unknown, name: string) => ((object as h.Pod).spec.containers.find((c) => c.name === name) ?? {}) as Record<string, unknown>;

describe.each(protocols)('over %s', (protocol, sender) => {
  it('negotiates the protocol asked for', async () => {
    const answer = await sender()(h.review(h.plainPod()));
    expect(answer.alpn).toBe(protocol === 'HTTP/2' ? 'h2' : 'http/1.1');
  });

  it('wraps a vLLM container exactly as the post-renderer does, and names it in an annotation', async () => {
    const pod = h.vllmPod();
    const body = h.review(pod);
    const answer = await sender()(body);
    expect(answer.status).toBe(200);
    expect(answer.headers['content-type']).toBe('application/json');
    const r = h.readReview(answer);
    expect(r.uid).toBe((JSON.parse(body) as { request: { uid: string } }).request.uid);
    expect(r.allowed).toBe(true);
    expect(r.patchType).toBe('JSONPatch');
    expect(r.warnings).toBeUndefined();
    const patched = h.applyPatch(pod, r.patch!) as h.Pod;
    const expected = h.postRendered(pod);
    expect(expected.errors).toEqual([]);
    expect(containerOf(patched, 'model').command).toEqual(containerOf(expected.object, 'model').command);
    expect(containerOf(patched, 'model').args).toEqual(containerOf(expected.object, 'model').args);
    expect(containerOf(patched, 'model').command).toEqual(['/bin/sh', '-ec']);
    // Nothing else changed but the annotation.
    expect({ ...patched, metadata: { ...patched.metadata, annotations: undefined }, spec: { ...patched.spec, containers: [] } }).toEqual({ ...pod, metadata: { ...pod.metadata, annotations: undefined }, spec: { ...pod.spec, containers: [] } });
    expect(patched.metadata.annotations).toEqual({ 'vram-preflight.io/wrapped': 'model' });
  });

  it('adds to annotations a pod already has, escaping the key as a JSON Pointer (~1 for /)', async () => {
    const pod = h.vllmPod({ annotations: { 'prometheus.io/scrape': 'true', 'a~b/c': 'x' } });
    const r = h.readReview(await sender()(h.review(pod)));
    expect(r.patch).toContainEqual({ op: 'add', path: '/metadata/annotations/vram-preflight.io~1wrapped', value: 'model' });
    const patched = h.applyPatch(pod, r.patch!) as h.Pod;
    expect(patched.metadata.annotations).toEqual({ 'prometheus.io/scrape': 'true', 'a~b/c': 'x', 'vram-preflight.io/wrapped': 'model' });
  });

  it('a pod with nothing to wrap gets no patch', async () => {
    const r = h.readReview(await sender()(h.review(h.plainPod())));
    expect(r).toEqual({ uid: expect.any(String), allowed: true });
  });

  it('a pod wrapped at render time (by the post-renderer) gets no patch, nor does a pod this webhook wrapped (reinvocation)', async () => {
    const rendered = h.postRendered(h.vllmPod()).object;
    expect(h.readReview(await sender()(h.review(rendered)))).toEqual({ uid: expect.any(String), allowed: true });
    const pod = h.vllmPod();
    const ours = h.applyPatch(pod, h.readReview(await sender()(h.review(pod))).patch!);
    expect(h.readReview(await sender()(h.review(ours)))).toEqual({ uid: expect.any(String), allowed: true });
  });

  it('wraps every vLLM container of a pod, and only those; a sidecar added later (reinvocation) joins the annotation', async () => {
    const vllm = h.vllmPod().spec.containers[0]!;
    const pod = h.vllmPod({ containers: [{ name: 'proxy', image: 'envoyproxy/envoy:v1.31' }, { ...vllm, name: 'prefill' }, { ...vllm, name: 'decode' }] });
    const r = h.readReview(await sender()(h.review(pod)));
    const patched = h.applyPatch(pod, r.patch!) as h.Pod;
    expect(patched.metadata.annotations).toEqual({ 'vram-preflight.io/wrapped': 'prefill,decode' });
    expect(containerOf(patched, 'proxy')).toEqual(pod.spec.containers[0]);
    const expected = h.postRendered(pod).object;
    expect(patched.spec.containers).toEqual((expected as h.Pod).spec.containers);
    // Another webhook adds a vLLM container after us; the API server calls us again.
    const grown = { ...patched, spec: { ...patched.spec, containers: [...patched.spec.containers, { ...vllm, name: 'late' }] } };
    const again = h.applyPatch(grown, h.readReview(await sender()(h.review(grown))).patch!) as h.Pod;
    expect(again.metadata.annotations).toEqual({ 'vram-preflight.io/wrapped': 'prefill,decode,late' });
    expect(containerOf(again, 'late').command).toEqual(['/bin/sh', '-ec']);
  });

  it('a vLLM container that cannot be wrapped safely: admitted unchanged, with warnings, the reason and the fix (config.images for the chart, as YAML) in an annotation', async () => {
    // v0.12.0: vLLM changed this image's start in v0.11.1-v0.14.0 and nothing says which; no registry here (lookups off).
    const pod = h.vllmPod({ containers: [{ ...h.vllmPod().spec.containers[0], image: 'vllm/vllm-openai:v0.12.0' }] });
    const r = h.readReview(await sender()(h.review(pod)));
    expect(r.allowed).toBe(true);
    expect(r.warnings).toHaveLength(2);
    expect(r.warnings![0]).toMatch(/^vram-preflight: container "model" not wrapped, admitted unchanged: /);
    expect(r.warnings![1]).toBe('vram-preflight: to wrap "model": add to the chart\'s config.images: {repository: vllm/vllm-openai, tag: "v0.12.0", entrypoint: [...]} (annotation vram-preflight.io/not-wrapped has the YAML)');
    const patched = h.applyPatch(pod, r.patch!) as h.Pod;
    expect(patched.spec).toEqual(pod.spec);
    const note = (patched.metadata.annotations as Record<string, string>)['vram-preflight.io/not-wrapped']!;
    expect(note).toMatch(/^model: the container gives no command/);
    const [, fix] = note.split('\n  fix: ');
    expect(fix).toMatch(/^add this entry to config\.images in the webhook chart's values \(`vram-preflight resolve vllm\/vllm-openai:v0\.12\.0` prints this entry from the registry\), then helm upgrade:\n/);
    // The YAML is the chart's values: it parses, and its entry, once filled in, is what the chart's schema takes.
    const values = parseYaml(fix!.slice(fix!.indexOf('\n') + 1).replace(/\[\.\.\.\]/g, '["vllm", "serve"]')) as { config: { images: Record<string, unknown>[] } };
    expect(values).toEqual({ config: { images: [{ repository: 'vllm/vllm-openai', tag: 'v0.12.0', entrypoint: ['vllm', 'serve'] }] } });
    const chartSchema = new Ajv({ strict: false }).compile(JSON.parse(readFileSync(path.join(import.meta.dirname, '../../deploy/webhook/values.schema.json'), 'utf8')));
    expect(chartSchema(values), JSON.stringify(chartSchema.errors)).toBe(true);
  });

  it('dryRun gets the same answer as the real request, counted apart', async () => {
    const pod = h.vllmPod();
    const real = h.readReview(await sender()(h.review(pod)));
    const before = started.webhook.metrics.admissions.get({ outcome: 'wrapped', dry_run: 'true' });
    const dry = h.readReview(await sender()(h.review(pod, { dryRun: true })));
    expect(dry.patch).toEqual(real.patch);
    expect(started.webhook.metrics.admissions.get({ outcome: 'wrapped', dry_run: 'true' })).toBe(before + 1);
  });

  it('anything but a Pod CREATE is allowed untouched: another kind, a subresource, UPDATE, DELETE, no object', async () => {
    const pod = h.vllmPod();
    const cases = [
      h.review({ ...pod, kind: 'Deployment' }, { kind: { group: 'apps', version: 'v1', kind: 'Deployment' }, resource: { group: 'apps', version: 'v1', resource: 'deployments' } }),
      h.review(pod, { resource: { group: '', version: 'v1', resource: 'pods' }, kind: { group: '', version: 'v1', kind: 'Pod' } }).replace('"operation":"CREATE"', '"subResource":"ephemeralcontainers","operation":"CREATE"'),
      h.review(pod, { operation: 'UPDATE' }),
      h.review(pod, { operation: 'DELETE' }),
      h.review(undefined),
    ];
    for (const body of cases) {
      const answer = await sender()(body);
      expect(answer.status, body.slice(0, 120)).toBe(200);
      expect(h.readReview(answer), body.slice(0, 120)).toEqual({ uid: (JSON.parse(body) as { request: { uid: string } }).request.uid, allowed: true });
    }
  });
});

describe('logs and metrics', () => {
  it('one JSON log line per admission, with uid, namespace, pod, outcome, wrapped containers and duration, and no env values', async () => {
    const pod = h.vllmPod({ containers: [{ ...h.vllmPod().spec.containers[0], env: [{ name: 'HF_TOKEN', value: 'hf_secret_value_123' }] }] });
    const body = h.review(pod);
    const uid = (JSON.parse(body) as { request: { uid: string } }).request.uid;
    await h.h1(started.url, pki.caCert, { body }, agent);
    const line = started.logs.find((l) => l.uid === uid)!;
    expect(line).toMatchObject({ level: 'info', msg: 'admission', uid, namespace: 'models', pod: 'qwen-7d9f8c6b5-', operation: 'CREATE', dryRun: false, outcome: 'wrapped', wrapped: ['model'] });
    expect(typeof line.durationMs).toBe('number');
    expect(JSON.stringify(started.logs)).not.toContain('hf_secret_value_123');
  });

  it('/metrics: Prometheus text, admissions by outcome, containers, latency histogram', async () => {
    const answer = await h.h1(started.url, pki.caCert, { method: 'GET', path: '/metrics' });
    expect(answer.status).toBe(200);
    expect(answer.headers['content-type']).toBe('text/plain; version=0.0.4; charset=utf-8');
    const text = answer.body;
    expect(text).toMatch(/^vram_preflight_webhook_admissions_total\{outcome="wrapped",dry_run="false"\} [1-9]\d*$/m);
    expect(text).toMatch(/^vram_preflight_webhook_containers_total\{result="wrapped"\} [1-9]\d*$/m);
    expect(text).toMatch(/^vram_preflight_webhook_containers_total\{result="refused"\} [1-9]\d*$/m);
    expect(text).toMatch(/^vram_preflight_webhook_admission_duration_seconds_count [1-9]\d*$/m);
    expect(text).toMatch(/^vram_preflight_webhook_in_flight_requests 1$/m);
    // Every sample line is NAME{labels} VALUE, every family has HELP and TYPE.
    for (const line of text.trimEnd().split('\n')) expect(line).toMatch(/^(# (HELP|TYPE) \w+ .+|\w+(\{[^}]*\})? [0-9.e+-]+)$/);
  });
});
