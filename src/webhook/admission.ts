/**
 * One AdmissionReview (admission.k8s.io/v1) in, one out. The decision is the
 * core's (patchObject, the same code as the post-renderer's); this door adds
 * what only an admission knows: the DRA claims the pod names (read from the
 * cluster), registry answers within a budget, the pod annotations that say
 * what happened, and the rule that a pod is never blocked.
 *
 * The answers, request by request:
 * - a body that is not an AdmissionReview v1 with a request uid: HTTP 400 (no
 *   review can be answered; with failurePolicy Ignore the API server admits
 *   the pod and logs the error);
 * - anything but a Pod CREATE (another kind, a subresource, UPDATE, DELETE,
 *   CONNECT), or a request without an object: allowed, no patch ("ignored");
 * - a Pod CREATE: allowed, always. A JSONPatch when a container is wrapped
 *   (its command/args, plus the annotation vram-preflight.io/wrapped naming
 *   the containers), or when a target container could not be wrapped safely
 *   (only the annotation vram-preflight.io/not-wrapped with the reasons, and a
 *   warning per container, which kubectl prints); no patch otherwise;
 * - dryRun: the same answer as the real request, so that
 *   `kubectl apply --dry-run=server` shows what would happen (counted apart
 *   in the metrics: the webhook has no side effects).
 */
import type { Options } from '../core/options.js';
import type { RegistryAnswers } from '../core/decide/start.js';
import { ANNOTATION_NOT_WRAPPED, ANNOTATION_WRAPPED, asObject, claimReferences, imageEntryFix, imageEntryYaml, patchObject, pointerSegment, withLookups, type ContainerReport, type ImageEntryFix, type JsonPatchOperation, type PatchResult } from '../core/index.js';
import { escapeControl } from '../core/errors.js';
import type { ClaimReadResult, ClaimReference } from './claims.js';
import type { Outcome } from './metrics.js';
import { base64Json } from './patch-encoding.js';

const REVIEW_VERSION = 'admission.k8s.io/v1';

export interface AdmissionDependencies {
  options: Options;
  /** Registry answers for these images, within the lookup budget; absent: no lookups. */
  lookup?: (images: readonly string[]) => Promise<RegistryAnswers>;
  /** Device classes of the claims a pod names; absent: not in a cluster. */
  readClaims?: (namespace: string, references: readonly ClaimReference[]) => Promise<ClaimReadResult>;
}

export interface RefusedContainer {
  container: string;
  reason: string;
  /** What to change so that it is wrapped: the chart values to add, or the fix of the error. */
  fix?: RefusalFix;
}

/** A fix as the chart's user applies it: a `config.images` entry, or words. */
export type RefusalFix = { entry: ImageEntryFix } | { text: string };

/**
 * The API server's limits on what an answer says (k8s.io/apiserver
 * pkg/endpoints/filters/warning.go): a warning with a control character (a
 * line break) is dropped whole; past 4096 runes of warnings in all, each is
 * cut to 256. So a warning is one line of at most 256 characters, and the
 * warnings of one answer stay under 4096. An object's annotations may hold
 * 256 KiB in all (apimachinery ValidateAnnotationsSize); ours takes at most
 * NOT_WRAPPED_LIMIT of it.
 */
export const WARNING_LIMIT = 256;
const WARNINGS_TOTAL_LIMIT = 4096;
export const NOT_WRAPPED_LIMIT = 4096;

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

type Plain = Record<string, unknown>;

/** A reason on one line, short enough for kubectl's warning and an annotation. */
export function shortReason(reason: string, limit = 160): string {
  return cut(escapeControl(reason.split('\n')[0]!.trim()), limit);
}

/** At most `limit` characters, with … where it was cut (never inside a surrogate pair). */
function cut(text: string, limit: number): string {
  if (text.length <= limit) return text;
  let end = limit - 1;
  if (/[\ud800-\udbff]/.test(text[end - 1] ?? '')) end--;
  return `${text.slice(0, end)}…`;
}

/** The fix as the chart's values, YAML lines to add (the annotation). */
function fixLines(fix: RefusalFix): string[] {
  if ('text' in fix) return [`  fix: ${escapeControl(fix.text)}`];
  const { entry } = fix;
  const how = entry.like !== undefined ? `a mirror of ${entry.like}` : escapeControl(entry.howToRead ?? '');
  return [`  fix: add this entry to config.images in the webhook chart's values (${how}), then helm upgrade:`, '    config:', '      images:', ...imageEntryYaml(entry, '        ')];
}

/** The fix on one line (a warning): the entry as flow YAML. */
function fixLine(fix: RefusalFix): string {
  if ('text' in fix) return escapeControl(fix.text);
  const { entry } = fix;
  const fields = entry.like !== undefined ? [`repository: ${entry.repository}`, `like: ${entry.like}`] : [`repository: ${entry.repository}`, `${entry.pin.key}: "${entry.pin.value}"`, 'entrypoint: [...]', ...(entry.needsCmd ? ['cmd: [...]'] : [])];
  return `add to the chart's config.images: {${fields.join(', ')}}`;
}

/** The fix as a warning: where the YAML is, when that fits; the fix itself before anything else. */
function fixWarning(name: string, fix: string): string {
  const full = `vram-preflight: to wrap "${name}": ${fix} (annotation ${ANNOTATION_NOT_WRAPPED} has the YAML)`;
  return full.length <= WARNING_LIMIT ? full : cut(`vram-preflight: to wrap "${name}": ${fix}`, WARNING_LIMIT);
}

/** The not-wrapped annotation: each container's reason and fix, within NOT_WRAPPED_LIMIT. */
export function notWrappedAnnotation(refused: readonly RefusedContainer[]): string {
  const blocks = refused.map((r) => [`${escapeControl(r.container)}: ${shortReason(r.reason, 600)}`, ...(r.fix ? fixLines(r.fix) : [])].join('\n'));
  const kept: string[] = [];
  let size = 0;
  for (const [i, block] of blocks.entries()) {
    const more = `... and ${blocks.length - i} more container(s): see the webhook's log`;
    if (size + block.length + 1 > NOT_WRAPPED_LIMIT - more.length - 1) {
      kept.push(more);
      break;
    }
    kept.push(block);
    size += block.length + 1;
  }
  return kept.join('\n');
}

/** The warnings kubectl prints: per container, the reason, then the fix; one line each, within the API server's limits. */
export function notWrappedWarnings(refused: readonly RefusedContainer[]): string[] {
  const warnings: string[] = [];
  let total = 0;
  for (const [i, r] of refused.entries()) {
    const name = escapeControl(r.container);
    const pair = [
      cut(`vram-preflight: container "${name}" not wrapped, admitted unchanged: ${shortReason(r.reason, WARNING_LIMIT)}`, WARNING_LIMIT),
      ...(r.fix ? [fixWarning(name, fixLine(r.fix))] : []),
    ];
    const more = `vram-preflight: ${refused.length - i} more container(s) not wrapped: see the annotation ${ANNOTATION_NOT_WRAPPED}`;
    const size = pair.reduce((n, w) => n + w.length, 0);
    if (total + size > WARNINGS_TOTAL_LIMIT - more.length) {
      warnings.push(more);
      break;
    }
    warnings.push(...pair);
    total += size;
  }
  return warnings;
}

/** A container of the pod by name (containers, then initContainers). */
function containerNamed(pod: Plain, name: string): Plain | undefined {
  const spec = asObject(pod.spec);
  for (const list of [spec?.containers, spec?.initContainers]) {
    if (!Array.isArray(list)) continue;
    const found = list.map(asObject).find((c) => c?.name === name);
    if (found) return found;
  }
  return undefined;
}

/** The fix of a refused container: for a start only a registry could place, the config entry; else the error's own fix. */
function refusalFix(pod: Plain, report: ContainerReport, lookupFailed: boolean): RefusalFix | undefined {
  if (report.error?.code === 'UNKNOWN_START' && report.image !== undefined) {
    const args = containerNamed(pod, report.container)?.args;
    return { entry: imageEntryFix(report.image, Array.isArray(args) && args.length > 0, lookupFailed) };
  }
  const fix = report.error?.details.fix;
  return fix ? { text: fix.split('\n')[0]! } : undefined;
}

function invalid(message: string): Admission {
  return { status: 400, body: JSON.stringify({ error: message, status: 400 }), outcome: 'invalid', dryRun: false, wrapped: [], refused: [], skipped: 0, log: { error: message } };
}

/**
 * The AdmissionReview answer's JSON text (the patch's base64 is joined from
 * pieces kept between answers: see ./patch-encoding.ts). One string, written
 * at once: written piece by piece, even corked, the answer cost the server
 * ~150 µs more CPU per wrapped pod (docs/webhook.md, "Speed").
 */
function review(uid: string, patch: JsonPatchOperation[], warnings: string[]): string {
  const head = `{"apiVersion":${JSON.stringify(REVIEW_VERSION)},"kind":"AdmissionReview","response":{"uid":${JSON.stringify(uid)},"allowed":true`;
  const tail = `${warnings.length > 0 ? `,"warnings":${JSON.stringify(warnings)}` : ''}}}`;
  if (patch.length === 0) return head + tail;
  // Base64 needs no escaping inside a JSON string.
  return `${head},"patchType":"JSONPatch","patch":"${base64Json(patch).join('')}"${tail}`;
}

/**
 * Ops that set the annotations to these values (creating metadata.annotations where the pod has
 * none); none for a value already there, and none for a pod whose metadata is not an object
 * (absent, null, a string): the patch never replaces metadata, which is outside what it may touch
 * (docs/webhook.md, "Nothing else of the pod changes"). The API server sends every pod with one.
 */
export function annotationOps(pod: Plain, values: Readonly<Record<string, string>>): JsonPatchOperation[] {
  const metadata = asObject(pod.metadata);
  if (!metadata) return [];
  const annotations = asObject(metadata.annotations);
  const changed = Object.entries(values).filter(([key, value]) => annotations?.[key] !== value);
  if (changed.length === 0) return [];
  if (!annotations) return [{ op: 'add', path: '/metadata/annotations', value: Object.fromEntries(changed) }];
  // `add` of an existing member replaces it (RFC 6902 4.1).
  return changed.map(([key, value]) => ({ op: 'add', path: `/metadata/annotations/${pointerSegment(key)}`, value }));
}

/** The refused containers and the wrapped ones, from the core's reports and the claims that could not be read. */
function readResult(pod: Plain, result: PatchResult, claimFailures: ReadonlyMap<string, string>, answers: RegistryAnswers | undefined): { wrapped: string[]; refused: RefusedContainer[]; skipped: number } {
  const wrapped: string[] = [];
  const refused: RefusedContainer[] = [];
  let skipped = 0;
  const claimReason = [...claimFailures].map(([label, why]) => `DRA ${label}: ${why}`).join('; ');
  for (const report of result.containers) {
    if (report.action === 'wrap') wrapped.push(report.container);
    else if (report.action === 'error' || report.action === 'cannot-wrap') {
      // The core's reason lists every source it tried; where the registry was the last hope, its failure is what to read first.
      const answer = report.image === undefined ? undefined : answers?.get(report.image);
      const failed = answer && 'error' in answer ? answer.error : undefined;
      const fix = refusalFix(pod, report, failed !== undefined);
      refused.push({ container: report.container, reason: failed ? `the start of its image is known only to its registry, and the lookup failed: ${failed}` : report.reason, ...(fix ? { fix } : {}) });
    }
    else if (claimFailures.size > 0 && [...report.warnings, ...report.notes].some((text) => text.includes('DRA'))) {
      // vLLM whose GPU is a claim we could not read: the core could not tell; say why it could not.
      refused.push({ container: report.container, reason: `${claimReason}, so it cannot tell whether the container has an NVIDIA GPU` });
    } else skipped++;
  }
  return { wrapped, refused, skipped };
}

/** Answers one request body. Never throws. */
export async function admit(text: string, deps: AdmissionDependencies): Promise<Admission> {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch (error) {
    return invalid(`the body is not JSON: ${(error as Error).message}`);
  }
  const reviewIn = asObject(body);
  if (!reviewIn || reviewIn.kind !== 'AdmissionReview' || reviewIn.apiVersion !== REVIEW_VERSION) {
    // A bare object (someone trying the webhook with curl): say where its answer is.
    const bare = typeof reviewIn?.kind === 'string' && reviewIn.kind !== 'AdmissionReview' ? `; for what the webhook would do to a ${reviewIn.kind} without a review: vram-preflight admit < ${reviewIn.kind.toLowerCase()}.yaml (docs/webhook.md, "Try it without a cluster")` : '';
    return invalid(`the body is not an AdmissionReview ${REVIEW_VERSION} (apiVersion ${JSON.stringify(reviewIn?.apiVersion)}, kind ${JSON.stringify(reviewIn?.kind)}); register the webhook with admissionReviewVersions: [v1]${bare}`);
  }
  const request = asObject(reviewIn.request);
  const uid = request?.uid;
  if (!request || typeof uid !== 'string' || uid === '') return invalid('the AdmissionReview has no request.uid');

  const dryRun = request.dryRun === true;
  const namespace = typeof request.namespace === 'string' ? request.namespace : '';
  const kind = asObject(request.kind);
  const resource = asObject(request.resource);
  const pod = asObject(request.object);
  const metadata = asObject(pod?.metadata);
  const log: Plain = {
    uid,
    namespace,
    pod: metadata?.name ?? metadata?.generateName ?? request.name ?? '',
    operation: request.operation,
    dryRun,
  };
  const ignored = (why: string): Admission => ({ status: 200, body: review(uid, [], []), outcome: 'ignored', dryRun, wrapped: [], refused: [], skipped: 0, log: { ...log, ignored: why } });
  if (kind?.kind !== 'Pod' || (kind.group ?? '') !== '' || (resource && resource.resource !== 'pods') || (typeof request.subResource === 'string' && request.subResource !== '')) {
    return ignored(`not a Pod (${String(kind?.group || 'core')}/${String(kind?.kind)}${request.subResource ? `, subresource ${String(request.subResource)}` : ''})`);
  }
  if (request.operation !== 'CREATE') return ignored(`operation ${String(request.operation)}, not CREATE`);
  if (!pod) return ignored('the request has no object');

  try {
    const references = claimReferences(asObject(pod.spec) ?? {});
    const wanted: ClaimReference[] = [
      ...references.claims.map((name) => ({ kind: 'ResourceClaim' as const, name })),
      ...references.templates.map((name) => ({ kind: 'ResourceClaimTemplate' as const, name })),
    ];
    let claims: ClaimReadResult['claims'] | undefined;
    let claimFailures = new Map<string, string>();
    if (wanted.length > 0) {
      if (deps.readClaims) ({ claims, failures: claimFailures } = await deps.readClaims(namespace, wanted));
      else claimFailures = new Map(wanted.map((ref) => [`${ref.kind} ${ref.name}`, 'no Kubernetes API to read it from (not running in a cluster)']));
    }
    let answers: RegistryAnswers | undefined;
    const lookup = deps.lookup && (async (images: readonly string[]) => (answers = await deps.lookup!(images)));
    const result = await withLookups((registry) => patchObject(pod, deps.options, { registry, claims }), deps.options.registryLookup, lookup);
    const { wrapped, refused, skipped } = readResult(pod, result, claimFailures, answers);
    const annotations: Record<string, string> = {};
    // A container without a name (the API server's validation refuses it after admission) has no place in a list of names.
    const named = wrapped.filter((name) => name !== '');
    if (named.length > 0) {
      const before = asObject(metadata?.annotations)?.[ANNOTATION_WRAPPED];
      const earlier = typeof before === 'string' ? before.split(',').filter((name) => name !== '') : [];
      annotations[ANNOTATION_WRAPPED] = [...new Set([...earlier, ...named])].join(',');
    }
    if (refused.length > 0) annotations[ANNOTATION_NOT_WRAPPED] = notWrappedAnnotation(refused.map((r) => ({ ...r, container: r.container || '(unnamed)' })));
    const patch = [...result.patch, ...annotationOps(pod, annotations)];
    const warnings = notWrappedWarnings(refused);
    const outcome: Outcome = refused.length > 0 ? 'not-wrapped' : wrapped.length > 0 ? 'wrapped' : 'unchanged';
    return {
      status: 200,
      body: review(uid, patch, warnings),
      outcome,
      dryRun,
      wrapped,
      refused,
      skipped,
      log: { ...log, outcome, wrapped, ...(refused.length > 0 ? { notWrapped: refused.map((r) => ({ container: r.container, reason: shortReason(r.reason, 300), ...(r.fix ? { fix: fixLine(r.fix) } : {}) })) } : {}) },
    };
  } catch (error) {
    // A bug of ours: the pod goes in as it came, and says so.
    const reason = 'internal error in vram-preflight (see its log)';
    const patch = annotationOps(pod, { [ANNOTATION_NOT_WRAPPED]: `*: ${reason}` });
    return {
      status: 200,
      body: review(uid, patch, [`vram-preflight: pod admitted unchanged: ${reason}`]),
      outcome: 'not-wrapped',
      dryRun,
      wrapped: [],
      refused: [{ container: '*', reason }],
      skipped: 0,
      log: { ...log, outcome: 'not-wrapped', level: 'error', error: error instanceof Error ? (error.stack ?? error.message) : String(error) },
    };
  }
}
