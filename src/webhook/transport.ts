/**
 * The webhook's HTTPS transport: HTTP/1.1 and HTTP/2 (ALPN; the API server's
 * Go client negotiates h2 on a loopback URL, http/1.1 through a Service) on
 * one port; the limits that bound what one client can make it hold; the books
 * of connections and requests in flight, which the lifecycle reads; and the
 * one way an answer is sent. Each request goes to the handler given to
 * listen() (./routes.ts), which resolves to an answer (./answers.ts); the
 * transport writes it to the request's own response.
 *
 * Limits (docs/webhook.md, "Hardening"):
 * - TLS 1.2 with ECDHE key exchange and AEAD ciphers only, or TLS 1.3; the
 *   handshake has the headers deadline;
 * - request headers have a deadline on both protocols: Node's own for
 *   HTTP/1.1; for HTTP/2, a session whose bytes keep coming while no stream
 *   starts or ends (a header block sent a byte at a time) is closed;
 * - at most `maxConnections` connections (./connections.ts): at the cap, the
 *   connection idle the longest is closed to make room (the API server reuses
 *   its most recent ones), and a new one is refused only when none is idle;
 * - at most `maxStreams` concurrent streams per HTTP/2 connection (a client
 *   that wants more waits, as Go's client does, or opens a connection);
 * - idle connections are closed after `idleTimeoutMs`.
 */
import { constants, createSecureServer, type Http2SecureServer, type Http2ServerRequest, type Http2ServerResponse, type SecureServerOptions, type ServerHttp2Session } from 'node:http2';
import { STATUS_CODES, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { errorAnswer, refusal, type Answer } from './answers.js';
import type { Request } from './body.js';
import { ConnectionCap, type Connection } from './connections.js';
import type { WebhookMetrics } from './metrics.js';
import type { KeyPair, Log } from './reload.js';

export type { Request };
export type Response = Http2ServerResponse | ServerResponse;

/** TLS 1.2 suites: ECDHE key exchange (forward secrecy) with an AEAD cipher, by their IANA names (as Kubernetes' --tls-cipher-suites takes them). */
export const TLS12_SUITES: Readonly<Record<string, string>> = {
  TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256: 'ECDHE-ECDSA-AES128-GCM-SHA256',
  TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256: 'ECDHE-RSA-AES128-GCM-SHA256',
  TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384: 'ECDHE-ECDSA-AES256-GCM-SHA384',
  TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384: 'ECDHE-RSA-AES256-GCM-SHA384',
  TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256: 'ECDHE-ECDSA-CHACHA20-POLY1305',
  TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256: 'ECDHE-RSA-CHACHA20-POLY1305',
};
/** TLS 1.3's suites are all AEAD with ephemeral keys; OpenSSL takes them in the same list. */
const TLS13_SUITES = ['TLS_AES_128_GCM_SHA256', 'TLS_AES_256_GCM_SHA384', 'TLS_CHACHA20_POLY1305_SHA256'];

export interface TlsSettings {
  minVersion: 'TLSv1.2' | 'TLSv1.3';
  /** IANA names, a subset of TLS12_SUITES (TLS 1.2 only). */
  cipherSuites: readonly string[];
  /** PEM bundle of the CA that signs the API server's client certificate; absent: no client certificate asked. */
  clientCa?: Buffer;
  /** The common name the client certificate must have (with clientCa). */
  clientCommonName?: string;
}

export interface TransportSettings {
  /** 0: any free port. */
  port: number;
  /** Empty: every interface. */
  address: string;
  headersTimeoutMs: number;
  requestTimeoutMs: number;
  idleTimeoutMs: number;
  maxConnections: number;
  maxStreams: number;
  tls: TlsSettings;
}

/** What answers the requests: the routes. */
export interface Handler {
  /** The answer to one request; a rejection is an internal error (500). `sendContinue`: the client waits for `100 Continue` before its body. */
  handle(req: Request, sendContinue?: () => void): Promise<Answer>;
}

export interface TransportHooks {
  /** The `route` label of a request's metrics. */
  route(req: Request): string;
  metrics: WebhookMetrics;
  log: Log;
}

interface Session extends Connection {
  session: ServerHttp2Session;
  socket: TLSSocket;
  bytesSeen: number;
  /** Bytes came with no stream starting or ending since this time (a header block in progress). */
  partialSince: number | undefined;
  progressed: boolean;
}

const SWEEP_MS = 1000;

function secureOptions(tls: TlsSettings, pair: KeyPair): SecureServerOptions {
  return {
    cert: pair.cert,
    key: pair.key,
    minVersion: tls.minVersion,
    ciphers: [...TLS13_SUITES, ...tls.cipherSuites.map((name) => TLS12_SUITES[name]!)].join(':'),
    honorCipherOrder: true,
    // The API server's client certificate is asked for, not required: the kubelet's probes have none (only /mutate needs one; see clientAllowed).
    ...(tls.clientCa ? { ca: tls.clientCa, requestCert: true, rejectUnauthorized: false } : {}),
  };
}

export class Transport {
  readonly server: Http2SecureServer;
  /** Requests being answered. */
  inFlight = 0;
  /**
   * Set on SIGTERM: every answer retires its connection (HTTP/1.1:
   * `Connection: close` on the last request known on it; HTTP/2: GOAWAY
   * once its streams are done), so that the API server moves to new
   * connections, which the Service sends to other replicas once this one is
   * out of its endpoints.
   */
  retiring = false;
  private readonly cap: ConnectionCap;
  private readonly h1 = new Map<TLSSocket, Connection>();
  private readonly h2 = new Map<ServerHttp2Session, Session>();
  private allDone: (() => void) | undefined;
  private readonly sweep: NodeJS.Timeout;
  /** Set by listen(), before the first request can arrive. */
  private handler: Handler | undefined;

  constructor(
    private readonly settings: TransportSettings,
    pair: KeyPair,
    private readonly hooks: TransportHooks,
  ) {
    this.server = createSecureServer({
      allowHTTP1: true,
      ...secureOptions(settings.tls, pair),
      handshakeTimeout: settings.headersTimeoutMs,
      settings: { maxConcurrentStreams: settings.maxStreams },
    });
    // HTTP/1.1 deadlines (Node's own checks, run every second); HTTP/2's are the sweep's, the body's and the idle timeout.
    const h1 = this.server as unknown as { headersTimeout: number; requestTimeout: number; keepAliveTimeout: number; connectionsCheckingInterval: number };
    h1.headersTimeout = settings.headersTimeoutMs;
    h1.requestTimeout = settings.requestTimeoutMs;
    h1.keepAliveTimeout = settings.idleTimeoutMs;
    h1.connectionsCheckingInterval = 1000;
    this.server.setTimeout(settings.idleTimeoutMs);

    this.cap = new ConnectionCap(settings.maxConnections, () => [...this.h1.values(), ...this.h2.values()], (what) => hooks.metrics.limits.inc({ limit: `connections-${what}` }));
    this.server.on('connection', (socket: Socket) => this.cap.admit(socket));
    this.server.on('secureConnection', (socket: TLSSocket) => {
      if (socket.alpnProtocol === 'h2') return; // its session keeps the books
      const connection: Connection = { busy: 0, idleSince: Date.now(), close: () => socket.destroy() };
      this.h1.set(socket, connection);
      socket.on('close', () => this.h1.delete(socket));
    });
    this.server.on('session', (session: ServerHttp2Session) => this.track(session));
    // HTTP/1.1 requests Node refuses before they reach us (headers too slow, too large, not HTTP): the same JSON answer and log line.
    // Anything else here (a TLS handshake that failed or timed out, a reset) is only closed, as Node would without this listener.
    this.server.on('clientError', (error: NodeJS.ErrnoException, socket: TLSSocket) => {
      const httpError = error.code === 'ERR_HTTP_REQUEST_TIMEOUT' || error.code?.startsWith('HPE_');
      if (!httpError || !socket.writable || socket.bytesWritten > 0) {
        socket.destroy();
        return;
      }
      const status = error.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 408 : error.code === 'HPE_HEADER_OVERFLOW' ? 431 : 400;
      const answer = refusal(status, status === 408 ? `the request did not arrive within ${settings.headersTimeoutMs} ms` : status === 431 ? 'the request headers are too large' : `not an HTTP request (${error.code ?? 'unparsable'})`);
      hooks.metrics.requests.inc({ route: 'other', code: String(status) });
      hooks.log({ level: 'warn', msg: 'request refused', status, error: answer.refused });
      // Node has no response object for a request it could not parse: the same answer, written as HTTP/1.1 text.
      socket.end(`HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\ncontent-type: ${answer.type}\r\ncontent-length: ${Buffer.byteLength(answer.body)}\r\nconnection: close\r\n\r\n${answer.body}`);
    });
    this.server.on('tlsClientError', () => {
      // A client that cannot finish a handshake is the client's problem; nothing to log per connection.
    });
    this.server.on('request', (req: Request, res: Response) => this.request(req, res, false));
    // Without this listener Node answers `100 Continue` by itself, before the body's size or turn is checked.
    this.server.on('checkContinue', (req: Request, res: Response) => this.request(req, res, true));
    this.sweep = setInterval(() => this.sweepSessions(), SWEEP_MS).unref();
  }

  private track(session: ServerHttp2Session): void {
    const socket = (session as unknown as { socket: TLSSocket }).socket;
    const record: Session = { session, socket, busy: 0, idleSince: Date.now(), bytesSeen: socket.bytesRead, partialSince: undefined, progressed: true, close: () => session.destroy() };
    this.h2.set(session, record);
    session.on('close', () => this.h2.delete(session));
    session.on('error', () => {
      // A session that fails is closed by Node; the client is told by the protocol.
    });
    session.on('stream', (stream) => {
      record.busy++;
      record.progressed = true;
      stream.on('close', () => {
        record.busy--;
        record.progressed = true;
        if (record.busy === 0) {
          record.idleSince = Date.now();
          if (this.retiring) session.close();
        }
      });
    });
    session.on('ping', () => (record.progressed = true));
  }

  /**
   * HTTP/2's headers deadline: Node has none, and nghttp2 emits a stream only
   * once its header block is complete. A session with no stream open whose
   * bytes keep coming, with no stream starting or ending and no PING, for
   * longer than the headers deadline, is sending a header block (or the
   * connection preface) too slowly: it is closed.
   */
  private sweepSessions(): void {
    const now = Date.now();
    for (const record of this.h2.values()) {
      const bytes = record.socket.bytesRead;
      const arrived = bytes !== record.bytesSeen;
      record.bytesSeen = bytes;
      if (record.busy > 0 || record.progressed || !arrived) {
        if (record.busy > 0 || record.progressed) record.partialSince = undefined;
        record.progressed = false;
        continue;
      }
      if (record.partialSince === undefined) record.partialSince = now;
      else if (now - record.partialSince >= this.settings.headersTimeoutMs) {
        this.hooks.metrics.limits.inc({ limit: 'http2-headers-deadline' });
        record.session.destroy();
      }
    }
  }

  private request(req: Request, res: Response, expectsContinue: boolean): void {
    const { metrics, log } = this.hooks;
    this.inFlight++;
    metrics.inFlight.add(1);
    const connection = req.httpVersionMajor === 1 ? this.h1.get(req.socket as TLSSocket) : undefined;
    if (connection) connection.busy++;
    let counted = true;
    const done = (): void => {
      if (!counted) return;
      counted = false;
      this.inFlight--;
      metrics.inFlight.add(-1);
      if (connection && --connection.busy === 0) connection.idleSince = Date.now();
      if (this.inFlight === 0) this.allDone?.();
    };
    res.on('finish', done);
    res.on('close', done);
    this.handler!.handle(req, expectsContinue ? () => res.writeContinue() : undefined).then(
      (answer) => this.send(req, res, answer),
      (error: unknown) => {
        log({ level: 'error', msg: 'internal error', error: error instanceof Error ? (error.stack ?? error.message) : String(error) });
        if (!res.headersSent) this.send(req, res, errorAnswer(500, 'internal error (logged)'));
        else if (!res.writableEnded) res.end();
      },
    );
  }

  /** Whether the client presented a certificate of the client CA (with the common name asked); true when none is asked. */
  clientAllowed(req: Request): boolean {
    const { clientCa, clientCommonName } = this.settings.tls;
    if (!clientCa) return true;
    // HTTP/2's req.socket is Node's proxy of the TLS socket, which reads through to it.
    const socket = req.socket as TLSSocket | undefined;
    if (!socket?.authorized) return false;
    return clientCommonName === undefined || socket.getPeerCertificate().subject?.CN === clientCommonName;
  }

  /**
   * Sends one answer, unless the client has gone (the API server gave up at
   * its timeout): nothing to answer then. A refusal is logged once here (the
   * method and route, never more of the request).
   */
  private send(req: Request, res: Response, answer: Answer): void {
    const { status, body } = answer;
    this.hooks.metrics.requests.inc({ route: this.hooks.route(req), code: String(status) });
    if (answer.refused !== undefined) this.hooks.log({ level: 'warn', msg: 'request refused', status, method: (req.method ?? '').slice(0, 16), path: this.hooks.route(req), error: answer.refused });
    const headers: Record<string, string | number> = { 'content-type': answer.type, 'content-length': Buffer.byteLength(body), ...answer.headers };
    // HTTP/1.1: a body not read to its end (refused before or while it came) is not read after the answer either: the connection closes.
    // HTTP/2: a request whose HEADERS ended its stream (a GET: the kubelet's HTTPS probes) has no body, read or not; Node's
    // req.complete stays false until one is read, and the reset below then cut the answer short (the kubelet's probe
    // failed: "stream error: CANCEL; received from peer", the pods were never Ready).
    const unread = !req.complete && !(req.httpVersionMajor === 2 && (req as Http2ServerRequest).stream.endAfterHeaders);
    if (req.httpVersionMajor === 1) {
      // Retiring: close once the last request known on the connection is answered; a request pipelined behind this one is answered first.
      const connection = this.h1.get(req.socket as TLSSocket);
      if ((this.retiring && (connection?.busy ?? 1) <= 1) || unread) headers.connection = 'close';
    }
    if (res.writableEnded || (res as { destroyed?: boolean }).destroyed || (req.httpVersionMajor === 2 && (res as Http2ServerResponse).stream.closed)) return;
    try {
      res.writeHead(status, headers);
      res.end(body);
      // HTTP/2: the answer is complete; a reset tells the client to stop sending the rest (RFC 9113 8.1). CANCEL, not NO_ERROR: with
      // NO_ERROR, or with none after a body paused half-read, Node 20's client (and Node's server side) left the stream open until the
      // session's idle timeout. The answer is delivered first.
      if (unread && req.httpVersionMajor === 2) (res as Http2ServerResponse).stream.close(constants.NGHTTP2_CANCEL);
    } catch (error) {
      this.hooks.log({ level: 'warn', msg: 'answer not sent', status, error: (error as Error).message });
    }
  }

  /** Starts serving: every request goes to `handler`, its answer back to the client. */
  async listen(handler: Handler): Promise<number> {
    const { server, settings } = this;
    this.handler = handler;
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
    this.server.setSecureContext(secureOptions(this.settings.tls, pair));
  }

  /** From now on every answer retires its connection; idle connections are left for the API server to use once more (and retire). */
  retire(): void {
    this.retiring = true;
    for (const record of this.h2.values()) if (record.busy === 0) record.session.close();
  }

  /** Stops accepting connections and closes those with nothing in flight. HTTP/2: GOAWAY, streams already open finish. HTTP/1.1: idle connections end now, busy ones after their answer. */
  stopAccepting(): void {
    this.retiring = true;
    this.server.close();
    for (const record of this.h2.values()) record.session.close();
    for (const [socket, connection] of this.h1) if (connection.busy === 0) socket.end();
  }

  /** Connections open now (tests, the lifecycle's log). */
  get connections(): number {
    return this.cap.size;
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
    clearInterval(this.sweep);
    this.cap.destroyAll();
  }
}
