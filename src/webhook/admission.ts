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
import { ACTION_EFFECTS, ANNOTATION_NOT_WRAPPED, ANNOTATION_WRAPPED, asObject, claimReferences, type ContainerReport, escapeControl, imageEntryFix, imageEntryYaml, type JsonPatchOperation, type Options, type PatchInput, patchObject, type PatchResult, type Plain, pointerSegment, type RegistryAnswers, withLookups } from '../core/index.js';
import { allowedAnswer, echo, readReview, type Admission, type RefusalFix, type RefusedContainer } from './answers.js';
import type { ClaimReadResult, ClaimReference } from './claims.js';
import { LOOKUP_NOT_ALLOWED } from './image-starts.js';
import type { Outcome } from './metrics.js';

export type { Admission, RefusalFix, RefusedContainer };

/** The reason a pod reads when its decision did not finish by the request's deadline (./worker.ts ends it then). */
export const DECISION_LATE = 'its decision did not finish within the request\'s deadline';

/**
 * Per-pod work is bounded, so that no admission holds the server for the
 * others (the decision runs on the one thread): a container's decision takes
 * ~0.15 ms and its wrapped start adds ~12 KB to the answer, so a pod of more
 * containers than this is admitted unchanged with the reason (a 2 MB pod of
 * 15,000 containers held 0.3.0 for 5-7 s). Pods have a handful.
 */
export const MAX_CONTAINERS = 64;
/** DRA claims read for one pod at most (each is one GET, three when older resource.k8s.io versions are tried). */
export const MAX_CLAIM_REFERENCES = 16;

export interface AdmissionDependencies {
  options: Options;
  /** Registry answers for these images, within the lookup budget; absent: no lookups. */
  lookup?: (images: readonly string[]) => Promise<RegistryAnswers>;
  /** Device classes of the claims a pod names; absent: not in a cluster. */
  readClaims?: (namespace: string, references: readonly ClaimReference[]) => Promise<ClaimReadResult>;
  /** Counts a limit that bit (metrics). */
  limitHit?: (limit: 'containers-per-pod' | 'claims-per-pod') => void;
  /** Told, once the envelope is read, how to answer should the decision not finish in time (./worker.ts; inline, nobody asks). */
  onReview?: (late: () => Admission) => void;
  /** How the pod's containers' command and args are read (`vram-preflight admit`: from its YAML, as the post-renderer reads them); absent: from the JSON. */
  access?: PatchInput['access'];
  /** Told the core's decision for every container (`vram-preflight admit` says what it decided; the webhook does not ask). */
  onDecided?: (result: PatchResult) => void;
}

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
function refusalFix(pod: Plain, report: ContainerReport, lookupFailed: boolean, notAllowed: boolean): RefusalFix | undefined {
  if (report.error?.code === 'UNKNOWN_START' && report.image !== undefined) {
    const args = containerNamed(pod, report.container)?.args;
    return { entry: imageEntryFix(report.image, Array.isArray(args) && args.length > 0, lookupFailed, notAllowed) };
  }
  const fix = report.error?.details.fix;
  return fix ? { text: fix.split('\n')[0]! } : undefined;
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
  for (const report of result.containers) {
    const effect = ACTION_EFFECTS[report.action];
    const container = echo(report.container);
    if (effect.waits && effect.writes) wrapped.push(container);
    else if (effect.missed) {
      // The core's reason lists every source it tried; where the registry was the last hope, its failure is what to read first.
      const answer = report.image === undefined ? undefined : answers?.get(report.image);
      const failed = answer && 'error' in answer ? answer.error : undefined;
      const fix = refusalFix(pod, report, failed !== undefined, failed === LOOKUP_NOT_ALLOWED);
      refused.push({ container, reason: failed ? `the start of its image is known only to its registry, and ${failed}` : report.reason, ...(fix ? { fix } : {}) });
    } else if (report.unknownDeviceClaims && claimFailures.size > 0) {
      // vLLM whose GPU is a claim we could not read: the core could not tell; say why it could not.
      const why = [...claimFailures].filter(([label]) => report.unknownDeviceClaims!.some((claim) => claim.startsWith(`${label} `))).map(([label, failure]) => `DRA ${label}: ${failure}`);
      refused.push({ container, reason: `${why.length > 0 ? why.join('; ') : `DRA ${report.unknownDeviceClaims.join(', ')} not read`}, so it cannot tell whether the container has an NVIDIA GPU` });
    } else skipped++;
  }
  return { wrapped, refused, skipped };
}

/** Containers of every kind the pod has (a pod spec's lists; CREATE allows no ephemeral containers, but they are counted if sent). */
function containerCount(spec: Plain | undefined): number {
  return ['containers', 'initContainers', 'ephemeralContainers'].reduce((n, key) => n + (Array.isArray(spec?.[key]) ? (spec![key] as unknown[]).length : 0), 0);
}

/** Answers one request body. Never throws. */
export async function admit(text: string, deps: AdmissionDependencies): Promise<Admission> {
  const review = readReview(text);
  if ('invalid' in review) return review.invalid;
  const { request, uid } = review;

  const dryRun = request.dryRun === true;
  const namespace = typeof request.namespace === 'string' ? request.namespace : '';
  const kind = asObject(request.kind);
  const resource = asObject(request.resource);
  const pod = asObject(request.object);
  const metadata = asObject(pod?.metadata);
  const log: Plain = {
    uid,
    namespace: echo(namespace),
    pod: echo(metadata?.name ?? metadata?.generateName ?? request.name ?? '', 253),
    operation: echo(request.operation, 16),
    dryRun,
  };
  const ignored = (why: string): Admission => allowedAnswer(uid, 'ignored', { dryRun, log: { ...log, ignored: why } });
  if (kind?.kind !== 'Pod' || (kind.group ?? '') !== '' || (resource && resource.resource !== 'pods') || (typeof request.subResource === 'string' && request.subResource !== '')) {
    return ignored(`not a Pod (${echo(kind?.group || 'core')}/${echo(kind?.kind)}${request.subResource ? `, subresource ${echo(request.subResource)}` : ''})`);
  }
  if (request.operation !== 'CREATE') return ignored(`operation ${echo(request.operation, 16)}, not CREATE`);
  if (!pod) return ignored('the request has no object');
  /** The whole pod admitted unchanged, with the reason (the annotation for `*`, one warning). */
  const notWrapped = (reason: string, level?: string): Admission =>
    allowedAnswer(uid, 'not-wrapped', {
      dryRun,
      patch: annotationOps(pod, { [ANNOTATION_NOT_WRAPPED]: notWrappedAnnotation([{ container: '*', reason }]) }),
      warnings: [`vram-preflight: pod admitted unchanged: ${reason}`],
      refused: [{ container: '*', reason }],
      log: { ...log, outcome: 'not-wrapped', ...(level ? { level } : {}), notWrapped: [{ container: '*', reason }] },
    });

  deps.onReview?.(() => notWrapped(DECISION_LATE));
  const spec = asObject(pod.spec);
  const containers = containerCount(spec);
  if (containers > MAX_CONTAINERS) {
    deps.limitHit?.('containers-per-pod');
    return notWrapped(`the pod has ${containers} containers; the webhook decides pods of at most ${MAX_CONTAINERS}`);
  }

  try {
    const references = claimReferences(spec ?? {});
    const wanted: ClaimReference[] = [
      ...references.claims.map((name) => ({ kind: 'ResourceClaim' as const, name })),
      ...references.templates.map((name) => ({ kind: 'ResourceClaimTemplate' as const, name })),
    ];
    let claims: ClaimReadResult['claims'] | undefined;
    let claimFailures = new Map<string, string>();
    if (wanted.length > MAX_CLAIM_REFERENCES) {
      deps.limitHit?.('claims-per-pod');
      claimFailures = new Map(wanted.map((ref) => [`${ref.kind} ${echo(ref.name, 253)}`, `not read: the pod names ${wanted.length} DRA claims and templates, and the webhook reads at most ${MAX_CLAIM_REFERENCES}`]));
    } else if (wanted.length > 0) {
      if (deps.readClaims) ({ claims, failures: claimFailures } = await deps.readClaims(namespace, wanted));
      else claimFailures = new Map(wanted.map((ref) => [`${ref.kind} ${echo(ref.name, 253)}`, 'no Kubernetes API to read it from (not running in a cluster)']));
    }
    let answers: RegistryAnswers | undefined;
    const lookup = deps.lookup && (async (images: readonly string[]) => (answers = await deps.lookup!(images)));
    const result = await withLookups((registry) => patchObject(pod, deps.options, { registry, claims, access: deps.access }), deps.options.registryLookup, lookup);
    deps.onDecided?.(result);
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
    const outcome: Outcome = refused.length > 0 ? 'not-wrapped' : wrapped.length > 0 ? 'wrapped' : 'unchanged';
    return allowedAnswer(uid, outcome, {
      dryRun,
      patch: [...result.patch, ...annotationOps(pod, annotations)],
      warnings: notWrappedWarnings(refused),
      wrapped,
      refused,
      skipped,
      log: { ...log, outcome, wrapped, ...(refused.length > 0 ? { notWrapped: refused.map((r) => ({ container: r.container, reason: shortReason(r.reason, 300), ...(r.fix ? { fix: fixLine(r.fix) } : {}) })) } : {}) },
    });
  } catch (error) {
    // A bug of ours: the pod goes in as it came, and says so.
    const answer = notWrapped('internal error in vram-preflight (see its log)', 'error');
    return { ...answer, log: { ...answer.log, error: error instanceof Error ? (error.stack ?? error.message) : String(error) } };
  }
}
