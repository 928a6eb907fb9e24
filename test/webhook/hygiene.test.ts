/**
 * Request hygiene: every malformed, oversized, slow or misdirected request
 * gets a defined answer (and the server goes on answering the next one).
 */
import { readFileSync } from 'node:fs';
import http2 from 'node:http2';
import path from 'node:path';
import tls from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BODY_LIMIT } from '../../src/webhook/server.js';
import * as h from './harness.js';

h.requireTools();

const dir = h.tempDir('hygiene');
let pki: h.Pki;
let started: h.Started;

beforeAll(async () => {
  pki = h.makePki(path.join(dir, 'pki'));
  const leaf = pki.leaf('webhook');
  // Short deadlines so that the slow-client cases end quickly; the defaults are 3 s and 5 s.
  started = await h.start({ certFile: leaf.cert, keyFile: leaf.key, headersTimeoutMs: 1000, requestTimeoutMs: 1500 });
});

afterAll(async () => {
  await started?.webhook.drain();
  h.removeDir(dir);
});

const get = (p: string) => h.h1(started.url, pki.caCert, { method: 'GET', path: p });

/** A raw TLS connection speaking HTTP/1.1 by hand. */
function raw(): Promise<tls.TLSSocket> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port: started.webhook.port, servername: 'localhost', ca: readFileSync(pki.caCert), ALPNProtocols: ['http/1.1'] }, () => resolve(socket));
    socket.on('error', reject);
  });
}

/** What a raw connection receives until the server closes it (or `limitMs`). */
function until(socket: tls.TLSSocket, limitMs: number): Promise<{ text: string; closed: boolean; ms: number }> {
  const t0 = Date.now();
  return new Promise((resolve) => {
    let text = '';
    socket.on('data', (d: Buffer) => (text += d.toString()));
    const timer = setTimeout(() => resolve({ text, closed: false, ms: Date.now() - t0 }), limitMs);
    socket.on('close', () => {
      clearTimeout(timer);
      resolve({ text, closed: true, ms: Date.now() - t0 });
    });
  });
}

describe('request hygiene', () => {
  it('/healthz and /readyz answer 200 with a valid config; unknown paths 404', async () => {
    expect((await get('/healthz')).status).toBe(200);
    expect((await get('/readyz')).status).toBe(200);
    expect((await get('/nope')).status).toBe(404);
  });

  it('/mutate takes POST only: 405 with Allow', async () => {
    for (const method of ['GET', 'PUT', 'DELETE']) {
      const answer = await h.h1(started.url, pki.caCert, { method, path: '/mutate' });
      expect(answer.status, method).toBe(405);
      expect(answer.headers.allow).toBe('POST');
    }
  });

  it('/mutate takes application/json only: 415', async () => {
    const answer = await h.h1(started.url, pki.caCert, { headers: { 'content-type': 'application/yaml' }, body: h.review(h.plainPod()) });
    expect(answer.status).toBe(415);
    const ok = await h.h1(started.url, pki.caCert, { headers: { 'content-type': 'application/json; charset=utf-8' }, body: h.review(h.plainPod()) });
    expect(ok.status).toBe(200);
  });

  it('malformed JSON and bodies that are not an AdmissionReview v1: 400 with a message', async () => {
    const cases: [string, RegExp][] = [
      ['{"apiVersion": ', /not JSON/],
      ['[]', /not an AdmissionReview admission\.k8s\.io\/v1/],
      [JSON.stringify({ apiVersion: 'admission.k8s.io/v1beta1', kind: 'AdmissionReview', request: { uid: 'x' } }), /admission\.k8s\.io\/v1beta1/],
      [JSON.stringify({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview' }), /no request\.uid/],
      ['', /not JSON/],
      // A bare pod: the answer says where a pod's answer is.
      [JSON.stringify(h.plainPod()), /for what the webhook would do to a Pod without a review: vram-preflight admit < pod\.yaml/],
    ];
    for (const [body, message] of cases) {
      const answer = await h.h1(started.url, pki.caCert, { body });
      expect(answer.status, body).toBe(400);
      expect(answer.body, body).toMatch(message);
    }
    expect(started.webhook.metrics.admissions.get({ outcome: 'invalid', dry_run: 'false' })).toBeGreaterThanOrEqual(cases.length);
  });

  it('a body over the limit: 413, whether its length is declared or it just keeps coming (HTTP/1.1 and HTTP/2)', async () => {
    const big = Buffer.alloc(BODY_LIMIT + 1024, 0x20);
    const declared = await h.h1(started.url, pki.caCert, { body: big });
    expect(declared.status).toBe(413);
    const chunked = await h.h1(started.url, pki.caCert, { body: big, headers: { 'transfer-encoding': 'chunked' } });
    expect(chunked.status).toBe(413);
    const session = h.h2session(started.url, pki.caCert);
    try {
      expect((await session.request({ body: big })).status).toBe(413);
      // The session stays usable.
      expect((await session.request({ body: h.review(h.plainPod()) })).status).toBe(200);
    } finally {
      session.close();
    }
    // A body just under the limit is read (and answered: it is no review).
    const under = await h.h1(started.url, pki.caCert, { body: Buffer.alloc(BODY_LIMIT - 16, 0x20) });
    expect(under.status).toBe(400);
  });

  it('a client that never finishes its headers is cut off (408) at the headers deadline', async () => {
    const socket = await raw();
    socket.write('POST /mutate HTTP/1.1\r\nHost: localhost\r\n');
    // Trickle a header line every 200 ms: never idle, never done.
    const trickle = setInterval(() => socket.writable && socket.write('X-Slow: y\r\n'), 200);
    const got = await until(socket, 8000);
    clearInterval(trickle);
    expect(got.closed).toBe(true);
    expect(got.text).toMatch(/^HTTP\/1\.1 408/);
    expect(got.ms).toBeLessThan(6000);
  });

  it('a client that never finishes its body gets 408 at the request deadline (HTTP/1.1 and HTTP/2)', async () => {
    const socket = await raw();
    socket.write('POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"apiVersion":');
    const got = await until(socket, 8000);
    expect(got.text).toMatch(/^HTTP\/1\.1 408/);
    expect(got.ms).toBeLessThan(6000);
    socket.destroy();

    const session = http2.connect(started.url, { ca: readFileSync(pki.caCert) });
    try {
      const stream = session.request({ ':method': 'POST', ':path': '/mutate', 'content-type': 'application/json' });
      stream.write('{"apiVersion":');
      const status = await new Promise<number>((resolve) => stream.on('response', (headers) => resolve(Number(headers[':status']))));
      expect(status).toBe(408);
      stream.close();
    } finally {
      session.close();
    }
  });

  it('a client that never finishes the TLS handshake is disconnected', async () => {
    const net = await import('node:net');
    const socket = net.connect(started.webhook.port, '127.0.0.1');
    const t0 = Date.now();
    const closed = await new Promise<number>((resolve) => {
      socket.on('error', () => {});
      socket.on('close', () => resolve(Date.now() - t0));
      setTimeout(() => resolve(-1), 8000);
    });
    expect(closed).toBeGreaterThan(0);
    expect(closed).toBeLessThan(6000);
  });

  it('TLS below 1.2 is refused', async () => {
    const error = await new Promise<Error | undefined>((resolve) => {
      const socket = tls.connect({ host: '127.0.0.1', port: started.webhook.port, ca: readFileSync(pki.caCert), servername: 'localhost', minVersion: 'TLSv1', maxVersion: 'TLSv1.1' }, () => {
        socket.destroy();
        resolve(undefined);
      });
      socket.on('error', resolve);
    });
    expect(error).toBeInstanceOf(Error);
  });

  it('every answer that is not 2xx is JSON {error, status}, and each refused request is logged once', async () => {
    type Case = { name: string; send: () => Promise<{ status: number; type: string | undefined; body: string }> };
    const viaH1 = (options: Parameters<typeof h.h1>[2]) => async () => {
      const a = await h.h1(started.url, pki.caCert, options);
      return { status: a.status, type: a.headers['content-type'] as string | undefined, body: a.body };
    };
    /** Raw HTTP/1.1 that Node refuses before a handler sees it. */
    const viaRaw = (text: string) => async () => {
      const socket = await raw();
      socket.write(text);
      const got = await until(socket, 6000);
      socket.destroy();
      const [head = '', body = ''] = got.text.split('\r\n\r\n');
      return { status: Number(/^HTTP\/1\.1 (\d+)/.exec(head)?.[1]), type: /^content-type: (.*)$/im.exec(head)?.[1], body };
    };
    const cases: Case[] = [
      { name: '404', send: viaH1({ method: 'GET', path: '/nope' }) },
      { name: '405 /mutate', send: viaH1({ method: 'GET', path: '/mutate' }) },
      { name: '405 /healthz', send: viaH1({ method: 'POST', path: '/healthz', body: '{}' }) },
      { name: '415', send: viaH1({ headers: { 'content-type': 'text/plain' }, body: 'x' }) },
      { name: '400 not JSON', send: viaH1({ body: '{' }) },
      { name: '413', send: viaH1({ body: Buffer.alloc(BODY_LIMIT + 1, 0x20) }) },
      { name: '400 not HTTP', send: viaRaw('NOT HTTP AT ALL\r\n\r\n') },
      { name: '408 headers', send: viaRaw('POST /mutate HTTP/1.1\r\nHost: localhost\r\n') },
    ];
    for (const c of cases) {
      const before = started.logs.length;
      const answer = await c.send();
      expect(answer.status, c.name).toBeGreaterThanOrEqual(400);
      expect(answer.type, c.name).toBe('application/json');
      expect(JSON.parse(answer.body), c.name).toMatchObject({ error: expect.any(String), status: answer.status });
      // Logged once, as a refusal (or, for a body that is no AdmissionReview, as the admission it was).
      const lines = started.logs.slice(before).filter((l) => l.status === answer.status);
      expect(lines, c.name).toHaveLength(1);
      expect(lines[0]!.msg, c.name).toMatch(/^(request refused|admission)$/);
    }
  });

  it('after all of it, a normal admission is answered', async () => {
    expect(h.readReview(await h.h1(started.url, pki.caCert, { body: h.review(h.plainPod()) })).allowed).toBe(true);
  });
});
