/**
 * `--metrics-port`: /metrics over plain HTTP on a port of its own, for
 * scrapers that do not trust the webhook's CA (the chart's generated one) or
 * that cannot do TLS. Nothing else is served there: admission stays on the
 * HTTPS port. Every answer that is not 200 is JSON, as on the HTTPS port
 * (the same constructors, ./answers.ts).
 *
 * Bounded as the HTTPS port is (docs/webhook.md, "Hardening"): a connection
 * cap of its own (METRICS_MAX_CONNECTIONS; at it the connection idle the
 * longest is closed, ./connections.ts), so that connections opened here
 * never get around the HTTPS port's cap nor take its room; the same headers,
 * request and idle deadlines, checked every second.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { errorAnswer, metricsAnswer, type Answer } from './answers.js';
import { ConnectionCap, type Connection } from './connections.js';
import type { WebhookMetrics } from './metrics.js';

/** Connections open at once on the metrics port: a few scrapers need a few (Prometheus keeps one per target). */
export const METRICS_MAX_CONNECTIONS = 64;

export interface MetricsPortSettings {
  /** 0: any free port. */
  port: number;
  /** Empty: every interface. */
  address: string;
  headersTimeoutMs: number;
  requestTimeoutMs: number;
  idleTimeoutMs: number;
  /** Default METRICS_MAX_CONNECTIONS. */
  maxConnections?: number;
}

export interface MetricsPort {
  port: number;
  /** Connections open now (tests). */
  readonly connections: number;
  close(): Promise<void>;
}

export async function startMetricsPort(settings: MetricsPortSettings, metrics: WebhookMetrics): Promise<MetricsPort> {
  const books = new Map<Socket, Connection>();
  const cap = new ConnectionCap(settings.maxConnections ?? METRICS_MAX_CONNECTIONS, () => books.values(), (what) => metrics.limits.inc({ limit: `metrics-connections-${what}` }));
  const server: Server = createServer((req, res) => {
    const connection = books.get(req.socket);
    if (connection) {
      connection.busy++;
      let counted = true;
      const done = (): void => {
        if (!counted) return;
        counted = false;
        if (--connection.busy === 0) connection.idleSince = Date.now();
      };
      res.on('finish', done);
      res.on('close', done);
    }
    const path = (req.url ?? '').split('?')[0];
    const answer: Answer =
      path !== '/metrics' ? errorAnswer(404, 'not found: GET /metrics (admission is on the HTTPS port)') : req.method !== 'GET' && req.method !== 'HEAD' ? { ...errorAnswer(405, `${String(req.method).slice(0, 16)} is not allowed here`), headers: { allow: 'GET' } } : metricsAnswer(metrics.render());
    res.writeHead(answer.status, { 'content-type': answer.type, 'content-length': Buffer.byteLength(answer.body), ...answer.headers });
    res.end(answer.body);
  });
  server.on('connection', (socket: Socket) => {
    if (!cap.admit(socket)) return;
    books.set(socket, { busy: 0, idleSince: Date.now(), close: () => socket.destroy() });
    socket.on('close', () => books.delete(socket));
  });
  // Node's own deadlines, checked every second (its default, 30 s, let a silent connection stay that long).
  server.headersTimeout = settings.headersTimeoutMs;
  server.requestTimeout = settings.requestTimeoutMs;
  server.keepAliveTimeout = settings.idleTimeoutMs;
  (server as unknown as { connectionsCheckingInterval: number }).connectionsCheckingInterval = 1000;
  server.setTimeout(settings.idleTimeoutMs);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    const listening = (): void => {
      server.removeListener('error', reject);
      resolve();
    };
    if (settings.address === '') server.listen(settings.port, listening);
    else server.listen(settings.port, settings.address, listening);
  });
  return {
    port: (server.address() as AddressInfo).port,
    get connections() {
      return cap.size;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        cap.destroyAll();
      }),
  };
}
