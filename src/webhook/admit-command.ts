/**
 * `vram-preflight admit`: the webhook's answer without a cluster. Objects on
 * stdin, JSON or YAML, one or a stream (`kubectl get pod -o yaml`, `helm
 * template`, as kubectl takes them), each answered in order:
 *
 * - an AdmissionReview (what the API server sends): the AdmissionReview the
 *   webhook answers;
 * - a Pod: the pod as the webhook lets it in (patched, annotated);
 * - anything else (a Deployment, a LeaderWorkerSet, a Service): as the
 *   post-renderer writes it, its pod templates wrapped, the rest unchanged.
 *
 * One reader for every door: the input is read by the post-renderer's reader
 * (src/core/transform.ts, `setAside` for what the webhook answers), so merge
 * keys, duplicate keys, go-yaml's scalars, NEL/LS/PS, tags, nesting and alias
 * bombs are taken, or refused, as a render takes them; a JSON AdmissionReview
 * goes, byte for byte, to the webhook's own reader. stdin is read within the
 * webhook's body limit and must be UTF-8, as a request body must.
 *
 * The same decision as the webhook (src/webhook/admission.ts) and the
 * post-renderer, with the same options (flags, VRAM_PREFLIGHT_*, --config:
 * the chart's `config`) and the same registry lookups within the same budget.
 * The output comes in the input's format unless --output says otherwise; a
 * line per object on stderr says what was wrapped, what was not and why.
 *
 * Exit codes, as the CLI's: 0 the answer is on stdout (wrapped or nothing to
 * wrap); 1 a container would not be wrapped, or the input cannot be read as
 * Kubernetes objects (the reasons and fixes on stderr, nothing on stdout);
 * 2 usage or option error; 70 internal error (74, stdout could not be
 * written, is src/cli/process-io.ts's, which src/cli/bin.ts gives admit).
 */
import { isUtf8 } from 'node:buffer';
import { ACTION_EFFECTS, ANNOTATION_NOT_WRAPPED, applyPatch, asObject, candidateTest, type Chunk, collectDeviceClaims, type ContainerReport, type DeviceClaims, emptyDeviceClaims, escapeControl, findOperatorKind, findWorkloadKind, kindAndNameOf, MAX_NESTING, nestingDepth, nestingTooDeep, type Options, parseDocuments, patchObject, type PatchResult, type Plain, PreflightError, type ReadDocument, type RegistryAnswers, splitStream, transform, type TransformResult, VERSION, vllmImageWithoutContainers, withLookups, writeYaml } from '../core/index.js';
import { optionHelp, parseCommandLine, refuseRenderOnlyEnv, type FlagRow } from '../config/flags.js';
import { resolveOptions } from '../config/load.js';
import { CONFIG_FLAG } from '../config/sources.js';
import { quoteBounded } from '../config/suggest.js';
import { admit, notWrappedAnnotation, shortReason, type Admission, type AdmissionDependencies } from './admission.js';
import { echo } from './answers.js';
import { BODY_LIMIT } from './body.js';
import { admissionLookupOptions, DEFAULT_CACHE_SETTINGS, ImageStartCache, LOOKUP_FAILED } from './image-starts.js';
import { webhookMetrics } from './metrics.js';

const OUTPUT_FLAG = '--output';

/** admit's own flags (the wrap's options are the table's, src/config/flags.ts). */
export const ADMIT_ROWS: readonly FlagRow[] = [
  { flag: OUTPUT_FLAG, aliases: ['-o'], value: 'json|yaml', help: "the answer's format (default: the input's; several objects in JSON: a List)", doors: ['admit'], kind: 'door' },
];

export const ADMIT_HELP = `vram-preflight ${VERSION} admit: what the admission webhook answers, without a cluster

Usage:
  vram-preflight admit [options] < pod.yaml           the pod as the webhook lets it in
  vram-preflight admit [options] < review.json        the AdmissionReview the webhook answers
  vram-preflight admit [options] < deployment.yaml    a workload with its pod templates wrapped
  helm template NAME CHART | vram-preflight admit     every object of a render, in order

Kubernetes objects on stdin, JSON or YAML (a stream of documents, as kubectl
takes), at most ${BODY_LIMIT} bytes (the webhook's body limit); the answers on
stdout in the same format, and a line per object on stderr: what was wrapped,
what was not, and why. The same decision, options and registry lookups as
\`vram-preflight webhook\` (Pods, reviews) and the post-renderer (the rest).

Options (flag, or environment variable; the config file is the chart's \`config\`):
${optionHelp('admit', 'all', ADMIT_ROWS)}

Exit codes: 0 the answer is on stdout; 1 a container would not be wrapped, or
the input cannot be read as Kubernetes objects (reasons and fixes on stderr,
nothing on stdout); 2 usage or option error; 74 stdout could not be written;
70 internal error.
Docs: docs/webhook.md ("Try it without a cluster").
`;

export interface AdmitIO {
  /** stdin's bytes, at most `limit` and one more (which tells that there was more); or why it cannot be read. */
  stdin(limit: number): Promise<Uint8Array | string | { cannotRead: string }>;
  stdout: { write(text: string): unknown };
  stderr: { write(text: string): unknown };
  env: Readonly<Record<string, string | undefined>>;
  readFile(path: string): string;
}

export type Format = 'json' | 'yaml';

/** `vram-preflight admit ARGS`: the exit code. Never throws: a bug of ours is exit 70 with one line. */
export async function runAdmit(argv: readonly string[], io: AdmitIO): Promise<number> {
  try {
    return await run(argv, io);
  } catch (error) {
    io.stderr.write(`vram-preflight: error INTERNAL: internal error (a bug in vram-preflight ${VERSION}, not in the input): ${error instanceof Error ? `${error.name}: ${error.message}` : String(error)}\n`);
    return 70;
  }
}

async function run(argv: readonly string[], io: AdmitIO): Promise<number> {
  let options: Options;
  let output: Format | undefined;
  try {
    const line = parseCommandLine(argv, 'admit', ADMIT_ROWS);
    if (line.stop === '--help') {
      io.stdout.write(ADMIT_HELP);
      return 0;
    }
    if (line.stop === '--version') {
      io.stdout.write(`${VERSION}\n`);
      return 0;
    }
    if (line.words.length > 0) throw new PreflightError('USAGE', `unexpected argument ${quoteBounded(line.words[0])}`, { fix: 'admit reads the objects on stdin: vram-preflight admit < pod.yaml' });
    const wanted = line.door.get(OUTPUT_FLAG);
    if (wanted !== undefined && wanted !== 'json' && wanted !== 'yaml') throw new PreflightError('USAGE', `${OUTPUT_FLAG} is ${quoteBounded(wanted)}`, { fix: `use ${OUTPUT_FLAG} json or ${OUTPUT_FLAG} yaml (default: the input's format)` });
    output = wanted;
    refuseRenderOnlyEnv(io.env, 'admit');
    const configPath = line.wrap.find((f) => f.flag === CONFIG_FLAG)?.value;
    options = resolveOptions({ configPath, flags: line.wrap.filter((f) => f.flag !== CONFIG_FLAG) }, io);
  } catch (error) {
    if (!(error instanceof PreflightError)) throw error;
    io.stderr.write(`vram-preflight: ${error.format()}\n`);
    return 2;
  }
  let text: string;
  try {
    text = await readInput(io);
  } catch (error) {
    if (!(error instanceof PreflightError)) throw error;
    io.stderr.write(`vram-preflight: ${error.format()}\n`);
    return 1;
  }
  return admitText(text, options, io, output);
}

/**
 * The answers for `text` (stdin, read), with these options: exit code 0 or 1.
 * runAdmit once the options are read; and the entry of the test that takes
 * one corpus through all three doors (test/core/doors.test.ts).
 */
export async function admitText(text: string, options: Options, io: Pick<AdmitIO, 'stdout' | 'stderr' | 'env'>, output?: Format): Promise<number> {
  const say = new Messages(io);
  try {
    return await answerInput(text, output, options, io, say);
  } catch (error) {
    if (!(error instanceof PreflightError)) throw error;
    say.error(error);
    return 1;
  }
}

/** stdin as the webhook reads a body: within its limit, UTF-8 only (a lossy decoding would answer for an argv that was not sent). */
async function readInput(io: AdmitIO): Promise<string> {
  const read = await io.stdin(BODY_LIMIT);
  if (typeof read === 'object' && 'cannotRead' in read) {
    throw new PreflightError('IO', `cannot read stdin: ${read.cannotRead}`, { fix: 'give the objects on stdin: vram-preflight admit < pod.yaml, or kubectl get pod NAME -o yaml | vram-preflight admit' });
  }
  const bytes = typeof read === 'string' ? Buffer.from(read, 'utf8') : Buffer.from(read.buffer, read.byteOffset, read.byteLength);
  if (bytes.length > BODY_LIMIT) {
    throw new PreflightError('USAGE', `stdin holds more than ${BODY_LIMIT} bytes, the most the webhook reads of one admission request`, {
      fix: 'give admit the objects you want answered (kubectl get pod NAME -o yaml); for a whole render, vram-preflight explain < rendered.yaml reads any size',
    });
  }
  if (!isUtf8(bytes)) throw new PreflightError('BAD_ENCODING', 'the input is not UTF-8', { fix: 'Kubernetes objects are UTF-8 (the webhook answers another body 400); check what produced the input' });
  return bytes.toString('utf8');
}

/** What admit says on stderr: errors and warnings as the post-renderer says them, and a line per object. */
class Messages {
  /** Why each registry lookup failed (the webhook logs it; here there is no log to point to). */
  readonly lookupFailures = new Map<string, string>();

  constructor(private readonly io: Pick<AdmitIO, 'stderr'>) {}

  line(text: string): void {
    this.io.stderr.write(`vram-preflight: ${this.withLookupReasons(text)}\n`);
  }

  error(error: PreflightError): void {
    this.line(error.format());
  }

  /** "(the webhook's log says why)" where there is no webhook: the reasons are printed by lookupLines. */
  private withLookupReasons(text: string): string {
    return this.lookupFailures.size > 0 ? text.replaceAll(LOOKUP_FAILED, 'the lookup failed (why: the "registry lookup" line above)') : text;
  }

  lookupLines(): void {
    for (const [image, why] of this.lookupFailures) this.io.stderr.write(`vram-preflight: registry lookup of ${quoteBounded(escapeControl(image), 300)} failed: ${escapeControl(why)}\n`);
  }
}

/** Registry lookups as the webhook makes them: one cache for the run, the per-admission budget; the failures kept to be said. */
function lookups(options: Options, io: Pick<AdmitIO, 'env'>, say: Messages): (images: readonly string[]) => Promise<RegistryAnswers> {
  const log = (entry: Record<string, unknown>): void => {
    if (typeof entry.image === 'string' && typeof entry.error === 'string') say.lookupFailures.set(entry.image, entry.error);
  };
  const cache = new ImageStartCache(DEFAULT_CACHE_SETTINGS, webhookMetrics(), undefined, Date.now, log);
  return (images) => cache.answers(images, admissionLookupOptions(options, io.env));
}

const isPod = (value: unknown): boolean => {
  const object = asObject(value);
  return object?.kind === 'Pod' && (object.apiVersion === 'v1' || object.apiVersion === undefined);
};
const isReview = (value: unknown): boolean => asObject(value)?.kind === 'AdmissionReview';

/** `Kind/name` of an object, for the line that says what admit did with it. */
function objectName(value: unknown): string {
  const object = asObject(value);
  const metadata = asObject(object?.metadata);
  const name = typeof metadata?.name === 'string' ? metadata.name : typeof metadata?.generateName === 'string' ? `${metadata.generateName}*` : '?';
  return escapeControl(`${typeof object?.kind === 'string' ? object.kind : '?'}/${name}`);
}

/** One object answered: its value after the answer, whether the answer changed it, the lines that say what happened. */
interface Answer {
  value: unknown;
  changed: boolean;
  summary: string[];
  /** Refused: the reasons and fixes (stderr), and nothing on stdout. */
  refusal?: string[];
}

type Lookup = (images: readonly string[]) => Promise<RegistryAnswers>;

async function answerInput(text: string, output: Format | undefined, options: Options, io: Pick<AdmitIO, 'stdout' | 'env'>, say: Messages): Promise<number> {
  // JS's trimStart takes a BOM for white space; JSON.parse does not take one, the post-renderer writes it back.
  const trimmed = text.trimStart();
  if (trimmed === '') throw new PreflightError('USAGE', 'nothing on stdin', { fix: 'vram-preflight admit < pod.yaml (Pods, workloads or an AdmissionReview, JSON or YAML)' });
  const lookup = lookups(options, io, say);
  // One JSON object; JSON documents between `---` lines are a YAML stream, as kubectl reads them.
  if (trimmed.startsWith('{') && !/^---/m.test(text)) return answerJson(text.charCodeAt(0) === 0xfeff ? text.slice(1) : text, output ?? 'json', options, lookup, io, say);

  // YAML: every document read by the post-renderer's reader; what the webhook does not answer decided as the post-renderer decides it.
  const aside: ReadDocument[] = [];
  const rendered = await withLookups(
    (registry) => {
      aside.length = 0;
      return transform(text, options, { registry, candidates: 'deciding-mention', setAside: (read) => (isPod(read.value) || isReview(read.value)) && (aside.push(read), true) });
    },
    options.registryLookup,
    lookup,
  );
  for (const warning of [...new Set(rendered.warnings)]) say.line(`warning: ${escapeControl(warning)}`);
  if (rendered.errors.length > 0) {
    say.lookupLines();
    for (const error of rendered.errors) say.error(error);
    say.line(`nothing was written to stdout${rendered.errors.length > 1 ? ` (${rendered.errors.length} errors)` : ''}`);
    return 1;
  }
  const chunks = splitStream(text);
  const claims = claimsOnStdin(collectDeviceClaims(chunks, options.fastParse !== 'off'));
  return answerStream(chunks, rendered, aside, output ?? 'yaml', options, lookup, claims, io, say);
}

/**
 * One JSON object, read as the webhook reads a body (JSON.parse: what the API
 * server sends is JSON): an AdmissionReview goes to the webhook's handler as
 * it came, byte for byte; a Pod in the review the API server would send; any
 * other object is decided as the post-renderer decides it, as a patch.
 */
async function answerJson(source: string, output: Format, options: Options, lookup: Lookup, io: Pick<AdmitIO, 'stdout'>, say: Messages): Promise<number> {
  let json: Plain | undefined;
  try {
    json = asObject(JSON.parse(source));
  } catch (error) {
    throw new PreflightError('YAML_SYNTAX', `stdin is not JSON: ${(error as Error).message}`, { fix: 'give one JSON object, or YAML' });
  }
  if (!json || typeof json.kind !== 'string') throw new PreflightError('USAGE', 'stdin is not a Kubernetes object (no kind)', { fix: 'give a Pod, a workload or an AdmissionReview' });
  const noClaims = claimsOnStdin(emptyDeviceClaims());
  if (isReview(json)) {
    const answer = await answerReview(source, json, undefined, options, lookup, noClaims);
    return finish([answer], () => writeValues(output, [answer.value]), io, say);
  }
  const answer = isPod(json) ? await answerPod(json, undefined, options, lookup, noClaims, source) : await answerObject(json, source, options, lookup, say);
  // Unchanged, it goes back as it came; changed, it is written anew (JSON.stringify and the YAML writer recurse: within MAX_NESTING).
  if (!answer.changed && output === 'json') return finish([answer], () => source, io, say);
  return finish([answer], () => writeValues(output, [answer.value], nestingDepth(source)), io, say);
}

const NOT_READ = 'nothing to wrap: no container of it can start vLLM (passed through unread, as the post-renderer passes it)';

/**
 * The DRA claims a pod names, as the webhook reads them from the cluster:
 * here, from the ResourceClaims and ResourceClaimTemplates on stdin (as the
 * post-renderer reads them from the render); one that is not there is a
 * claim that could not be read, as for the webhook.
 */
function claimsOnStdin(known: DeviceClaims): ReadClaims {
  return async (_namespace, references) => {
    const failures = new Map<string, string>();
    for (const { kind, name } of references) {
      if (!(kind === 'ResourceClaim' ? known.claims : known.templates).has(name)) failures.set(`${kind} ${echo(name, 253)}`, `not on stdin (admit reads no cluster: give the ${kind} with the pod, e.g. kubectl get ${kind.toLowerCase()} NAME -o yaml)`);
    }
    return { claims: known, failures };
  };
}

type ReadClaims = NonNullable<AdmissionDependencies['readClaims']>;

/** The answer for a document the webhook answers: a Pod, an AdmissionReview (in YAML). */
function answerRead(read: ReadDocument, options: Options, lookup: Lookup, readClaims: ReadClaims): Promise<Answer> {
  if (isPod(read.value)) return answerPod(read.value as Plain, read.access, options, lookup, readClaims);
  // As the API server would send it: JSON. Its pod's command and args read from the YAML, as the post-renderer reads them.
  const access = read.access;
  return answerReview(JSON.stringify(read.value), read.value as Plain, (path) => access(['request', 'object', ...path]), options, lookup, readClaims);
}

/**
 * A Pod: the webhook's answer to its CREATE, applied. Its JSON, when it came
 * as JSON, goes into the review as it came (the webhook reads a pod nested
 * deeper than JSON.stringify could write again).
 */
async function answerPod(pod: Plain, access: ReadDocument['access'] | undefined, options: Options, lookup: Lookup, readClaims: ReadClaims, podJson?: string): Promise<Answer> {
  const metadata = asObject(pod.metadata);
  const request = {
    uid: 'vram-preflight-admit',
    kind: { group: '', version: 'v1', kind: 'Pod' },
    resource: { group: '', version: 'v1', resource: 'pods' },
    namespace: typeof metadata?.namespace === 'string' ? metadata.namespace : 'default',
    operation: 'CREATE',
  };
  const head = `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":${JSON.stringify(request).slice(0, -1)},"object":`;
  const review = `${head}${podJson ?? JSON.stringify(pod)}}}`;
  let decided: PatchResult | undefined;
  const admission = await admit(review, { options, lookup, readClaims, access, onDecided: (result) => (decided = result) });
  const response = (JSON.parse(admission.body) as { response: { patch?: string } }).response;
  const patch = response.patch ? (JSON.parse(Buffer.from(response.patch, 'base64').toString('utf8')) as Parameters<typeof applyPatch>[1]) : [];
  return { value: applyPatch(pod, patch), changed: patch.length > 0, ...admissionLines(objectName(pod), admission, decided) };
}

/** An AdmissionReview: the webhook's answer, from its text (JSON). */
async function answerReview(text: string, review: Plain, access: ReadDocument['access'] | undefined, options: Options, lookup: Lookup, readClaims: ReadClaims): Promise<Answer> {
  let decided: PatchResult | undefined;
  const admission = await admit(text, { options, lookup, readClaims, access, onDecided: (result) => (decided = result) });
  if (admission.status !== 200) {
    throw new PreflightError('USAGE', `the webhook would answer HTTP ${admission.status}: ${String((JSON.parse(admission.body) as { error?: unknown }).error)}`, { fix: 'give an AdmissionReview admission.k8s.io/v1 with request.uid (or a Pod)' });
  }
  const object = asObject(asObject(review.request)?.object);
  return { value: JSON.parse(admission.body), changed: true, ...admissionLines(`AdmissionReview (${object ? objectName(object) : 'no object'})`, admission, decided) };
}

/**
 * Any other object given as JSON: as the post-renderer answers it, as a patch
 * (its text edits are for block YAML). Read only where a mention could decide
 * a container, within MAX_NESTING, as the post-renderer reads a document.
 */
async function answerObject(object: Plain, source: string, options: Options, lookup: Lookup, say: Messages): Promise<Answer> {
  if (!candidateTest(options, 'deciding-mention')(source)) return { value: object, changed: false, summary: [unreadLine(object, objectName(object))] };
  const depth = nestingDepth(source);
  if (depth > MAX_NESTING) throw nestingTooDeep(`${depth} levels deep`, { index: 1, line: 1, kind: typeof object.kind === 'string' ? object.kind : undefined, name: typeof asObject(object.metadata)?.name === 'string' ? String(asObject(object.metadata)!.name) : undefined });
  const result = await withLookups((registry) => patchObject(object, options, { registry, keepWrapped: false }), options.registryLookup, lookup);
  for (const warning of [...new Set(result.warnings)]) say.line(`warning: ${escapeControl(warning)}`);
  const summary = reportLines(result.containers, objectName(object), true);
  if (result.errors.length > 0) return { value: object, changed: false, summary, refusal: result.errors.map((error) => error.format()) };
  return { value: applyPatch(object, result.patch), changed: result.patch.length > 0, summary };
}

/** What an admission did, on one line; and, where containers were refused, the not-wrapped annotation's lines. */
function admissionLines(what: string, admission: Admission, decided: PatchResult | undefined): Pick<Answer, 'summary' | 'refusal'> {
  // The webhook admits the pod unchanged and logs the bug; here there is no log: it is admit's internal error (exit 70).
  if (admission.log.level === 'error') throw new Error(`the webhook's handler failed: ${String(admission.log.error).split('\n')[0]}`);
  if (admission.outcome === 'ignored') return { summary: [`${what}: not decided: the webhook ignores it (${escapeControl(String(admission.log.ignored ?? ''))})`] };
  const parts: string[] = [];
  if (admission.wrapped.length > 0) parts.push(`wrapped: ${admission.wrapped.map(escapeControl).join(', ')}`);
  if (admission.refused.length > 0) parts.push(`not wrapped: ${admission.refused.map((r) => `${escapeControl(r.container || '(unnamed)')} (${shortReason(r.reason, 120)})`).join(', ')}`);
  const named = new Set([...admission.wrapped, ...admission.refused.map((r) => r.container)]);
  parts.push(...otherContainers((decided?.containers ?? []).filter((c) => !named.has(c.container))));
  const summary = [`${what}: ${parts.length > 0 ? parts.join('; ') : 'nothing to wrap: no containers'}`];
  if (admission.refused.length === 0) return { summary };
  const refusal = [
    ...notWrappedAnnotation(admission.refused).split('\n'),
    `the webhook would admit ${what} unchanged, with this in its annotation ${ANNOTATION_NOT_WRAPPED} and as warnings`,
  ];
  return { summary, refusal };
}

/** The containers neither wrapped nor refused: already wrapped, or not a target, and why. */
function otherContainers(reports: readonly ContainerReport[]): string[] {
  const parts: string[] = [];
  const named = (list: readonly ContainerReport[]): string => list.map((c) => `${escapeControl(c.container)} (${shortReason(c.reason, 120)})`).join(', ');
  const unchanged = reports.filter((c) => c.action === 'unchanged');
  const unwrapped = reports.filter((c) => c.action === 'unwrap');
  const skipped = reports.filter((c) => c.action === 'skip');
  const cannot = reports.filter((c) => c.action === 'cannot-wrap');
  if (unchanged.length > 0) parts.push(`already wrapped: ${unchanged.map((c) => escapeControl(c.container)).join(', ')}`);
  if (unwrapped.length > 0) parts.push(`unwrapped: ${named(unwrapped)}`);
  if (cannot.length > 0) parts.push(...cannot.map((c) => (c.container === '-' ? shortReason(c.reason, 200) : `cannot be wrapped: ${named([c])}`)));
  if (skipped.length > 0) parts.push(`not a target: ${named(skipped)}`);
  return parts;
}

/**
 * What admit says of an object the post-renderer passes through unread:
 * nothing in it can start vLLM; or, for an operator's resource that names a
 * vLLM image but holds no containers, that its pods are the webhook's to wrap.
 */
function unreadLine(value: unknown, name: string): string {
  const object = asObject(value)!;
  const known = findWorkloadKind(object.kind, object.apiVersion) ?? findOperatorKind(object.kind, object.apiVersion);
  const named = known ? undefined : vllmImageWithoutContainers(object);
  if (!named) return `${name}: ${NOT_READ}`;
  return `${name}: cannot be wrapped here: its kind is not one vram-preflight knows and it has no containers of its own; it names the vLLM image ${escapeControl(named.image)}, so its operator creates the pods, which the webhook wraps when they are created (admit answers such a pod: kubectl get pod NAME -o yaml | vram-preflight admit)`;
}

/** A line per workload of an object the post-renderer decided: wrapped, not wrapped, not a target, and why. */
function reportLines(reports: readonly ContainerReport[], what: string, read: boolean): string[] {
  if (reports.length === 0) return [`${what}: ${read ? 'nothing to wrap: no containers vram-preflight reads (docs/detection.md)' : NOT_READ}`];
  const byWorkload = new Map<string, ContainerReport[]>();
  for (const report of reports) byWorkload.set(report.workload, [...(byWorkload.get(report.workload) ?? []), report]);
  return [...byWorkload].map(([workload, list]) => {
    const parts: string[] = [];
    const wrapped = list.filter((c) => ACTION_EFFECTS[c.action].waits && ACTION_EFFECTS[c.action].writes);
    const failed = list.filter((c) => c.action === 'error');
    if (wrapped.length > 0) parts.push(`wrapped: ${wrapped.map((c) => escapeControl(c.container)).join(', ')}`);
    if (failed.length > 0) parts.push(`not wrapped: ${failed.map((c) => `${escapeControl(c.container)} (${shortReason(c.reason, 120)})`).join(', ')}`);
    parts.push(...otherContainers(list));
    return `${escapeControl(workload)}: ${parts.join('; ')}`;
  });
}

/**
 * A YAML stream: every document in order, each as its answer. What the
 * post-renderer decided is its output, byte for byte; a Pod or review the
 * webhook answered is written anew (the pod as it would be created).
 */
async function answerStream(chunks: readonly Chunk[], rendered: TransformResult, aside: readonly ReadDocument[], output: Format, options: Options, lookup: Lookup, readClaims: ReadClaims, io: Pick<AdmitIO, 'stdout'>, say: Messages): Promise<number> {
  const isCandidate = candidateTest(options, 'deciding-mention');
  const answers: Answer[] = [];
  const pieces = [...rendered.pieces];
  const values: unknown[] = [];
  let objects = aside.length;
  for (const [k, chunk] of chunks.entries()) {
    const answered = aside.filter((read) => read.chunk === k);
    if (answered.length > 0) {
      for (const read of answered) {
        if (read.documentsInChunk > 1) throw new PreflightError('USAGE', `${objectName(read.value)} shares its document chunk with another document (\`...\` without \`---\`)`, { document: read.ref, fix: 'separate the documents with --- lines' });
        const answer = await answerRead(read, options, lookup, readClaims);
        answers.push(answer);
        values.push(answer.value);
        if (answer.changed) pieces[k] = `${pieces[k]!.slice(0, read.contentStart)}${writeYaml(answer.value)}`;
      }
      continue;
    }
    // Decided by the post-renderer (or passed through unread): its output's objects, for the lines and --output json.
    const candidate = isCandidate(chunk.text);
    for (const [i, object] of objectsOf(pieces[k]!, k + 1, options).entries()) {
      if (object.value === undefined) {
        if (output === 'json') throw new PreflightError('USAGE', `${object.name} cannot be written as JSON: ${object.unread}`, { fix: 'leave --output out: the document is then written back as it came' });
        // What the post-renderer passes through unread, admit passes through too, and says why it is no object it answers.
        answers.push({ value: undefined, changed: false, summary: [`${object.name}: passed through unread: ${object.unread}`] });
        continue;
      }
      const own = rendered.containers.filter((c) => c.document.index === k + 1 + i);
      answers.push({ value: object.value, changed: false, summary: own.length > 0 || candidate ? reportLines(own, object.name, true) : [unreadLine(object.value, object.name)] });
      values.push(object.value);
      objects++;
    }
  }
  if (objects === 0) throw new PreflightError('USAGE', 'stdin holds no Kubernetes object', { fix: 'vram-preflight admit < pod.yaml (Pods, workloads or an AdmissionReview, JSON or YAML)' });
  return finish(answers, () => (output === 'yaml' ? pieces.join('') : writeValues('json', values)), io, say);
}

/**
 * The documents of a chunk as the post-renderer wrote them, named, with their
 * value; without one (and why) where it is no object admit can answer: not
 * valid YAML, no kind, nested past MAX_NESTING. The post-renderer passes such
 * a document through unread when nothing in it could start vLLM.
 */
function objectsOf(text: string, index: number, options: Options): { name: string; value?: unknown; unread?: string }[] {
  const byText = (why: string): { name: string; unread: string }[] => {
    const { kind, name } = kindAndNameOf(text);
    return [{ name: kind || name ? escapeControl(`${kind ?? '?'}/${name ?? '?'}`) : `document ${index}`, unread: why }];
  };
  if (nestingDepth(text) > MAX_NESTING) return byText(`it nests more than ${MAX_NESTING} levels deep`);
  const out: { name: string; value?: unknown; unread?: string }[] = [];
  for (const [i, doc] of parseDocuments(text, options.fastParse !== 'off').entries()) {
    const syntax = doc.errors[0];
    if (syntax) return [...out, ...byText(`not valid YAML (${escapeControl(syntax.message.split('\n')[0]!.replace(/ at line \d+, column \d+:?$/, ''))})`)];
    if (doc.contents === null || doc.contents === undefined) continue;
    let value: unknown;
    try {
      value = doc.toJS();
    } catch (error) {
      return [...out, ...byText(escapeControl((error as Error).message))];
    }
    if (typeof asObject(value)?.kind !== 'string') out.push({ name: `document ${index + i}`, unread: 'not a Kubernetes object (no kind)' });
    else out.push({ name: objectName(value), value });
  }
  return out;
}

/** Values in a format: one object as itself, several in JSON as a List (as kubectl prints them); at most MAX_NESTING deep. */
function writeValues(format: Format, values: readonly unknown[], depth = 0): string {
  if (depth > MAX_NESTING) {
    throw new PreflightError('NESTING_TOO_DEEP', `the object nests ${depth} levels deep; admit writes objects up to ${MAX_NESTING} levels (the webhook, which answers with a patch, does not write it)`, {
      fix: 'for the webhook\'s answer to such a pod, give admit its AdmissionReview (JSON); the post-renderer refuses such a document too',
    });
  }
  if (format === 'yaml') return values.map((value) => writeYaml(value)).join('---\n');
  const value = values.length === 1 ? values[0] : { apiVersion: 'v1', kind: 'List', items: values };
  return `${JSON.stringify(value, null, 2)}\n`;
}

/** Says what happened to each object (after why a lookup failed, which its reasons point to); the answer on stdout only when nothing was refused. */
function finish(answers: readonly Answer[], write: () => string, io: Pick<AdmitIO, 'stdout'>, say: Messages): number {
  say.lookupLines();
  const refused = answers.filter((answer) => answer.refusal !== undefined);
  for (const answer of refused) for (const line of answer.refusal!) say.line(line);
  for (const answer of answers) for (const line of answer.summary) say.line(line);
  if (refused.length > 0) {
    say.line('nothing was written to stdout');
    return 1;
  }
  let text: string;
  try {
    text = write();
  } catch (error) {
    if (!(error instanceof PreflightError)) throw error;
    say.error(error);
    return 1;
  }
  io.stdout.write(text);
  return 0;
}
