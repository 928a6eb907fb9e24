/**
 * The walk over one object: its kind's pod templates (src/core/tables/workloads.ts),
 * our annotations on the object and each template, and a decision for every
 * container (./container.ts). The object is a plain value (a rendered
 * document's, or a pod the API server admits); a door says how to read a
 * container's command and args (`ObjectVisit.access`) and writes the edits.
 */
import type { Options } from '../options.js';
import { describeDocument, PreflightError, type DocumentRef, type ErrorDetails, type SourcePosition } from '../errors.js';
import { nvidiaGpuSignals, type DeviceClaims } from '../tables/gpu.js';
import { apiGroup, findOperatorKind, findWorkloadKind, LIST_KIND, TEMPLATE_KIND, templatesOf, type FoundTemplate, type WorkloadKind } from '../tables/workloads.js';
import { asObject, formatPath, valueAt, type Plain } from '../values.js';
import { decideContainer, type ArgvReader, type ContainerEdit, type ContainerReport, type PodControls } from './container.js';
import { ANNOTATION_CONTAINERS, ANNOTATION_SKIP, ANNOTATION_UTILIZATION } from './detect.js';
import type { StartSources } from './start.js';
import { overwriteRequested, RAY_CONTAINER_INDEX, RAY_OVERWRITE_ANNOTATION, rayServeRunsVllm } from './kuberay.js';
import { containersStartingVllm, mentionsVllm, vllmImageWithoutContainers } from './unrecognised.js';
import { unwrappedGpuWorkers } from './multinode.js';



function annotationsOf(objectValue: unknown): Plain {
  return asObject(asObject(asObject(objectValue)?.metadata)?.annotations) ?? {};
}

/** Where a door keeps what the walk finds: every container's report, and the messages. */
export interface WalkResult {
  containers: ContainerReport[];
  errors: PreflightError[];
  warnings: string[];
}

/** How a door lets the walk read one container: its command and args, and where it is in the input. */
export interface ContainerAccess {
  readArgv: ArgvReader;
  /** Its position in the input stream, for messages (computed only when one is written). */
  position?: () => SourcePosition;
}

/** One object (a document's value, or a pod) being walked. */
export interface ObjectVisit {
  ref: DocumentRef;
  options: Options;
  sources: StartSources;
  claims: DeviceClaims;
  result: WalkResult;
  /** The door's access to the container at a value path; undefined when it cannot be read as one (it is left alone). */
  access: (path: readonly (string | number)[]) => ContainerAccess | undefined;
  /** Leave already wrapped containers as they are (the webhook). */
  keepWrapped?: boolean;
  /**
   * Writes one container's new start in the door's form (text edits, JSON
   * Patch operations); a PreflightError it throws refuses that container.
   */
  write: (edit: ContainerEdit, report: ContainerReport, context: ErrorDetails) => void;
  wanted: Set<string>;
}

function record(visit: Pick<ObjectVisit, 'result'>, report: ContainerReport): void {
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

function writeEdit(visit: ObjectVisit, edit: ContainerEdit, report: ContainerReport, context: ErrorDetails): void {
  try {
    visit.write(edit, report, context);
  } catch (error) {
    if (!(error instanceof PreflightError)) throw error;
    report.action = 'error';
    report.reason = error.message;
    report.error = error;
  }
}

function annotationError(visit: ObjectVisit, base: Pick<ContainerReport, 'document' | 'workload' | 'template'>, container: string, error: PreflightError): void {
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
    throw new PreflightError('BAD_ANNOTATION', `annotation ${ANNOTATION_CONTAINERS} must be a comma-separated string of container names`, {
      ...context,
      fix: `write it as one quoted string, e.g. ${ANNOTATION_CONTAINERS}: "vllm,sidecar"`,
    });
  }
  if (utilization !== undefined && typeof utilization !== 'string') {
    throw new PreflightError('BAD_ANNOTATION', `annotation ${ANNOTATION_UTILIZATION} must be a quoted string such as "0.9"`, {
      ...context,
      fix: `quote the value: ${ANNOTATION_UTILIZATION}: "0.9" (Kubernetes annotations are strings)`,
    });
  }
  return { skip: skip as string | undefined, forced: forced as string | undefined, utilization: utilization as string | undefined };
}

function names(list: string | undefined): Set<string> {
  return new Set((list ?? '').split(',').map((s) => s.trim()).filter(Boolean));
}

/** Decides every container of an object (and of every object in a `kind: List`), into `visit`. */
export function visitObject(visit: ObjectVisit, value: unknown, at: readonly (string | number)[]): void {
  const object = asObject(value);
  if (!object) return;
  if (object.kind === LIST_KIND && Array.isArray(object.items)) {
    object.items.forEach((item, i) => visitObject(visit, item, [...at, 'items', i]));
    return;
  }
  const workload = `${String(object.kind)}/${String(asObject(object.metadata)?.name ?? '?')}`;
  const where = at.length ? `${formatPath(at)}.` : '';
  const cannotWrap = (template: string, why: string): void => {
    visit.result.containers.push({ document: visit.ref, workload, template, container: '-', initContainer: false, action: 'cannot-wrap', reason: `mentions vLLM, cannot be wrapped here: ${why}`, gpus: [], gpuSignals: [], warnings: [], notes: [] });
  };
  const operator = findOperatorKind(object.kind, object.apiVersion);
  if (operator) {
    cannotWrap(`${where}(object)`, operator.why);
    return;
  }
  if (object.kind === TEMPLATE_KIND.kind && apiGroup(object.apiVersion) === TEMPLATE_KIND.group && Array.isArray(object[TEMPLATE_KIND.objects])) {
    (object[TEMPLATE_KIND.objects] as unknown[]).forEach((inner, i) => {
      const held = asObject(inner);
      if (!held || !mentionsVllm(held)) return;
      const heldOperator = findOperatorKind(held.kind, held.apiVersion);
      cannotWrap(`${where}${TEMPLATE_KIND.objects}[${i}] (${String(held.kind)}/${String(asObject(held.metadata)?.name ?? '?')})`, `${TEMPLATE_KIND.why}${heldOperator ? `; and then ${heldOperator.why}` : ''}`);
    });
    return;
  }
  const kind = findWorkloadKind(object.kind, object.apiVersion);
  if (!kind) {
    warnUnknownKind(visit, object, workload, where);
    return;
  }
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
  const first = visit.result.containers.length;
  for (const template of templates) {
    if (!template.isTemplate && kind.builtByOperatorWhen && asObject(valueAt(object, template.path))?.[kind.builtByOperatorWhen.key] !== undefined) {
      cannotWrap(`${where}${formatPath(template.path)}`, kind.builtByOperatorWhen.why);
      continue;
    }
    for (const name of visitTemplate(visit, object, kind, template, at, workload, where, objectControls)) seenNames.add(name);
  }
  if (kind.startedBy === 'kuberay' && rayServeRunsVllm(object)) {
    cannotWrap(`${where}spec.serveConfigV2`, 'vLLM runs inside Ray Serve actors that Ray starts in its worker processes, not as a container start; no container start of this object is vLLM\'s');
  }
  if (kind.multiNode) {
    for (const { skipped, wrapped } of unwrappedGpuWorkers(visit.result.containers.slice(first))) {
      visit.result.warnings.push(
        `${describeDocument(visit.ref)}: container "${wrapped.container}" (${wrapped.template}) is wrapped, but GPU container "${skipped.container}" of the same set (${skipped.template}: ${skipped.reason}) is not, so the wait protects only part of the model's GPUs; fix: add the annotation ${ANNOTATION_CONTAINERS}: "${skipped.container}" to ${skipped.template}.metadata.annotations`,
      );
    }
  }
  // A workload-level name must match a container of some template (a LeaderWorkerSet names its worker's).
  for (const name of names(objectControls.forced)) {
    if (seenNames.has(name)) continue;
    const fix = `use one of: ${[...seenNames].join(', ') || '(no containers)'}`;
    annotationError(visit, base, name, new PreflightError('BAD_ANNOTATION', `annotation ${ANNOTATION_CONTAINERS} names "${name}", which is not a container of any pod template of this workload`, { document: visit.ref, fix }));
  }
}

/**
 * A kind this walk does not know whose containers start vLLM on an NVIDIA
 * GPU: left as it is, but never in silence.
 */
function warnUnknownKind(visit: ObjectVisit, object: Plain, workload: string, where: string): void {
  const starting = containersStartingVllm(object, visit.claims);
  const named = starting.length === 0 ? vllmImageWithoutContainers(object) : undefined;
  if (named) {
    // An operator's resource: its pods are created later, by the operator, where the webhook can wrap them.
    const reason = `mentions vLLM, cannot be wrapped here: kind ${String(object.kind)} (${String(object.apiVersion)}) is not one vram-preflight knows and has no containers of its own; it names the vLLM image at ${where}${formatPath(named.path)}, so whatever reconciles it (its operator) creates the pods at run time: the admission webhook wraps those pods when they are created (docs/webhook.md)`;
    visit.result.containers.push({ document: visit.ref, workload, template: `${where}(object)`, container: '-', initContainer: false, image: named.image, action: 'cannot-wrap', reason, gpus: [], gpuSignals: [], warnings: [], notes: [] });
  }
  for (const found of starting) {
    const path = `${where}${formatPath(found.path)}`;
    const what = found.evidence === 'start' ? 'this one starts vLLM' : 'this one has a vLLM image and no command of its own (its image, or whatever creates its pods, decides its start: it may start vLLM)';
    const reason = `kind ${String(object.kind)} (${String(object.apiVersion)}) is not one vram-preflight knows, so its containers are not wrapped: ${what} on an NVIDIA GPU (${found.gpus.join(', ')})`;
    visit.result.containers.push({ document: visit.ref, workload, template: path, container: found.name, initContainer: false, image: found.image, action: 'skip', reason, gpus: found.gpus, gpuSignals: found.signals, warnings: [], notes: [] });
    visit.result.warnings.push(`${describeDocument(visit.ref)}, container "${found.name}" at ${path}: ${reason}; fix: file an issue naming the kind, its API group and where its pod templates are (a known kind is one row of vram-preflight's workload table)`);
  }
}

/** Visits one pod template; returns its container names. */
function visitTemplate(visit: ObjectVisit, object: Plain, kind: WorkloadKind, found: FoundTemplate, at: readonly (string | number)[], workload: string, where: string, objectControls: Controls): string[] {
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
  // KubeRay copies the Ray object's overwrite annotation into every template; either place counts.
  const rayOverwrite = overwriteRequested(annotationsOf(object)[RAY_OVERWRITE_ANNOTATION]) || overwriteRequested(annotationsOf(templateValue)[RAY_OVERWRITE_ANNOTATION]);
  const containerNames: string[] = [];

  const initContainers = podSpec.initContainers;
  if (Array.isArray(initContainers)) {
    for (const c of initContainers.map(asObject)) {
      const gpus = nvidiaGpuSignals({ container: c ?? {}, podSpec, claims: visit.claims }).signals;
      visit.result.containers.push({ document: base.document, workload: base.workload, template: base.template, container: String(c?.name ?? '?'), initContainer: true, image: c?.image as string | undefined, action: 'skip', reason: 'init container: it does not re-run when the model container restarts', gpus: gpus.map((g) => g.detail), gpuSignals: gpus, warnings: [], notes: [] });
    }
  }
  const containers = podSpec.containers;
  if (Array.isArray(containers)) {
    containers.forEach((item, i) => {
      const container = asObject(item);
      const path = [...specPath, 'containers', i];
      const access = container ? visit.access(path) : undefined;
      if (!container || !access) return;
      const name = String(container.name ?? '?');
      containerNames.push(name);
      const controls: PodControls = {
        skip,
        forced: forcedHere.has(name) || forcedByObject.has(name),
        utilizationAnnotation: utilization !== undefined ? { key: ANNOTATION_UTILIZATION, value: utilization } : undefined,
      };
      const context: ErrorDetails = { document: visit.ref, container: name, image: typeof container.image === 'string' ? container.image : undefined };
      // Only messages need the position: computing it here would index the lines of the whole stream.
      const { position } = access;
      if (position) Object.defineProperty(context, 'position', { get: position, enumerable: true });
      const decision = decideContainer(
        {
          value: container,
          readArgv: access.readArgv,
          path,
          podSpec,
          controls,
          keepWrapped: visit.keepWrapped,
          claims: visit.claims,
          ray: kind.startedBy === 'kuberay' && i === RAY_CONTAINER_INDEX ? { overwrite: rayOverwrite } : undefined,
          options: visit.options,
          sources: visit.sources,
          context,
          onWanted: (image) => visit.wanted.add(image),
        },
        base,
      );
      if (decision.edit) writeEdit(visit, decision.edit, decision.report, context);
      record(visit, decision.report);
    });
  }
  for (const name of forcedHere) {
    if (containerNames.includes(name)) continue;
    annotationError(visit, base, name, new PreflightError('BAD_ANNOTATION', `annotation ${ANNOTATION_CONTAINERS} names "${name}", which is not a container of this pod template`, { document: visit.ref, fix: `use one of: ${containerNames.join(', ') || '(no containers)'}` }));
  }
  return containerNames;
}
