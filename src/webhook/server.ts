/**
 * The webhook's HTTPS server: HTTP/1.1 and HTTP/2 (ALPN; the API server's Go
 * client negotiates h2) on one port, TLS 1.2 or later.
 *
 *   POST /mutate    AdmissionReview v1 (src/webhook/admission.ts)
 *   GET  /healthz   the process answers
 *   GET  /readyz    a valid config is loaded and the process is not draining
 *   GET  /metrics   Prometheus text format 0.0.4 (src/webhook/metrics.ts)
 *
 * The certificate and key, and the config file, are read again when they
 * change (src/webhook/watch.ts); a new pair that does not load, or a new
 * config that is invalid, keeps the one in use and says so (log line and
 * metric). A config invalid at start makes the webhook not ready, but it
 * serves /healthz and /metrics so that the reason can be seen.
 *
 * Request hygiene: /mutate takes POST only (405), application/json only
 * (415), at most BODY_LIMIT bytes (413; the API server's objects are at most
 * ~3 MiB), malformed bodies get 400 with a message. Every answer that is not
 * 2xx is JSON ({"error": ..., "status": ...}), and every refused request is
 * logged once ("request refused", or the admission line of a 400). Slow clients: TLS
 * handshake, request headers and the whole request each have a deadline well
 * inside the API server's webhook timeout, idle connections are closed.
 *
 * drain() (SIGTERM) stops accepting connections, lets requests in flight
 * finish (bounded), then closes every connection.
 */
import { readFileSync } from 'node:fs';
import { createSecureServer, type Http2SecureServer, type Http2ServerRequest, type Http2ServerResponse, type ServerHttp2Session } from 'node:http2';
import { STATUS_CODES, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createSecureContext, type TLSSocket } from 'node:tls';
import { resolveOptions } from '../config/load.js';
import { PreflightError } from '../core/errors.js';
import type { Options } from '../core/options.js';
import { VERSION } from '../core/version.js';
import type { RegistryOptions } from '../registry/index.js';
import { admit, type Admission, type AdmissionDependencies } from './admission.js';
import { ClaimReader } from './claims.js';
import { DEFAULT_CACHE_SETTINGS, ImageStartCache, type LookupFunction } from './image-starts.js';
import { webhookMetrics, type WebhookMetrics } from './metrics.js';
import { watchFiles, type FileWatch } from './watch.js';

/** The API server's objects are at most ~3 MiB (etcd's request limit); its review adds little. */
export const BODY_LIMIT = 3.5 * 1024 * 1024;

export interface WebhookSettings {
  certFile: string;
  keyFile: string;
  /** 0: any free port. */
  port: number;
  /** Empty: every interface. */
  address: string;
  /** The config file (--config, else VRAM_PREFLIGHT_CONFIG). */
  configPath?: string;
  /** Option flags, as the CLI takes them. */
  flags: readonly { flag: string; value: string }[];
  env: Readonly<Record<string, string | undefined>>;
  /** How long one admission waits for registry lookups. */
  registryBudgetMs: number;
  /** How long one admission waits for the Kubernetes API (DRA claims). */
  kubernetesBudgetMs: number;
  /** https://host:port of the Kubernetes API; absent: none (DRA claims cannot be read). */
  kubernetesApi?: string;
  kubernetesCredentialsDir: string;
  /** How long a drain waits for requests in flight. */
  drainTimeoutMs: number;
  /** How often changed files are looked for, besides the directory watch. */
  reloadPollMs: number;
  headersTimeoutMs: number;
  requestTimeoutMs: number;
  idleTimeoutMs: number;
  /** One JSON object per call, written as one line. */
  log: (entry: Record<string, unknown>) => void;
  /** Registry lookups (tests may count them); default: src/registry. */
  lookup?: LookupFunction;
}

export const DEFAULT_SETTINGS = {
  port: 8443,
  address: '',
  registryBudgetMs: DEFAULT_CACHE_SETTINGS.budgetMs,
  kubernetesBudgetMs: 1000,
  drainTimeoutMs: 15_000,
  reloadPollMs: 2000,
  headersTimeoutMs: 3000,
  requestTimeoutMs: 5000,
  idleTimeoutMs: 60_000,
} as const;

export interface Webhook {
  port: number;
  metrics: WebhookMetrics;
  ready(): boolean;
  /** Stop accepting, finish what is in flight (at most drainTimeoutMs), close everything. */
  drain(): Promise<void>;
}

type Request = Http2ServerRequest | IncomingMessage;
type Response = Http2ServerResponse | ServerResponse;

class HttpProblem extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** The registry client's options: per request within the pod's budget; the whole lookup may run on after it, bounded, to fill the cache. */
export function registryOptions(options: Options, env: WebhookSettings['env']): RegistryOptions {
  const requestTimeoutMs = Math.min(5000, Math.round(options.registryTimeoutSeconds * 1000));
  return {
    platform: options.registryPlatform,
    cacheDir: options.cacheDir ?? `${env.TMPDIR || '/tmp'}/vram-preflight-cache`,
    requestTimeoutMs,
    totalTimeoutMs: 3 * requestTimeoutMs,
    insecureRegistries: options.registryInsecure,
    caFile: options.registryCaFile,
    env,
  };
}

/** The body of every answer that is not 2xx. */
function jsonError(status: number, message: string): string {
  return `${JSON.stringify({ error: message, status })}\n`;
}

function readBody(req: Request, deadlineMs: number): Promise<string> {
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

function loadPair(certFile: string, keyFile: string): { cert: Buffer; key: Buffer } {
  const cert = readFileSync(certFile);
  const key = readFileSync(keyFile);
  // Throws for a key that does not match the certificate, or either unreadable as PEM.
  createSecureContext({ cert, key });
  return { cert, key };
}

export async function startWebhook(settings: WebhookSettings): Promise<Webhook> {
  const metrics = webhookMetrics();
  const log = settings.log;

  // ---- config: valid at start (ready), else not ready until a valid file comes
  let options: Options | undefined;
  let configProblem: string | undefined;
  const readFile = (path: string): string => readFileSync(path, 'utf8');
  const configPath = settings.configPath ?? (settings.env.VRAM_PREFLIGHT_CONFIG || undefined);
  const images = new ImageStartCache(DEFAULT_CACHE_SETTINGS.budgetMs === settings.registryBudgetMs ? DEFAULT_CACHE_SETTINGS : { ...DEFAULT_CACHE_SETTINGS, budgetMs: settings.registryBudgetMs }, metrics, settings.lookup);
  const loadConfig = (first: boolean): void => {
    try {
      const loaded = resolveOptions({ configPath, flags: settings.flags }, { env: settings.env, readFile });
      const changed = JSON.stringify(loaded) !== JSON.stringify(options);
      options = loaded;
      configProblem = undefined;
      metrics.configValid.set(1);
      if (!first && !changed) return;
      // Answers read under other registry settings may not hold.
      images.clear();
      metrics.reloads.inc({ what: 'config', result: 'ok' });
      log({ level: 'info', msg: first ? 'config loaded' : 'config reloaded', config: configPath ?? null });
    } catch (error) {
      if (!(error instanceof PreflightError)) throw error;
      configProblem = error.format();
      metrics.reloads.inc({ what: 'config', result: 'error' });
      metrics.configValid.set(options ? 1 : 0);
      log({
        level: 'error',
        msg: options ? 'config invalid; keeping the one in use' : 'config invalid; not ready until it is fixed',
        config: configPath ?? null,
        error: configProblem,
      });
      // The one in use stays; readiness says only whether there is one.
      if (options) configProblem = undefined;
    }
  };
  loadConfig(true);

  // ---- certificate: must load at start; a bad new pair keeps the old
  let pair: { cert: Buffer; key: Buffer };
  try {
    pair = loadPair(settings.certFile, settings.keyFile);
  } catch (error) {
    throw new PreflightError('IO', `cannot load the TLS certificate ${settings.certFile} and key ${settings.keyFile}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`, {
      fix: 'check --tls-cert-file and --tls-key-file: both files must exist, be readable, and hold a PEM certificate and its key',
    });
  }
  metrics.reloads.inc({ what: 'certificate', result: 'ok' });

  const claimReader = settings.kubernetesApi
    ? new ClaimReader({ apiServer: settings.kubernetesApi, credentialsDir: settings.kubernetesCredentialsDir, budgetMs: settings.kubernetesBudgetMs, ttlMs: 60_000, failureTtlMs: 10_000 }, metrics)
    : undefined;

  let draining = false;
  const ready = (): boolean => options !== undefined && !draining;

  const server: Http2SecureServer = createSecureServer({
    allowHTTP1: true,
    cert: pair.cert,
    key: pair.key,
    minVersion: 'TLSv1.2',
    handshakeTimeout: settings.headersTimeoutMs,
  });
  // HTTP/1.1 deadlines (Node's own checks, run every second); HTTP/2 gets the body deadline below and the idle timeout.
  const h1 = server as unknown as { headersTimeout: number; requestTimeout: number; keepAliveTimeout: number; connectionsCheckingInterval: number };
  h1.headersTimeout = settings.headersTimeoutMs;
  h1.requestTimeout = settings.requestTimeoutMs;
  h1.keepAliveTimeout = settings.idleTimeoutMs;
  h1.connectionsCheckingInterval = 1000;
  server.setTimeout(settings.idleTimeoutMs);

  const sockets = new Set<TLSSocket>();
  const sessions = new Set<ServerHttp2Session>();
  /** HTTP/1.1 requests being answered, per connection: a draining server closes a connection once it has none. */
  const busy = new Map<TLSSocket, number>();
  server.on('secureConnection', (socket: TLSSocket) => {
    sockets.add(socket);
    socket.on('close', () => {
      sockets.delete(socket);
      busy.delete(socket);
    });
    // A connection that never finishes its handshake is ended by handshakeTimeout; one that goes quiet, by the idle timeout.
  });
  server.on('session', (session: ServerHttp2Session) => {
    sessions.add(session);
    session.on('close', () => sessions.delete(session));
    if (draining) session.close();
  });
  // HTTP/1.1 requests Node refuses before they reach us (headers too slow, too large, not HTTP): the same JSON answer and log line.
  // Anything else here (a TLS handshake that failed or timed out, a reset) is only closed, as Node would without this listener.
  server.on('clientError', (error: NodeJS.ErrnoException, socket: TLSSocket) => {
    const httpError = error.code === 'ERR_HTTP_REQUEST_TIMEOUT' || error.code?.startsWith('HPE_');
    if (!httpError || !socket.writable || socket.bytesWritten > 0) {
      socket.destroy();
      return;
    }
    const status = error.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 408 : error.code === 'HPE_HEADER_OVERFLOW' ? 431 : 400;
    const message = status === 408 ? `the request did not arrive within ${settings.headersTimeoutMs} ms` : status === 431 ? 'the request headers are too large' : `not an HTTP request (${error.code ?? error.message})`;
    metrics.requests.inc({ route: 'other', code: String(status) });
    log({ level: 'warn', msg: 'request refused', status, error: message });
    const body = jsonError(status, message);
    socket.end(`HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
  });
  server.on('tlsClientError', () => {
    // A client that cannot finish a handshake is the client's problem; nothing to log per connection.
  });

  let inFlight = 0;
  let allDone: (() => void) | undefined;

  const deps = (): AdmissionDependencies => ({
    options: options!,
    lookup: (wanted) => images.answers(wanted, registryOptions(options!, settings.env)),
    readClaims: claimReader ? (namespace, references) => claimReader.read(namespace, references) : undefined,
  });

  const send = (req: Request, res: Response, status: number, type: string, body: string, extra: Record<string, string> = {}): void => {
    metrics.requests.inc({ route: routeOf(req), code: String(status) });
    const headers: Record<string, string | number> = { 'content-type': type, 'content-length': Buffer.byteLength(body), ...extra };
    if (req.httpVersionMajor === 1 && (draining || status === 413 || status === 408)) headers.connection = 'close';
    // The client may have gone (the API server gave up at its timeout): nothing to answer then.
    if (res.writableEnded || (res as { destroyed?: boolean }).destroyed || (req.httpVersionMajor === 2 && (res as Http2ServerResponse).stream.closed)) return;
    try {
      res.writeHead(status, headers);
      res.end(body);
    } catch (error) {
      log({ level: 'warn', msg: 'answer not sent', status, error: (error as Error).message });
    }
  };

  /** A refused request: one JSON answer, one log line. */
  const refuse = (req: Request, res: Response, status: number, message: string, extra: Record<string, string> = {}): void => {
    log({ level: 'warn', msg: 'request refused', status, method: req.method, path: routeOf(req), error: message });
    send(req, res, status, 'application/json', jsonError(status, message), extra);
  };

  const routeOf = (req: Request): string => {
    const path = (req.url ?? '').split('?')[0];
    return path === '/mutate' || path === '/healthz' || path === '/readyz' || path === '/metrics' ? path : 'other';
  };

  const mutate = async (req: Request, res: Response): Promise<void> => {
    const started = process.hrtime.bigint();
    if (req.method !== 'POST') {
      refuse(req, res, 405, `${req.method} is not allowed here: POST an AdmissionReview`, { allow: 'POST' });
      return;
    }
    const type = String(req.headers['content-type'] ?? '');
    if (!/^application\/json\s*(;|$)/i.test(type)) {
      refuse(req, res, 415, `Content-Type is ${JSON.stringify(type).slice(0, 100)}: send application/json`);
      return;
    }
    let text: string;
    try {
      text = await readBody(req, settings.requestTimeoutMs);
    } catch (error) {
      const status = error instanceof HttpProblem ? error.status : 400;
      metrics.admissions.inc({ outcome: 'invalid', dry_run: 'false' });
      refuse(req, res, status, (error as Error).message);
      return;
    }
    // Not ready (no valid config yet): the API server should not be sending; if it does, the pod goes in unchanged.
    const admission = options ? await admit(text, deps()) : notReadyAnswer(text);
    metrics.admissions.inc({ outcome: admission.outcome, dry_run: String(admission.dryRun) });
    metrics.containers.inc({ result: 'wrapped' }, admission.wrapped.length);
    metrics.containers.inc({ result: 'refused' }, admission.refused.length);
    metrics.containers.inc({ result: 'skipped' }, admission.skipped);
    const seconds = Number(process.hrtime.bigint() - started) / 1e9;
    metrics.latency.observe(seconds);
    const { level, ...fields } = admission.log;
    log({ level: level ?? (admission.status === 200 ? 'info' : 'warn'), msg: 'admission', ...fields, ...(admission.status !== 200 ? { status: admission.status } : {}), durationMs: Math.round(seconds * 1e5) / 100 });
    send(req, res, admission.status, 'application/json', admission.body);
  };

  /** Without a valid config there is nothing to decide with: allowed, no patch, a warning. */
  const notReadyAnswer = (text: string): Admission => {
    let uid: unknown;
    try {
      uid = (JSON.parse(text) as { request?: { uid?: unknown } }).request?.uid;
    } catch {
      uid = undefined;
    }
    if (typeof uid !== 'string') return { status: 400, body: jsonError(400, 'not an AdmissionReview with a request.uid'), outcome: 'invalid', dryRun: false, wrapped: [], refused: [], skipped: 0, log: {} };
    const body = JSON.stringify({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', response: { uid, allowed: true, warnings: ['vram-preflight: pod admitted unchanged: the webhook has no valid config (see its log)'] } });
    return { status: 200, body, outcome: 'not-wrapped', dryRun: false, wrapped: [], refused: [], skipped: 0, log: { uid, error: 'no valid config' } };
  };

  const handle = (req: Request, res: Response): void => {
    inFlight++;
    metrics.inFlight.add(1);
    const socket = req.httpVersionMajor === 1 ? (req.socket as TLSSocket) : undefined;
    if (socket) busy.set(socket, (busy.get(socket) ?? 0) + 1);
    let counted = true;
    const done = (): void => {
      if (!counted) return;
      counted = false;
      inFlight--;
      metrics.inFlight.add(-1);
      if (socket) {
        const left = (busy.get(socket) ?? 1) - 1;
        busy.set(socket, left);
        if (draining && left === 0) socket.end();
      }
      if (inFlight === 0) allDone?.();
    };
    res.on('finish', done);
    res.on('close', done);
    const path = (req.url ?? '').split('?')[0];
    const answer = async (): Promise<void> => {
      if (path === '/mutate') return mutate(req, res);
      if (req.method !== 'GET' && req.method !== 'HEAD') return refuse(req, res, 405, `${req.method} is not allowed here`, { allow: 'GET' });
      if (path === '/healthz') return send(req, res, 200, 'text/plain; charset=utf-8', 'ok\n');
      if (path === '/readyz') {
        if (ready()) return send(req, res, 200, 'text/plain; charset=utf-8', 'ok\n');
        // Not a refused request: a probe's answer, asked every few seconds; the reason was logged when it arose.
        return send(req, res, 503, 'application/json', jsonError(503, draining ? 'draining' : `no valid config: ${configProblem ?? 'see the log'}`));
      }
      if (path === '/metrics') return send(req, res, 200, 'text/plain; version=0.0.4; charset=utf-8', metrics.render());
      return refuse(req, res, 404, 'not found: POST /mutate, GET /healthz, /readyz, /metrics');
    };
    answer().catch((error: unknown) => {
      log({ level: 'error', msg: 'internal error', error: error instanceof Error ? (error.stack ?? error.message) : String(error) });
      if (!res.headersSent) send(req, res, 500, 'application/json', jsonError(500, 'internal error (logged)'));
      else if (!res.writableEnded) res.end();
    });
  };
  server.on('request', handle);

  // ---- reloads
  const watches: FileWatch[] = [];
  watches.push(
    watchFiles(
      [settings.certFile, settings.keyFile],
      () => {
        let next: { cert: Buffer; key: Buffer };
        try {
          next = loadPair(settings.certFile, settings.keyFile);
        } catch (error) {
          metrics.reloads.inc({ what: 'certificate', result: 'error' });
          log({ level: 'error', msg: 'new certificate does not load; keeping the one in use', cert: settings.certFile, key: settings.keyFile, error: (error as NodeJS.ErrnoException).code ?? (error as Error).message });
          return;
        }
        if (next.cert.equals(pair.cert) && next.key.equals(pair.key)) return;
        server.setSecureContext({ cert: next.cert, key: next.key, minVersion: 'TLSv1.2' });
        pair = next;
        metrics.reloads.inc({ what: 'certificate', result: 'ok' });
        log({ level: 'info', msg: 'certificate reloaded', cert: settings.certFile });
      },
      settings.reloadPollMs,
    ),
  );
  if (configPath) watches.push(watchFiles([configPath], () => loadConfig(false), settings.reloadPollMs));

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    const onListening = (): void => {
      server.removeListener('error', reject);
      resolve();
    };
    if (settings.address === '') server.listen(settings.port, onListening);
    else server.listen(settings.port, settings.address, onListening);
  });
  const port = (server.address() as AddressInfo).port;
  log({ level: 'info', msg: 'listening', version: VERSION, port, address: settings.address || '*', ready: ready(), kubernetesApi: settings.kubernetesApi ?? null });

  let drained: Promise<void> | undefined;
  const drain = (): Promise<void> =>
    (drained ??= (async () => {
      draining = true;
      log({ level: 'info', msg: 'draining', inFlight });
      for (const w of watches) w.close();
      server.close();
      // HTTP/2: GOAWAY, streams already open finish. HTTP/1.1: idle connections end now, busy ones after their answer.
      for (const session of sessions) session.close();
      for (const socket of sockets) if (socket.alpnProtocol !== 'h2' && (busy.get(socket) ?? 0) === 0) socket.end();
      if (inFlight > 0) {
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, settings.drainTimeoutMs);
          allDone = () => {
            clearTimeout(timer);
            resolve();
          };
        });
      }
      const left = inFlight;
      for (const socket of sockets) socket.destroy();
      claimReader?.close();
      log({ level: left > 0 ? 'warn' : 'info', msg: 'drained', unfinished: left });
    })());

  return { port, metrics, ready, drain };
}
