/**
 * What the webhook serves, route by route (its handler, kept apart from the
 * server's start as controller-runtime keeps webhook.Admission's ServeHTTP
 * apart from its server's Start):
 *
 *   POST /mutate    AdmissionReview v1 (./admission.ts)
 *   GET  /healthz   the process answers
 *   GET  /readyz    a valid config is loaded and the process is not draining
 *   GET  /metrics   Prometheus text format 0.0.4 (./metrics.ts)
 *
 * Each route resolves to an answer (./answers.ts), which the transport
 * sends: as controller-runtime's admission handler decodes, handles, and
 * writes what it returns to the writer it was handed, no route touches the
 * connection (the one exception, `100 Continue`, goes through the function
 * the transport hands over for it).
 *
 * Request hygiene: /mutate takes POST only (405), application/json only
 * (415), at most BODY_LIMIT bytes (413, before `100 Continue` and before a
 * byte is read; the API server's objects are at most ~3 MiB), UTF-8 only
 * (400), and, with a client CA, only from a client with its certificate
 * (403); malformed bodies get 400 with a message that quotes none of them.
 * Every answer that is not 2xx is JSON ({"error": ..., "status": ...}), and
 * every refused request is logged once ("request refused", or the admission
 * line of a 400).
 */
import type { Options } from '../core/index.js';
import { admit, type AdmissionDependencies } from './admission.js';
import { echo, errorAnswer, jsonAnswer, metricsAnswer, notReadyAnswer, refusal, textAnswer, type Answer } from './answers.js';
import { checkDeclaredLength, decodeBody, HttpProblem, readBody, Reservation, SMALL_BODY, type ByteBudget, type Request } from './body.js';
import type { Lifecycle } from './lifecycle.js';
import type { WebhookMetrics } from './metrics.js';
import type { ConfigReloader, Log } from './reload.js';
import type { AdmissionWorker } from './worker.js';

const ROUTES = new Set(['/mutate', '/healthz', '/readyz', '/metrics']);
const pathOf = (req: Request): string => (req.url ?? '').split('?')[0]!;

/** The `route` label of a request's metrics: its path when it is one of ours. */
export const routeOf = (req: Request): string => (ROUTES.has(pathOf(req)) ? pathOf(req) : 'other');

export interface RouteParts {
  lifecycle: Pick<Lifecycle, 'ready' | 'whyNotReady'>;
  config: Pick<ConfigReloader, 'options'>;
  /** Whether the client presented the certificate /mutate asks for (the transport's TLS knows). */
  clientAllowed(req: Request): boolean;
  /** Bytes of request bodies in flight. */
  budget: ByteBudget;
  /** Decides large bodies off the event loop; absent: every body is decided inline. */
  worker: AdmissionWorker | undefined;
  /** What an admission needs besides its body, under the options in use. */
  deps(options: Options): AdmissionDependencies;
  requestTimeoutMs: number;
  metrics: WebhookMetrics;
  log: Log;
}

export class Routes {
  constructor(private readonly parts: RouteParts) {}

  /**
   * The answer to one request (the transport's handler). `sendContinue`: the
   * client waits for `100 Continue` before its body; called once the body is
   * wanted (never for one refused before a byte is read).
   */
  async handle(req: Request, sendContinue?: () => void): Promise<Answer> {
    const { lifecycle, metrics } = this.parts;
    const path = pathOf(req);
    if (path === '/mutate') return this.mutate(req, sendContinue);
    if (req.method !== 'GET' && req.method !== 'HEAD') return refusal(405, `${echo(req.method, 16)} is not allowed here`, { allow: 'GET' });
    if (path === '/healthz') return textAnswer(200, 'ok\n');
    // Not a refused request: a probe's answer, asked every few seconds; the reason was logged when it arose.
    if (path === '/readyz') return lifecycle.ready() ? textAnswer(200, 'ok\n') : errorAnswer(503, lifecycle.whyNotReady());
    if (path === '/metrics') return metricsAnswer(metrics.render());
    return refusal(404, 'not found: POST /mutate, GET /healthz, /readyz, /metrics');
  }

  private async mutate(req: Request, sendContinue: (() => void) | undefined): Promise<Answer> {
    const { config, budget, worker, metrics, log } = this.parts;
    const started = process.hrtime.bigint();
    const deadline = Date.now() + this.parts.requestTimeoutMs;
    if (req.method !== 'POST') return refusal(405, `${echo(req.method, 16)} is not allowed here: POST an AdmissionReview`, { allow: 'POST' });
    if (!this.parts.clientAllowed(req)) return refusal(403, 'a client certificate of the configured client CA is required');
    const type = String(req.headers['content-type'] ?? '');
    if (!/^application\/json\s*(;|$)/i.test(type)) return refusal(415, `Content-Type is ${JSON.stringify(echo(type, 100))}: send application/json`);
    let reservation: Reservation | undefined;
    try {
      let body: Buffer;
      let text: string | undefined;
      try {
        // Over the limit: refused before a byte is read, and before `100 Continue`.
        checkDeclaredLength(req);
        reservation = await Reservation.take(budget, req, deadline);
        sendContinue?.();
        body = await readBody(req, deadline, reservation);
        // A large body is decoded (and parsed, and decided) off the event loop.
        if (!worker || body.length <= SMALL_BODY) text = decodeBody(body);
      } catch (error) {
        return this.bodyRefused(error);
      }
      // Not ready (no valid config yet): the API server should not be sending; if it does, the pod goes in unchanged.
      const options = config.options;
      const admission = !options ? notReadyAnswer(text ?? decodeBody(body)) : text !== undefined ? await admit(text, this.parts.deps(options)) : await worker!.admit(body, this.parts.deps(options), deadline);
      metrics.admissions.inc({ outcome: admission.outcome, dry_run: String(admission.dryRun) });
      metrics.containers.inc({ result: 'wrapped' }, admission.wrapped.length);
      metrics.containers.inc({ result: 'refused' }, admission.refused.length);
      metrics.containers.inc({ result: 'skipped' }, admission.skipped);
      const seconds = Number(process.hrtime.bigint() - started) / 1e9;
      metrics.latency.observe(seconds);
      const { level, ...fields } = admission.log;
      log({ level: level ?? (admission.status === 200 ? 'info' : 'warn'), msg: 'admission', ...fields, ...(admission.status !== 200 ? { status: admission.status } : {}), durationMs: Math.round(seconds * 1e5) / 100 });
      return jsonAnswer(admission.status, admission.body);
    } finally {
      // The parsed body is gone once its answer is made: its bytes go back to the budget.
      reservation?.done();
    }
  }

  /** A body refused before its admission: counted, and answered with the reason (nothing of the body). */
  private bodyRefused(error: unknown): Answer {
    const status = error instanceof HttpProblem ? error.status : 400;
    this.parts.metrics.admissions.inc({ outcome: 'invalid', dry_run: 'false' });
    if (error instanceof HttpProblem && error.limit) this.parts.metrics.limits.inc({ limit: error.limit });
    return refusal(status, error instanceof HttpProblem ? error.message : 'the request could not be read');
  }
}
