/**
 * DRA reads are bounded and fair (docs/webhook.md, "Hardening", row 5): a
 * fake API server that never answers some ResourceClaimTemplates and answers
 * others at once, over HTTP/2 as the real one speaks (HTTP/1.1 too, for a
 * client that asks for it). Reads in flight are capped and have deadlines that
 * count their time in the queue, so a storm of pods naming templates the API
 * server never answers delays no pod past its own budget; while reads wait, a
 * running one keeps its slot for its fair share only, so a pod whose template
 * answers at once is wrapped during the storm too; a pod naming thousands of
 * templates reads none of them.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as c from './child.js';
import * as h from './harness.js';

h.requireTools();

const dir = h.tempDir('claims-limits');
const TOKEN = 'token-of-the-webhook';
let file: string;
let pki: h.Pki;
let api: ChildProcess;
let apiUrl: string;
let credentials: string;
const children: c.Child[] = [];

/** The fake API server's counts: GETs so far, open now, the most open at once (since the last reset). */
async function stats(reset = false): Promise<{ gets: number; open: number; mostOpen: number }> {
  return JSON.parse((await h.h1(apiUrl, pki.caCert, { method: 'GET', path: `/stats${reset ? '?reset' : ''}` })).body);
}

beforeAll(async () => {
  file = c.bundle(dir);
  pki = h.makePki(path.join(dir, 'pki'));
  const leaf = pki.leaf('apiserver');
  credentials = path.join(dir, 'serviceaccount');
  mkdirSync(credentials);
  writeFileSync(path.join(credentials, 'token'), `${TOKEN}\n`);
  writeFileSync(path.join(credentials, 'ca.crt'), readFileSync(pki.caCert));
  // In a process of its own, as the real API server is: the storm's client below shares no event loop with it.
  api = spawn(process.execPath, [path.join(import.meta.dirname, 'claims-api.mjs'), leaf.cert, leaf.key], { stdio: ['ignore', 'pipe', 'inherit'] });
  const port = await new Promise<number>((resolve, reject) => {
    let out = '';
    api.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /^port (\d+)\n/.exec(out);
      if (m) resolve(Number(m[1]));
    });
    api.on('exit', (code) => reject(new Error(`the fake API server exited ${code}`)));
  });
  apiUrl = `https://127.0.0.1:${port}`;
}, 120_000);

afterAll(async () => {
  for (const child of children) await child.stop();
  api?.kill('SIGKILL');
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

describe('DRA reads are bounded and fair (Hardening row 5)', () => {
  it('200 pods naming templates the API never answers: each pod is answered within its budget; pods whose templates answer, sent at 100, 400 and 700 ms into the storm, are wrapped; one sent right after it is wrapped at once', async () => {
    const child = await start();
    const session = h.h2session(child.url, pki.caCert);
    await stats(true);
    const t0 = performance.now();
    const storm = Array.from({ length: 200 }, (_, i) => session.request({ body: h.review(draPod([`hang-${i}`])) }).then((answer) => ({ answer, ms: performance.now() - t0 })));
    // Each from its own connection, as the API server sends them, at moments into the storm.
    const during = [100, 400, 700].map(async (at) => {
      await new Promise((resolve) => setTimeout(resolve, at));
      const sent = performance.now();
      const answer = await h.h1(child.url, pki.caCert, { body: h.review(draPod([`ok-during-${at}`])) });
      return { at, answer, ms: performance.now() - sent };
    });
    const duringAnswers = await Promise.all(during);
    const stormAnswers = await Promise.all(storm);
    const after = performance.now();
    const afterAnswer = await h.h1(child.url, pki.caCert, { body: h.review(draPod(['ok-after'])) });
    const afterMs = performance.now() - after;
    const slowest = Math.max(...stormAnswers.map((a) => a.ms));
    // What the API server waits per pod: from its request to its answer (the client's 200 streams go 100 at a time, the webhook's cap per connection).
    const serverMs = Math.max(...child.logs().filter((l) => l.msg === 'admission').map((l) => Number(l.durationMs)));
    const metrics = await h.h1(child.url, pki.caCert, { method: 'GET', path: '/metrics' });
    const shares = /limit_hits_total\{limit="dra-share-ended"\} (\d+)/.exec(metrics.body)?.[1];
    const { gets, mostOpen } = await stats();
    c.figure(5, `200 pods naming never-answered templates: each answered within ${serverMs.toFixed(0)} ms of its request (budget 1,000), the last at ${slowest.toFixed(0)} ms; pods whose template answers, sent during the storm: ${duringAnswers.map((d) => `at ${d.at} ms ${wrapped(d.answer) ? 'wrapped' : `NOT wrapped (${h.readReview(d.answer).warnings?.[0]})`} in ${d.ms.toFixed(0)} ms`).join(', ')}; right after it: ${wrapped(afterAnswer) ? 'wrapped' : 'not wrapped'} in ${afterMs.toFixed(0)} ms; ${gets} GETs to the API server, at most ${mostOpen} at once, ${shares ?? '?'} reads gave their slot up after their share`);
    for (const { answer } of stormAnswers) {
      expect(answer.status).toBe(200);
      expect(h.readReview(answer).warnings?.[0]).toMatch(/not wrapped, admitted unchanged: DRA ResourceClaimTemplate hang-\d+: /);
    }
    expect(serverMs).toBeLessThan(1500);
    // The fair share: hung reads give their slots up while others wait, so each pod that can be wrapped is, within its budget.
    for (const d of duringAnswers) {
      expect(wrapped(d.answer), `the pod sent at ${d.at} ms: ${JSON.stringify(h.readReview(d.answer).warnings)}`).toBe(true);
      expect(d.ms).toBeLessThan(1500);
    }
    expect(wrapped(afterAnswer)).toBe(true);
    expect(afterMs).toBeLessThan(500);
    // --kubernetes-reads-in-flight (16): the API server never sees more of this webhook's reads at once.
    expect(mostOpen).toBeLessThanOrEqual(16);
    session.close();
  }, 60_000);

  it('50 pods at once naming one template the API never answers: one read, not one per pod; each pod answered within its budget', async () => {
    const child = await start();
    const session = h.h2session(child.url, pki.caCert);
    const before = (await stats()).gets;
    const t0 = performance.now();
    const answers = await Promise.all(Array.from({ length: 50 }, () => session.request({ body: h.review(draPod(['hang-shared'])) })));
    const ms = performance.now() - t0;
    const gets = (await stats()).gets - before;
    c.figure(5, `50 pods naming one never-answered template: ${gets} GET(s), all answered in ${ms.toFixed(0)} ms`);
    expect(gets).toBe(1);
    for (const answer of answers) expect(h.readReview(answer).warnings?.[0]).toMatch(/DRA ResourceClaimTemplate hang-shared: /);
    expect(ms).toBeLessThan(2500);
    session.close();
  }, 30_000);

  it('one pod naming 3,000 templates: none is read (at most 16 per pod), and the pod is answered at once with the reason', async () => {
    const child = await start();
    const before = (await stats()).gets;
    const t0 = performance.now();
    const answer = await h.h1(child.url, pki.caCert, { body: h.review(draPod(Array.from({ length: 3000 }, (_, i) => `ok-${i}`))) });
    const ms = performance.now() - t0;
    const gets = (await stats()).gets - before;
    c.figure(5, `one pod naming 3,000 templates: ${gets} GETs, answered in ${ms.toFixed(0)} ms`);
    expect(gets).toBe(0);
    expect(h.readReview(answer).warnings?.[0]).toMatch(/the pod names 3000 DRA claims and templates, and the webhook reads at most 16/);
    expect(ms).toBeLessThan(1000);
  }, 30_000);
});
