/**
 * HTTP/2 written frame by frame over TLS, as a hostile client would: it
 * opens more streams than the server's SETTINGS allow, or sends a header
 * block a byte at a time, which Node's own client never does. Headers are
 * HPACK literals without indexing (RFC 7541 6.2.2), which every decoder
 * takes.
 */
import { readFileSync } from 'node:fs';
import tls from 'node:tls';

export const FRAME = { DATA: 0, HEADERS: 1, RST_STREAM: 3, SETTINGS: 4, PING: 6, GOAWAY: 7, WINDOW_UPDATE: 8 } as const;
export const FLAG = { END_STREAM: 0x1, ACK: 0x1, END_HEADERS: 0x4 } as const;

export interface Frame {
  type: number;
  flags: number;
  stream: number;
  payload: Buffer;
}

function integer(value: number): Buffer {
  // 7-bit prefix (RFC 7541 5.1).
  if (value < 127) return Buffer.from([value]);
  const bytes = [127];
  let rest = value - 127;
  while (rest >= 128) {
    bytes.push((rest % 128) + 128);
    rest = Math.floor(rest / 128);
  }
  bytes.push(rest);
  return Buffer.from(bytes);
}

/** A header block of literals without indexing. */
export function headerBlock(headers: readonly [string, string][]): Buffer {
  return Buffer.concat(headers.flatMap(([name, value]) => [Buffer.from([0]), integer(Buffer.byteLength(name)), Buffer.from(name), integer(Buffer.byteLength(value)), Buffer.from(value)]));
}

export function frame(type: number, flags: number, stream: number, payload: Buffer = Buffer.alloc(0)): Buffer {
  const head = Buffer.alloc(9);
  head.writeUIntBE(payload.length, 0, 3);
  head[3] = type;
  head[4] = flags;
  head.writeUInt32BE(stream, 5);
  return Buffer.concat([head, payload]);
}

export const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');

export class RawH2 {
  readonly frames: Frame[] = [];
  closed = false;
  readonly done: Promise<void>;
  private pending = Buffer.alloc(0);

  /** `ack`: answers the server's SETTINGS (a client that has not sent its preface must not: those bytes would be a broken preface). */
  private constructor(
    readonly socket: tls.TLSSocket,
    private readonly ack: boolean,
  ) {
    this.done = new Promise((resolve) => socket.on('close', () => resolve()));
    socket.on('close', () => (this.closed = true));
    socket.on('error', () => {});
    socket.on('data', (chunk: Buffer) => {
      this.pending = Buffer.concat([this.pending, chunk]);
      while (this.pending.length >= 9) {
        const length = this.pending.readUIntBE(0, 3);
        if (this.pending.length < 9 + length) break;
        const f: Frame = { type: this.pending[3]!, flags: this.pending[4]!, stream: this.pending.readUInt32BE(5) & 0x7fffffff, payload: this.pending.subarray(9, 9 + length) };
        this.pending = this.pending.subarray(9 + length);
        this.frames.push(f);
        if (this.ack && f.type === FRAME.SETTINGS && !(f.flags & FLAG.ACK)) socket.write(frame(FRAME.SETTINGS, FLAG.ACK, 0));
      }
    });
  }

  /** A TLS connection that negotiated h2; `preface`: sends the connection preface and an empty SETTINGS. `at`: elsewhere than 127.0.0.1, for a certificate of another name than localhost. */
  static connect(port: number, ca: string, preface = true, at: { host: string; servername: string } = { host: '127.0.0.1', servername: 'localhost' }): Promise<RawH2> {
    return new Promise((resolve, reject) => {
      const socket = tls.connect({ host: at.host, port, servername: at.servername, ca: readFileSync(ca), ALPNProtocols: ['h2'] }, () => {
        if (preface) socket.write(Buffer.concat([PREFACE, frame(FRAME.SETTINGS, 0, 0)]));
        resolve(new RawH2(socket, preface));
      });
      socket.once('error', reject);
    });
  }

  write(bytes: Buffer): void {
    if (!this.closed) this.socket.write(bytes);
  }

  /** Opens stream `id` with a POST /mutate header block; the body follows with data(). */
  post(id: number, endStream = false): void {
    const block = headerBlock([
      [':method', 'POST'],
      [':scheme', 'https'],
      [':authority', 'localhost'],
      [':path', '/mutate'],
      ['content-type', 'application/json'],
    ]);
    this.write(frame(FRAME.HEADERS, FLAG.END_HEADERS | (endStream ? FLAG.END_STREAM : 0), id, block));
  }

  /** The status of stream `id`'s answer, once its HEADERS came (the HPACK of Node's answers starts with an indexed :status). */
  answered(id: number): boolean {
    return this.frames.some((f) => f.type === FRAME.HEADERS && f.stream === id);
  }

  resets(code?: number): Frame[] {
    return this.frames.filter((f) => f.type === FRAME.RST_STREAM && (code === undefined || f.payload.readUInt32BE(0) === code));
  }

  close(): void {
    this.socket.destroy();
  }
}
