/**
 * Requests of the Kubernetes API that KubernetesClient's GET and LIST do not
 * make: a POST of a JSON object (a SelfSubjectAccessReview), a GET whose
 * answer is text (a container's log), and a watch (a stream of events, one
 * JSON object a line). Each is sent as the client's own are (its TLS and
 * credentials: KubernetesClient.authentication, an exec plugin run again
 * after a 401), and each is bounded: a deadline for the whole exchange and a
 * limit on what it reads (a log's bytes, a watch event's line).
 */
import type { IncomingMessage } from 'node:http';
import { request } from 'node:https';
import { PreflightError } from '../core/errors.js';
import { asObject, type Plain } from '../core/values.js';
import { CONNECT_WHY, KubernetesApiError, type KubernetesClient } from './client.js';

export interface RequestOptions {
  /** Epoch ms by which the whole exchange is over. */
  deadline: number;
  /** Largest answer read (text, JSON); a watch: its largest event. */
  maxBytes: number;
}

export interface WatchEvent {
  type: 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';
  object: Plain;
}

interface Open {
  response: IncomingMessage;
  /** Ends the exchange (no more is read); idempotent. */
  end(): void;
}

/** The error a deadline that passed stands for. */
export class RequestDeadlineError extends PreflightError {
  constructor(what: string) {
    super('KUBERNETES_API', `no answer to ${what} before the deadline`, { fix: 'check that the API server answers (kubectl get --raw /readyz), or give more time' });
    this.name = 'RequestDeadlineError';
  }
}

function connectError(client: KubernetesClient, error: NodeJS.ErrnoException): PreflightError {
  const why = error.code ? CONNECT_WHY[error.code] : undefined;
  const c = client.connection;
  return new PreflightError('KUBERNETES_API', `cannot reach the Kubernetes API at ${c.server} (${c.origin}): ${error.code ?? ''}${error.code ? ' ' : ''}${why ?? error.message}`, {
    fix: 'check that the cluster is reachable from here with the same kubeconfig (kubectl get --raw /version)',
  });
}

/** Sends one request and resolves with its response (a 2xx one, or the API's error read and thrown). */
async function open(client: KubernetesClient, method: 'GET' | 'POST', path: string, body: unknown, options: RequestOptions, refreshed = false): Promise<Open> {
  const what = `${method} ${path.split('?')[0]}`;
  const left = options.deadline - Date.now();
  if (left <= 0) throw new RequestDeadlineError(what);
  const auth = await client.authentication(refreshed);
  const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
  const headers: Record<string, string | string[]> = {
    Accept: 'application/json, */*',
    'User-Agent': 'vram-preflight-verify',
    ...auth.headers,
    ...(payload && { 'Content-Type': 'application/json', 'Content-Length': String(payload.length) }),
  };
  const opened = await new Promise<Open>((resolve, reject) => {
    let settled = false;
    const req = request(new URL(`${client.connection.server}${path}`), { method, headers, ...auth.tls, agent: false });
    let response: IncomingMessage | undefined;
    const timer = setTimeout(() => {
      const error = new RequestDeadlineError(what);
      if (!settled) {
        settled = true;
        reject(error);
      }
      response?.destroy(error);
      req.destroy(error);
    }, left);
    const end = (): void => {
      clearTimeout(timer);
      response?.destroy();
      req.destroy();
    };
    req.on('response', (res) => {
      response = res;
      settled = true;
      resolve({ response: res, end });
    });
    req.on('error', (error: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      if (settled) return;
      settled = true;
      reject(error instanceof PreflightError ? error : connectError(client, error));
    });
    req.end(payload);
  });
  const status = opened.response.statusCode ?? 0;
  if (status >= 200 && status < 300) return opened;
  let text: string;
  try {
    text = (await readAll(opened, 64 << 10, what, true)).toString('utf8');
  } finally {
    opened.end();
  }
  let status_: Plain | undefined;
  try {
    status_ = asObject(JSON.parse(text));
  } catch {
    status_ = undefined;
  }
  const message = typeof status_?.message === 'string' ? status_.message.slice(0, 1000) : text.trim().slice(0, 200);
  const reason = typeof status_?.reason === 'string' ? status_.reason : undefined;
  // An exec credential the API server no longer takes: run the plugin again, once (as client-go does).
  if (status === 401 && !refreshed && client.connection.exec !== undefined) return open(client, method, path, body, options, true);
  throw new KubernetesApiError(status, reason, path, `HTTP ${status}${reason ? ` ${reason}` : ''}: ${message || 'no message'}`);
}

/** The whole body, at most `limit` bytes (`cut`: the first `limit` bytes are enough; otherwise more is an error). */
async function readAll(opened: Open, limit: number, what: string, cut = false): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of opened.response as AsyncIterable<Buffer>) {
    if (size + chunk.length > limit) {
      if (cut) {
        chunks.push(chunk.subarray(0, limit - size));
        size = limit;
        break;
      }
      throw new PreflightError('KUBERNETES_API', `the answer to ${what} is larger than ${limit} bytes`, { fix: 'report it: vram-preflight reads a bounded amount of each answer' });
    }
    chunks.push(chunk);
    size += chunk.length;
  }
  return Buffer.concat(chunks, size);
}

/** GET or POST of a JSON object; the answer's JSON object. */
export async function requestJson(client: KubernetesClient, method: 'GET' | 'POST', path: string, body: unknown, options: RequestOptions): Promise<Plain> {
  const opened = await open(client, method, path, body, options);
  const what = `${method} ${path.split('?')[0]}`;
  try {
    const text = (await readAll(opened, options.maxBytes, what)).toString('utf8');
    let value: Plain | undefined;
    try {
      value = asObject(JSON.parse(text));
    } catch {
      value = undefined;
    }
    if (!value) throw new KubernetesApiError(opened.response.statusCode ?? 0, undefined, path, `the answer to ${what} is not a JSON object`);
    return value;
  } finally {
    opened.end();
  }
}

/**
 * GET of text (a container's log): its first `maxBytes` bytes, and whether
 * there was more (ask the API server for no more than that, with limitBytes,
 * where it takes it).
 */
export async function requestText(client: KubernetesClient, path: string, options: RequestOptions): Promise<{ text: string; cut: boolean }> {
  const opened = await open(client, 'GET', path, undefined, options);
  try {
    const body = await readAll(opened, options.maxBytes + 1, `GET ${path.split('?')[0]}`, true);
    const cut = body.length > options.maxBytes;
    return { text: body.subarray(0, options.maxBytes).toString('utf8'), cut };
  } finally {
    opened.end();
  }
}

/**
 * A watch (`path` with watch=1): its events as they come, until the API
 * server ends the stream (its timeoutSeconds) or the deadline passes (then
 * it ends too, without an error: the caller knows its own deadline). An
 * event longer than `maxBytes` is an error.
 */
export async function* watchObjects(client: KubernetesClient, path: string, options: RequestOptions): AsyncGenerator<WatchEvent> {
  let opened: Open;
  try {
    opened = await open(client, 'GET', path, undefined, options);
  } catch (error) {
    if (error instanceof RequestDeadlineError) return;
    throw error;
  }
  let pending: Buffer = Buffer.alloc(0);
  try {
    for await (const chunk of opened.response as AsyncIterable<Buffer>) {
      pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
      for (let newline = pending.indexOf(10); newline !== -1; newline = pending.indexOf(10)) {
        const line = pending.subarray(0, newline).toString('utf8').trim();
        pending = pending.subarray(newline + 1);
        if (line === '') continue;
        const event = asObject(JSON.parse(line));
        const object = asObject(event?.object);
        if (!event || typeof event.type !== 'string' || !object) throw new PreflightError('KUBERNETES_API', `the watch ${path.split('?')[0]} sent something that is not an event`, { fix: 'check what stands between here and the API server (a proxy that buffers or rewrites streams)' });
        yield { type: event.type as WatchEvent['type'], object };
      }
      if (pending.length > options.maxBytes) throw new PreflightError('KUBERNETES_API', `an event of the watch ${path.split('?')[0]} is larger than ${options.maxBytes} bytes`, { fix: 'report it: vram-preflight reads a bounded amount of each event' });
    }
  } catch (error) {
    if (error instanceof RequestDeadlineError) return;
    if (error instanceof SyntaxError) throw new PreflightError('KUBERNETES_API', `the watch ${path.split('?')[0]} sent a line that is not JSON`, { fix: 'check what stands between here and the API server (a proxy that buffers or rewrites streams)' });
    throw error;
  } finally {
    opened.end();
  }
}
