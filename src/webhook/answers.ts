/**
 * The answers, written once for every part of the webhook that answers: the
 * HTTP answer every route resolves to (Answer: status, type, body, headers,
 * and the reason when the request is refused), which the transport only
 * sends; and the AdmissionReview answers of /mutate: the admission itself
 * (./admission.ts) and the not-ready answer (./routes.ts), each a value
 * (status, body, outcome, the containers it names, the fields of its log
 * line).
 *
 * What an answer or a log line echoes of the request is bounded (echo()):
 * nothing of the body but named fields, each cut to a length, never an env
 * value or the body's bytes.
 */
import { asObject, type ImageEntryFix, type JsonPatchOperation } from '../core/index.js';
import type { Outcome } from './metrics.js';
import { base64Json } from './patch-encoding.js';

export const REVIEW_VERSION = 'admission.k8s.io/v1';

/** The API server's uids are UUIDs (36 characters); a longer one is not a review of the API server's. */
export const UID_LIMIT = 128;

export interface RefusedContainer {
  container: string;
  reason: string;
  /** What to change so that it is wrapped: the chart values to add, or the fix of the error. */
  fix?: RefusalFix;
}

/** A fix as the chart's user applies it: a `config.images` entry, or words. */
export type RefusalFix = { entry: ImageEntryFix } | { text: string };

export interface Admission {
  /** 200, or 400 when the body is no AdmissionReview. */
  status: number;
  /** The JSON body to send. */
  body: string;
  outcome: Outcome | 'invalid' | 'ignored';
  dryRun: boolean;
  wrapped: string[];
  refused: RefusedContainer[];
  /** Containers decided that are neither wrapped nor refused. */
  skipped: number;
  /** Fields of the one log line (no env values, no object, every echoed field bounded). */
  log: Record<string, unknown>;
}

/**
 * A field of the request as an answer or a log line may show it: a string
 * cut to `max` characters (Kubernetes names are at most 253, labels 63), or
 * the type of anything else, never its content.
 */
export function echo(value: unknown, max = 63): string {
  if (typeof value !== 'string') return value === undefined ? '(none)' : `(${value === null ? 'null' : typeof value})`;
  return value.length <= max ? value : `${value.slice(0, max - 1)}…`;
}

/**
 * The AdmissionReview answer's JSON text (the patch's base64 is joined from
 * pieces kept between answers: see ./patch-encoding.ts). One string, written
 * at once: written piece by piece, even corked, the answer cost the server
 * ~150 µs more CPU per wrapped pod (docs/webhook.md, "Speed").
 */
export function reviewText(uid: string, patch: readonly JsonPatchOperation[], warnings: readonly string[]): string {
  const head = `{"apiVersion":${JSON.stringify(REVIEW_VERSION)},"kind":"AdmissionReview","response":{"uid":${JSON.stringify(uid)},"allowed":true`;
  const tail = `${warnings.length > 0 ? `,"warnings":${JSON.stringify(warnings)}` : ''}}}`;
  if (patch.length === 0) return head + tail;
  // Base64 needs no escaping inside a JSON string.
  return `${head},"patchType":"JSONPatch","patch":"${base64Json(patch).join('')}"${tail}`;
}

/** The body of every answer that is not 2xx: `{"error": ..., "status": ...}`. */
export function jsonError(status: number, message: string): string {
  return `${JSON.stringify({ error: message, status })}\n`;
}

/** One HTTP answer, as a route resolves to it and the transport sends it. */
export interface Answer {
  status: number;
  /** Content-Type. */
  type: string;
  body: string;
  /** Headers besides Content-Type and Content-Length (Allow, for a 405). */
  headers?: Readonly<Record<string, string>>;
  /** Set when the request is refused: the reason, which the transport logs once ("request refused", with the method and route). */
  refused?: string;
}

const JSON_TYPE = 'application/json';
const TEXT_TYPE = 'text/plain; charset=utf-8';
/** Prometheus' text format. */
const METRICS_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

/** A plain-text answer (/healthz, /readyz). */
export const textAnswer = (status: number, text: string): Answer => ({ status, type: TEXT_TYPE, body: text });

/** /metrics. */
export const metricsAnswer = (text: string): Answer => ({ status: 200, type: METRICS_TYPE, body: text });

/** A JSON answer whose body is already JSON text (an AdmissionReview, a 400 about one). */
export const jsonAnswer = (status: number, body: string): Answer => ({ status, type: JSON_TYPE, body });

/** An answer that is not 2xx and no refusal (a probe's 503, an internal error): `{"error": ..., "status": ...}`. */
export const errorAnswer = (status: number, message: string): Answer => jsonAnswer(status, jsonError(status, message));

/** A refused request: the JSON error answer, logged once by the transport. */
export const refusal = (status: number, message: string, headers?: Readonly<Record<string, string>>): Answer => ({ ...errorAnswer(status, message), ...(headers ? { headers } : {}), refused: message });

/** A body no review can be answered for: HTTP 400 with a one-line message. */
export function invalidAnswer(message: string, status = 400): Admission {
  return { status, body: jsonError(status, message), outcome: 'invalid', dryRun: false, wrapped: [], refused: [], skipped: 0, log: { error: message } };
}

/** An allowed answer. */
export function allowedAnswer(uid: string, outcome: Admission['outcome'], fields: Partial<Pick<Admission, 'dryRun' | 'wrapped' | 'refused' | 'skipped'>> & { patch?: readonly JsonPatchOperation[]; warnings?: readonly string[]; log: Record<string, unknown> }): Admission {
  return {
    status: 200,
    body: reviewText(uid, fields.patch ?? [], fields.warnings ?? []),
    outcome,
    dryRun: fields.dryRun ?? false,
    wrapped: fields.wrapped ?? [],
    refused: fields.refused ?? [],
    skipped: fields.skipped ?? 0,
    log: fields.log,
  };
}

export type Review = { request: Record<string, unknown>; uid: string } | { invalid: Admission };

/** The envelope every answer needs: an AdmissionReview v1 with a request and its uid; otherwise the 400 that says why. */
export function readReview(text: string): Review {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    // JSON.parse's message quotes the body: it stays out of the answer and the log.
    return { invalid: invalidAnswer('the body is not JSON') };
  }
  const reviewIn = asObject(body);
  if (!reviewIn || reviewIn.kind !== 'AdmissionReview' || reviewIn.apiVersion !== REVIEW_VERSION) {
    // A bare object (someone trying the webhook with curl): say where its answer is.
    const kind = typeof reviewIn?.kind === 'string' && reviewIn.kind !== 'AdmissionReview' ? echo(reviewIn.kind) : undefined;
    const bare = kind ? `; for what the webhook would do to a ${kind} without a review: vram-preflight admit < ${kind.toLowerCase()}.yaml (docs/webhook.md, "Try it without a cluster")` : '';
    return { invalid: invalidAnswer(`the body is not an AdmissionReview ${REVIEW_VERSION} (apiVersion ${echo(reviewIn?.apiVersion)}, kind ${echo(reviewIn?.kind)}); register the webhook with admissionReviewVersions: [v1]${bare}`) };
  }
  const request = asObject(reviewIn.request);
  const uid = request?.uid;
  if (!request || typeof uid !== 'string' || uid === '') return { invalid: invalidAnswer('the AdmissionReview has no request.uid') };
  if (uid.length > UID_LIMIT) return { invalid: invalidAnswer(`the AdmissionReview's request.uid is longer than ${UID_LIMIT} characters`) };
  return { request, uid };
}

/** Without a valid config there is nothing to decide with: allowed, no patch, a warning. */
export function notReadyAnswer(text: string): Admission {
  const review = readReview(text);
  if ('invalid' in review) return review.invalid;
  return allowedAnswer(review.uid, 'not-wrapped', { warnings: ['vram-preflight: pod admitted unchanged: the webhook has no valid config (see its log)'], log: { uid: review.uid, error: 'no valid config' } });
}
