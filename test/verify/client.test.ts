/**
 * What verify asks of the Kubernetes client besides GET and LIST (a POST, a
 * log as text, a watch, a WebSocket: src/kubernetes/client.ts), each held to
 * the client's rules, against a server on Node's own HTTP/2 server (HTTP/1.1
 * allowed, as the API server), which plays the API server's part slowly or
 * wrongly where a test needs it: the body sent over HTTP/2 and HTTP/1.1, a log
 * cut at its limit, a watch's events across chunks, its end at the caller's
 * deadline (not the request's, once answered), an event over the limit, a
 * watch or a WebSocket handshake never answered (the request's deadline). The
 * real API server's answers are in test/verify/verify.test.ts.
 */
import { readFileSync } from 'node:fs';
import http2 from 'node:http2';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KubernetesApiError, KubernetesClient, KubernetesDeadlineError, type ClientSettings } from '../../src/kubernetes/client.js';
import { removeDir, servingPki, tempDir } from '../apiserver/harness.js';

let dir = '';
let ca = '';
let api: http2.Http2SecureServer;
let silent: https.Server;
let apiBase = '';
let silentBase = '';
/** What the server received: method, path, protocol, content-type and body, per request. */
const received: { method: string; path: string; version: string; contentType?: string; body: string }[] = [];
const upgrades: string[] = [];

/** The server's answers by path (without the query). */
const routes: Record<string, (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse, body: string) => void> = {
  '/apis/authorization.k8s.io/v1/selfsubjectaccessreviews': (_req, res, body) => {
    const review = JSON.parse(body) as { spec: unknown };
    res.writeHead(201, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ kind: 'SelfSubjectAccessReview', spec: review.spec, status: { allowed: true } }));
  },
  '/log': (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.end('a'.repeat(3000));
  },
  '/watch': (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    const event = (n: number) => `${JSON.stringify({ type: 'MODIFIED', object: { metadata: { name: 'p', resourceVersion: String(n) } } })}\n`;
    const text = event(1) + event(2) + event(3);
    // Cut mid-event, then the rest, then an open stream that sends nothing more (the API server's until its timeoutSeconds).
    res.write(text.slice(0, 30));
    setTimeout(() => res.write(text.slice(30)), 50);
  },
  '/watch-large': (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.write(`{"type":"MODIFIED","object":{"metadata":{"name":"${'x'.repeat(5000)}`);
  },
  '/watch-never': () => undefined,
  '/watch-garbled': (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.write('{"kind":"Status"}\n');
  },
};

beforeAll(async () => {
  dir = tempDir('client');
  const pki = servingPki(dir);
  ca = readFileSync(pki.caCert, 'utf8');
  const tls = { cert: readFileSync(pki.cert), key: readFileSync(pki.key) };
  api = http2.createSecureServer({ ...tls, allowHTTP1: true }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      const path = req.url.split('?')[0]!;
      received.push({ method: req.method, path, version: req.httpVersion, contentType: req.headers['content-type'], body });
      routes[path]!(req, res, body);
    });
  });
  // A server that takes a WebSocket handshake and never answers it.
  silent = https.createServer(tls);
  silent.on('upgrade', (req, socket: Duplex) => {
    upgrades.push(String(req.headers.authorization));
    socket.on('error', () => undefined);
  });
  await Promise.all([new Promise<void>((resolve) => api.listen(0, '127.0.0.1', resolve)), new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve))]);
  apiBase = `https://127.0.0.1:${(api.address() as AddressInfo).port}`;
  silentBase = `https://127.0.0.1:${(silent.address() as AddressInfo).port}`;
});

afterAll(() => {
  api?.close();
  silent?.closeAllConnections();
  silent?.close();
  removeDir(dir);
});

const SETTINGS: ClientSettings = { env: {}, requestTimeoutMs: 10_000, maxBodyBytes: 1 << 20, maxSockets: 4, userAgent: 'vram-preflight-test' };
const clientOf = (server: string, settings: Partial<ClientSettings> = {}): KubernetesClient =>
  new KubernetesClient({ server, ca, insecureSkipTlsVerify: false, token: 't0ken', origin: 'test' }, { ...SETTINGS, ...settings });

describe("the client's requests for verify", () => {
  it('a POST sends its JSON object and reads the answer, over HTTP/2 and HTTP/1.1 alike', async () => {
    const review = { apiVersion: 'authorization.k8s.io/v1', kind: 'SelfSubjectAccessReview', spec: { resourceAttributes: { namespace: 'ml', verb: 'get', resource: 'pods' } } };
    const client = clientOf(apiBase);
    try {
      expect(await client.post('/apis/authorization.k8s.io/v1/selfsubjectaccessreviews', review)).toEqual({ kind: 'SelfSubjectAccessReview', spec: review.spec, status: { allowed: true } });
      expect(received.at(-1)).toMatchObject({ method: 'POST', version: '2.0', contentType: 'application/json', body: JSON.stringify(review) });
    } finally {
      client.close();
    }
    // The same, where the API server speaks HTTP/1.1 only (a proxy in front of it): ALPN offers h2 first, so force the old protocol with a server that offers none.
    const old = https.createServer({ cert: readFileSync(`${dir}/tls.crt`), key: readFileSync(`${dir}/tls.key`) }, (req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        received.push({ method: req.method!, path: req.url!, version: req.httpVersion, contentType: req.headers['content-type'], body: Buffer.concat(chunks).toString('utf8') });
        res.writeHead(201, { 'content-type': 'application/json' });
        res.end('{"status":{"allowed":false}}');
      });
    });
    await new Promise<void>((resolve) => old.listen(0, '127.0.0.1', resolve));
    const client1 = clientOf(`https://127.0.0.1:${(old.address() as AddressInfo).port}`);
    try {
      expect(await client1.post('/apis/authorization.k8s.io/v1/selfsubjectaccessreviews', review)).toEqual({ status: { allowed: false } });
      expect(received.at(-1)).toMatchObject({ method: 'POST', version: '1.1', contentType: 'application/json', body: JSON.stringify(review) });
    } finally {
      client1.close();
      old.close();
    }
  });

  it('a log as text: its head up to the limit, and whether there was more', async () => {
    const client = clientOf(apiBase);
    try {
      expect(await client.text('/log', { maxBytes: 1000 })).toEqual({ text: 'a'.repeat(1000), cut: true });
      expect(await client.text('/log', { maxBytes: 5000 })).toEqual({ text: 'a'.repeat(3000), cut: false });
    } finally {
      client.close();
    }
  });

  it("a watch: events across chunks, in order, until the caller's deadline, which the request's shorter timeout does not cut once answered", async () => {
    const client = clientOf(apiBase, { requestTimeoutMs: 300 });
    const t0 = Date.now();
    const versions: string[] = [];
    try {
      for await (const event of client.watch('/watch?watch=1', { deadline: Date.now() + 1500 })) versions.push(`${event.type} ${String((event.object.metadata as { resourceVersion: string }).resourceVersion)}`);
    } finally {
      client.close();
    }
    const took = Date.now() - t0;
    expect(versions).toEqual(['MODIFIED 1', 'MODIFIED 2', 'MODIFIED 3']);
    expect(took).toBeGreaterThanOrEqual(1400);
    expect(took).toBeLessThan(5000);
  });

  it("a watch's event over the limit, or a line that is no event, is the API's error; a watch never answered ends at the request's deadline", async () => {
    const client = clientOf(apiBase, { requestTimeoutMs: 500, maxBodyBytes: 1000 });
    const drain = async (path: string): Promise<unknown> => {
      try {
        for await (const _event of client.watch(path, { deadline: Date.now() + 5000 }));
        return undefined;
      } catch (error) {
        return error;
      }
    };
    try {
      const large = await drain('/watch-large?watch=1');
      expect(large).toBeInstanceOf(KubernetesApiError);
      expect((large as Error).message).toBe('the answer to the watch GET /watch-large: an event is larger than 1000 bytes');
      expect(((await drain('/watch-garbled?watch=1')) as Error).message).toBe('the answer to the watch GET /watch-garbled: a line is not an event (type and object)');
      const never = await drain('/watch-never?watch=1');
      expect(never).toBeInstanceOf(KubernetesDeadlineError);
      expect({ which: (never as KubernetesDeadlineError).which, message: (never as Error).message }).toEqual({ which: 'request', message: 'no whole answer to GET /watch-never within 500 ms' });
    } finally {
      client.close();
    }
  });

  it("a WebSocket handshake never answered ends at the request's deadline, with the client's credentials sent; nothing listening is said as for a GET", async () => {
    const client = clientOf(silentBase, { requestTimeoutMs: 500 });
    const t0 = Date.now();
    const error = await client.upgrade('/api/v1/namespaces/ml/pods/p/exec?command=true', { protocols: ['v5.channel.k8s.io'], maxMessageBytes: 1 << 20 }).catch((e: unknown) => e);
    client.close();
    expect(error).toBeInstanceOf(KubernetesDeadlineError);
    expect((error as Error).message).toBe('no whole answer to GET /api/v1/namespaces/ml/pods/p/exec within 500 ms');
    expect(Date.now() - t0).toBeLessThan(3000);
    expect(upgrades.at(-1)).toBe('Bearer t0ken');
    const closed = await new Promise<number>((resolve) => {
      const s = https.createServer();
      s.listen(0, '127.0.0.1', () => {
        const port = (s.address() as AddressInfo).port;
        s.close(() => resolve(port));
      });
    });
    const nowhere = clientOf(`https://127.0.0.1:${closed}`);
    const refused = await nowhere.upgrade('/x', { protocols: ['v5.channel.k8s.io'], maxMessageBytes: 1 << 20 }).catch((e: unknown) => e);
    nowhere.close();
    expect((refused as Error).message).toBe(`cannot reach the Kubernetes API at https://127.0.0.1:${closed} (test): ECONNREFUSED nothing listens there`);
  });
});
