/**
 * The pure transform: a manifest stream in, the rewritten stream plus a report
 * and diagnostics out. No I/O, no globals; the CLI supplies options (and the
 * registry's answers, looked up at its edge) and decides what to print.
 *
 * Pipeline: cut the stream into documents on text alone (src/core/yaml/stream.ts);
 * parse only documents that may hold a target (`candidateTest`); find their
 * pod templates (src/core/tables/workloads.ts) and decide each container
 * (src/core/decide/container.ts); apply the edits (src/core/yaml/edit.ts) and check the edited
 * text means what was intended (src/core/yaml/verify.ts). Everything else is copied.
 */
import { isMap, isSeq, type Node } from 'yaml';
import type { Options } from './options.js';
import { decideContainer, type ContainerEdit, type ContainerReport, type PodControls } from './decide/container.js';
import { ANNOTATION_CONTAINERS, ANNOTATION_SKIP, ANNOTATION_UTILIZATION } from './decide/detect.js';
import { describeDocument, PreflightError, type DocumentRef, type ErrorDetails } from './errors.js';
import { emptyDeviceClaims, nvidiaGpuSignals, recordDeviceClaim, type DeviceClaims } from './tables/gpu.js';
import { KNOWN_IMAGES } from './tables/images.js';
import { applyEdits } from './yaml/edit.js';
import type { RegistryAnswers, StartSources } from './decide/start.js';
import { LineIndex, lineEnding, splitStream, type Chunk, type StreamText } from './yaml/stream.js';
import { formatPath, verifyEditedChunk, type IntendedStart } from './yaml/verify.js';
import { findOperatorKind, findWorkloadKind, LIST_KIND, OPERATOR_KINDS, templatesOf, type FoundTemplate } from './tables/workloads.js';
import { TARGET_WORDS } from './decide/target-words.js';
import { parseDocuments } from './yaml/fast-parse.js';
import { effectiveGet, findDuplicateKeys, resolveAlias, type ParsedDocument } from './yaml/nodes.js';

export type { Action, ContainerReport } from './decide/container.js';

export interface TransformResult {
  /** The output stream, in pieces (one per document chunk); empty when there are errors. */
  readonly pieces: readonly string[];
  /** The pieces joined (computed on first read). */
  readonly output: string;
  containers: ContainerReport[];
  errors: PreflightError[];
  warnings: string[];
  /** Images whose start only their registry can tell: the CLI looks them up and runs the transform again. */
  wantedImages: string[];
}

export interface TransformInput {
  /** Registry answers by image reference as written (src/registry, at the CLI's edge). */
  registry?: RegistryAnswers;
}

/**
 * Cheap text test that decides whether a document is parsed at all: it must
 * hold containers and mention vLLM, one of its family's images, an earlier
 * wrap, an annotation of ours or a configured image. A backslash may spell
 * any of these in a double-quoted escape, so it makes a document a candidate too.
 */
function candidateTest(options: Options): (text: string) => boolean {
  const all = [...TARGET_WORDS, ...KNOWN_IMAGES.map((i) => i.repository), ...options.images.map((i) => i.repository)].map((w) => w.toLowerCase());
  // A word that holds another one adds nothing to the test but time (every built-in repository names vllm, llm-d or huggingfaceserver).
  const words = [...new Set(all)].filter((w, _, list) => !list.some((other) => other !== w && w.includes(other)));
  const mentions = new RegExp(words.map((w) => w.replace(/[\\^$.|?*+()[\]{}]/g, '\\$&')).join('|'), 'i');
  const containersKey = /containers['"]?\s*:/;
  // The regex only where the word is: a native search rules most documents out at once.
  const hasContainers = (text: string): boolean => text.includes('containers') && containersKey.test(text);
  // Operator resources carry no `containers` key of their own (Dynamo, KubeAI), yet explain must name them.
  const operatorKind = new RegExp(`^kind:[ \\t]*['"]?(${OPERATOR_KINDS.map((k) => k.kind).join('|')})\\b`, 'm');
  return (text) => (hasContainers(text) || text.includes('\\') || operatorKind.test(text)) && (mentions.test(text) || text.includes('\\'));
}

/** DRA claims can be defined anywhere in the stream (Helm sorts unknown kinds last): read them first. */
function collectDeviceClaims(chunks: readonly Chunk[], fast: boolean): DeviceClaims {
  const claims = emptyDeviceClaims();
  for (const chunk of chunks) {
    if (!chunk.text.includes('ResourceClaim') || !chunk.text.includes('resource.k8s.io')) continue;
    for (const doc of parseDocuments(chunk.text, fast)) {
      if (doc.errors.length) continue;
      try {
        const value = doc.toJS() as unknown;
        if (value && typeof value === 'object' && String((value as Plain).apiVersion ?? '').startsWith('resource.k8s.io/')) recordDeviceClaim(claims, value as Plain);
      } catch {
        // An unreadable claim is simply not known: containers using it are reported as unknown.
      }
    }
  }
  return claims;
}

type Plain = Record<string, unknown>;

function asObject(value: unknown): Plain | undefined {
  return value && typeof value === 'object' && !Array.isArray(value) ? (value as Plain) : undefined;
}

function valueAt(value: unknown, path: readonly (string | number)[]): unknown {
  let current = value;
  for (const key of path) current = (current as Record<string | number, unknown> | undefined)?.[key];
  return current;
}

/** The node at a value path, following merge keys and aliases exactly as the value was built. */
function nodeAt(root: unknown, path: readonly (string | number)[], doc: ParsedDocument): unknown {
  let node = resolveAlias(root, doc);
  for (const step of path) {
    if (typeof step === 'number') node = isSeq(node) ? resolveAlias(node.items[step], doc) : undefined;
    else node = effectiveGet(node, step, doc);
  }
  return node;
}

function annotationsOf(objectValue: unknown): Plain {
  return asObject(asObject(asObject(objectValue)?.metadata)?.annotations) ?? {};
}

/** One document being visited. */
interface DocumentVisit {
  doc: ParsedDocument;
  value: unknown;
  ref: DocumentRef;
  chunk: Chunk;
  lines: LineIndex;
  nl: '\n' | '\r\n';
  options: Options;
  sources: StartSources;
  claims: DeviceClaims;
  result: TransformResult;
  edits: (ContainerEdit & { report: ContainerReport })[];
  wanted: Set<string>;
}

function record(visit: Pick<DocumentVisit, 'result'>, report: ContainerReport): void {
  visit.result.containers.push(report);
  if (report.error) {
    visit.result.errors.push(report.error);
    return;
  }
  // Inside a `kind: List` the document is the list: name the workload too.
  const doc = report.document;
  const workload = report.workload === `${doc.kind ?? '?'}/${doc.name ?? '?'}` ? '' : `, ${report.workload}`;
  for (const warning of report.warnings) visit.result.warnings.push(`${describeDocument(doc)}${workload}, container "${report.container}": ${warning}`);
}

function annotationError(visit: DocumentVisit, base: Pick<ContainerReport, 'document' | 'workload' | 'template'>, container: string, error: PreflightError): void {
  record(visit, { ...base, container, initContainer: false, action: 'error', reason: error.message, gpus: [], gpuSignals: [], warnings: [], notes: [], error });
}

interface Controls {
  skip?: string;
  forced?: string;
  utilization?: string;
}

/** Our annotations on one object or pod template, checked. */
function readControls(annotations: Plain, context: ErrorDetails): Controls {
  const skip = annotations[ANNOTATION_SKIP];
  const forced = annotations[ANNOTATION_CONTAINERS];
  const utilization = annotations[ANNOTATION_UTILIZATION];
  if (skip !== undefined && skip !== 'true' && skip !== 'false') {
    throw new PreflightError('BAD_ANNOTATION', `annotation ${ANNOTATION_SKIP} is "${String(skip)}"`, { ...context, fix: 'use "true" or "false"' });
  }
  if (forced !== undefined && typeof forced !== 'string') {
    throw new PreflightError('BAD_ANNOTATION', `annotation ${ANNOTATION_CONTAINERS} must be a comma-separated string of container names`, context);
  }
  if (utilization !== undefined && typeof utilization !== 'string') {
    throw new PreflightError('BAD_ANNOTATION', `annotation ${ANNOTATION_UTILIZATION} must be a quoted string such as "0.9"`, context);
  }
  return { skip: skip as string | undefined, forced: forced as string | undefined, utilization: utilization as string | undefined };
}

function names(list: string | undefined): Set<string> {
  return new Set((list ?? '').split(',').map((s) => s.trim()).filter(Boolean));
}

function visitObject(visit: DocumentVisit, value: unknown, at: readonly (string | number)[]): void {
  const object = asObject(value);
  if (!object) return;
  if (object.kind === LIST_KIND && Array.isArray(object.items)) {
    object.items.forEach((item, i) => visitObject(visit, item, [...at, 'items', i]));
    return;
  }
  const workload = `${String(object.kind)}/${String(asObject(object.metadata)?.name ?? '?')}`;
  const where = at.length ? `${formatPath(at)}.` : '';
  const operator = findOperatorKind(object.kind, object.apiVersion);
  if (operator) {
    visit.result.containers.push({ document: visit.ref, workload, template: `${where}(object)`, container: '-', initContainer: false, action: 'cannot-wrap', reason: `mentions vLLM, cannot be wrapped here: ${operator.why}`, gpus: [], gpuSignals: [], warnings: [], notes: [] });
    return;
  }
  const kind = findWorkloadKind(object.kind, object.apiVersion);
  if (!kind) return;
  const base = { document: visit.ref, workload, template: `${where}(object)` };
  let objectControls: Controls;
  try {
    objectControls = readControls(annotationsOf(object), { document: visit.ref });
  } catch (error) {
    annotationError(visit, base, '*', error as PreflightError);
    return;
  }
  const templates = templatesOf(kind, object);
  const seenNames = new Set<string>();
  for (const template of templates) {
    if (!template.isTemplate && kind.builtByOperatorWhen && asObject(valueAt(object, template.path))?.[kind.builtByOperatorWhen.key] !== undefined) {
      visit.result.containers.push({ ...base, template: `${where}${formatPath(template.path)}`, container: '-', initContainer: false, action: 'cannot-wrap', reason: `mentions vLLM, cannot be wrapped here: ${kind.builtByOperatorWhen.why}`, gpus: [], gpuSignals: [], warnings: [], notes: [] });
      continue;
    }
    for (const name of visitTemplate(visit, object, template, at, workload, where, objectControls)) seenNames.add(name);
  }
  // A workload-level name must match a container of some template (a LeaderWorkerSet names its worker's).
  for (const name of names(objectControls.forced)) {
    if (seenNames.has(name)) continue;
    const fix = `use one of: ${[...seenNames].join(', ') || '(no containers)'}`;
    annotationError(visit, base, name, new PreflightError('BAD_ANNOTATION', `annotation ${ANNOTATION_CONTAINERS} names "${name}", which is not a container of any pod template of this workload`, { document: visit.ref, fix }));
  }
}

/** Visits one pod template; returns its container names. */
function visitTemplate(visit: DocumentVisit, object: Plain, found: FoundTemplate, at: readonly (string | number)[], workload: string, where: string, objectControls: Controls): string[] {
  const templateValue = asObject(valueAt(object, found.path));
  const podSpec = found.isTemplate ? asObject(templateValue?.spec) : templateValue;
  const base = { document: visit.ref, workload, template: `${where}${found.path.length ? formatPath(found.path) : '(object)'}` };
  if (!podSpec) return [];
  let templateControls: Controls = {};
  try {
    if (found.isTemplate && found.path.length) templateControls = readControls(annotationsOf(templateValue), { document: visit.ref });
  } catch (error) {
    annotationError(visit, base, '*', error as PreflightError);
    return [];
  }
  const skip = (templateControls.skip ?? objectControls.skip) === 'true';
  const forcedHere = names(templateControls.forced);
  const forcedByObject = names(objectControls.forced);
  const utilization = templateControls.utilization ?? objectControls.utilization;
  const specPath = [...at, ...found.path, ...(found.isTemplate ? ['spec'] : [])];
  const containerNames: string[] = [];

  const initContainers = podSpec.initContainers;
  if (Array.isArray(initContainers)) {
    for (const c of initContainers.map(asObject)) {
      const gpus = nvidiaGpuSignals({ container: c ?? {}, podSpec, claims: visit.claims }).signals;
      visit.result.containers.push({ ...base, container: String(c?.name ?? '?'), initContainer: true, image: c?.image as string | undefined, action: 'skip', reason: 'init container: it does not re-run when the model container restarts', gpus: gpus.map((g) => g.detail), gpuSignals: gpus, warnings: [], notes: [] });
    }
  }
  const containers = podSpec.containers;
  if (Array.isArray(containers)) {
    containers.forEach((item, i) => {
      const container = asObject(item);
      const path = [...specPath, 'containers', i];
      const node = nodeAt(visit.doc.contents, path, visit.doc);
      if (!container || !isMap(node)) return;
      const name = String(container.name ?? '?');
      containerNames.push(name);
      const controls: PodControls = {
        skip,
        forced: forcedHere.has(name) || forcedByObject.has(name),
        utilizationAnnotation: utilization !== undefined ? { key: ANNOTATION_UTILIZATION, value: utilization } : undefined,
      };
      const context: ErrorDetails = { document: visit.ref, container: name, image: typeof container.image === 'string' ? container.image : undefined };
      // Only messages need the position: computing it here would index the lines of the whole stream.
      const start = node.range?.[0];
      if (start !== undefined) Object.defineProperty(context, 'position', { get: () => visit.lines.position(visit.chunk.offset + start), enumerable: true });
      const decision = decideContainer(
        { node, value: container, path, podSpec, doc: visit.doc, text: visit.chunk.text, nl: visit.nl, controls, claims: visit.claims, options: visit.options, sources: visit.sources, context, onWanted: (image) => visit.wanted.add(image) },
        base,
      );
      record(visit, decision.report);
      if (decision.edit) visit.edits.push({ ...decision.edit, report: decision.report });
    });
  }
  for (const name of forcedHere) {
    if (containerNames.includes(name)) continue;
    annotationError(visit, base, name, new PreflightError('BAD_ANNOTATION', `annotation ${ANNOTATION_CONTAINERS} names "${name}", which is not a container of this pod template`, { document: visit.ref, fix: `use one of: ${containerNames.join(', ') || '(no containers)'}` }));
  }
  return containerNames;
}

const SOURCE_COMMENT = /^# Source: (.+?)\r?$/m;
/** A chunk of comments only: Helm 4 prints `---\n# Source: x\n---\n<document>`. */
const COMMENTS_ONLY = /^(---[ \t]*\r?\n?)?([ \t]*(#.*)?\r?(\n|$))*$/;

function sourceOf(before: string, previousChunk: string | undefined): string | undefined {
  return SOURCE_COMMENT.exec(before)?.[1] ?? (previousChunk !== undefined && COMMENTS_ONLY.test(previousChunk) ? SOURCE_COMMENT.exec(previousChunk)?.[1] : undefined);
}

function documentRef(lines: LineIndex, chunk: Chunk, doc: ParsedDocument, value: Plain | undefined, index: number, previousChunk: string | undefined): DocumentRef {
  const contents = doc.contents as Node | null;
  const contentStart = contents?.range?.[0] ?? doc.range?.[0] ?? 0;
  const metadata = asObject(value?.metadata);
  const helmFilename = asObject(metadata?.annotations)?.['postrenderer.helm.sh/postrender-filename'];
  const ref: DocumentRef = {
    index,
    line: 0,
    kind: typeof value?.kind === 'string' ? value.kind : undefined,
    name: typeof metadata?.name === 'string' ? metadata.name : undefined,
    source: sourceOf(chunk.text.slice(0, contentStart), previousChunk),
    helmFilename: typeof helmFilename === 'string' ? helmFilename : undefined,
  };
  // Only messages need the line: computing it for every document would index the whole stream.
  Object.defineProperty(ref, 'line', { get: () => lines.position(chunk.offset + contentStart).line, enumerable: true });
  return ref;
}

/** A document that does not parse has no value: name it from its text, as well as that goes. */
function refFromText(lines: LineIndex, chunk: Chunk, index: number, previousChunk: string | undefined): DocumentRef {
  const kind = /^kind:[ \t]*["']?([A-Za-z0-9.-]+)/m.exec(chunk.text)?.[1];
  const name = /^metadata:[ \t]*\r?\n(?:[ \t]+.*\r?\n)*?[ \t]+name:[ \t]*["']?([A-Za-z0-9.-]+)/m.exec(chunk.text)?.[1];
  const line = lines.position(chunk.offset).line;
  return { index, line, kind, name, source: sourceOf(chunk.text, previousChunk) };
}

/** Applies a document chunk's edits, checks them, and refuses any edit that would mean more than intended. */
function editChunk(chunk: Chunk, values: readonly unknown[], edits: DocumentVisit['edits'][], result: TransformResult, fast: boolean): string {
  const all = edits.flat();
  if (all.length === 0) return chunk.text;
  const intended = (subset: readonly (readonly DocumentVisit['edits'][number][])[]): IntendedStart[][] => subset.map((list) => list.map((e) => e.intended));
  const edited = applyEdits(chunk.text, all.flatMap((e) => e.edits));
  const problem = verifyEditedChunk(edited, values, intended(edits), fast);
  if (!problem) return edited;
  // Find the edit(s) at fault: each alone, against the same check.
  const alone = all.map((one) => ({ one, problem: verifyEditedChunk(applyEdits(chunk.text, one.edits), values, intended(edits.map((list) => list.filter((e) => e === one))), fast) }));
  const culprits = alone.filter((a) => a.problem !== undefined);
  for (const { one, problem: single } of culprits.length ? culprits : alone) {
    const { report } = one;
    const message = `${(single ?? problem).message}, not just this container's command and args (YAML anchors, aliases or << merge keys share its text); nothing was written`;
    const error = new PreflightError('UNSAFE_EDIT', message, {
      document: report.document,
      container: report.container,
      image: report.image,
      fix: 'write this container\'s command, args and the containers around it without sharing them through anchors, aliases or << merge keys, or opt it out with vram-preflight.io/skip: "true"',
    });
    report.action = 'error';
    report.reason = message;
    report.error = error;
    result.errors.push(error);
  }
  return chunk.text;
}

export function transform(stream: StreamText, options: Options, input: TransformInput = {}): TransformResult {
  const pieces: string[] = [];
  let joined: string | undefined;
  const result = { pieces, containers: [], errors: [], warnings: [], wantedImages: [] } as unknown as TransformResult;
  // Joined on demand: the CLI writes the pieces, so a large stream is never copied whole.
  Object.defineProperty(result, 'output', { get: () => (result.errors.length ? '' : (joined ??= pieces.join(''))) });
  const isCandidate = candidateTest(options);
  const lines = new LineIndex(stream);
  const chunks = splitStream(stream);
  const fast = options.fastParse !== 'off';
  const claims = collectDeviceClaims(chunks, fast);
  const sources: StartSources = { images: options.images, registry: input.registry ?? new Map(), lookup: options.registryLookup };
  const wanted = new Set<string>();
  let index = 0;
  let previousChunk: string | undefined;
  for (const chunk of chunks) {
    index += 1;
    const previous = previousChunk;
    previousChunk = chunk.text;
    if (!isCandidate(chunk.text)) {
      pieces.push(chunk.text);
      continue;
    }
    const docs = parseDocuments(chunk.text, fast);
    const values: unknown[] = [];
    const editsByDoc: DocumentVisit['edits'][] = [];
    let broken = false;
    for (const [i, doc] of docs.entries()) {
      const syntax = doc.errors[0];
      if (syntax) {
        // The parser's own "at line N" counts from the chunk, not the stream: drop it.
        const message = syntax.message.split('\n')[0]!.replace(/ at line \d+, column \d+:?$/, '');
        const position = lines.position(chunk.offset + syntax.pos[0]);
        result.errors.push(new PreflightError('YAML_SYNTAX', message, { document: refFromText(lines, chunk, index + i, i === 0 ? previous : undefined), position, fix: 'fix the chart template that renders this document' }));
        broken = true;
        break;
      }
      let value: unknown;
      try {
        value = doc.toJS();
      } catch (error) {
        // toJS refuses alias bombs and the like: a YAML problem of this document.
        result.errors.push(new PreflightError('YAML_SYNTAX', (error as Error).message, { document: refFromText(lines, chunk, index + i, i === 0 ? previous : undefined), position: lines.position(chunk.offset + (doc.range?.[0] ?? 0)) }));
        broken = true;
        break;
      }
      values.push(value);
      const ref = documentRef(lines, chunk, doc, asObject(value), index + i, i === 0 ? previous : undefined);
      for (const dup of doc.uniqueKeys ? [] : findDuplicateKeys(doc.contents)) {
        result.warnings.push(`${describeDocument(ref)}: key "${dup.key}" appears more than once in ${dup.path}; the last value is used, as Helm and kubectl do`);
      }
      const visit: DocumentVisit = { doc, value, ref, chunk, lines, nl: lineEnding(chunk.text), options, sources, claims, result, edits: [], wanted };
      visitObject(visit, value, []);
      editsByDoc.push(visit.edits);
    }
    pieces.push(broken ? chunk.text : editChunk(chunk, values, editsByDoc, result, fast));
  }
  result.wantedImages = [...wanted];
  return result;
}
