/**
 * Files that change under a running webhook, as Kubernetes changes them (a
 * Secret or ConfigMap volume swaps its `..data` symlink): a config reloaded,
 * an invalid config kept out (the one in use stays, log and metric say so),
 * an invalid config at start (not ready, /healthz still answers), and the
 * certificate rotated under load without one failed request, a broken new
 * pair kept out.
 */
import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import https from 'node:https';
import path from 'node:path';
import tls from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as h from './harness.js';

h.requireTools();

const dir = h.tempDir('reload');
let pki: h.Pki;
let leafA: { cert: string; key: string };
let leafB: { cert: string; key: string };
const running: h.Started[] = [];

beforeAll(() => {
  pki = h.makePki(path.join(dir, 'pki'));
  leafA = pki.leaf('a');
  leafB = pki.leaf('b');
});

afterAll(async () => {
  for (const s of running) await s.webhook.drain();
  h.removeDir(dir);
});

/** Waits until `check` holds (the reload is noticed by a watch or a poll), at most 15 s. */
async function eventually(check: () => boolean | Promise<boolean>, what: string): Promise<void> {
  const until = Date.now() + 15_000;
  while (!(await check())) {
    if (Date.now() > until) throw new Error(`not within 15 s: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const timeoutOf = async (s: h.Started): Promise<string | undefined> => {
  const r = h.readReview(await h.h1(s.url, pki.caCert, { body: h.review(h.vllmPod()) }));
  const args = (r.patch as { path: string; value: string[] }[] | undefined)?.find((op) => op.path.endsWith('/args'))?.value;
  return args?.[0]?.match(/timeout_s=(\d+)/)?.[1];
};

describe('config reload', () => {
  it('a changed config is used; an invalid one keeps the one in use and says so (log, metric); readiness stays', async () => {
    const volume = new h.SecretVolume(path.join(dir, 'config'));
    volume.write({ 'config.yaml': 'timeoutSeconds: 600\n' });
    const s = await h.start({ certFile: leafA.cert, keyFile: leafA.key, configPath: volume.path('config.yaml'), reloadPollMs: 200 });
    running.push(s);
    expect(await timeoutOf(s)).toBe('600');

    volume.write({ 'config.yaml': 'timeoutSeconds: 900\n' });
    await eventually(async () => (await timeoutOf(s)) === '900', 'the new timeout is used');
    expect(s.webhook.metrics.reloads.get({ what: 'config', result: 'ok' })).toBeGreaterThanOrEqual(1);

    volume.write({ 'config.yaml': 'timeoutSeconds: -5\nnoSuchOption: 1\n' });
    await eventually(() => s.webhook.metrics.reloads.get({ what: 'config', result: 'error' }) === 1, 'the invalid config is noticed');
    const complaint = s.logs.find((l) => l.msg === 'config invalid; keeping the one in use');
    expect(complaint?.level).toBe('error');
    expect(String(complaint?.error)).toMatch(/BAD_CONFIG.*noSuchOption|BAD_CONFIG.*timeoutSeconds/s);
    expect(await timeoutOf(s)).toBe('900');
    expect((await h.h1(s.url, pki.caCert, { method: 'GET', path: '/readyz' })).status).toBe(200);
    expect((await h.h1(s.url, pki.caCert, { method: 'GET', path: '/metrics' })).body).toMatch(/^vram_preflight_webhook_reloads_total\{what="config",result="error"\} 1$/m);

    volume.write({ 'config.yaml': 'timeoutSeconds: 700\n' });
    await eventually(async () => (await timeoutOf(s)) === '700', 'a valid config after an invalid one is used');
  });

  it('invalid at start: not ready (503 with the reason), /healthz answers, pods go in unchanged; ready once the file is fixed', async () => {
    const volume = new h.SecretVolume(path.join(dir, 'config-bad'));
    volume.write({ 'config.yaml': 'timeoutSeconds: [not a number\n' });
    const s = await h.start({ certFile: leafA.cert, keyFile: leafA.key, configPath: volume.path('config.yaml'), reloadPollMs: 200 });
    running.push(s);
    expect(s.webhook.ready()).toBe(false);
    const readyz = await h.h1(s.url, pki.caCert, { method: 'GET', path: '/readyz' });
    expect(readyz.status).toBe(503);
    expect(readyz.body).toMatch(/no valid config: error BAD_CONFIG: config file .*config\.yaml is not valid YAML/);
    expect((await h.h1(s.url, pki.caCert, { method: 'GET', path: '/healthz' })).status).toBe(200);
    const r = h.readReview(await h.h1(s.url, pki.caCert, { body: h.review(h.vllmPod()) }));
    expect(r).toEqual({ uid: expect.any(String), allowed: true, warnings: ['vram-preflight: pod admitted unchanged: the webhook has no valid config (see its log)'] });

    volume.write({ 'config.yaml': 'timeoutSeconds: 450\n' });
    await eventually(() => s.webhook.ready(), 'ready once the config is valid');
    expect(await timeoutOf(s)).toBe('450');
  });
});

describe('certificate rotation', () => {
  const fingerprint = (s: h.Started): Promise<string> =>
    new Promise((resolve, reject) => {
      const socket = tls.connect({ host: '127.0.0.1', port: s.webhook.port, servername: 'localhost', ca: readFileSync(pki.caCert) }, () => {
        resolve(socket.getPeerCertificate().fingerprint256);
        socket.destroy();
      });
      socket.on('error', reject);
    });
  const fingerprintOf = (file: string) => new X509Certificate(readFileSync(file)).fingerprint256;

  it('under load: a new pair is served to new connections, a broken pair is kept out, no request fails', async () => {
    const volume = new h.SecretVolume(path.join(dir, 'tls'));
    volume.write({ 'tls.crt': readFileSync(leafA.cert, 'utf8'), 'tls.key': readFileSync(leafA.key, 'utf8') });
    const s = await h.start({ certFile: volume.path('tls.crt'), keyFile: volume.path('tls.key'), reloadPollMs: 200 });
    running.push(s);
    expect(await fingerprint(s)).toBe(fingerprintOf(leafA.cert));

    // Load: 8 workers, each request on a new connection (a new handshake sees the certificate of the moment), plus kept-alive ones.
    let stop = false;
    const failures: string[] = [];
    let answered = 0;
    const keptAlive = new https.Agent({ keepAlive: true, ca: readFileSync(pki.caCert) });
    const worker = async (agent?: https.Agent) => {
      while (!stop) {
        try {
          const answer = await h.h1(s.url, pki.caCert, { body: h.review(h.vllmPod()) }, agent);
          if (answer.status !== 200 || h.readReview(answer).patchType !== 'JSONPatch') failures.push(`HTTP ${answer.status}`);
          else answered++;
        } catch (error) {
          failures.push(String(error));
        }
      }
    };
    const workers = [...Array.from({ length: 6 }, () => worker()), worker(keptAlive), worker(keptAlive)];

    await new Promise((r) => setTimeout(r, 300));
    // A broken pair: B's certificate with A's key.
    volume.write({ 'tls.crt': readFileSync(leafB.cert, 'utf8'), 'tls.key': readFileSync(leafA.key, 'utf8') });
    await eventually(() => s.webhook.metrics.reloads.get({ what: 'certificate', result: 'error' }) >= 1, 'the broken pair is noticed');
    expect(await fingerprint(s)).toBe(fingerprintOf(leafA.cert));
    expect(s.logs.some((l) => l.msg === 'new certificate does not load; keeping the one in use')).toBe(true);

    volume.write({ 'tls.crt': readFileSync(leafB.cert, 'utf8'), 'tls.key': readFileSync(leafB.key, 'utf8') });
    await eventually(async () => (await fingerprint(s)) === fingerprintOf(leafB.cert), 'the new certificate is served');
    await new Promise((r) => setTimeout(r, 300));
    stop = true;
    await Promise.all(workers);
    keptAlive.destroy();
    expect(failures).toEqual([]);
    expect(answered).toBeGreaterThan(20);
    expect(s.webhook.metrics.reloads.get({ what: 'certificate', result: 'ok' })).toBe(2);
  });
});
