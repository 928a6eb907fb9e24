/**
 * Memory and time are bounded by design (docs/webhook.md, Hardening: rows 1-3 and 13): the
 * webhook as the chart runs it (the built bundle, the heap cap the chart
 * derives from its memory limit in deploy/webhook/values.yaml) under the load
 * a hostile or merely busy client can make, while a legitimate admission is
 * timed every 100 ms from this process (the attacker is a process of its
 * own). Each test prints its figures ([row N] ..., N a row of that table).
 */
import { spawn } from 'node:child_process';
import https from 'node:https';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as c from './child.js';
import { RawH2 } from './h2raw.js';
import * as h from './harness.js';

h.requireTools();

const dir = h.tempDir('limits');
const ATTACKER = path.join(import.meta.dirname, 'attacker.mjs');
let file: string;
let pki: h.Pki;
let leaf: { cert: string; key: string };
const children: c.Child[] = [];

beforeAll(() => {
  file = c.bundle(dir);
  pki = h.makePki(path.join(dir, 'pki'));
  leaf = pki.leaf('webhook');
}, 120_000);

afterAll(async () => {
  for (const child of children) await child.stop();
  h.removeDir(dir);
});

async function webhook(args: string[] = []): Promise<c.Child> {
  const child = await c.startChild(file, leaf, ['--registry-lookup', 'never', ...args], { heapMiB: c.CHART_HEAP_MIB });
  children.push(child);
  // Warm: the first admissions compile the decision's code.
  for (let i = 0; i < 20; i++) await h.h1(child.url, pki.caCert, { body: h.review(h.vllmPod()) });
  return child;
}

/** Runs the attacker to its end (or until `until` resolves, for one that holds), timing a legitimate wrapped admission every 100 ms meanwhile. */
async function underAttack(child: c.Child, job: Record<string, unknown>, holdMs?: number): Promise<{ attacker: Record<string, number>; legitMs: number[]; legitStatuses: number[] }> {
  const attacker = spawn(process.execPath, [ATTACKER, JSON.stringify({ port: child.port, ca: pki.caCert, ...job })], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  attacker.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  const finished = new Promise<void>((resolve) => attacker.on('exit', () => resolve()));
  const printed = new Promise<void>((resolve) => attacker.stdout!.on('data', () => out.includes('\n') && resolve()));
  const agent = new https.Agent({ keepAlive: true, ca: readFileSync(pki.caCert), maxSockets: 1 });
  const legitMs: number[] = [];
  const legitStatuses: number[] = [];
  let attacking = true;
  const probing = (async () => {
    while (attacking) {
      const t0 = performance.now();
      const answer = await h.h1(child.url, pki.caCert, { body: h.review(h.vllmPod()) }, agent).catch(() => ({ status: 0 }) as h.Answer);
      legitMs.push(performance.now() - t0);
      legitStatuses.push(answer.status);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  })();
  if (holdMs === undefined) await finished;
  else {
    await printed;
    await new Promise((resolve) => setTimeout(resolve, holdMs));
  }
  attacking = false;
  await probing;
  agent.destroy();
  if (holdMs !== undefined) {
    attacker.kill('SIGKILL');
    await finished;
  }
  return { attacker: JSON.parse(out.trim().split('\n')[0] || '{}') as Record<string, number>, legitMs, legitStatuses };
}

const max = (list: number[]): number => Math.max(...list);
const median = (list: number[]): number => [...list].sort((a, b) => a - b)[Math.floor(list.length / 2)]!;
const metric = async (child: c.Child, name: string): Promise<number> => {
  const text = (await h.h1(child.url, pki.caCert, { method: 'GET', path: '/metrics' })).body;
  return [...text.matchAll(new RegExp(`^${name.replace(/[{}"]/g, (ch) => `\\${ch}`)} (\\d+)$`, 'gm'))].reduce((n, m) => n + Number(m[1]), 0);
};

describe('bounded memory (Hardening rows 1-3)', () => {
  it('row 1: 60 concurrent 3.4 MiB bodies on one HTTP/2 connection, and 2 x 60 over HTTP/1.1: RSS stays under the chart limit, a legitimate admission is answered well inside its timeout', async () => {
    const child = await webhook();
    const before = child.rss();
    const h2 = await underAttack(child, { mode: 'h2-bodies', count: 60, bytes: 3.4 * 1024 * 1024 });
    const afterH2 = child.peak();
    const h1 = await underAttack(child, { mode: 'h1-bodies', count: 60, rounds: 2, bytes: 3.4 * 1024 * 1024 });
    const peak = child.peak();
    c.figure(1, `RSS ${before.toFixed(0)} MiB before; peak ${afterH2.toFixed(0)} MiB after the HTTP/2 bodies (${JSON.stringify(h2.attacker)}), ${peak.toFixed(0)} MiB after the HTTP/1.1 ones (${JSON.stringify(h1.attacker)}); legitimate admission max ${max(h2.legitMs).toFixed(0)} / ${max(h1.legitMs).toFixed(0)} ms, median ${median(h2.legitMs).toFixed(0)} / ${median(h1.legitMs).toFixed(0)} ms`);
    expect(peak).toBeLessThan(c.CHART_MEMORY_LIMIT_MIB);
    // The HTTP/1.1 bodies reached the server (answered, most with 503 while others were read): the row measures them.
    expect(Object.entries(h1.attacker).filter(([status]) => /^\d{3}$/.test(status)).reduce((n, [, k]) => n + k, 0)).toBeGreaterThanOrEqual(60);
    for (const run of [h2, h1]) {
      expect(run.legitStatuses.every((s) => s === 200)).toBe(true);
      // The goal: under a second, well inside the API server's 5 s (which counts the whole call).
      expect(max(run.legitMs)).toBeLessThan(1000);
    }
    // Nothing stays in flight once the attacker is gone (a request it left behind ends at its 5 s deadline at most, checked
    // once a second; a busy 2-core machine has been seen to need more than 7 s in all, 15 s and once more than 40 s with
    // the cluster's tests beside: 90 s is room, not the claim; the backlog is the attack's bodies still being decided).
    const settled = performance.now();
    while ((await metric(child, 'vram_preflight_webhook_in_flight_requests')) > 1 && performance.now() - settled < 90_000) await new Promise((resolve) => setTimeout(resolve, 200));
    c.figure(1, `in flight again 0 after ${(performance.now() - settled).toFixed(0)} ms`);
    expect(await metric(child, 'vram_preflight_webhook_in_flight_requests')).toBe(1);
  }, 240_000);

  it('row 2: a client opening 5,000 /mutate streams on one HTTP/2 connection gets at most 100 at once (the rest refused, then the connection closed); a legitimate admission does not wait', async () => {
    const child = await webhook();
    const before = child.rss();
    const raw = await RawH2.connect(child.port, pki.caCert);
    const t0 = performance.now();
    // Headers only: each stream stays open, waiting for a body that never comes.
    for (let id = 1; id < 10_000; id += 2) raw.post(id);
    await new Promise((resolve) => setTimeout(resolve, 300));
    const inFlight = await metric(child, 'vram_preflight_webhook_in_flight_requests');
    const legit = await c.timedAdmission(child.url, pki.caCert, h.review(h.vllmPod()));
    await Promise.race([raw.done, new Promise((resolve) => setTimeout(resolve, 8000))]);
    const refused = raw.resets(7).length;
    c.figure(2, `5,000 streams sent: ${inFlight - 1} in flight at once, ${refused} refused (REFUSED_STREAM), connection ${raw.closed ? 'closed' : 'open'} after ${(performance.now() - t0).toFixed(0)} ms; legitimate admission ${legit.ms.toFixed(0)} ms; RSS ${before.toFixed(0)} -> ${child.peak().toFixed(0)} MiB`);
    expect(inFlight - 1).toBeLessThanOrEqual(100);
    expect(legit.answer.status).toBe(200);
    expect(legit.ms).toBeLessThan(1000);
    expect(raw.closed).toBe(true);
    raw.close();
  }, 60_000);

  it('row 3: 3,000 idle kept-alive TLS connections: at most 512 stay open (the longest idle closed to make room), RSS stays bounded, a new connection is still answered', async () => {
    const child = await webhook();
    const before = child.rss();
    const run = await underAttack(child, { mode: 'idle', count: 3000 }, 500);
    const peak = child.peak();
    const closed = await metric(child, 'vram_preflight_webhook_limit_hits_total{limit="connections-idle-closed"}');
    // A connection that sends no request is also closed at the headers deadline (3 s, with a 408): where the flood takes longer
    // than that to open (a busy machine), the deadline closes the oldest before the cap has to.
    const timedOut = await metric(child, 'vram_preflight_webhook_http_requests_total{route="other",code="408"}');
    c.figure(3, `3,000 idle connections tried: ${run.attacker.open} still open; ${closed} closed at the cap, ${timedOut} at the headers deadline; RSS ${before.toFixed(0)} -> peak ${peak.toFixed(0)} MiB; legitimate admission max ${max(run.legitMs).toFixed(0)} ms`);
    expect(run.attacker.open).toBeLessThanOrEqual(512);
    expect(closed + timedOut).toBeGreaterThanOrEqual(3000 - 512 - 20);
    expect(peak - before).toBeLessThan(80);
    expect(run.legitStatuses.every((s) => s === 200)).toBe(true);
  }, 120_000);
});

describe('no admission waits behind another (Hardening row 13)', () => {
  it('a 2.1 MB pod of 15,000 vLLM containers: decided off the event loop and refused by the containers cap; legitimate admissions meanwhile are not held', async () => {
    const child = await webhook();
    const containers = Array.from({ length: 15_000 }, (_, i) => ({ name: `c${i}`, image: 'vllm/vllm-openai:v0.10.1', args: ['--model', 'm'], resources: { limits: { 'nvidia.com/gpu': '1' } } }));
    const big = h.review(h.vllmPod({ containers }));
    const agent = new https.Agent({ keepAlive: true, ca: readFileSync(pki.caCert), maxSockets: 1 });
    const legitMs: number[] = [];
    let done = false;
    const probing = (async () => {
      while (!done) {
        const t0 = performance.now();
        expect((await h.h1(child.url, pki.caCert, { body: h.review(h.vllmPod()) }, agent)).status).toBe(200);
        legitMs.push(performance.now() - t0);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    })();
    await new Promise((resolve) => setTimeout(resolve, 200));
    const t0 = performance.now();
    const answers = await Promise.all(Array.from({ length: 3 }, () => h.h1(child.url, pki.caCert, { body: big })));
    const bigMs = performance.now() - t0;
    await new Promise((resolve) => setTimeout(resolve, 200));
    done = true;
    await probing;
    agent.destroy();
    c.figure(13, `3 pods of 15,000 vLLM containers (${(Buffer.byteLength(big) / 1e6).toFixed(1)} MB each) answered in ${bigMs.toFixed(0)} ms; legitimate admissions meanwhile: ${legitMs.length}, max ${max(legitMs).toFixed(0)} ms, median ${median(legitMs).toFixed(0)} ms`);
    // The worker that decided them gives way to the main thread: its thread (only it) runs at nice 10 (Linux: per thread).
    const nice = readdirSync(`/proc/${child.child.pid}/task`).map((task) => Number(readFileSync(`/proc/${child.child.pid}/task/${task}/stat`, 'utf8').split(') ')[1]!.split(' ')[16]));
    if (!c.OTHER_BUILD) expect(nice.filter((n) => n !== 0)).toEqual([10]);
    expect(nice[0]).toBe(0);
    for (const answer of answers) {
      const review = h.readReview(answer);
      expect(review.allowed).toBe(true);
      expect(review.warnings?.[0]).toMatch(/the pod has 15000 containers; the webhook decides pods of at most 64/);
    }
    expect(max(legitMs)).toBeLessThan(250);
  }, 60_000);

  it("a large body whose decision runs past the request's deadline: the worker is ended then, the pod admitted unchanged with the reason, and the next large body gets a new worker", async () => {
    // In process, with a request deadline of 800 ms and a registry lookup that never answers (its budget, 5 s, is past the deadline).
    const worker = path.join(path.dirname(file), 'vram-preflight.webhook.cjs');
    const asked: string[] = [];
    const s = await h.start({ certFile: leaf.cert, keyFile: leaf.key, admissionWorkerScript: worker, requestTimeoutMs: 800, registryBudgetMs: 5000, lookup: (images) => (asked.push(...images), new Promise(() => {})) });
    try {
      // Over SMALL_BODY (256 KiB): decided in the worker. v0.12.0: only a registry can place its start.
      const large = (image: string) => h.review(h.vllmPod({ annotations: { padding: 'x'.repeat(300 * 1024) }, containers: [{ name: 'model', image, args: ['--model', 'm'], resources: { limits: { 'nvidia.com/gpu': '1' } } }] }));
      const t0 = performance.now();
      const late = h.readReview(await h.h1(s.url, pki.caCert, { body: large('vllm/vllm-openai:v0.12.0') }));
      const lateMs = performance.now() - t0;
      const t1 = performance.now();
      const next = h.readReview(await h.h1(s.url, pki.caCert, { body: large('vllm/vllm-openai:v0.10.1') }));
      const nextMs = performance.now() - t1;
      c.figure(13, `a large body whose decision waits on a lookup past the 800 ms deadline: answered in ${lateMs.toFixed(0)} ms (${late.warnings?.[0]}); the next large body: ${next.patch ? 'wrapped' : 'not wrapped'} in ${nextMs.toFixed(0)} ms`);
      expect(asked).toEqual(['vllm/vllm-openai:v0.12.0']);
      expect(late.allowed).toBe(true);
      expect(late.patch).toBeDefined();
      expect(late.warnings?.[0]).toMatch(/its decision did not finish within the request's deadline/);
      expect(lateMs).toBeGreaterThanOrEqual(700);
      expect(lateMs).toBeLessThan(2500);
      expect(s.logs).toContainEqual(expect.objectContaining({ msg: 'admission worker restarted', reason: 'a decision ran past its deadline', unfinished: 1 }));
      expect((next.patch ?? []).some((op) => (op as { path: string }).path.endsWith('/command'))).toBe(true);
      expect(next.warnings).toBeUndefined();
      expect(nextMs).toBeLessThan(2500);
    } finally {
      await s.webhook.drain();
    }
  }, 60_000);
});
