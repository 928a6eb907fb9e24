/**
 * The one reader of request bodies: at most a limit of bytes, within a
 * deadline. What goes wrong is an HttpProblem carrying the status to answer.
 */
import type { Http2ServerRequest } from 'node:http2';
import type { IncomingMessage } from 'node:http';

/** The API server's objects are at most ~3 MiB (etcd's request limit); its review adds little. */
export const BODY_LIMIT = 3.5 * 1024 * 1024;

export type Request = Http2ServerRequest | IncomingMessage;

/** A request the server refuses, with the status that says why. */
export class HttpProblem extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

export function readBody(req: Request, deadlineMs: number): Promise<string> {
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > BODY_LIMIT) return Promise.reject(new HttpProblem(413, `the body is ${declared} bytes; at most ${BODY_LIMIT} are read`));
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
      } else resolve(Buffer.concat(chunks).toString('utf8'));
    };
    const timer = setTimeout(() => finish(new HttpProblem(408, `the body did not arrive within ${deadlineMs} ms`)), deadlineMs);
    const onData = (chunk: Buffer): void => {
      size += chunk.length;
      if (size > BODY_LIMIT) finish(new HttpProblem(413, `the body is larger than ${BODY_LIMIT} bytes`));
      else chunks.push(chunk);
    };
    req.on('data', onData);
    req.on('end', () => finish());
    req.on('error', (error: Error) => finish(error));
    req.on('aborted', () => finish(new Error('the client went away')));
  });
}
