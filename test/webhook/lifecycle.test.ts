/**
 * The webhook's own rollout (docs/webhook.md: Shutdown and readiness;
 * Hardening rows 6 and 8), on the built bundle as
 * the Deployment runs it: on SIGTERM /readyz turns 503 at once, and for the
 * shutdown delay the webhook goes on accepting connections and answering
 * (each answer retiring its connection); then it drains: every request
 * accepted is answered, HTTP/1.1 requests pipelined behind another too, and
 * it exits as soon as nothing is in flight.
 */
import { readFileSync } from 'node:fs';
import https from 'node:https';
import path from 'node:path';
import tls from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as r from '../registry/harness.js';
import * as c from './child.js';
import * as h from './harness.js';

h.requireTools();
r.requireTools();

const dir = h.tempDir('lifecycle');
let file: string;
let pki: h.Pki;
let leaf: { cert: string; key: string };
const children: c.Child[] = [];
const stops: (() => Promise<void>)[] = [];

beforeAll(() => {
  file = c.bundle(dir);
  pki = h.makePki(path.join(dir, 'pki'));
  leaf = pki.leaf('webhook');
}, 120_000);

afterAll(async () => {
  for (const child of children) await child.stop();
  for (const stop of stops) await stop();
  h.removeDir(dir);
});

async function start(args: string[]): Promise<c.Child> {
  const child = await c.startChild(file, leaf, ['--registry-lookup', 'never', ...args]);
  children.push(child);
  return child;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const get = (url: string, route: string) => h.h1(url, pki.caCert, { method: 'GET', path: route }).catch((error: NodeJS.ErrnoException) => ({ status: 0, body: error.code ?? String(error) }) as h.Answer);

describe('SIGTERM: not ready at once, serving on for the shutdown delay (Hardening row 6)', () => {
  it('/readyz is 503 from the signal on; new connections are accepted and answered until the delay ends, and each answer retires its connection; then connections are refused and the process exits promptly', async () => {
    const child = await start(['--shutdown-delay-ms', '3000']);
    const agent = new https.Agent({ keepAlive: true, ca: readFileSync(pki.caCert), maxSockets: 1 });
    const kept = await h.h1(child.url, pki.caCert, { body: h.review(h.vllmPod()) }, agent);
    expect(kept.headers.connection).toBe('keep-alive');
    const session = h.h2session(child.url, pki.caCert);
    expect((await session.request({ body: h.review(h.vllmPod()) })).status).toBe(200);
    const goaway = new Promise<number>((resolve) => session.session.on('goaway', () => resolve(performance.now())));

    const t0 = performance.now();
    child.child.kill('SIGTERM');
    await sleep(100);
    const readyz = await get(child.url, '/readyz');
    // The API server's kept-alive connection: answered, and told to close.
    const retired = await h.h1(child.url, pki.caCert, { body: h.review(h.vllmPod()) }, agent);
    const duringDelay: number[] = [];
    for (let i = 0; i < 5; i++) {
      duringDelay.push((await h.h1(child.url, pki.caCert, { body: h.review(h.vllmPod()) })).status);
      await sleep(400);
    }
    const goawayAfter = (await goaway) - t0;
    let refusedAfter = -1;
    for (;;) {
      const probe = await get(child.url, '/healthz');
      if (probe.status === 0) {
        refusedAfter = performance.now() - t0;
        break;
      }
      await sleep(50);
    }
    const code = await child.exit;
    const exitedAfter = performance.now() - t0;
    c.figure(6, `SIGTERM with a 3 s shutdown delay: /readyz ${readyz.status} at 100 ms; ${duringDelay.filter((s) => s === 200).length}/5 admissions on new connections answered during the delay; kept-alive connection answered ${retired.status} with Connection: ${retired.headers.connection}; HTTP/2 GOAWAY after ${goawayAfter.toFixed(0)} ms; new connections refused from ${refusedAfter.toFixed(0)} ms; exit ${code} at ${exitedAfter.toFixed(0)} ms`);
    expect(readyz.status).toBe(503);
    expect(JSON.parse(readyz.body)).toMatchObject({ status: 503, error: expect.stringMatching(/shutting down/) });
    expect(retired.status).toBe(200);
    expect(retired.headers.connection).toBe('close');
    expect(duringDelay).toEqual([200, 200, 200, 200, 200]);
    // Retired on its first answer after the signal, or at the signal when idle: either way before the delay ends.
    expect(goawayAfter).toBeLessThan(3000);
    expect(refusedAfter).toBeGreaterThan(2500);
    expect(code).toBe(0);
    expect(exitedAfter).toBeLessThan(5000);
    const lines = child.logs().map((l) => l.msg);
    expect(lines).toEqual(expect.arrayContaining(['shutting down', 'draining', 'drained']));
    session.close();
    agent.destroy();
  }, 30_000);
});

describe('the drain answers every request accepted (Hardening row 8)', () => {
  it('two HTTP/1.1 requests pipelined on one connection, in flight at SIGTERM: both answered, and the process exits once they are, not at the drain timeout', async () => {
    const stalled = await r.startStalled();
    stops.push(stalled.close);
    const child = await start(['--registry-lookup', 'missing', '--registry-insecure', stalled.host, '--registry-budget-ms', '1500', '--shutdown-delay-ms', '0', '--cache-dir', path.join(dir, 'cache')]);
    // Pods only the (stalled) registry can place: each admission waits its 1.5 s budget.
    const pod = h.vllmPod({ containers: [{ name: 'model', image: `${stalled.host}/vllm/vllm-openai:v0.12.0`, args: ['--model', 'm'], resources: { limits: { 'nvidia.com/gpu': 1 } } }] });
    const request = (uid: string) => {
      const body = h.review(pod, { uid });
      return `POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
    };
    const socket = tls.connect({ host: '127.0.0.1', port: child.port, servername: 'localhost', ca: readFileSync(pki.caCert), ALPNProtocols: ['http/1.1'] });
    await new Promise((resolve) => socket.once('secureConnect', resolve));
    let text = '';
    socket.on('data', (d: Buffer) => (text += d.toString()));
    const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
    socket.on('error', () => {});
    socket.write(request('first') + request('second'));
    await sleep(300);
    const t0 = performance.now();
    child.child.kill('SIGTERM');
    const code = await child.exit;
    const exitedAfter = performance.now() - t0;
    await Promise.race([closed, sleep(1000)]);
    const answers = [...text.matchAll(/HTTP\/1\.1 (\d+)/g)].map((m) => Number(m[1]));
    c.figure(8, `2 pipelined requests in flight at SIGTERM: ${answers.length} answered (${answers.join(', ')}); exit ${code} ${exitedAfter.toFixed(0)} ms after the signal (drain timeout 15 s)`);
    expect(answers).toEqual([200, 200]);
    expect(text).toContain('"uid":"first"');
    expect(text).toContain('"uid":"second"');
    expect(code).toBe(0);
    expect(exitedAfter).toBeLessThan(3000);
    expect(child.logs().find((l) => l.msg === 'drained')).toMatchObject({ unfinished: 0 });
  }, 30_000);
});
