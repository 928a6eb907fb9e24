/**
 * DRA reads are bounded (docs/webhook.md, Hardening row 5): a fake API server that never
 * answers some ResourceClaimTemplates and answers others at once. Reads in
 * flight are capped and have deadlines that count their time in the queue,
 * so a storm of pods naming templates the API server never answers delays no
 * pod past its own budget, and stops mattering once those reads time out; a
 * pod naming thousands of templates reads none of them.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as c from './child.js';
import * as h from './harness.js';

h.requireTools();

const dir = h.tempDir('claims-limits');
const TOKEN = 'token-of-the-webhook';
let file: string;
let pki: h.Pki;
let api: https.Server;
let apiUrl: string;
let credentials: string;
let gets = 0;
/** GETs open at the API server now, and the most at once. */
let open = 0;
let mostOpen = 0;
const hanging = new Set<import('node:http').ServerResponse>();
const children: c.Child[] = [];

beforeAll(async () => {
  file = c.bundle(dir);
  pki = h.makePki(path.join(dir, 'pki'));
  const leaf = pki.leaf('apiserver');
  credentials = path.join(dir, 'serviceaccount');
  mkdirSync(credentials);
  writeFileSync(path.join(credentials, 'token'), `${TOKEN}\n`);
  writeFileSync(path.join(credentials, 'ca.crt'), readFileSync(pki.caCert));
  api = https.createServer({ cert: readFileSync(leaf.cert), key: readFileSync(leaf.key) }, (req, res) => {
    gets++;
    mostOpen = Math.max(mostOpen, ++open);
    res.on('close', () => open--);
    const name = req.url!.split('/').pop()!;
    // Never answered: an API server stuck on these objects.
    if (name.startsWith('hang-')) return void hanging.add(res);
    if (!name.startsWith('ok-')) return void res.writeHead(404, { 'content-type': 'application/json' }).end('{"kind":"Status","code":404}');
    res.writeHead(200, { 'content-type': 'application/json' }).end(
      JSON.stringify({ apiVersion: 'resource.k8s.io/v1', kind: 'ResourceClaimTemplate', metadata: { name, namespace: 'models' }, spec: { spec: { devices: { requests: [{ name: 'gpu', exactly: { deviceClassName: 'gpu.nvidia.com' } }] } } } }),
    );
  });
  api.keepAliveTimeout = 60_000;
  await new Promise<void>((resolve) => api.listen(0, '127.0.0.1', resolve));
  apiUrl = `https://127.0.0.1:${(api.address() as AddressInfo).port}`;
}, 120_000);

afterAll(async () => {
  for (const child of children) await child.stop();
  for (const res of hanging) res.destroy();
  api?.closeAllConnections();
  await new Promise((resolve) => api?.close(resolve));
  h.removeDir(dir);
});

async function start(): Promise<c.Child> {
  const child = await c.startChild(file, pki.leaf(`webhook-${children.length}`), ['--registry-lookup', 'never', '--kubernetes-api', apiUrl, '--kubernetes-credentials-dir', credentials]);
  children.push(child);
  return child;
}

/** A vLLM pod whose GPU is a DRA claim from these templates (the container uses the first). */
function draPod(templates: string[]): h.Pod {
  return h.vllmPod({
    containers: [{ name: 'model', image: 'vllm/vllm-openai:v0.10.1', args: ['--model', 'm', '--gpu-memory-utilization', '0.9'], resources: { claims: [{ name: 'claim-0' }] } }],
    spec: { resourceClaims: templates.map((name, i) => ({ name: `claim-${i}`, resourceClaimTemplateName: name })) },
  });
}

const wrapped = (answer: h.Answer): boolean => (h.readReview(answer).patch ?? []).some((op) => (op as { path: string }).path.endsWith('/command'));

describe('DRA reads are bounded (Hardening row 5)', () => {
  it('200 pods naming templates the API never answers: each pod is answered within its budget (a pod whose template answers, sent during the storm, too), and one sent right after it is wrapped at once', async () => {
    const child = await start();
    const session = h.h2session(child.url, pki.caCert);
    mostOpen = open;
    const t0 = performance.now();
    const storm = Array.from({ length: 200 }, (_, i) => session.request({ body: h.review(draPod([`hang-${i}`])) }).then((answer) => ({ answer, ms: performance.now() - t0 })));
    await new Promise((resolve) => setTimeout(resolve, 100));
    const during = performance.now();
    const duringAnswer = await h.h1(child.url, pki.caCert, { body: h.review(draPod(['ok-during'])) });
    const duringMs = performance.now() - during;
    const stormAnswers = await Promise.all(storm);
    const after = performance.now();
    const afterAnswer = await h.h1(child.url, pki.caCert, { body: h.review(draPod(['ok-after'])) });
    const afterMs = performance.now() - after;
    const slowest = Math.max(...stormAnswers.map((a) => a.ms));
    // What the API server waits per pod: from its request to its answer (the client's 200 streams go 100 at a time, the webhook's cap per connection).
    const serverMs = Math.max(...child.logs().filter((l) => l.msg === 'admission').map((l) => Number(l.durationMs)));
    c.figure(5, `200 pods naming never-answered templates: each answered within ${serverMs.toFixed(0)} ms of its request (budget 1,000), the last at ${slowest.toFixed(0)} ms; a pod whose template answers, sent during the storm: ${wrapped(duringAnswer) ? 'wrapped' : 'not wrapped'} in ${duringMs.toFixed(0)} ms; right after it: ${wrapped(afterAnswer) ? 'wrapped' : 'not wrapped'} in ${afterMs.toFixed(0)} ms; ${gets} GETs to the API server, at most ${mostOpen} at once`);
    for (const { answer } of stormAnswers) {
      expect(answer.status).toBe(200);
      expect(h.readReview(answer).warnings?.[0]).toMatch(/not wrapped, admitted unchanged: DRA ResourceClaimTemplate hang-\d+: /);
    }
    expect(serverMs).toBeLessThan(1500);
    expect(wrapped(afterAnswer)).toBe(true);
    expect(afterMs).toBeLessThan(500);
    expect(duringMs).toBeLessThan(1500);
    // --kubernetes-reads-in-flight (16): the API server never sees more of this webhook's reads at once.
    expect(mostOpen).toBeLessThanOrEqual(16);
    session.close();
  }, 60_000);

  it('50 pods at once naming one template the API never answers: one read, not one per pod; each pod answered within its budget', async () => {
    const child = await start();
    const session = h.h2session(child.url, pki.caCert);
    const before = gets;
    const t0 = performance.now();
    const answers = await Promise.all(Array.from({ length: 50 }, () => session.request({ body: h.review(draPod(['hang-shared'])) })));
    const ms = performance.now() - t0;
    c.figure(5, `50 pods naming one never-answered template: ${gets - before} GET(s), all answered in ${ms.toFixed(0)} ms`);
    expect(gets - before).toBe(1);
    for (const answer of answers) expect(h.readReview(answer).warnings?.[0]).toMatch(/DRA ResourceClaimTemplate hang-shared: /);
    expect(ms).toBeLessThan(2500);
    session.close();
  }, 30_000);

  it('one pod naming 3,000 templates: none is read (at most 16 per pod), and the pod is answered at once with the reason', async () => {
    const child = await start();
    const before = gets;
    const t0 = performance.now();
    const answer = await h.h1(child.url, pki.caCert, { body: h.review(draPod(Array.from({ length: 3000 }, (_, i) => `ok-${i}`))) });
    const ms = performance.now() - t0;
    c.figure(5, `one pod naming 3,000 templates: ${gets - before} GETs, answered in ${ms.toFixed(0)} ms`);
    expect(gets - before).toBe(0);
    expect(h.readReview(answer).warnings?.[0]).toMatch(/the pod names 3000 DRA claims and templates, and the webhook reads at most 16/);
    expect(ms).toBeLessThan(1000);
  }, 30_000);
});
