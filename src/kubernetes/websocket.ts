/**
 * A WebSocket client (RFC 6455) over node:https, for the API server's exec
 * (./pod-exec.ts, opened by KubernetesClient.upgrade with the client's
 * credentials): Node 20 has no WebSocket client of its own.
 *
 * What it does: the opening handshake (a GET with `Upgrade: websocket`, a
 * random Sec-WebSocket-Key whose Sec-WebSocket-Accept it checks, the
 * subprotocols offered in order of preference and the one the server picked
 * checked against them); frames in both directions, its own masked with a
 * fresh random key each (RFC 6455 §5.3), the server's refused if masked
 * (§5.1); messages in fragments joined (continuation frames), up to a size
 * limit; ping answered with pong; the closing handshake (§7), its code and
 * reason kept. What it does not: extensions (none is offered, so none may
 * be used: a frame with RSV bits set is a protocol error), and text frames
 * are handed over as bytes (the exec protocols are binary).
 *
 * A server that answers the handshake with anything but 101 (the API
 * server's 403, 404, 400) is an error holding the status and its body, for
 * the caller to read the API's Status in.
 */
import { createHash, randomBytes } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { request } from 'node:https';
import type { Duplex } from 'node:stream';

/** The GUID of RFC 6455 §1.3, hashed with the key into Sec-WebSocket-Accept. */
const ACCEPT_GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';

const OPCODE = { continuation: 0x0, text: 0x1, binary: 0x2, close: 0x8, ping: 0x9, pong: 0xa } as const;

/** A handshake refused, or the connection broken, or the server breaking the protocol. */
export class WebSocketError extends Error {
  constructor(
    message: string,
    /** The HTTP status of a refused handshake. */
    readonly status?: number,
    /** The body of a refused handshake (the API server's Status, as JSON text). */
    readonly body?: string,
    /** The handshake was not done by the deadline. */
    readonly timedOut = false,
  ) {
    super(message);
    this.name = 'WebSocketError';
  }
}

export interface WebSocketMessage {
  /** A text message's bytes are handed over as they came (UTF-8). */
  binary: boolean;
  data: Buffer;
}

export interface WebSocket {
  /** The subprotocol the server picked. */
  protocol: string;
  /** Messages as they arrive; ends when the connection closes (by either side), throws when it breaks. */
  messages: AsyncIterable<WebSocketMessage>;
  /** The close frame's code and reason once the server sent one. */
  closed(): { code?: number; reason: string } | undefined;
  send(data: Buffer | Uint8Array, binary?: boolean): void;
  /** Starts the closing handshake (code 1000 by default) and ends the connection once answered or after a moment. */
  close(code?: number, reason?: string): void;
  /** Ends the connection at once. */
  destroy(): void;
}

export interface WebSocketOptions {
  url: URL;
  /** Subprotocols, most wanted first (Sec-WebSocket-Protocol). */
  protocols: readonly string[];
  headers: Record<string, string | string[]>;
  tls: { ca?: string; cert?: string; key?: string; rejectUnauthorized: boolean; servername?: string };
  /** Epoch ms: the handshake must be done by then. */
  deadline: number;
  /** Largest message taken, in bytes (a larger one closes the connection with 1009). */
  maxMessageBytes: number;
  /** Largest refused-handshake body kept. */
  maxErrorBytes?: number;
}

/** A frame's header, as written: FIN, opcode, MASK and the payload length in 7, 7+16 or 7+64 bits. */
function frameHeader(opcode: number, length: number, fin = true): Buffer {
  const first = (fin ? 0x80 : 0) | opcode;
  if (length < 126) return Buffer.from([first, 0x80 | length]);
  if (length < 0x10000) {
    const header = Buffer.alloc(4);
    header[0] = first;
    header[1] = 0x80 | 126;
    header.writeUInt16BE(length, 2);
    return header;
  }
  const header = Buffer.alloc(10);
  header[0] = first;
  header[1] = 0x80 | 127;
  header.writeBigUInt64BE(BigInt(length), 2);
  return header;
}

/** One client frame: header, a fresh 4-byte masking key, the payload masked with it (RFC 6455 §5.3). */
export function clientFrame(opcode: number, payload: Uint8Array, fin = true): Buffer {
  const mask = randomBytes(4);
  const masked = Buffer.alloc(payload.length);
  for (let i = 0; i < payload.length; i++) masked[i] = payload[i]! ^ mask[i & 3]!;
  return Buffer.concat([frameHeader(opcode, payload.length, fin), mask, masked]);
}

/** Reads server frames from bytes as they come; hands over whole messages and control frames. */
class FrameReader {
  private buffer: Buffer = Buffer.alloc(0);
  private fragments: Buffer[] = [];
  private fragmentsSize = 0;
  private fragmentBinary = true;

  constructor(private readonly maxMessageBytes: number) {}

  /** The events the bytes complete, in order. Throws a WebSocketError (with the close code to send) on a protocol error. */
  push(chunk: Buffer): ({ kind: 'message'; message: WebSocketMessage } | { kind: 'close'; code?: number; reason: string } | { kind: 'ping'; data: Buffer } | { kind: 'pong' })[] {
    this.buffer = this.buffer.length === 0 ? chunk : Buffer.concat([this.buffer, chunk]);
    const events: ReturnType<FrameReader['push']> = [];
    for (;;) {
      const b = this.buffer;
      if (b.length < 2) break;
      const fin = (b[0]! & 0x80) !== 0;
      const rsv = b[0]! & 0x70;
      const opcode = b[0]! & 0x0f;
      const masked = (b[1]! & 0x80) !== 0;
      let length = b[1]! & 0x7f;
      let offset = 2;
      if (length === 126) {
        if (b.length < 4) break;
        length = b.readUInt16BE(2);
        offset = 4;
      } else if (length === 127) {
        if (b.length < 10) break;
        const long = b.readBigUInt64BE(2);
        if (long > BigInt(this.maxMessageBytes)) throw protocolError(1009, `a frame of ${long} bytes, more than the ${this.maxMessageBytes} taken`);
        length = Number(long);
        offset = 10;
      }
      if (rsv !== 0) throw protocolError(1002, 'a frame with RSV bits set, though no extension was agreed');
      if (masked) throw protocolError(1002, 'a masked frame from the server (RFC 6455 5.1: a server must not mask)');
      const control = opcode >= 0x8;
      if (control && (!fin || length > 125)) throw protocolError(1002, 'a fragmented or oversized control frame');
      if (!control && length > this.maxMessageBytes) throw protocolError(1009, `a frame of ${length} bytes, more than the ${this.maxMessageBytes} taken`);
      if (b.length < offset + length) break;
      const payload = Buffer.from(b.subarray(offset, offset + length));
      this.buffer = b.subarray(offset + length);
      switch (opcode) {
        case OPCODE.close: {
          if (length === 1) throw protocolError(1002, 'a close frame with a 1-byte body');
          events.push({ kind: 'close', ...(length >= 2 && { code: payload.readUInt16BE(0) }), reason: payload.subarray(2).toString('utf8') });
          return events;
        }
        case OPCODE.ping:
          events.push({ kind: 'ping', data: payload });
          break;
        case OPCODE.pong:
          events.push({ kind: 'pong' });
          break;
        case OPCODE.text:
        case OPCODE.binary:
        case OPCODE.continuation: {
          const starts = opcode !== OPCODE.continuation;
          if (starts && this.fragments.length > 0) throw protocolError(1002, 'a new message began before the last one ended');
          if (!starts && this.fragments.length === 0) throw protocolError(1002, 'a continuation frame with no message to continue');
          if (starts) this.fragmentBinary = opcode === OPCODE.binary;
          this.fragmentsSize += payload.length;
          if (this.fragmentsSize > this.maxMessageBytes) throw protocolError(1009, `a message of more than the ${this.maxMessageBytes} bytes taken`);
          this.fragments.push(payload);
          if (fin) {
            events.push({ kind: 'message', message: { binary: this.fragmentBinary, data: Buffer.concat(this.fragments, this.fragmentsSize) } });
            this.fragments = [];
            this.fragmentsSize = 0;
          }
          break;
        }
        default:
          throw protocolError(1002, `a frame of the reserved opcode ${opcode}`);
      }
    }
    return events;
  }
}

function protocolError(code: number, message: string): WebSocketError & { closeCode: number } {
  return Object.assign(new WebSocketError(`the server broke the WebSocket protocol: ${message}`), { closeCode: code });
}

/** Sec-WebSocket-Accept for a key (RFC 6455 §4.2.2). */
export function acceptFor(key: string): string {
  return createHash('sha1').update(key + ACCEPT_GUID).digest('base64');
}

/** Opens a WebSocket: resolves once the handshake is done and checked. */
export function openWebSocket(options: WebSocketOptions): Promise<WebSocket> {
  const key = randomBytes(16).toString('base64');
  const left = options.deadline - Date.now();
  if (left <= 0) return Promise.reject(new WebSocketError('the deadline passed before the WebSocket was opened', undefined, undefined, true));
  return new Promise((resolve, reject) => {
    const req = request(options.url, {
      method: 'GET',
      agent: false,
      ...options.tls,
      headers: {
        ...options.headers,
        Connection: 'Upgrade',
        Upgrade: 'websocket',
        'Sec-WebSocket-Version': '13',
        'Sec-WebSocket-Key': key,
        'Sec-WebSocket-Protocol': options.protocols.join(', '),
      },
    });
    let settled = false;
    const fail = (error: Error): void => {
      clearTimeout(timer);
      if (settled) return;
      settled = true;
      reject(error);
    };
    const timer = setTimeout(() => {
      fail(new WebSocketError(`no WebSocket handshake within ${Math.round(left / 1000)} s`, undefined, undefined, true));
      req.destroy();
    }, left);
    req.on('error', fail);
    req.on('response', (res: IncomingMessage) => {
      // Not upgraded: the server's answer, status and body (bounded), for the caller to read.
      const limit = options.maxErrorBytes ?? 64 << 10;
      const chunks: Buffer[] = [];
      let size = 0;
      res.on('data', (chunk: Buffer) => {
        if (size < limit) chunks.push(chunk.subarray(0, limit - size));
        size += chunk.length;
      });
      res.on('end', () => fail(new WebSocketError(`the server answered the WebSocket handshake with HTTP ${res.statusCode}`, res.statusCode, Buffer.concat(chunks).toString('utf8'))));
      res.on('error', fail);
    });
    req.on('upgrade', (res: IncomingMessage, socket: Duplex, head: Buffer) => {
      clearTimeout(timer);
      const refuse = (why: string): void => {
        socket.destroy();
        fail(new WebSocketError(`the server's WebSocket handshake is not valid: ${why}`, res.statusCode));
      };
      if (res.statusCode !== 101) return refuse(`HTTP ${res.statusCode} with Upgrade`);
      if (String(res.headers.upgrade ?? '').toLowerCase() !== 'websocket') return refuse(`Upgrade is "${String(res.headers.upgrade ?? '')}", not websocket`);
      if (!String(res.headers.connection ?? '').toLowerCase().split(/\s*,\s*/).includes('upgrade')) return refuse('Connection does not say Upgrade');
      if (res.headers['sec-websocket-accept'] !== acceptFor(key)) return refuse('Sec-WebSocket-Accept does not match the key sent');
      if (res.headers['sec-websocket-extensions']) return refuse(`it names extensions (${String(res.headers['sec-websocket-extensions'])}), none of which was offered`);
      const protocol = String(res.headers['sec-websocket-protocol'] ?? '');
      if (!options.protocols.includes(protocol)) return refuse(protocol === '' ? `it picked none of the subprotocols offered (${options.protocols.join(', ')})` : `it picked the subprotocol "${protocol}", which was not offered`);
      settled = true;
      resolve(connection(socket, head, protocol, options.maxMessageBytes));
    });
    req.end();
  });
}

/** The open connection: frames read into messages, a queue for the reader, the closing handshake. */
function connection(socket: Duplex, head: Buffer, protocol: string, maxMessageBytes: number): WebSocket {
  const reader = new FrameReader(maxMessageBytes);
  const queue: WebSocketMessage[] = [];
  let waiting: (() => void) | undefined;
  let ended = false;
  /** No more messages: the server's close frame came (the socket may still be open). */
  let over = false;
  let failure: Error | undefined;
  let closeFrame: { code?: number; reason: string } | undefined;
  let closeSent = false;
  let closeTimer: NodeJS.Timeout | undefined;
  const wake = (): void => {
    const w = waiting;
    waiting = undefined;
    w?.();
  };
  const finish = (error?: Error): void => {
    if (ended) return;
    ended = true;
    failure ??= error;
    clearTimeout(closeTimer);
    socket.destroy();
    wake();
  };
  const write = (frame: Buffer): void => {
    if (!socket.destroyed && socket.writable) socket.write(frame);
  };
  const sendClose = (code?: number, reason = ''): void => {
    if (closeSent) return;
    closeSent = true;
    const body = code === undefined ? Buffer.alloc(0) : Buffer.concat([Buffer.from([code >> 8, code & 0xff]), Buffer.from(reason, 'utf8').subarray(0, 123)]);
    write(clientFrame(OPCODE.close, body));
  };
  const onData = (chunk: Buffer): void => {
    if (ended || over) return;
    let events: ReturnType<FrameReader['push']>;
    try {
      events = reader.push(chunk);
    } catch (error) {
      // Say why (the close code), let it go out, then end the connection.
      sendClose((error as { closeCode?: number }).closeCode ?? 1002);
      failure = error as Error;
      over = true;
      socket.end();
      closeTimer = setTimeout(() => finish(failure), 1000);
      closeTimer.unref();
      wake();
      return;
    }
    for (const event of events) {
      if (event.kind === 'message') queue.push(event.message);
      else if (event.kind === 'ping') write(clientFrame(OPCODE.pong, event.data));
      else if (event.kind === 'close') {
        closeFrame = { code: event.code, reason: event.reason };
        // Answer the close (echoing its code, §5.5.1), then the server closes the TCP connection; end it ourselves after a moment.
        sendClose(event.code);
        socket.end();
        clearTimeout(closeTimer);
        closeTimer = setTimeout(() => finish(), 1000);
        closeTimer.unref();
        over = true;
        wake();
        return;
      }
    }
    if (queue.length > 0) wake();
  };
  socket.on('data', onData);
  socket.on('end', () => finish());
  socket.on('close', () => finish());
  socket.on('error', (error: Error) => finish(new WebSocketError(`the WebSocket connection broke: ${error.message}`)));
  if (head.length > 0) onData(head);

  const messages: AsyncIterable<WebSocketMessage> = {
    [Symbol.asyncIterator]: () => ({
      next: async (): Promise<IteratorResult<WebSocketMessage>> => {
        for (;;) {
          const message = queue.shift();
          if (message) return { value: message, done: false };
          if (ended || over) {
            if (failure) throw failure;
            return { value: undefined, done: true };
          }
          await new Promise<void>((resolve) => (waiting = resolve));
        }
      },
      return: async (): Promise<IteratorResult<WebSocketMessage>> => {
        finish();
        return { value: undefined, done: true };
      },
    }),
  };
  return {
    protocol,
    messages,
    closed: () => closeFrame,
    send: (data, binary = true) => write(clientFrame(binary ? OPCODE.binary : OPCODE.text, data)),
    close: (code = 1000, reason = '') => {
      sendClose(code, reason);
      closeTimer ??= setTimeout(() => finish(), 1000);
      closeTimer.unref();
    },
    destroy: () => finish(),
  };
}
