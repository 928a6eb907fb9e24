/**
 * The Kubernetes API client of every door that reads a cluster (the audit;
 * the webhook's DRA claim reads): one object that holds where the API is and
 * who we are (a Connection, ./kubeconfig.ts) and makes requests over HTTPS
 * with its CA, client certificate, bearer token (`token`, a `tokenFile` read
 * again for each request, or an exec plugin's credential, run again when it
 * expires or the API server answers 401) and impersonation headers.
 *
 * It speaks HTTP/2 where the API server offers it (as client-go does: one
 * connection, a stream per request, so that a request given up costs a
 * stream reset, not a connection and its TLS handshake), else HTTP/1.1 on
 * kept-alive connections.
 *
 * Each call has a deadline for the whole exchange (waiting for a socket,
 * connecting, the answer and its body: never an idle timer that a dripping
 * answer keeps alive) and a limit on what it reads: a GET's body, or a list's
 * largest item, since a LIST is read as it streams in, one item at a time
 * (./list-stream.ts), page by page (`limit`/`continue`, as kubectl's
 * --chunk-size). A caller may end a call early (an AbortSignal).
 *
 * Besides GET and LIST (the audit, the webhook), `verify` asks for a POST of
 * a JSON object (a SelfSubjectAccessReview), a container's log as text (its
 * head, cut at a limit), a watch (events as they come, one at a time, each
 * bounded, until the caller's deadline) and a WebSocket (the exec API,
 * ./websocket.ts and ./pod-exec.ts): each sent as the others are, with the
 * same credentials and TLS, deadline and limits, and its refusal read as the
 * same KubernetesApiError. A WebSocket is HTTP/1.1's (an upgrade), on a
 * connection of its own.
 *
 * An answer that is not 2xx is a KubernetesApiError with the API server's own
 * Status message (a 403 names the verb, resource and identity that RBAC
 * refused) and the HTTP status and reason as values, for the caller to decide
 * on; a deadline that passed is a KubernetesDeadlineError.
 */
import { readFileSync } from 'node:fs';
import type { IncomingMessage } from 'node:http';
import { connect as connectHttp2, constants as http2, type ClientHttp2Session } from 'node:http2';
import { Agent, request as httpsRequest } from 'node:https';
import { connect as connectTls, type TLSSocket } from 'node:tls';
import { asObject, type Plain, PreflightError } from '../core/index.js';
import { runExecPlugin, type ExecCredential } from './exec.js';
import type { Connection } from './kubeconfig.js';
import { describeBytes, ListScanner, ListStreamError } from './list-stream.js';
import { WatchScanner, WatchStreamError, type WatchEvent } from './watch-stream.js';
import { openWebSocket, WebSocketError, type WebSocket } from './websocket.js';

/** An answer of the API server that is not 2xx, or not the JSON object asked for. */
export class KubernetesApiError extends PreflightError {
  constructor(
    readonly status: number,
    /** The Status object's reason (Forbidden, NotFound, Expired, …), when it has one. */
    readonly reason: string | undefined,
    readonly path: string,
    message: string,
  ) {
    super('KUBERNETES_API', message);
    this.name = 'KubernetesApiError';
  }
}

/** A call that did not finish by its deadline (the request's own, or the caller's). */
export class KubernetesDeadlineError extends PreflightError {
  constructor(
    readonly path: string,
    /** What set the deadline that passed: this request's timeout, or the caller's deadline for everything. */
    readonly which: 'request' | 'caller',
    message: string,
  ) {
    super('KUBERNETES_API', message);
    this.name = 'KubernetesDeadlineError';
  }
}

export interface ClientSettings {
  /** The exec plugin's environment (and HTTPS_PROXY, which is named when a connection fails). */
  env: Readonly<Record<string, string | undefined>>;
  /** One request's deadline unless a call gives an earlier one: the whole exchange. */
  requestTimeoutMs: number;
  /** Largest body a GET reads, and a list's largest item, unless a call gives its own. */
  maxBodyBytes: number;
  /** Epoch ms after which no request runs and none goes on (the caller's deadline for everything); absent: none. */
  deadline?: number;
  /** Sockets open to the API server at once. */
  maxSockets: number;
  userAgent: string;
}

export interface CallOptions {
  /** Epoch ms; the earlier of this and the request timeout holds. */
  deadline?: number;
  /** Largest body (a GET) or item (a list), in bytes. */
  maxBytes?: number;
  /** Ends the call early, with the signal's reason. */
  signal?: AbortSignal;
  /** Called once the request is on its way over an open connection (its time connecting is over). */
  onSent?: () => void;
}

/** A WebSocket to open: the subprotocols offered (most wanted first) and the largest message taken. */
export interface UpgradeOptions extends Pick<CallOptions, 'deadline'> {
  protocols: readonly string[];
  maxMessageBytes: number;
}

/** Why a connection failed, in words, for the Node error codes an operator meets. */
const CONNECT_WHY: Record<string, string> = {
  ECONNREFUSED: 'nothing listens there',
  ENOTFOUND: 'the host name does not resolve',
  EAI_AGAIN: 'the host name does not resolve (DNS unavailable)',
  ETIMEDOUT: 'the connection timed out',
  EHOSTUNREACH: 'the host is unreachable',
  ECONNRESET: 'the connection was reset',
  DEPTH_ZERO_SELF_SIGNED_CERT: "the server's certificate is self-signed and not trusted: give the cluster's CA (certificate-authority-data)",
  SELF_SIGNED_CERT_IN_CHAIN: "the server's certificate chain ends in a CA that is not trusted: give the cluster's CA (certificate-authority-data)",
  UNABLE_TO_VERIFY_LEAF_SIGNATURE: "the server's certificate is not signed by a trusted CA: give the cluster's CA (certificate-authority-data)",
  UNABLE_TO_GET_ISSUER_CERT_LOCALLY: "the server's certificate is not signed by a trusted CA: give the cluster's CA (certificate-authority-data)",
  ERR_TLS_CERT_ALTNAME_INVALID: "the server's certificate is not for this host name (tls-server-name names another)",
  CERT_HAS_EXPIRED: "the server's certificate has expired",
};

/** HTTP/2 flow control windows: a stream's and the connection's (Go's client: 4 MiB and 1 GiB). */
const STREAM_WINDOW = 4 << 20;
const SESSION_WINDOW = 32 << 20;

/** An error answer's body is read up to this much (a Status object is small). */
const ERROR_BODY_LIMIT = 64 << 10;

const seconds = (ms: number): string => (ms % 1000 === 0 ? `${ms / 1000} s` : `${ms} ms`);

/** The error an answer that is not 2xx stands for: the API server's Status message, its reason and the HTTP status. */
function statusError(status: number, text: string, path: string): KubernetesApiError {
  let body: Plain | undefined;
  try {
    body = asObject(JSON.parse(text));
  } catch {
    body = undefined;
  }
  const message = typeof body?.message === 'string' ? body.message.slice(0, 1000) : text.trim().slice(0, 200);
  const reason = typeof body?.reason === 'string' ? body.reason : undefined;
  return new KubernetesApiError(status, reason, path, `HTTP ${status}${reason ? ` ${reason}` : ''}: ${message || 'no message'}`);
}

/** A request under way: its answer's status and body, and the timer that ends it at its deadline (paused while the caller holds an item). */
interface Exchange {
  status: number;
  /** The answer's body, as it arrives. */
  body: AsyncIterable<Buffer>;
  /** Stops the deadline's clock (the caller works on what it was handed), and starts it again. */
  pause(): void;
  resume(): void;
  /** From now on the exchange ends at `at` (a watch, once answered, runs until the caller's deadline). */
  until(at: number, which: 'request' | 'caller'): void;
  /** The exchange is over: no timer, no listener left. */
  done(): void;
}

/** TLS material of the connections: the CA, and the client certificate and key (an exec plugin may hand out a new pair). */
interface Tls {
  ca?: string;
  cert?: string;
  key?: string;
}

/** One request: its method and path (with its query), and the JSON body of a POST. */
interface Request {
  method: 'GET' | 'POST';
  path: string;
  body?: Buffer;
}

/** "GET /api/v1/…", without the query, for messages. */
const describeRequest = (request: Pick<Request, 'method' | 'path'>): string => `${request.method} ${request.path.split('?')[0]}`;

export class KubernetesClient {
  /** HTTP/1.1 connections, when the API server speaks no HTTP/2. */
  private agent: Agent | undefined;
  /** The HTTP/2 connection; one at a time, made again when it closes. */
  private session: Promise<ClientHttp2Session | 'http/1.1'> | undefined;
  /** Its socket while it connects (closed with the client, so that no connection outlives it). */
  private connecting: TLSSocket | undefined;
  /** The TLS material the connections above were made with. */
  private tlsKey = '';
  /** Whether the API server spoke HTTP/2 (known after the first connection). */
  private protocol: 'h2' | 'http/1.1' | undefined;
  private credential: ExecCredential | undefined;

  constructor(
    readonly connection: Connection,
    private readonly settings: ClientSettings,
  ) {}

  /** GET of one object (or a small List), read whole within `call.maxBytes`. */
  get(path: string, call: CallOptions = {}): Promise<Plain> {
    return this.object({ method: 'GET', path }, call);
  }

  /** POST of a JSON object (a SelfSubjectAccessReview); the answer's object, read whole within `call.maxBytes`. */
  post(path: string, body: Plain, call: CallOptions = {}): Promise<Plain> {
    return this.object({ method: 'POST', path, body: Buffer.from(JSON.stringify(body)) }, call);
  }

  /**
   * GET of text (a container's log): its first `call.maxBytes` bytes, and
   * whether there was more (then the rest is not read: ask the API server
   * for no more, with the log's limitBytes, where it takes it).
   */
  async text(path: string, call: CallOptions = {}): Promise<{ text: string; cut: boolean }> {
    const limit = call.maxBytes ?? this.settings.maxBodyBytes;
    const exchange = await this.open({ method: 'GET', path }, call, false);
    try {
      const chunks: Buffer[] = [];
      let size = 0;
      for await (const chunk of exchange.body) {
        chunks.push(chunk);
        size += chunk.length;
        if (size > limit) break;
      }
      const body = Buffer.concat(chunks, size);
      return { text: body.subarray(0, limit).toString('utf8'), cut: size > limit };
    } finally {
      exchange.done();
    }
  }

  /**
   * A watch (`path` with watch=1): its events as they come, one at a time,
   * each within `call.maxBytes`. The request's timeout holds until the API
   * server answers; then the stream runs until it ends it (its
   * timeoutSeconds) or `call.deadline` passes, when it ends too, without an
   * error: the caller knows its own deadline.
   */
  async *watch(path: string, call: CallOptions & { deadline: number }): AsyncGenerator<WatchEvent> {
    const request: Request = { method: 'GET', path };
    let exchange: Exchange;
    try {
      exchange = await this.open(request, call, false);
    } catch (error) {
      if (error instanceof KubernetesDeadlineError && error.which === 'caller') return;
      throw error;
    }
    const caller = Math.min(call.deadline, this.settings.deadline ?? Infinity);
    exchange.until(caller, 'caller');
    const scanner = new WatchScanner(call.maxBytes ?? this.settings.maxBodyBytes);
    try {
      for await (const chunk of exchange.body) for (const event of scanner.push(chunk)) yield event;
    } catch (error) {
      if (error instanceof KubernetesDeadlineError && error.which === 'caller') return;
      if (error instanceof WatchStreamError) throw new KubernetesApiError(exchange.status, undefined, path, `the answer to the watch ${describeRequest(request)}: ${error.message}`);
      throw error;
    } finally {
      exchange.done();
    }
  }

  /**
   * A WebSocket to the API server (the exec API), with this client's
   * credentials and TLS, on an HTTP/1.1 connection of its own: resolves once
   * the handshake is done. A refused handshake is the API's error (its Status
   * message), as a refused GET is; the request's deadline holds until the
   * handshake is done, the caller's for the connection after it.
   */
  async upgrade(path: string, options: UpgradeOptions, retried = false): Promise<WebSocket> {
    const request: Request = { method: 'GET', path };
    const deadline = this.deadlineOf(options);
    if (deadline.at <= Date.now()) throw this.deadlineError(request, deadline.which);
    const { tls, headers } = await this.identity(retried);
    try {
      return await openWebSocket({
        url: new URL(`${this.connection.server}${path}`),
        protocols: options.protocols,
        headers,
        tls: { ...tls, rejectUnauthorized: !this.connection.insecureSkipTlsVerify, servername: this.connection.tlsServerName },
        deadline: deadline.at,
        maxMessageBytes: options.maxMessageBytes,
        maxErrorBytes: ERROR_BODY_LIMIT,
      });
    } catch (error) {
      if (!(error instanceof WebSocketError)) throw this.connectError(error as NodeJS.ErrnoException);
      if (error.timedOut) throw this.deadlineError(request, deadline.which);
      if (error.status === undefined) throw error;
      const refused = statusError(error.status, error.body ?? '', path);
      // An exec credential the API server no longer takes: run the plugin again, once.
      if (!retried && this.connection.exec && refused.status === 401) return this.upgrade(path, options, true);
      throw refused;
    }
  }

  /** A JSON object as the answer, read whole within `call.maxBytes`. */
  private async object(request: Request, call: CallOptions): Promise<Plain> {
    const limit = call.maxBytes ?? this.settings.maxBodyBytes;
    const { path } = request;
    const exchange = await this.open(request, call, false);
    try {
      const chunks: Buffer[] = [];
      let size = 0;
      for await (const chunk of exchange.body) {
        size += chunk.length;
        if (size > limit) throw new KubernetesApiError(exchange.status, undefined, path, `the answer to ${request.method} ${path} is larger than ${describeBytes(limit)}`);
        chunks.push(chunk);
      }
      let body: Plain | undefined;
      try {
        body = asObject(JSON.parse(Buffer.concat(chunks, size).toString('utf8')));
      } catch {
        body = undefined;
      }
      if (!body) throw new KubernetesApiError(exchange.status, undefined, path, `the answer to ${request.method} ${path} is not a JSON object`);
      return body;
    } catch (error) {
      throw this.failure(error, exchange, path);
    } finally {
      exchange.done();
    }
  }

  /**
   * A collection's items, one at a time, `limit` per request, page by page,
   * each page read as it streams in (the caller holds one item at a time; the
   * request's deadline does not count the time the caller spends on it). A
   * continue token that expired while the pages were read (410 Expired: the
   * list changed beyond what etcd keeps) is followed by one full list, as
   * client-go's pager does: items of the pages before come again in it (tell
   * them apart by metadata.uid).
   */
  async *items(path: string, limit: number, call: CallOptions = {}): AsyncGenerator<Plain> {
    let next: string | undefined;
    for (;;) {
      const query = new URLSearchParams({ limit: String(limit), ...(next !== undefined && { continue: next }) });
      let exchange: Exchange;
      try {
        exchange = await this.open({ method: 'GET', path: `${path}${path.includes('?') ? '&' : '?'}${query}` }, call, false);
      } catch (error) {
        if (next !== undefined && error instanceof KubernetesApiError && error.status === 410) {
          yield* this.wholeList(path, call);
          return;
        }
        throw error;
      }
      const rest = yield* this.stream(exchange, path, call);
      const token = asObject(rest.metadata)?.continue;
      if (typeof token !== 'string' || token === '') return;
      next = token;
    }
  }

  /** Every item of a collection (for small ones: webhook configurations, namespaces). */
  async list(path: string, limit: number, call: CallOptions = {}): Promise<Plain[]> {
    const items: Plain[] = [];
    const seen = new Set<string>();
    for await (const item of this.items(path, limit, call)) {
      const uid = asObject(item.metadata)?.uid;
      if (typeof uid === 'string' && seen.has(uid)) continue;
      if (typeof uid === 'string') seen.add(uid);
      items.push(item);
    }
    return items;
  }

  private async *wholeList(path: string, call: CallOptions): AsyncGenerator<Plain> {
    yield* this.stream(await this.open({ method: 'GET', path }, call, false), path, call);
  }

  /** The items of one answer as they arrive; returns its other members (metadata). */
  private async *stream(exchange: Exchange, path: string, call: CallOptions): AsyncGenerator<Plain, Record<string, unknown>> {
    const scanner = new ListScanner(call.maxBytes ?? this.settings.maxBodyBytes);
    try {
      for await (const chunk of exchange.body) {
        for (const item of scanner.push(chunk)) {
          exchange.pause();
          yield asObject(item) ?? {};
          exchange.resume();
        }
      }
      return scanner.end();
    } catch (error) {
      throw this.failure(error, exchange, path);
    } finally {
      exchange.done();
    }
  }

  /** An error while a body was read, as the client's own: the deadline's, a malformed answer, or the reason the caller ended it. */
  private failure(error: unknown, exchange: Exchange, path: string): unknown {
    if (error instanceof ListStreamError) return new KubernetesApiError(exchange.status, undefined, path, `the answer to LIST ${path.split('?')[0]}: ${error.message}`);
    return error;
  }

  private async credentialNow(refresh: boolean): Promise<ExecCredential | undefined> {
    const exec = this.connection.exec;
    if (!exec) return undefined;
    if (refresh || !this.credential || (this.credential.expires !== undefined && this.credential.expires <= Date.now() + 10_000)) {
      const left = (this.settings.deadline ?? Infinity) - Date.now();
      this.credential = await runExecPlugin(exec, this.settings.env, left);
    }
    return this.credential;
  }

  /** The CA to trust now: a CA file (the service account's ca.crt, which the kubelet updates) is read again for each request. */
  private caNow(): string | undefined {
    const c = this.connection;
    if (c.caFile === undefined) return c.ca;
    try {
      return readFileSync(c.caFile, 'utf8');
    } catch (error) {
      throw new PreflightError('KUBECONFIG', `cannot read the CA file ${c.caFile}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`, { fix: `check the CA of ${c.origin}` });
    }
  }

  /** The connections for this TLS material; new ones when it changes (a rotated CA, an exec plugin's new pair). */
  private useTls(tls: Tls): void {
    const key = `${tls.ca ?? ''}\n${tls.cert ?? ''}\n${tls.key ?? ''}`;
    if (key === this.tlsKey) return;
    this.closeConnections();
    this.tlsKey = key;
  }

  private agentFor(tls: Tls): Agent {
    const c = this.connection;
    this.agent ??= new Agent({ keepAlive: true, maxSockets: this.settings.maxSockets, ca: tls.ca, cert: tls.cert, key: tls.key, rejectUnauthorized: !c.insecureSkipTlsVerify, servername: c.tlsServerName });
    return this.agent;
  }

  /**
   * The HTTP/2 connection, made on first use: TLS with ALPN offering h2 and
   * HTTP/1.1; an API server that picks HTTP/1.1 (or a proxy in front of it)
   * is spoken to over HTTP/1.1 from then on. Rejects with the reason the
   * connection failed.
   */
  private sessionFor(tls: Tls, url: URL): Promise<ClientHttp2Session | 'http/1.1'> {
    if (this.session) return this.session;
    const c = this.connection;
    const session = new Promise<ClientHttp2Session | 'http/1.1'>((resolve, reject) => {
      const socket: TLSSocket = connectTls({
        host: url.hostname.replace(/^\[|\]$/g, ''),
        port: Number(url.port || 443),
        ca: tls.ca,
        cert: tls.cert,
        key: tls.key,
        rejectUnauthorized: !c.insecureSkipTlsVerify,
        servername: c.tlsServerName ?? (/^[\d.]+$|:/.test(url.hostname) ? undefined : url.hostname),
        ALPNProtocols: ['h2', 'http/1.1'],
      });
      this.connecting = socket;
      socket.once('error', (error) => {
        if (this.connecting === socket) this.connecting = undefined;
        if (this.session === session) this.session = undefined;
        reject(error);
      });
      socket.once('close', () => {
        if (this.connecting === socket) this.connecting = undefined;
        if (this.session === session) this.session = undefined;
        reject(new Error('the connection closed before it was made'));
      });
      socket.once('secureConnect', () => {
        this.connecting = undefined;
        if (socket.alpnProtocol !== 'h2') {
          this.protocol = 'http/1.1';
          socket.destroy();
          resolve('http/1.1');
          return;
        }
        this.protocol = 'h2';
        // Windows as Go's HTTP/2 client opens them (4 MiB a stream): a page of a list comes without waiting for WINDOW_UPDATEs; the reader's pace still holds it back beyond that.
        const h2 = connectHttp2(url.origin, { createConnection: () => socket, settings: { initialWindowSize: STREAM_WINDOW } });
        h2.setLocalWindowSize(SESSION_WINDOW);
        // Gone (closed, GOAWAY, an error): the next request connects again.
        const forget = (): void => {
          if (this.session === session) this.session = undefined;
        };
        h2.on('close', forget);
        h2.on('goaway', forget);
        h2.on('error', forget);
        h2.unref();
        resolve(h2);
      });
    });
    this.session = session;
    return session;
  }

  private bearer(credential: ExecCredential | undefined): string | undefined {
    if (credential?.token !== undefined) return credential.token;
    const c = this.connection;
    if (c.tokenFile !== undefined) {
      try {
        return readFileSync(c.tokenFile, 'utf8').trim();
      } catch (error) {
        throw new PreflightError('KUBECONFIG', `cannot read the token file ${c.tokenFile}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`, { fix: `check the tokenFile of ${c.origin}` });
      }
    }
    return c.token;
  }

  /** The deadline of one request: its own timeout, the caller's, the client's for everything, whichever comes first. */
  private deadlineOf(call: CallOptions): { at: number; which: 'request' | 'caller' } {
    const own = Date.now() + this.settings.requestTimeoutMs;
    const caller = Math.min(call.deadline ?? Infinity, this.settings.deadline ?? Infinity);
    return caller < own ? { at: caller, which: 'caller' } : { at: own, which: 'request' };
  }

  /** Who we are, for one request: the TLS material and the headers (user agent, bearer token, impersonation). */
  private async identity(retried: boolean): Promise<{ tls: Tls; headers: Record<string, string | string[]> }> {
    const c = this.connection;
    const credential = await this.credentialNow(retried);
    const tls: Tls = { ca: this.caNow(), cert: credential?.clientCertificate ?? c.clientCertificate, key: credential?.clientKey ?? c.clientKey };
    const headers: Record<string, string | string[]> = { 'user-agent': this.settings.userAgent };
    const token = this.bearer(credential);
    if (token) headers.authorization = `Bearer ${token}`;
    if (c.impersonate?.user) headers['impersonate-user'] = c.impersonate.user;
    if (c.impersonate?.uid) headers['impersonate-uid'] = c.impersonate.uid;
    if (c.impersonate?.groups.length) headers['impersonate-group'] = c.impersonate.groups;
    return { tls, headers };
  }

  /** Sends a request and resolves with a 2xx answer's headers (its body unread), or rejects with the API's error. */
  private async open(request: Request, call: CallOptions, retried: boolean): Promise<Exchange> {
    const c = this.connection;
    const deadline = this.deadlineOf(call);
    if (deadline.at <= Date.now()) throw this.deadlineError(request, deadline.which);
    call.signal?.throwIfAborted();
    const { tls, headers } = await this.identity(retried);
    this.useTls(tls);
    headers.accept = 'application/json';
    if (request.body) {
      headers['content-type'] = 'application/json';
      headers['content-length'] = String(request.body.length);
    }
    const exchange = await this.send(new URL(`${c.server}${request.path}`), tls, headers, request, deadline, call);
    const status = exchange.status;
    if (status >= 200 && status < 300) return exchange;
    const error = await this.errorOf(exchange, request.path);
    // An exec credential the API server no longer takes: run the plugin again, once (client-go does the same).
    if (!retried && c.exec && error instanceof KubernetesApiError && error.status === 401) return this.open(request, call, true);
    throw error;
  }

  /** The error an answer that is not 2xx stands for: the API server's Status message, its reason and the HTTP status. */
  private async errorOf(exchange: Exchange, path: string): Promise<unknown> {
    const status = exchange.status;
    const chunks: Buffer[] = [];
    let size = 0;
    try {
      for await (const chunk of exchange.body) {
        chunks.push(chunk);
        size += chunk.length;
        if (size >= ERROR_BODY_LIMIT) break;
      }
    } catch (error) {
      return error;
    } finally {
      exchange.done();
    }
    return statusError(status, Buffer.concat(chunks).subarray(0, ERROR_BODY_LIMIT).toString('utf8'), path);
  }

  private deadlineError(request: Pick<Request, 'method' | 'path'>, which: 'request' | 'caller'): KubernetesDeadlineError {
    const what = describeRequest(request);
    return new KubernetesDeadlineError(request.path, which, which === 'request' ? `no whole answer to ${what} within ${seconds(this.settings.requestTimeoutMs)}` : `no whole answer to ${what} before the deadline`);
  }

  /**
   * One exchange, over HTTP/2 where the API server speaks it; the timer is
   * the whole exchange's (a socket's `timeout` would be an idle timer, which
   * an answer dripped byte by byte never trips).
   */
  private send(url: URL, tls: Tls, headers: Record<string, string | string[]>, request: Request, deadline: { at: number; which: 'request' | 'caller' }, call: CallOptions): Promise<Exchange> {
    const { signal, onSent } = call;
    let which = deadline.which;
    return new Promise((resolve, reject) => {
      let ended: Error | undefined;
      let cancel: ((error: Error) => void) | undefined;
      let timer: NodeJS.Timeout | undefined;
      let left = deadline.at - Date.now();
      let since = Date.now();
      // Ends the exchange wherever it is (connecting, waiting, reading), with the error its reader sees.
      const end = (error: Error): void => {
        ended ??= error;
        if (cancel) cancel(error);
        else fail(error);
      };
      const arm = (): void => {
        since = Date.now();
        timer = setTimeout(() => end(this.deadlineError(request, which)), Math.max(0, left));
      };
      const onAbort = (): void => end(signal!.reason instanceof Error ? signal!.reason : new Error(String(signal!.reason)));
      let settled = false;
      let finish: () => void = () => {};
      const done = (): void => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        finish();
      };
      const fail = (error: unknown): void => {
        done();
        if (settled) return;
        settled = true;
        if (error instanceof PreflightError || signal?.aborted || ended) return reject(ended ?? error);
        reject(this.connectError(error as NodeJS.ErrnoException));
      };
      const answered = (status: number, body: AsyncIterable<Buffer>): void => {
        settled = true;
        resolve({
          status,
          body,
          pause: () => {
            clearTimeout(timer);
            left -= Date.now() - since;
          },
          resume: arm,
          until: (at, whose) => {
            clearTimeout(timer);
            left = at - Date.now();
            which = whose;
            arm();
          },
          done,
        });
      };
      arm();
      signal?.addEventListener('abort', onAbort, { once: true });

      const overHttp1 = (): void => {
        const req = httpsRequest(url, { method: request.method, agent: this.agentFor(tls), headers });
        let response: IncomingMessage | undefined;
        cancel = (error) => {
          response?.destroy(error);
          req.destroy(error);
        };
        // A body left unread (over its limit, or its reader stopped) is not read on.
        finish = () => {
          if (response && !response.complete) response.destroy();
        };
        req.on('socket', (socket) => {
          if (!onSent) return;
          if ((socket as TLSSocket).connecting || !(socket as TLSSocket).encrypted) socket.once('secureConnect', onSent);
          else onSent();
        });
        req.on('response', (res) => {
          response = res;
          answered(res.statusCode ?? 0, res);
        });
        req.on('error', fail);
        req.end(request.body);
      };

      if (this.protocol === 'http/1.1') return overHttp1();
      this.sessionFor(tls, url).then(
        (session) => {
          if (ended) return fail(ended);
          if (session === 'http/1.1') return overHttp1();
          const stream = session.request({ ':method': request.method, ':path': `${url.pathname}${url.search}`, ...headers }, { endStream: request.body === undefined });
          if (request.body) stream.end(request.body);
          cancel = (error) => stream.destroy(error);
          finish = () => {
            if (!stream.destroyed && !stream.readableEnded) stream.close(http2.NGHTTP2_CANCEL);
          };
          onSent?.();
          stream.on('response', (answer) => answered(Number(answer[':status'] ?? 0), stream));
          stream.on('error', fail);
        },
        fail,
      );
    });
  }

  private connectError(error: NodeJS.ErrnoException): PreflightError {
    const why = error.code ? CONNECT_WHY[error.code] : undefined;
    // kubectl would go through a proxy named in the environment; this client connects directly.
    const env = this.settings.env;
    const proxy = env.HTTPS_PROXY || env.https_proxy ? '; HTTPS_PROXY is set, and vram-preflight connects to the Kubernetes API directly, without a proxy' : '';
    return new PreflightError('KUBERNETES_API', `cannot reach the Kubernetes API at ${this.connection.server} (${this.connection.origin}): ${error.code ?? ''}${error.code ? ' ' : ''}${why ?? error.message}${proxy}`, {
      fix: 'check that the cluster is reachable from here with the same kubeconfig (kubectl get --raw /version)',
    });
  }

  private closeConnections(): void {
    this.agent?.destroy();
    this.agent = undefined;
    this.connecting?.destroy();
    this.connecting = undefined;
    const session = this.session;
    this.session = undefined;
    void session?.then((h2) => h2 !== 'http/1.1' && h2.close(), () => undefined);
  }

  close(): void {
    this.closeConnections();
  }
}
