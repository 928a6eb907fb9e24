/**
 * `--metrics-port`: /metrics over plain HTTP on a port of its own, for
 * scrapers that do not trust the webhook's CA (the chart's generated one) or
 * that cannot do TLS. Nothing else is served there: admission stays on the
 * HTTPS port. Every answer that is not 200 is JSON, as on the HTTPS port.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { WebhookMetrics } from './metrics.js';

export interface MetricsPort {
  port: number;
  close(): Promise<void>;
}

export async function startMetricsPort(port: number, address: string, metrics: WebhookMetrics): Promise<MetricsPort> {
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? '').split('?')[0];
    const answer = (status: number, type: string, body: string): void => {
      res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(body) });
      res.end(body);
    };
    if (path !== '/metrics') return answer(404, 'application/json', `${JSON.stringify({ error: 'not found: GET /metrics (admission is on the HTTPS port)', status: 404 })}\n`);
    if (req.method !== 'GET' && req.method !== 'HEAD') return answer(405, 'application/json', `${JSON.stringify({ error: `${req.method} is not allowed here`, status: 405 })}\n`);
    answer(200, 'text/plain; version=0.0.4; charset=utf-8', metrics.render());
  });
  server.headersTimeout = 3000;
  server.requestTimeout = 5000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    const listening = (): void => {
      server.removeListener('error', reject);
      resolve();
    };
    if (address === '') server.listen(port, listening);
    else server.listen(port, address, listening);
  });
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
