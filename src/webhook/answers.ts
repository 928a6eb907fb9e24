/**
 * The AdmissionReview answers, written once for every part of the webhook
 * that answers /mutate: the admission itself (./admission.ts) and the
 * not-ready answer (./server.ts). An answer is a value (status, body,
 * outcome, the containers it names, the fields of its log line); the
 * transport only sends it.
 */
import type { JsonPatchOperation } from '../core/index.js';
import type { Outcome } from './metrics.js';
import { base64Json } from './patch-encoding.js';

export const REVIEW_VERSION = 'admission.k8s.io/v1';

export interface RefusedContainer {
  container: string;
  reason: string;
}

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
  /** Fields of the one log line (no env values, no object). */
  log: Record<string, unknown>;
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

/** A body no review can be answered for: HTTP 400 with a one-line message. */
export function invalidAnswer(message: string): Admission {
  return { status: 400, body: JSON.stringify({ error: message }), outcome: 'invalid', dryRun: false, wrapped: [], refused: [], skipped: 0, log: { error: message } };
}

/** Without a valid config there is nothing to decide with: allowed, no patch, a warning. */
export function notReadyAnswer(text: string): Admission {
  let uid: unknown;
  try {
    uid = (JSON.parse(text) as { request?: { uid?: unknown } }).request?.uid;
  } catch {
    uid = undefined;
  }
  if (typeof uid !== 'string') return { ...invalidAnswer('not an AdmissionReview with a request.uid'), log: {} };
  const body = reviewText(uid, [], ['vram-preflight: pod admitted unchanged: the webhook has no valid config (see its log)']);
  return { status: 200, body, outcome: 'not-wrapped', dryRun: false, wrapped: [], refused: [], skipped: 0, log: { uid, error: 'no valid config' } };
}
