/**
 * The pure transform: a manifest stream in, the rewritten stream plus a report
 * and diagnostics out. No I/O, no globals; the CLI supplies options and
 * decides what to print.
 */
import { isMap, isSeq, parseAllDocuments, type Document, type Node, type YAMLMap } from 'yaml';
import type { Options } from './config.js';
import { describeDocument, PreflightError, type DocumentRef, type ErrorDetails } from './errors.js';
import { LineIndex, lineEnding, splitStream } from './stream.js';
import { findWorkloadKind, LIST_KIND, type TemplatePath } from './workloads.js';
import {
  ANNOTATION_CONTAINERS,
  ANNOTATION_SKIP,
  ANNOTATION_UTILIZATION,
  nameSelected,
  nvidiaGpus,
  runsOnCpu,
  vllmEvidence,
  imageNamesVllm,
} from './detect.js';
import { isWrapped, resolveStart, WRAPPER_COMMAND } from './start.js';
import { readUtilization, type EnvVar, type Utilization } from './utilization.js';
import { applyEdits, readArgv, startEdits, type TextEdit } from './rewrite.js';
import { renderPreflightScript } from './preflight.js';
import { VERSION } from './version.js';

export type Action = 'wrap' | 'rewrap' | 'unchanged' | 'unwrap' | 'skip' | 'error';

export interface ContainerReport {
  document: DocumentRef;
  /** `Deployment/name`. */
  workload: string;
  /** Path of the pod template inside the object, e.g. `spec.template`. */
  template: string;
  container: string;
  initContainer: boolean;
  image?: string;
  action: Action;
  reason: string;
  utilization?: Utilization;
  gpus: string[];
  startOrigin?: string;
  /** Seconds the kubelet gives the container before its startup (or liveness) probe kills it. */
  probeBudgetSeconds?: number;
  warnings: string[];
  error?: PreflightError;
}

export interface TransformResult {
  /** The output stream, in pieces (one per document chunk); empty when there are errors. */
  readonly pieces: readonly string[];
  /** The pieces joined (computed on first read). */
  readonly output: string;
  containers: ContainerReport[];
  errors: PreflightError[];
  warnings: string[];
}

/**
 * Cheap text test that decides whether a document is parsed at all: it must
 * hold containers and mention vLLM, an earlier wrap, an annotation of ours or
 * a configured image. Anything else cannot need a rewrite.
 */
function candidateTest(options: Options): (text: string) => boolean {
  const words = ['vllm', 'vram-preflight', ...options.images.map((i) => i.repository)];
  const mentions = new RegExp(words.map((w) => w.replace(/[\\^$.|?*+()[\]{}]/g, '\\$&')).join('|'), 'i');
  const containers = /containers"?\s*:/;
  return (text) => containers.test(text) && mentions.test(text);
}

type Plain = Record<string, unknown>;

function asObject(value: unknown): Plain | undefined {
  return value && typeof value === 'object' && !Array.isArray(value) ? (value as Plain) : undefined;
}

function getNode(map: unknown, path: readonly string[]): unknown {
  let node: unknown = map;
  for (const key of path) {
    if (!isMap(node)) return undefined;
    node = node.get(key, true);
  }
  return node;
}

interface Context {
  lines: LineIndex;
  chunkOffset: number;
  chunkText: string;
  doc: Document;
  ref: DocumentRef;
  nl: '\n' | '\r\n';
  options: Options;
  edits: TextEdit[];
  result: TransformResult;
}

function annotationsOf(objectValue: Plain | undefined): Record<string, unknown> {
  return asObject(asObject(objectValue?.metadata)?.annotations) ?? {};
}

function probeBudget(container: Plain): number | undefined {
  const probe = asObject(container.startupProbe) ?? asObject(container.livenessProbe);
  if (!probe) return undefined;
  const n = (v: unknown, d: number) => (typeof v === 'number' ? v : d);
  return n(probe.initialDelaySeconds, 0) + n(probe.failureThreshold, 3) * n(probe.periodSeconds, 10);
}

/** Plain values were converted once per document; nodes and values are walked side by side. */
function valueAt(value: unknown, path: readonly (string | number)[]): unknown {
  let current = value;
  for (const key of path) current = (current as Record<string | number, unknown> | undefined)?.[key];
  return current;
}

function visitObject(node: unknown, objectValue: unknown, ctx: Context, where: string): void {
  const value = asObject(objectValue);
  if (!isMap(node) || !value) return;
  if (value.kind === LIST_KIND) {
    const items = node.get('items', true);
    if (isSeq(items)) items.items.forEach((item, i) => visitObject(item, valueAt(value, ['items', i]), ctx, `${where}items[${i}].`));
    return;
  }
  const kind = findWorkloadKind(value.kind, value.apiVersion);
  if (!kind) return;
  const workload = `${String(value.kind)}/${String(asObject(value.metadata)?.name ?? '?')}`;
  for (const path of kind.templates) visitTemplate(node, value, path, ctx, workload, where);
}

function visitTemplate(objectNode: YAMLMap, objectValue: Plain, path: TemplatePath, ctx: Context, workload: string, where: string): void {
  const templateNode = getNode(objectNode, path);
  if (!isMap(templateNode)) return;
  const template = asObject(valueAt(objectValue, path)) ?? {};
  const annotations = { ...annotationsOf(objectValue), ...(path.length ? annotationsOf(template) : {}) };
  const templatePath = `${where}${path.join('.') || '(object)'}`;
  const base = { document: ctx.ref, workload, template: templatePath };
  const docContext: ErrorDetails = { document: ctx.ref };

  const skipValue = annotations[ANNOTATION_SKIP];
  const forcedValue = annotations[ANNOTATION_CONTAINERS];
  const utilValue = annotations[ANNOTATION_UTILIZATION];
  try {
    if (skipValue !== undefined && skipValue !== 'true' && skipValue !== 'false') {
      throw new PreflightError('BAD_ANNOTATION', `annotation ${ANNOTATION_SKIP} is "${String(skipValue)}"`, { ...docContext, fix: 'use "true" or "false"' });
    }
    if (forcedValue !== undefined && typeof forcedValue !== 'string') {
      throw new PreflightError('BAD_ANNOTATION', `annotation ${ANNOTATION_CONTAINERS} must be a comma-separated string of container names`, docContext);
    }
    if (utilValue !== undefined && typeof utilValue !== 'string') {
      throw new PreflightError('BAD_ANNOTATION', `annotation ${ANNOTATION_UTILIZATION} must be a quoted string such as "0.9"`, docContext);
    }
  } catch (error) {
    record(ctx, { ...base, container: '*', initContainer: false, action: 'error', reason: (error as Error).message, gpus: [], warnings: [] }, error);
    return;
  }
  const forced = new Set((forcedValue ?? '').split(',').map((s) => s.trim()).filter(Boolean));
  const spec = getNode(templateNode, ['spec']);
  const containers = getNode(spec, ['containers']);
  const initContainers = getNode(spec, ['initContainers']);
  const containerValues = valueAt(template, ['spec', 'containers']);
  const initContainerValues = valueAt(template, ['spec', 'initContainers']);
  if (isSeq(initContainers)) {
    for (const [i] of initContainers.items.entries()) {
      const c = asObject(valueAt(initContainerValues, [i])) ?? {};
      record(ctx, { ...base, container: String(c.name ?? '?'), initContainer: true, image: c.image as string | undefined, action: 'skip', reason: 'init container: it does not re-run when the model container restarts', gpus: nvidiaGpus(c.resources), warnings: [] });
    }
  }
  const names = new Set<string>();
  if (isSeq(containers)) {
    for (const [i, item] of containers.items.entries()) {
      if (!isMap(item)) continue;
      const container = asObject(valueAt(containerValues, [i])) ?? {};
      const name = String(container.name ?? '?');
      names.add(name);
      visitContainer(item, container, ctx, base, {
        skip: skipValue === 'true',
        forced: forced.has(name),
        utilizationAnnotation: typeof utilValue === 'string' ? { key: ANNOTATION_UTILIZATION, value: utilValue } : undefined,
      });
    }
  }
  for (const name of forced) {
    if (!names.has(name)) {
      const error = new PreflightError('BAD_ANNOTATION', `annotation ${ANNOTATION_CONTAINERS} names "${name}", which is not a container of this pod template`, { ...docContext, fix: `use one of: ${[...names].join(', ') || '(no containers)'}` });
      record(ctx, { ...base, container: name, initContainer: false, action: 'error', reason: error.message, gpus: [], warnings: [] }, error);
    }
  }
}

interface PodControls {
  skip: boolean;
  forced: boolean;
  utilizationAnnotation?: { key: string; value: string };
}

function visitContainer(node: YAMLMap, container: Plain, ctx: Context, base: Pick<ContainerReport, 'document' | 'workload' | 'template'>, controls: PodControls): void {
  const name = String(container.name ?? '?');
  const image = typeof container.image === 'string' ? container.image : undefined;
  const gpus = nvidiaGpus(container.resources);
  const report: ContainerReport = { ...base, container: name, initContainer: false, image, action: 'skip', reason: '', gpus, warnings: [] };
  const context: ErrorDetails = {
    document: ctx.ref,
    container: name,
    image,
    position: node.range ? ctx.lines.position(ctx.chunkOffset + node.range[0]) : undefined,
  };
  try {
    const command = readArgv(node, 'command', ctx.chunkText, context);
    const args = readArgv(node, 'args', ctx.chunkText, context);
    const wrapped = isWrapped(command, args);
    const written = wrapped ? args!.slice(2) : [...(command ?? []), ...(args ?? [])];

    const skipBecause = ((): string | undefined => {
      if (controls.skip) return `opted out by annotation ${ANNOTATION_SKIP}`;
      if (controls.forced) return undefined;
      if (!nameSelected(name, ctx.options.containerNames)) return `name not matched by containerNames (${ctx.options.containerNames.join(', ')})`;
      // A wrapped start may come from the image ENTRYPOINT, so the image still counts then.
      const evidence = vllmEvidence(image, written, command !== null && !wrapped);
      if (!evidence) {
        return command !== null && !wrapped && imageNamesVllm(image)
          ? `its command runs ${written[0]}, not vLLM (name it in ${ANNOTATION_CONTAINERS} if it starts vLLM indirectly)`
          : 'not vLLM (neither its image nor its command names vLLM)';
      }
      if (gpus.length === 0) return 'no NVIDIA GPU requested (vLLM on CPU, AMD or Intel, or no GPU)';
      if (runsOnCpu(written)) return 'vLLM runs on CPU here (--device cpu)';
      report.reason = `${evidence}; NVIDIA GPU ${gpus.join(', ')}`;
      return undefined;
    })();
    if (controls.forced) report.reason = `named by annotation ${ANNOTATION_CONTAINERS}`;

    if (skipBecause !== undefined) {
      report.reason = skipBecause;
      if (wrapped) {
        // No longer a target: give it back its original start, which runs the same argv.
        report.action = 'unwrap';
        report.reason += '; restoring the start an earlier vram-preflight wrapped';
        ctx.edits.push(...startEdits(ctx.chunkText, node, written, null, ctx.nl, context));
      }
      record(ctx, report);
      return;
    }
    if (controls.forced && gpus.length === 0) report.warnings.push('no nvidia.com/gpu in its resources: the wait will see whatever GPUs nvidia-smi shows');

    const start = resolveStart({ command, args, image }, ctx.options.images, context);
    report.startOrigin = start.origin;
    const env = Array.isArray(container.env) ? (container.env as EnvVar[]) : [];
    const utilization = readUtilization({
      start: start.start,
      env,
      hasEnvFrom: Array.isArray(container.envFrom) && container.envFrom.length > 0,
      annotation: controls.utilizationAnnotation,
      defaultValue: ctx.options.defaultUtilization,
      context,
    });
    report.utilization = utilization;
    if (utilization.source === 'default') {
      report.warnings.push(`no --gpu-memory-utilization: waiting for ${utilization.value} of each GPU; vLLM's own default is 0.9 before v0.21 and 0.92 since, so pass the flag explicitly`);
    }
    report.probeBudgetSeconds = probeBudget(container);
    if (report.probeBudgetSeconds !== undefined && ctx.options.timeoutSeconds >= report.probeBudgetSeconds) {
      const which = container.startupProbe ? 'startupProbe' : 'livenessProbe';
      report.warnings.push(`preflight timeout ${ctx.options.timeoutSeconds}s is not below the ${which} budget of ${report.probeBudgetSeconds}s: the kubelet, not the preflight, would end a long wait, without saying why`);
    }
    const terminationMessagePath = typeof container.terminationMessagePath === 'string' ? container.terminationMessagePath : '/dev/termination-log';
    const script = renderPreflightScript({
      version: VERSION,
      utilization: utilization.value,
      headroomMiB: ctx.options.headroomMiB,
      timeoutSeconds: ctx.options.timeoutSeconds,
      pollIntervalSeconds: ctx.options.pollIntervalSeconds,
      logIntervalSeconds: ctx.options.logIntervalSeconds,
      onNvidiaSmiUnavailable: ctx.options.onNvidiaSmiUnavailable,
      terminationMessagePath,
    });
    const newArgs = [script, '--', ...start.start];
    if (wrapped && sameList(args!, newArgs)) {
      report.action = 'unchanged';
      report.reason += '; already wrapped by this version with these options';
    } else {
      report.action = wrapped ? 'rewrap' : 'wrap';
      ctx.edits.push(...startEdits(ctx.chunkText, node, WRAPPER_COMMAND, newArgs, ctx.nl, context));
    }
    record(ctx, report);
  } catch (error) {
    if (!(error instanceof PreflightError)) throw error;
    report.action = 'error';
    report.reason = error.message;
    record(ctx, report, error);
  }
}

function sameList(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((item, i) => item === b[i]);
}

function record(ctx: Context, report: ContainerReport, error?: unknown): void {
  if (error instanceof PreflightError) {
    report.error = error;
    ctx.result.errors.push(error);
  }
  ctx.result.containers.push(report);
  if (error) return;
  for (const warning of report.warnings) {
    ctx.result.warnings.push(`${describeDocument(report.document)}, container "${report.container}": ${warning}`);
  }
}

const SOURCE_COMMENT = /^# Source: (.+?)\r?$/m;
/** A chunk of comments only: Helm 4 prints `---\n# Source: x\n---\n<document>`. */
const COMMENTS_ONLY = /^(---[ \t]*\r?\n?)?([ \t]*(#.*)?\r?(\n|$))*$/;

function documentRef(lines: LineIndex, chunkOffset: number, chunkText: string, doc: Document, value: Plain | undefined, index: number, previousChunk: string | undefined): DocumentRef {
  const contents = doc.contents as Node | null;
  const contentStart = contents?.range?.[0] ?? doc.range?.[0] ?? 0;
  const before = chunkText.slice(0, contentStart);
  const source =
    SOURCE_COMMENT.exec(before)?.[1] ??
    (previousChunk !== undefined && COMMENTS_ONLY.test(previousChunk) ? SOURCE_COMMENT.exec(previousChunk)?.[1] : undefined);
  const metadata = asObject(value?.metadata);
  const helmFilename = asObject(metadata?.annotations)?.['postrenderer.helm.sh/postrender-filename'];
  const ref: DocumentRef = {
    index,
    line: 0,
    kind: typeof value?.kind === 'string' ? value.kind : undefined,
    name: typeof metadata?.name === 'string' ? metadata.name : undefined,
    source,
    helmFilename: typeof helmFilename === 'string' ? helmFilename : undefined,
  };
  // Only messages need the line: computing it for every document would index the whole stream.
  Object.defineProperty(ref, 'line', { get: () => lines.position(chunkOffset + contentStart).line, enumerable: true });
  return ref;
}


export function transform(stream: string, options: Options): TransformResult {
  const pieces: string[] = [];
  let joined: string | undefined;
  const result = { pieces, containers: [], errors: [], warnings: [] } as unknown as TransformResult;
  // Joined on demand: the CLI writes the pieces, so a large stream is never copied whole.
  Object.defineProperty(result, 'output', { get: () => (result.errors.length ? '' : (joined ??= pieces.join(''))) });
  const isCandidate = candidateTest(options);
  const lines = new LineIndex(stream);
  let index = 0;
  let previousChunk: string | undefined;
  for (const chunk of splitStream(stream)) {
    index += 1;
    const previous = previousChunk;
    previousChunk = chunk.text;
    if (!isCandidate(chunk.text)) {
      pieces.push(chunk.text);
      continue;
    }
    const docs = parseAllDocuments(chunk.text);
    const edits: TextEdit[] = [];
    for (const [i, doc] of (Array.isArray(docs) ? docs : []).entries()) {
      const syntax = doc.errors[0];
      if (syntax) {
        // The parser's own "at line N" counts from the chunk, not the stream: drop it.
        const message = syntax.message.split('\n')[0]!.replace(/ at line \d+, column \d+:?$/, '');
        const position = lines.position(chunk.offset + syntax.pos[0]);
        result.errors.push(new PreflightError('YAML_SYNTAX', message, { position, fix: 'fix the chart template that renders this document' }));
        break;
      }
      let value: unknown;
      try {
        value = doc.toJS();
      } catch (error) {
        // toJS refuses alias bombs and the like: a YAML problem of this document.
        result.errors.push(new PreflightError('YAML_SYNTAX', (error as Error).message, { position: lines.position(chunk.offset + (doc.range?.[0] ?? 0)) }));
        continue;
      }
      const ref = documentRef(lines, chunk.offset, chunk.text, doc, asObject(value), index + i, i === 0 ? previous : undefined);
      const ctx: Context = { lines, chunkOffset: chunk.offset, chunkText: chunk.text, doc, ref, nl: lineEnding(chunk.text), options, edits, result };
      visitObject(doc.contents, value, ctx, '');
    }
    pieces.push(edits.length ? applyEdits(chunk.text, edits) : chunk.text);
  }
  return result;
}
