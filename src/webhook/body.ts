/**
 * The one reader of request bodies: at most BODY_LIMIT bytes, within a
 * deadline, and only once its bytes fit in the process-wide budget of bytes
 * in flight (ByteBudget). A request that does not fit yet is not read: it
 * waits under TCP's or HTTP/2's flow control (the client cannot send more
 * than a window), and the budget is handed out in arrival order. The bytes
 * stay counted until the answer is sent, because the parsed object lives
 * that long. What goes wrong is an HttpProblem carrying the status to answer.
 */
import { isUtf8 } from 'node:buffer';
import type { Http2ServerRequest } from 'node:http2';
import type { IncomingMessage } from 'node:http';

/** The API server's objects are at most ~3 MiB (etcd's request limit); its review adds little. */
export const BODY_LIMIT = 3.5 * 1024 * 1024;

/**
 * Bodies up to this size are "small": the API server's pods are a few KB to
 * a few tens of KB. Large bodies may use only part of the budget, so that
 * large ones (hostile or not) never make a small one wait.
 */
export const SMALL_BODY = 256 * 1024;
/**
 * What a body that declares no length (chunked HTTP/1.1, an HTTP/2 client
 * that sends no content-length; the API server's Go client always sends one)
 * takes at first; one that grows past it takes a largest body's share.
 */
export const UNDECLARED_FIRST = 64 * 1024;
/** The share of the budget large bodies may use together (a parsed body takes up to ~20 times its bytes while it is decided). */
const LARGE_SHARE = 0.5;

export type Request = Http2ServerRequest | IncomingMessage;

/** A request the server refuses, with the status that says why, and the limit that bit (metrics), if one did. */
export class HttpProblem extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly limit?: 'body-budget' | 'body-queue-full',
  ) {
    super(message);
  }
}

interface Waiter {
  bytes: number;
  ceiling: number;
  grant: () => void;
}

/** Bodies waiting for their share, at most (each holds up to a flow-control window of bytes while it waits); a large one past this is refused at once. */
export const MAX_WAITING = 64;

/** Bytes of request bodies being read or answered, at most `capacity` at once, handed out first come first served within each size class. */
export class ByteBudget {
  private used = 0;
  private readonly waiters: Waiter[] = [];

  constructor(readonly capacity: number) {}

  /** Bytes counted now (tests, metrics). */
  get inUse(): number {
    return this.used;
  }

  /** Requests waiting for their share. */
  get waiting(): number {
    return this.waiters.length;
  }

  /**
   * Takes `bytes` once they fit (at once when they do); resolves with the
   * function that gives them back, or rejects with 503 at `deadline` (epoch
   * ms). The budget never blocks a request that is alone: one body of at
   * most BODY_LIMIT always fits a budget of at least that.
   */
  take(bytes: number, deadline: number): Promise<() => void> {
    if (bytes > SMALL_BODY && this.waiters.length >= MAX_WAITING) return Promise.reject(new HttpProblem(503, 'too many request bodies are waiting to be read', 'body-queue-full'));
    const ceiling = bytes <= SMALL_BODY ? this.capacity : Math.max(BODY_LIMIT, this.capacity * LARGE_SHARE);
    let given = false;
    const release = (): void => {
      if (given) return;
      given = true;
      this.used -= bytes;
      this.grantWaiting();
    };
    if (this.waiters.every((w) => w.ceiling !== ceiling) && this.used + bytes <= ceiling) {
      this.used += bytes;
      return Promise.resolve(release);
    }
    return new Promise((resolve, reject) => {
      const waiter: Waiter = {
        bytes,
        ceiling,
        grant: () => {
          clearTimeout(timer);
          resolve(release);
        },
      };
      const timer = setTimeout(() => {
        this.waiters.splice(this.waiters.indexOf(waiter), 1);
        reject(new HttpProblem(503, `the server is reading other request bodies (${this.capacity} bytes in flight at most), and this one's turn did not come in time`, 'body-budget'));
        this.grantWaiting();
      }, Math.max(0, deadline - Date.now()));
      this.waiters.push(waiter);
    });
  }

  /** Grants waiters in order; one that does not fit yet holds back only those of its own class behind it. */
  private grantWaiting(): void {
    const blocked = new Set<number>();
    for (let i = 0; i < this.waiters.length; ) {
      const waiter = this.waiters[i]!;
      if (!blocked.has(waiter.ceiling) && this.used + waiter.bytes <= waiter.ceiling) {
        this.used += waiter.bytes;
        this.waiters.splice(i, 1);
        waiter.grant();
      } else {
        blocked.add(waiter.ceiling);
        i++;
      }
    }
  }
}

/** The Content-Length a request declares, or undefined (chunked HTTP/1.1, an HTTP/2 stream without one). */
export function declaredLength(req: Request): number | undefined {
  const text = req.headers['content-length'];
  if (typeof text !== 'string' || !/^\d+$/.test(text)) return undefined;
  return Number(text);
}

/** 413 before a byte is read when the declared length is over the limit (and no `100 Continue` for it). */
export function checkDeclaredLength(req: Request): void {
  const declared = declaredLength(req);
  if (declared !== undefined && declared > BODY_LIMIT) throw new HttpProblem(413, `the body is ${declared} bytes; at most ${BODY_LIMIT} are read`);
}

/** A body's share of the budget: what it holds now, grown once when an undeclared body outgrows its first share. */
export class Reservation {
  private release: () => void = () => {};
  bytes = 0;

  private constructor(private readonly budget: ByteBudget) {}

  /** The share a request needs: its declared length, or a first share for one that declares none. */
  static async take(budget: ByteBudget, req: Request, deadline: number): Promise<Reservation> {
    const reservation = new Reservation(budget);
    await reservation.resize(declaredLength(req) ?? UNDECLARED_FIRST, deadline);
    return reservation;
  }

  /** Gives back what it holds and takes `bytes` (giving back first: two bodies that grow at once never hold each other's share). */
  async resize(bytes: number, deadline: number): Promise<void> {
    this.release();
    this.bytes = 0;
    this.release = await this.budget.take(bytes, deadline);
    this.bytes = bytes;
  }

  done(): void {
    this.release();
    this.bytes = 0;
  }
}

/** The body as text: 400 for bytes that are not UTF-8 (JSON is UTF-8; a lossy decoding would answer for a uid that is not the one sent). */
export function decodeBody(body: Buffer): string {
  if (!isUtf8(body)) throw new HttpProblem(400, 'the body is not UTF-8');
  return body.toString('utf8');
}

/**
 * Reads the body, at most BODY_LIMIT bytes, by `deadline` (epoch ms), within
 * its reservation (grown, with the request paused, when a body without a
 * declared length outgrows it): 413 over the limit, 408 late, 503 when no
 * share came in time.
 */
export function readBody(req: Request, deadline: number, reservation: Reservation): Promise<Buffer> {
  try {
    checkDeclaredLength(req);
  } catch (error) {
    return Promise.reject(error);
  }
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    const finish = (error?: Error): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      req.removeListener('data', onData);
      if (error) {
        // Nothing more of this body is wanted.
        req.pause();
        reject(error);
        return;
      }
      resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size));
    };
    const timer = setTimeout(() => finish(new HttpProblem(408, 'the body did not arrive in time')), Math.max(0, deadline - Date.now()));
    const onData = (chunk: Buffer): void => {
      size += chunk.length;
      if (size > BODY_LIMIT) return finish(new HttpProblem(413, `the body is larger than ${BODY_LIMIT} bytes`));
      chunks.push(chunk);
      if (size > reservation.bytes) {
        req.pause();
        reservation.resize(BODY_LIMIT, deadline).then(
          () => !done && req.resume(),
          (error: Error) => finish(error),
        );
      }
    };
    req.on('data', onData);
    req.on('end', () => finish());
    req.on('error', (error: Error) => finish(error));
    req.on('aborted', () => finish(new Error('the client went away')));
  });
}
