/**
 * The webhook's HTTPS transport: HTTP/1.1 and HTTP/2 (ALPN; the API server's
 * Go client negotiates h2) on one port, TLS 1.2 or later; the deadlines of
 * slow clients; the books of connections and requests in flight, which a
 * drain reads; and the one way an answer is sent.
 *
 * Slow clients: TLS handshake, request headers and the whole request each
 * have a deadline well inside the API server's webhook timeout, idle
 * connections are closed.
 */
import { createSecureServer, type Http2SecureServer, type Http2ServerResponse, type ServerHttp2Session } from 'node:http2';
import type { ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { TLSSocket } from 'node:tls';
import type { Request } from './body.js';
import type { WebhookMetrics } from './metrics.js';
import type { KeyPair, Log } from './reload.js';

export type { Request };
export type Response = Http2ServerResponse | ServerResponse;

export interface TransportSettings {
  /** 0: any free port. */
  port: number;
  /** Empty: every interface. */
  address: string;
  headersTimeoutMs: number;
  requestTimeoutMs: number;
  idleTimeoutMs: number;
}

export interface TransportHooks {
  /** Answers one request; a rejection is an internal error (500). */
  handle(req: Request, res: Response): Promise<void>;
  /** The `route` label of a request's metrics. */
  route(req: Request): string;
  metrics: WebhookMetrics;
  log: Log;
}

export class Transport {
  readonly server: Http2SecureServer;
  /** Requests being answered. */
  inFlight = 0;
  /** Set by a drain: HTTP/1.1 answers close their connection, new HTTP/2 sessions are closed. */
  closing = false;
  private readonly sockets = new Set<TLSSocket>();
  private readonly sessions = new Set<ServerHttp2Session>();
  /** HTTP/1.1 requests being answered, per connection: a closing server closes a connection once it has none. */
  private readonly busy = new Map<TLSSocket, number>();
  private allDone: (() => void) | undefined;

  constructor(
    private readonly settings: TransportSettings,
    pair: KeyPair,
    private readonly hooks: TransportHooks,
  ) {
    this.server = createSecureServer({
      allowHTTP1: true,
      cert: pair.cert,
      key: pair.key,
      minVersion: 'TLSv1.2',
      handshakeTimeout: settings.headersTimeoutMs,
    });
    // HTTP/1.1 deadlines (Node's own checks, run every second); HTTP/2 gets the body deadline and the idle timeout.
    const h1 = this.server as unknown as { headersTimeout: number; requestTimeout: number; keepAliveTimeout: number; connectionsCheckingInterval: number };
    h1.headersTimeout = settings.headersTimeoutMs;
    h1.requestTimeout = settings.requestTimeoutMs;
    h1.keepAliveTimeout = settings.idleTimeoutMs;
    h1.connectionsCheckingInterval = 1000;
    this.server.setTimeout(settings.idleTimeoutMs);

    this.server.on('secureConnection', (socket: TLSSocket) => {
      this.sockets.add(socket);
      socket.on('close', () => {
        this.sockets.delete(socket);
        this.busy.delete(socket);
      });
      // A connection that never finishes its handshake is ended by handshakeTimeout; one that goes quiet, by the idle timeout.
    });
    this.server.on('session', (session: ServerHttp2Session) => {
      this.sessions.add(session);
      session.on('close', () => this.sessions.delete(session));
      if (this.closing) session.close();
    });
    this.server.on('tlsClientError', () => {
      // A client that cannot finish a handshake is the client's problem; nothing to log per connection.
    });
    this.server.on('request', (req: Request, res: Response) => this.request(req, res));
  }

  private request(req: Request, res: Response): void {
    const { metrics, log } = this.hooks;
    this.inFlight++;
    metrics.inFlight.add(1);
    const socket = req.httpVersionMajor === 1 ? (req.socket as TLSSocket) : undefined;
    if (socket) this.busy.set(socket, (this.busy.get(socket) ?? 0) + 1);
    let counted = true;
    const done = (): void => {
      if (!counted) return;
      counted = false;
      this.inFlight--;
      metrics.inFlight.add(-1);
      if (socket) {
        const left = (this.busy.get(socket) ?? 1) - 1;
        this.busy.set(socket, left);
        if (this.closing && left === 0) socket.end();
      }
      if (this.inFlight === 0) this.allDone?.();
    };
    res.on('finish', done);
    res.on('close', done);
    this.hooks.handle(req, res).catch((error: unknown) => {
      log({ level: 'error', msg: 'internal error', error: error instanceof Error ? (error.stack ?? error.message) : String(error) });
      if (!res.headersSent) this.send(req, res, 500, 'text/plain; charset=utf-8', 'internal error\n');
      else if (!res.writableEnded) res.end();
    });
  }

  /** Sends one answer, unless the client has gone (the API server gave up at its timeout): nothing to answer then. */
  send(req: Request, res: Response, status: number, type: string, body: string, extra: Record<string, string> = {}): void {
    this.hooks.metrics.requests.inc({ route: this.hooks.route(req), code: String(status) });
    const headers: Record<string, string | number> = { 'content-type': type, 'content-length': Buffer.byteLength(body), ...extra };
    if (req.httpVersionMajor === 1 && (this.closing || status === 413 || status === 408)) headers.connection = 'close';
    if (res.writableEnded || (res as { destroyed?: boolean }).destroyed || (req.httpVersionMajor === 2 && (res as Http2ServerResponse).stream.closed)) return;
    try {
      res.writeHead(status, headers);
      res.end(body);
    } catch (error) {
      this.hooks.log({ level: 'warn', msg: 'answer not sent', status, error: (error as Error).message });
    }
  }

  async listen(): Promise<number> {
    const { server, settings } = this;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      const onListening = (): void => {
        server.removeListener('error', reject);
        resolve();
      };
      if (settings.address === '') server.listen(settings.port, onListening);
      else server.listen(settings.port, settings.address, onListening);
    });
    return (server.address() as AddressInfo).port;
  }

  setCertificate(pair: KeyPair): void {
    this.server.setSecureContext({ cert: pair.cert, key: pair.key, minVersion: 'TLSv1.2' });
  }

  /** Stops accepting connections and closes those with nothing in flight. HTTP/2: GOAWAY, streams already open finish. HTTP/1.1: idle connections end now, busy ones after their answer. */
  stopAccepting(): void {
    this.closing = true;
    this.server.close();
    for (const session of this.sessions) session.close();
    for (const socket of this.sockets) if (socket.alpnProtocol !== 'h2' && (this.busy.get(socket) ?? 0) === 0) socket.end();
  }

  /** Resolves when no request is in flight, or after `timeoutMs`. */
  async settled(timeoutMs: number): Promise<void> {
    if (this.inFlight === 0) return;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, timeoutMs);
      this.allDone = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }

  /** Closes every connection at once. */
  destroy(): void {
    for (const socket of this.sockets) socket.destroy();
  }
}
