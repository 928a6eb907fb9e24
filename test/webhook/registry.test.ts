/**
 * Registry lookups from the webhook against a real docker-registry (the CNCF
 * distribution server, as in the registry tests) and the harness's stalled
 * and rate-limiting stubs: one lookup per image however many pods ask at
 * once, answers (and failures) cached across requests, a digest-only image
 * (how Knative/KServe serverless pods carry it) placed by its digest, and a
 * registry that stalls or fails never holding a pod past the budget: the pod
 * goes in unchanged with the reason.
 */
import { createHash } from 'node:crypto';
import https from 'node:https';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { lookupImageStarts } from '../../src/registry/index.js';
import type { LookupFunction } from '../../src/webhook/image-starts.js';
import * as r from '../registry/harness.js';
import * as h from './harness.js';

h.requireTools();
r.requireTools();

const API_SERVER = ['python3', '-m', 'vllm.entrypoints.openai.api_server'];
const ARGS = ['--model', 'Qwen/Qwen3-8B', '--gpu-memory-utilization', '0.9'];
const dir = h.tempDir('registry');
let pki: h.Pki;
let leaf: { cert: string; key: string };
let registry: r.Registry;
let image: string;
let digest: string;
const stops: (() => Promise<void>)[] = [];

beforeAll(async () => {
  pki = h.makePki(path.join(dir, 'pki'));
  leaf = pki.leaf('webhook');
  registry = await r.startRegistry(path.join(dir, 'registry'), path.join(dir, 'storage'), { kind: 'none' });
  stops.push(registry.stop);
  const layout = r.writeOciLayout(path.join(dir, 'oci'), [{ architecture: 'amd64', entrypoint: API_SERVER, cmd: null }], false);
  // v0.12.0: the table cannot place it (vLLM changed this image's start in v0.11.1-v0.14.0); only the registry can.
  image = `${registry.host}/vllm/vllm-openai:v0.12.0`;
  await r.push(layout, image);
  const manifest = await r.skopeoRawManifest(image);
  digest = `sha256:${createHash('sha256').update(JSON.stringify(manifest)).digest('hex')}`;
}, 60_000);

afterAll(async () => {
  for (const stop of stops) await stop();
  h.removeDir(dir);
});

/** The registry client, counting the lookups it is asked for. */
function counting(): { lookup: LookupFunction; images: string[] } {
  const images: string[] = [];
  return { images, lookup: (wanted, options) => (images.push(...wanted), lookupImageStarts(wanted, options)) };
}

function podWith(ref: string, name = 'kserve-container') {
  return h.vllmPod({ containers: [{ name, image: ref, args: ARGS, resources: { limits: { 'nvidia.com/gpu': '1' } } }] });
}

async function startWith(over: Partial<Parameters<typeof h.start>[0]> = {}) {
  const counter = counting();
  const s = await h.start({ certFile: leaf.cert, keyFile: leaf.key, lookup: counter.lookup, flags: [{ flag: '--cache-dir', value: h.tempDir('cache') }], ...over });
  stops.push(() => s.webhook.drain());
  return { s, counter };
}

const startOf = (answer: h.ReviewAnswer): string[] | undefined => (answer.patch as { path: string; value: string[] }[] | undefined)?.find((op) => op.path.endsWith('/args'))?.value.slice(2);

describe('registry lookups from the webhook', () => {
  it('many pods asking for one image at once: one lookup, every pod wrapped with the start the registry holds', async () => {
    const { s, counter } = await startWith();
    const agent = new https.Agent({ keepAlive: true, ca: readFileSync(pki.caCert) });
    const session = h.h2session(s.url, pki.caCert);
    const answers = await Promise.all(
      Array.from({ length: 24 }, (_, i) => (i % 2 ? h.h1(s.url, pki.caCert, { body: h.review(podWith(image)) }, agent) : session.request({ body: h.review(podWith(image)) }))),
    );
    session.close();
    agent.destroy();
    for (const answer of answers) expect(startOf(h.readReview(answer))).toEqual([...API_SERVER, ...ARGS]);
    expect(counter.images).toEqual([image]);
    expect(s.webhook.metrics.registryLookups.get({ result: 'answered' })).toBe(1);
    expect(s.webhook.metrics.registryLookups.get({ result: 'shared' })).toBe(23);
    // Later pods: from the cache.
    expect(startOf(h.readReview(await h.h1(s.url, pki.caCert, { body: h.review(podWith(image)) })))).toEqual([...API_SERVER, ...ARGS]);
    expect(counter.images).toHaveLength(1);
    expect(s.webhook.metrics.registryLookups.get({ result: 'hit' })).toBe(1);
  });

  it('a Knative/KServe serverless pod carries its image by digest only: the lookup by digest places it (and is cached)', async () => {
    const { s, counter } = await startWith();
    const byDigest = `${registry.host}/vllm/vllm-openai@${digest}`;
    const pod = h.vllmPod({
      name: 'qwen-predictor-00001-deployment',
      containers: [
        { name: 'kserve-container', image: byDigest, args: ARGS, resources: { limits: { 'nvidia.com/gpu': '1' } }, env: [{ name: 'PORT', value: '8080' }, { name: 'K_REVISION', value: 'qwen-predictor-00001' }] },
        { name: 'queue-proxy', image: 'gcr.io/knative-releases/knative.dev/serving/cmd/queue@sha256:0a8f0a8c7e43e2f2c8b8f0f7dc1f5b1c1e5ad8a7f1f0e2d3c4b5a69788796a5b', ports: [{ containerPort: 8012, name: 'http-usermetric' }] },
      ],
    });
    for (let i = 0; i < 2; i++) {
      const answer = h.readReview(await h.h1(s.url, pki.caCert, { body: h.review(pod) }));
      const patched = h.applyPatch(pod, answer.patch!) as h.Pod;
      expect(patched.metadata.annotations).toEqual({ 'vram-preflight.io/wrapped': 'kserve-container' });
      expect(startOf(answer)).toEqual([...API_SERVER, ...ARGS]);
      expect(patched.spec.containers[1]).toEqual(pod.spec.containers[1]);
    }
    expect(counter.images).toEqual([byDigest]);
  });

  it('a stalled registry: every pod is answered within the budget, admitted unchanged with the reason; one lookup', async () => {
    const stalled = await r.startStalled();
    stops.push(stalled.close);
    const { s, counter } = await startWith({ registryBudgetMs: 800 });
    const ref = `${stalled.host}/vllm/vllm-openai:v0.12.0`;
    const t0 = Date.now();
    const answers = await Promise.all(Array.from({ length: 10 }, () => h.h1(s.url, pki.caCert, { body: h.review(podWith(ref)) })));
    const elapsed = Date.now() - t0;
    // The budget, plus what a loaded machine adds; far below the API server's 5 s.
    expect(elapsed).toBeLessThan(4000);
    for (const answer of answers) {
      const review = h.readReview(answer);
      expect(review.allowed).toBe(true);
      expect(review.warnings?.[0]).toMatch(/container "kserve-container" not wrapped, admitted unchanged: .*did not answer within 800 ms/);
      const patched = h.applyPatch(podWith(ref), review.patch!) as h.Pod;
      expect(patched.spec).toEqual(podWith(ref).spec);
      expect((patched.metadata.annotations as Record<string, string>)['vram-preflight.io/not-wrapped']).toMatch(/^kserve-container: /);
    }
    expect(counter.images).toEqual([ref]);
    expect(s.webhook.metrics.registryLookups.get({ result: 'timeout' })).toBe(10);
    expect(s.webhook.metrics.admissions.get({ outcome: 'not-wrapped', dry_run: 'false' })).toBe(10);
  });

  it('a client that goes away while its pod waits for the registry (the API server gave up): the others are answered, nothing breaks', async () => {
    const stalled = await r.startStalled();
    stops.push(stalled.close);
    const { s } = await startWith({ registryBudgetMs: 600 });
    const pod = podWith(`${stalled.host}/vllm/vllm-openai:v0.12.0`);
    const session = h.h2session(s.url, pki.caCert);
    const leaving = session.session.request({ ':method': 'POST', ':path': '/mutate', 'content-type': 'application/json' });
    leaving.on('error', () => {});
    leaving.end(h.review(pod));
    const https1 = await import('node:https');
    const leaving1 = https1.request(`${s.url}/mutate`, { method: 'POST', ca: readFileSync(pki.caCert), headers: { 'content-type': 'application/json' } });
    leaving1.on('error', () => {});
    leaving1.end(h.review(pod));
    const staying = session.request({ body: h.review(pod) });
    await new Promise((resolve) => setTimeout(resolve, 150));
    leaving.close();
    leaving1.destroy();
    expect(h.readReview(await staying).allowed).toBe(true);
    session.close();
    await new Promise((resolve) => setTimeout(resolve, 700));
    expect(h.readReview(await h.h1(s.url, pki.caCert, { body: h.review(h.plainPod()) })).allowed).toBe(true);
    expect(s.logs.filter((l) => l.msg === 'internal error')).toEqual([]);
    expect(s.webhook.metrics.inFlight.get()).toBe(0);
  });

  it('a failing registry (429) and a registry that is gone: admitted unchanged with the reason; the failure is cached briefly, not asked again by every pod', async () => {
    const limited = await r.startRateLimited();
    stops.push(limited.close);
    const { s } = await startWith();
    const ref = `${limited.host}/vllm/vllm-openai:v0.12.0`;
    const first = h.readReview(await h.h1(s.url, pki.caCert, { body: h.review(podWith(ref)) }));
    expect(first.warnings?.[0]).toMatch(/not wrapped, admitted unchanged: .*429/);
    const asked = limited.count();
    expect(asked).toBeGreaterThan(0);
    const second = h.readReview(await h.h1(s.url, pki.caCert, { body: h.review(podWith(ref)) }));
    expect(second.warnings).toEqual(first.warnings);
    expect(limited.count()).toBe(asked);
    expect(s.webhook.metrics.registryLookups.get({ result: 'negative-hit' })).toBe(1);

    const gone = await r.startRegistry(path.join(dir, 'gone'), path.join(dir, 'storage'), { kind: 'none' });
    await gone.stop();
    const answer = h.readReview(await h.h1(s.url, pki.caCert, { body: h.review(podWith(`${gone.host}/vllm/vllm-openai:v0.12.0`)) }));
    expect(answer.allowed).toBe(true);
    expect(answer.warnings?.[0]).toMatch(/container "kserve-container" not wrapped, admitted unchanged: /);
    // The fix: the chart's config.images entry for this image, read where it can be pulled (not `resolve`, which asks the same registry).
    expect(answer.warnings?.[1]).toBe(`vram-preflight: to wrap "kserve-container": add to the chart's config.images: {repository: ${gone.host}/vllm/vllm-openai, tag: "v0.12.0", entrypoint: [...]} (annotation vram-preflight.io/not-wrapped has the YAML)`);
    const note = ((h.applyPatch(podWith(`${gone.host}/vllm/vllm-openai:v0.12.0`), answer.patch!) as h.Pod).metadata.annotations as Record<string, string>)['vram-preflight.io/not-wrapped']!;
    expect(note).toContain(`the registry did not answer from here, so read the image's ENTRYPOINT where it can be pulled (\`skopeo inspect --config docker://${gone.host}/vllm/vllm-openai:v0.12.0\``);
    expect(note).not.toContain('vram-preflight resolve');
    expect(note).toContain(`    config:\n      images:\n        - repository: ${gone.host}/vllm/vllm-openai\n          tag: "v0.12.0"\n          entrypoint: [...]`);
  });
});
