/**
 * The transport as a client of any kind meets it (docs/webhook.md,
 * Hardening: rows 4, 9, 10 and 11), against the built bundle: header blocks and
 * prefaces sent a byte at a time over HTTP/2, the TLS suites and versions it
 * accepts (flags to narrow them, and a client CA), `Expect: 100-continue`
 * for a body over the limit, and what its answers and log lines carry of a
 * request (nothing but bounded names: no env value, no body bytes).
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import tls from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as c from './child.js';
import { FLAG, FRAME, frame, headerBlock, PREFACE, RawH2 } from './h2raw.js';
import * as h from './harness.js';

h.requireTools();

const dir = h.tempDir('protocol');
let file: string;
let pki: h.Pki;
let leaf: { cert: string; key: string };
let child: c.Child;
const children: c.Child[] = [];

beforeAll(async () => {
  file = c.bundle(dir);
  pki = h.makePki(path.join(dir, 'pki'));
  leaf = pki.leaf('webhook');
  child = await start([]);
}, 120_000);

afterAll(async () => {
  for (const ch of children) await ch.stop();
  h.removeDir(dir);
});

async function start(args: string[], which = leaf): Promise<c.Child> {
  const ch = await c.startChild(file, which, ['--registry-lookup', 'never', ...args]);
  children.push(ch);
  return ch;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Waits for `raw` to close, up to `limitMs`; the ms it took, or undefined when still open. */
async function closedWithin(raw: RawH2, limitMs: number, t0: number): Promise<number | undefined> {
  await Promise.race([raw.done, sleep(limitMs - (performance.now() - t0))]);
  return raw.closed ? performance.now() - t0 : undefined;
}

describe('HTTP/2 headers have a deadline (Hardening row 4)', () => {
  it('a header block sent one byte every 500 ms: the connection is closed within the headers deadline (3 s) and the sweep', async () => {
    const raw = await RawH2.connect(child.port, pki.caCert);
    const block = Buffer.from(frame(FRAME.HEADERS, 0x4, 1, Buffer.alloc(60, 0x82)));
    const t0 = performance.now();
    let sent = 0;
    const trickle = setInterval(() => raw.write(block.subarray(sent, ++sent)), 500);
    const ms = await closedWithin(raw, 12_000, t0);
    clearInterval(trickle);
    c.figure(4, `HTTP/2 header block at one byte per 500 ms: ${ms === undefined ? 'still open after 12 s' : `closed after ${(ms / 1000).toFixed(1)} s`} (${sent} bytes sent)`);
    expect(ms).toBeDefined();
    expect(ms!).toBeLessThan(6000);
    raw.close();
  }, 20_000);

  it('a connection preface sent one byte every 500 ms is closed too; a session that sends nothing is left for the idle timeout, and a normal client meanwhile is answered', async () => {
    const raw = await RawH2.connect(child.port, pki.caCert, false);
    const idle = await RawH2.connect(child.port, pki.caCert);
    const t0 = performance.now();
    let sent = 0;
    const bytes = Buffer.concat([PREFACE, frame(FRAME.SETTINGS, 0, 0)]);
    const trickle = setInterval(() => raw.write(bytes.subarray(sent, ++sent)), 500);
    const session = h.h2session(child.url, pki.caCert);
    expect((await session.request({ body: h.review(h.vllmPod()) })).status).toBe(200);
    const ms = await closedWithin(raw, 12_000, t0);
    clearInterval(trickle);
    expect(ms).toBeDefined();
    expect(ms!).toBeLessThan(6000);
    expect(idle.closed).toBe(false);
    // The well-behaved session is still usable after its idle seconds.
    expect((await session.request({ body: h.review(h.vllmPod()) })).status).toBe(200);
    session.close();
    idle.close();
    raw.close();
  }, 20_000);
});

/** Attempts a TLS handshake; the negotiated cipher, or undefined when refused. */
function handshake(port: number, options: tls.ConnectionOptions): Promise<string | undefined> {
  return new Promise((resolve) => {
    const socket = tls.connect({ host: '127.0.0.1', port, servername: 'localhost', rejectUnauthorized: false, ...options }, () => {
      const cipher = socket.getCipher().name;
      socket.destroy();
      resolve(cipher);
    });
    socket.on('error', () => resolve(undefined));
  });
}

/** Every TLS 1.2 suite this Node's OpenSSL knows, offered one at a time: those the server takes. */
async function tls12Accepted(port: number): Promise<string[]> {
  const accepted: string[] = [];
  for (const cipher of tls.getCiphers()) {
    if (cipher.startsWith('tls_')) continue; // TLS 1.3's
    const got = await handshake(port, { ciphers: cipher.toUpperCase(), maxVersion: 'TLSv1.2', minVersion: 'TLSv1.2' });
    if (got) accepted.push(got);
  }
  return accepted;
}

describe('HTTP/2 streams refused half-way are closed', () => {
  it('a body that stops half-way gets 408 at the request deadline, and its stream is reset (CANCEL) after the answer, not left open until the idle timeout', async () => {
    const session = h.h2session(child.url, pki.caCert);
    const stream = session.session.request({ ':method': 'POST', ':path': '/mutate', 'content-type': 'application/json', 'content-length': String(2 * 1024 * 1024) });
    stream.on('error', () => {});
    stream.write(Buffer.alloc(1024 * 1024, 0x20));
    const t0 = performance.now();
    const status = new Promise<number>((resolve) => stream.on('response', (headers) => resolve(Number(headers[':status']))));
    const closed = new Promise<number>((resolve) => stream.on('close', () => resolve(performance.now() - t0)));
    expect(await status).toBe(408);
    const ms = await Promise.race([closed, sleep(8000).then(() => -1)]);
    expect(ms).toBeGreaterThan(0);
    expect(ms).toBeLessThan(7000);
    expect(stream.rstCode).toBe(8);
    session.close();
  }, 20_000);
});

describe('HTTP/2 requests without a body (the kubelet\'s HTTPS probes)', () => {
  it('GET /readyz, /healthz and /metrics over HTTP/2 are answered whole, their streams never reset', async () => {
    // As the kubelet's prober sends them (Go's HTTP/2 client): HEADERS with END_STREAM, no body. Reset with CANCEL
    // before the answer's end, the kubelet read "stream error: stream ID 1; CANCEL; received from peer": every
    // probe failed, the chart's pods were never Ready (test/apiserver/service.test.ts on the tests' node).
    for (const route of ['/readyz', '/healthz', '/metrics']) {
      const raw = await RawH2.connect(child.port, pki.caCert);
      raw.write(frame(FRAME.HEADERS, FLAG.END_HEADERS | FLAG.END_STREAM, 1, headerBlock([[':method', 'GET'], [':scheme', 'https'], [':authority', 'localhost'], [':path', route], ['user-agent', 'kube-probe/1.37']])));
      const ended = () => raw.frames.some((f) => f.stream === 1 && ((f.type === FRAME.DATA && f.flags & FLAG.END_STREAM) || f.type === FRAME.RST_STREAM));
      for (const t0 = performance.now(); !ended() && performance.now() - t0 < 3000; ) await sleep(20);
      // A moment more: a reset sent right after the end would come now.
      await sleep(200);
      const frames = raw.frames.filter((f) => f.stream === 1).map((f) => (f.type === FRAME.RST_STREAM ? `RST_STREAM ${f.payload.readUInt32BE(0)}` : `${f.type === FRAME.DATA ? 'DATA' : f.type === FRAME.HEADERS ? 'HEADERS' : f.type}${f.flags & FLAG.END_STREAM ? ' END_STREAM' : ''}`));
      expect(frames.at(-1), `${route}: ${frames.join(', ')}`).toBe('DATA END_STREAM');
      expect(frames.filter((f) => f.startsWith('RST_STREAM')), `${route}: ${frames.join(', ')}`).toEqual([]);
      raw.close();
    }
  });
});

describe('TLS (Hardening row 10)', () => {
  it('TLS 1.2 offers only ECDHE key exchange with AEAD ciphers, for an ECDSA and an RSA certificate', async () => {
    const ecdsa = await tls12Accepted(child.port);
    // An RSA serving certificate (static-RSA suites need one to be offered at all).
    const key = path.join(dir, 'rsa.key');
    const cert = path.join(dir, 'rsa.crt');
    execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-keyout', key, '-out', cert, '-subj', '/CN=localhost', '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1'], { stdio: 'pipe' });
    const rsaChild = await start([], { cert, key });
    const rsa = await tls12Accepted(rsaChild.port);
    c.figure(10, `TLS 1.2 suites accepted: ${ecdsa.length} with the ECDSA certificate (${ecdsa.join(', ')}), ${rsa.length} with an RSA one (${rsa.join(', ')})`);
    for (const suite of [...ecdsa, ...rsa]) expect(suite, suite).toMatch(/^ECDHE-(ECDSA|RSA)-(AES(128|256)-GCM-SHA(256|384)|CHACHA20-POLY1305)$/);
    expect(ecdsa).toHaveLength(3);
    expect(rsa).toHaveLength(3);
    // TLS 1.3 is on.
    expect(await handshake(child.port, { minVersion: 'TLSv1.3' })).toMatch(/^TLS_/);
  }, 60_000);

  it('--tls-min-version VersionTLS13 refuses TLS 1.2; --tls-cipher-suites narrows TLS 1.2 to the suites named', async () => {
    const only13 = await start(['--tls-min-version', 'VersionTLS13']);
    expect(await handshake(only13.port, { maxVersion: 'TLSv1.2' })).toBeUndefined();
    expect(await handshake(only13.port, {})).toMatch(/^TLS_/);
    const narrowed = await start(['--tls-cipher-suites', 'TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384']);
    expect(await tls12Accepted(narrowed.port)).toEqual(['ECDHE-ECDSA-AES256-GCM-SHA384']);
  }, 60_000);

  it('--client-ca-file: /mutate answers only a client with a certificate of that CA (and the common name asked); the probes and /metrics need none', async () => {
    const clients = h.makePki(path.join(dir, 'clients'));
    const apiserver = clients.leaf('kube-apiserver', 'clientAuth');
    const other = clients.leaf('someone-else', 'clientAuth');
    const stranger = h.makePki(path.join(dir, 'stranger')).leaf('kube-apiserver', 'clientAuth');
    const guarded = await start(['--client-ca-file', clients.caCert, '--client-common-name', 'kube-apiserver']);
    const post = (client?: { cert: string; key: string }) => h.h1(guarded.url, pki.caCert, { body: h.review(h.vllmPod()), ...(client ? { client } : {}) });
    expect((await post(apiserver)).status).toBe(200);
    expect(h.readReview(await post(apiserver)).allowed).toBe(true);
    for (const [who, client] of [['no certificate', undefined], ['another common name', other], ['another CA', stranger]] as const) {
      const answer = await post(client);
      expect(answer.status, who).toBe(403);
      expect(JSON.parse(answer.body)).toEqual({ error: 'a client certificate of the configured client CA is required', status: 403 });
    }
    for (const route of ['/healthz', '/readyz', '/metrics']) expect((await h.h1(guarded.url, pki.caCert, { method: 'GET', path: route })).status, route).toBe(200);
  }, 60_000);
});

describe('Expect: 100-continue (Hardening row 11)', () => {
  function exchange(headers: string, body = ''): Promise<string> {
    return new Promise((resolve, reject) => {
      const socket = tls.connect({ host: '127.0.0.1', port: child.port, servername: 'localhost', ca: readFileSync(pki.caCert), ALPNProtocols: ['http/1.1'] }, () => socket.write(headers));
      let text = '';
      socket.on('data', (d: Buffer) => {
        text += d.toString();
        if (text.startsWith('HTTP/1.1 100') && body && !text.includes('\r\n\r\nHTTP')) {
          const sent = body;
          body = '';
          socket.write(sent);
        }
      });
      socket.on('close', () => resolve(text));
      socket.on('error', reject);
      setTimeout(() => socket.destroy(), 4000);
    });
  }

  it('a Content-Length over the limit gets 413 at once, never 100 Continue; a body within it gets 100 Continue, then its answer', async () => {
    const big = await exchange(`POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${4 * 1024 * 1024}\r\nExpect: 100-continue\r\n\r\n`);
    c.figure(11, `Expect: 100-continue with Content-Length 4 MiB: first line "${big.split('\r\n')[0]}"`);
    expect(big).toMatch(/^HTTP\/1\.1 413 /);
    expect(big).not.toContain('100 Continue');
    const body = h.review(h.vllmPod());
    const ok = await exchange(`POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n`, body);
    expect(ok).toMatch(/^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200 /);
  }, 20_000);
});

describe('answers and logs carry no request data (Hardening row 9)', () => {
  const logOf = (uid: string) => child.logs().filter((l) => l.uid === uid);

  it("an env var's value named by --gpu-memory-utilization $(VAR) reaches neither the answer nor the log", async () => {
    const secret = 's3cr3t-7a1f-token-value';
    const pod = h.vllmPod({ containers: [{ name: 'model', image: 'vllm/vllm-openai:v0.10.1', args: ['--model', 'm', '--gpu-memory-utilization', '$(GPU_UTIL)'], env: [{ name: 'GPU_UTIL', value: secret }], resources: { limits: { 'nvidia.com/gpu': '1' } } }] });
    const answer = await h.h1(child.url, pki.caCert, { body: h.review(pod, { uid: 'env-value' }) });
    const review = h.readReview(answer);
    expect(review.warnings?.join('\n')).toMatch(/env GPU_UTIL/);
    await sleep(100);
    const lines = JSON.stringify(child.logs());
    c.figure(9, `env value in the answer: ${JSON.stringify(review).includes(secret)}, in the log: ${lines.includes(secret)}`);
    expect(answer.body).not.toContain(secret);
    expect(JSON.stringify(review)).not.toContain(secret);
    expect(lines).not.toContain(secret);
    expect(logOf('env-value')).toHaveLength(1);
  });

  it('a 3 MiB apiVersion, kind, namespace or pod name is echoed cut short, in the answer and in the log line', async () => {
    const huge = 'A'.repeat(3 * 1024 * 1024);
    const answer = await h.h1(child.url, pki.caCert, { body: JSON.stringify({ apiVersion: huge, kind: 'AdmissionReview', request: { uid: 'x' } }) });
    expect(answer.status).toBe(400);
    const pod = h.vllmPod();
    pod.metadata.generateName = huge.slice(0, 1.5 * 1024 * 1024);
    expect((await h.h1(child.url, pki.caCert, { body: h.review(pod, { uid: 'huge-names' }) })).status).toBe(200);
    expect((await h.h1(child.url, pki.caCert, { body: h.review(h.vllmPod(), { uid: 'huge-names', namespace: huge.slice(0, 1.5 * 1024 * 1024) }) })).status).toBe(200);
    await sleep(100);
    const lines = child.logs().filter((l) => String(l.error ?? '').includes('apiVersion') || l.uid === 'huge-names');
    const longest = Math.max(...lines.map((l) => JSON.stringify(l).length));
    c.figure(9, `3 MiB apiVersion: answer ${answer.body.length} bytes; longest log line of the 3 MiB fields ${longest} bytes`);
    expect(answer.body.length).toBeLessThan(1024);
    expect(lines.length).toBeGreaterThanOrEqual(3);
    expect(longest).toBeLessThan(2048);
  });

  it('the bytes of a body that is not JSON reach neither the answer nor the log', async () => {
    const marker = 'MARKER-of-the-body-9f2c';
    const answer = await h.h1(child.url, pki.caCert, { body: `{"apiVersion": ${marker}` });
    expect(answer.status).toBe(400);
    expect(answer.body).not.toContain(marker);
    await sleep(100);
    expect(JSON.stringify(child.logs())).not.toContain(marker);
  });

  it('a body that is not UTF-8 gets 400, not an answer for a uid it never sent (Hardening row 9)', async () => {
    const body = Buffer.concat([Buffer.from('{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"'), Buffer.from([0xff, 0xfe]), Buffer.from(`","kind":{"group":"","version":"v1","kind":"Pod"},"operation":"CREATE","object":${JSON.stringify(h.plainPod())}}}`)]);
    const answer = await h.h1(child.url, pki.caCert, { body });
    c.figure(9, `invalid UTF-8 body: HTTP ${answer.status} ${answer.body.trim()}`);
    expect(answer.status).toBe(400);
    expect(JSON.parse(answer.body)).toEqual({ error: 'the body is not UTF-8', status: 400 });
    expect(answer.body).not.toContain('\ufffd');
  });
});
