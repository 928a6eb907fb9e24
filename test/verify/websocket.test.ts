/**
 * The WebSocket client (src/kubernetes/websocket.ts) and the exec over it
 * (src/kubernetes/pod-exec.ts) against a server on Node's own HTTPS server,
 * which does the upgrade and the framing here, written from RFC 6455 apart
 * from the client: it checks what the client sends (the handshake's headers,
 * every frame masked, a fresh key each), and sends what a server may
 * (fragments, pings, close frames, large messages) and what it must not
 * (a masked frame, a wrong accept, a subprotocol not offered). The exec
 * protocol's side is the API server's: channel bytes, the Status on channel
 * 3, v5 preferred and v4 taken. The API server's own answers are in
 * test/verify/verify.test.ts.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execInContainer, execPath, EXEC_PROTOCOLS } from '../../src/kubernetes/pod-exec.js';
import { KubernetesApiError, KubernetesClient } from '../../src/kubernetes/client.js';
import { openWebSocket, WebSocketError, type WebSocket } from '../../src/kubernetes/websocket.js';
import { removeDir, servingPki, tempDir } from '../apiserver/harness.js';

const GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';

/** What the server saw of one connection. */
interface Seen {
  headers: Record<string, string | string[] | undefined>;
  frames: { opcode: number; fin: boolean; mask: Buffer; payload: Buffer }[];
}

/** A server frame: unmasked, unless told to break the rule. */
function serverFrame(opcode: number, payload: Buffer, { fin = true, mask = false }: { fin?: boolean; mask?: boolean } = {}): Buffer {
  const len = payload.length;
  const head = len < 126 ? Buffer.from([(fin ? 0x80 : 0) | opcode, (mask ? 0x80 : 0) | len]) : len < 65536 ? Buffer.from([(fin ? 0x80 : 0) | opcode, (mask ? 0x80 : 0) | 126, len >> 8, len & 255]) : Buffer.concat([Buffer.from([(fin ? 0x80 : 0) | opcode, (mask ? 0x80 : 0) | 127]), (() => { const b = Buffer.alloc(8); b.writeBigUInt64BE(BigInt(len)); return b; })()]);
  return Buffer.concat([head, mask ? Buffer.from([1, 2, 3, 4]) : Buffer.alloc(0), mask ? Buffer.from(payload.map((b, i) => b ^ [1, 2, 3, 4][i & 3]!)) : payload]);
}

/** Reads the client's frames; every one must be masked (RFC 6455 5.1). */
function readClientFrames(buffer: Buffer): { frames: Seen['frames']; rest: Buffer } {
  const frames: Seen['frames'] = [];
  let b = buffer;
  for (;;) {
    if (b.length < 2) break;
    const fin = (b[0]! & 0x80) !== 0;
    const opcode = b[0]! & 0x0f;
    const masked = (b[1]! & 0x80) !== 0;
    let len = b[1]! & 0x7f;
    let at = 2;
    if (len === 126) {
      if (b.length < 4) break;
      len = b.readUInt16BE(2);
      at = 4;
    } else if (len === 127) {
      if (b.length < 10) break;
      len = Number(b.readBigUInt64BE(2));
      at = 10;
    }
    if (!masked) throw new Error('an unmasked frame from the client');
    if (b.length < at + 4 + len) break;
    const mask = b.subarray(at, at + 4);
    const payload = Buffer.from(b.subarray(at + 4, at + 4 + len).map((x, i) => x ^ mask[i & 3]!));
    frames.push({ opcode, fin, mask: Buffer.from(mask), payload });
    b = b.subarray(at + 4 + len);
  }
  return { frames, rest: b };
}

type Behaviour = (socket: Duplex, seen: Seen, onFrame: (handler: (frame: Seen['frames'][number]) => void) => void) => void;

let server: https.Server;
let base = '';
let dir = '';
let ca = '';
const connections: Seen[] = [];
const behaviours = new Map<string, { protocol?: string | null; accept?: string; status?: number; body?: string; run?: Behaviour }>();

function handshake(key: string, accept: string | undefined, protocol: string | null): string {
  return ['HTTP/1.1 101 Switching Protocols', 'Upgrade: websocket', 'Connection: Upgrade', `Sec-WebSocket-Accept: ${accept ?? createHash('sha1').update(key + GUID).digest('base64')}`, ...(protocol ? [`Sec-WebSocket-Protocol: ${protocol}`] : []), '', ''].join('\r\n');
}

beforeAll(async () => {
  dir = tempDir('websocket');
  const pki = servingPki(dir);
  ca = readFileSync(pki.caCert, 'utf8');
  server = https.createServer({ cert: readFileSync(pki.cert), key: readFileSync(pki.key) }, (req, res) => {
    res.writeHead(400, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ kind: 'Status', status: 'Failure', message: 'Upgrade request required', reason: 'BadRequest', code: 400 }));
  });
  server.on('upgrade', (req, socket: Duplex) => {
    const name = new URL(req.url!, 'https://x').pathname.split('/').filter(Boolean).at(-2) ?? '';
    const b = behaviours.get(name) ?? behaviours.get(new URL(req.url!, 'https://x').pathname.slice(1))!;
    const seen: Seen = { headers: req.headers, frames: [] };
    connections.push(seen);
    if (b.status) {
      socket.end(`HTTP/1.1 ${b.status} Refused\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(b.body ?? '')}\r\nConnection: close\r\n\r\n${b.body ?? ''}`);
      return;
    }
    const offered = String(req.headers['sec-websocket-protocol'] ?? '').split(/\s*,\s*/);
    const protocol = b.protocol === undefined ? offered[0]! : b.protocol;
    socket.write(handshake(String(req.headers['sec-websocket-key']), b.accept, protocol));
    let pending: Buffer = Buffer.alloc(0);
    const handlers: ((f: Seen['frames'][number]) => void)[] = [];
    socket.on('data', (chunk: Buffer) => {
      const { frames, rest } = readClientFrames(Buffer.concat([pending, chunk]));
      pending = rest;
      for (const f of frames) {
        seen.frames.push(f);
        for (const h of handlers) h(f);
      }
    });
    socket.on('error', () => undefined);
    b.run?.(socket, seen, (h) => handlers.push(h));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(() => {
  server?.closeAllConnections();
  server?.close();
  removeDir(dir);
});

const open = (name: string, protocols: readonly string[] = ['v5.channel.k8s.io', 'v4.channel.k8s.io'], maxMessageBytes = 1 << 20): Promise<WebSocket> =>
  openWebSocket({ url: new URL(`${base}/${name}`), protocols, headers: { Authorization: 'Bearer t0ken' }, tls: { ca, rejectUnauthorized: true }, deadline: Date.now() + 10_000, maxMessageBytes });

/** Waits until the server has seen what the check wants (it reads the client's frames as they come). */
async function until(check: () => boolean): Promise<void> {
  for (let i = 0; i < 100 && !check(); i++) await new Promise((resolve) => setTimeout(resolve, 20));
}

async function collect(ws: WebSocket): Promise<Buffer[]> {
  const out: Buffer[] = [];
  for await (const m of ws.messages) out.push(m.data);
  return out;
}

describe('the WebSocket client (RFC 6455) against a server of its own', () => {
  it('the handshake: GET with Upgrade, version 13, a fresh 16-byte key, the subprotocols in order, our headers; the accept checked', async () => {
    behaviours.set('hello', { run: (socket) => socket.end(serverFrame(0x8, Buffer.from([0x03, 0xe8]))) });
    const first = await open('hello');
    expect(first.protocol).toBe('v5.channel.k8s.io');
    await collect(first);
    const second = await open('hello');
    await collect(second);
    const [a, b] = connections.slice(-2);
    for (const seen of [a!, b!]) {
      expect(seen.headers.upgrade).toBe('websocket');
      expect(String(seen.headers.connection).toLowerCase()).toContain('upgrade');
      expect(seen.headers['sec-websocket-version']).toBe('13');
      expect(Buffer.from(String(seen.headers['sec-websocket-key']), 'base64')).toHaveLength(16);
      expect(seen.headers['sec-websocket-protocol']).toBe('v5.channel.k8s.io, v4.channel.k8s.io');
      expect(seen.headers.authorization).toBe('Bearer t0ken');
    }
    expect(a!.headers['sec-websocket-key']).not.toBe(b!.headers['sec-websocket-key']);
    // The server's close (1000) is answered with a close frame of the same code, masked.
    await until(() => a!.frames.length > 0);
    expect(a!.frames.map((f) => [f.opcode, f.payload.readUInt16BE(0)])).toEqual([[0x8, 1000]]);
    expect(first.closed()).toEqual({ code: 1000, reason: '' });
  });

  it('messages: fragments joined, pings answered with the same data, lengths of 7, 16 and 64 bits; every client frame masked with a fresh key', async () => {
    const big = Buffer.alloc(70_000, 7);
    const mid = Buffer.alloc(300, 5);
    behaviours.set('messages', {
      run: (socket, _seen, onFrame) => {
        socket.write(serverFrame(0x9, Buffer.from('are you there')));
        onFrame((f) => {
          if (f.opcode !== 0xa) return;
          socket.write(serverFrame(0x2, Buffer.from([1, 104, 101]), { fin: false }));
          socket.write(serverFrame(0x9, Buffer.from('again')));
          socket.write(serverFrame(0x0, Buffer.from('llo'), { fin: false }));
          socket.write(serverFrame(0x0, Buffer.alloc(0)));
          socket.write(serverFrame(0x2, mid));
          socket.write(serverFrame(0x2, big));
          socket.write(serverFrame(0x1, Buffer.from('text')));
          socket.end(serverFrame(0x8, Buffer.concat([Buffer.from([0x03, 0xe8]), Buffer.from('bye')])));
        });
      },
    });
    const ws = await open('messages');
    ws.send(Buffer.from('from the client'));
    const got = await collect(ws);
    expect(got.map((m) => m.length)).toEqual([6, 300, 70_000, 4]);
    expect(got[0]!.toString('latin1')).toBe('\x01hello');
    expect(got[2]!.equals(big)).toBe(true);
    expect(ws.closed()).toEqual({ code: 1000, reason: 'bye' });
    const frames = connections.at(-1)!.frames;
    await until(() => frames.filter((f) => f.opcode === 0xa).length === 2);
    expect(frames.filter((f) => f.opcode === 0xa).map((f) => f.payload.toString())).toEqual(['are you there', 'again']);
    expect(frames.find((f) => f.opcode === 0x2)!.payload.toString()).toBe('from the client');
    const masks = frames.map((f) => f.mask.toString('hex'));
    expect(new Set(masks).size).toBe(masks.length);
  });

  it('refuses a wrong Sec-WebSocket-Accept, a subprotocol not offered or none at all', async () => {
    behaviours.set('bad-accept', { accept: 'c29tZXRoaW5nIGVsc2U=' });
    behaviours.set('other-protocol', { protocol: 'v3.channel.k8s.io' });
    behaviours.set('no-protocol', { protocol: null });
    await expect(open('bad-accept')).rejects.toThrow('Sec-WebSocket-Accept does not match the key sent');
    await expect(open('other-protocol')).rejects.toThrow('it picked the subprotocol "v3.channel.k8s.io", which was not offered');
    await expect(open('no-protocol')).rejects.toThrow('it picked none of the subprotocols offered (v5.channel.k8s.io, v4.channel.k8s.io)');
  });

  it('a handshake answered without the upgrade: the status and the body, for the Status in it', async () => {
    behaviours.set('refused', { status: 403, body: '{"kind":"Status","status":"Failure","message":"nope","reason":"Forbidden","code":403}' });
    const error = await open('refused').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(WebSocketError);
    expect((error as WebSocketError).status).toBe(403);
    expect(JSON.parse((error as WebSocketError).body!).reason).toBe('Forbidden');
  });

  it('a masked server frame, or a message over the limit, breaks the connection with the close code RFC 6455 gives it (1002, 1009)', async () => {
    behaviours.set('masked', { run: (socket) => socket.write(serverFrame(0x2, Buffer.from('x'), { mask: true })) });
    await expect(collect(await open('masked'))).rejects.toThrow('a masked frame from the server');
    await until(() => connections.at(-1)!.frames.length > 0);
    expect(connections.at(-1)!.frames.map((f) => [f.opcode, f.payload.readUInt16BE(0)])).toEqual([[0x8, 1002]]);
    behaviours.set('huge', { run: (socket) => socket.write(serverFrame(0x2, Buffer.alloc(2000))) });
    await expect(collect(await open('huge', undefined, 1000))).rejects.toThrow('a frame of 2000 bytes, more than the 1000 taken');
    await until(() => connections.at(-1)!.frames.length > 0);
    expect(connections.at(-1)!.frames.map((f) => [f.opcode, f.payload.readUInt16BE(0)])).toEqual([[0x8, 1009]]);
  });
});

/** A KubernetesClient whose API server is the test server. */
function clientOf(): KubernetesClient {
  return new KubernetesClient({ server: base, ca, insecureSkipTlsVerify: false, token: 't0ken', origin: 'test' }, { requestTimeoutMs: 10_000, env: {}, maxBodyBytes: 8 << 20, maxSockets: 4, userAgent: 'vram-preflight-test' });
}

/** The API server's side of an exec: the empty message first, then output, then the Status on channel 3, then close. */
const execServer = (protocol: string | undefined, status: object | undefined): Behaviour => (socket) => {
  const channel = (n: number, text: string) => serverFrame(0x2, Buffer.concat([Buffer.from([n]), Buffer.from(text)]));
  socket.write(channel(1, ''));
  socket.write(channel(1, 'out\n'));
  socket.write(channel(2, 'err\n'));
  if (status) socket.write(channel(3, JSON.stringify(status)));
  socket.end(serverFrame(0x8, Buffer.from([0x03, 0xe8])));
  void protocol;
};

describe('exec over it: the channel protocol, v5 preferred, v4 taken', () => {
  const request = (pod: string) => ({ namespace: 'ml', pod, container: 'model', command: ['/bin/sh', '-c', 'kill -TERM 1'], deadline: Date.now() + 10_000 });

  it('the path kubectl exec uses: each word a command parameter, the container, stdout and stderr, no stdin, no tty', () => {
    expect(execPath(request('p'))).toBe('/api/v1/namespaces/ml/pods/p/exec?command=%2Fbin%2Fsh&command=-c&command=kill+-TERM+1&container=model&stdout=true&stderr=true');
    expect(EXEC_PROTOCOLS).toEqual(['v5.channel.k8s.io', 'v4.channel.k8s.io']);
  });

  it('success, an exit code, and a connection that ends without a Status (the container stopped under the command)', async () => {
    behaviours.set('ok', { run: execServer('v5', { metadata: {}, status: 'Success' }) });
    behaviours.set('fails', { protocol: 'v4.channel.k8s.io', run: execServer('v4', { metadata: {}, status: 'Failure', message: 'command terminated with non-zero exit code: error executing command [sh -c kill -TERM 1], exit code 1', reason: 'NonZeroExitCode', details: { causes: [{ reason: 'ExitCode', message: '1' }] } }) });
    behaviours.set('cut', { run: (socket) => socket.destroy() });
    const client = clientOf();
    expect(await execInContainer(client, request('ok'))).toEqual({ protocol: 'v5.channel.k8s.io', stdout: 'out\n', stderr: 'err\n', status: { metadata: {}, status: 'Success' }, exitCode: 0 });
    const failed = await execInContainer(client, request('fails'));
    expect({ protocol: failed.protocol, exitCode: failed.exitCode }).toEqual({ protocol: 'v4.channel.k8s.io', exitCode: 1 });
    const cut = await execInContainer(client, request('cut'));
    expect(cut.status).toBeUndefined();
    expect(cut.exitCode).toBeUndefined();
    expect(connections.at(-1)!.headers.authorization).toBe('Bearer t0ken');
  });

  it('a refused upgrade is the API\'s error, with its Status message and reason', async () => {
    behaviours.set('forbidden', { status: 403, body: JSON.stringify({ kind: 'Status', status: 'Failure', message: 'pods "forbidden" is forbidden: User "u" cannot create resource "pods/exec" in API group "" in the namespace "ml"', reason: 'Forbidden', code: 403 }) });
    const error = await execInContainer(clientOf(), request('forbidden')).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(KubernetesApiError);
    expect((error as KubernetesApiError).status).toBe(403);
    expect((error as Error).message).toBe('HTTP 403 Forbidden: pods "forbidden" is forbidden: User "u" cannot create resource "pods/exec" in API group "" in the namespace "ml"');
  });
});

