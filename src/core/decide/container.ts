/**
 * The decision for one container: is it a target (vLLM on an NVIDIA GPU),
 * what does it run, how much memory will vLLM ask for, and what its start
 * becomes. Everything it reads comes in as plain values, and its command and
 * args through the door's reader (YAML nodes for a render, JSON arrays for an
 * admitted pod); it returns a report and, for a target, the intended start.
 * Writing that start (a text edit, a JSON Patch) is the caller's.
 */
import type { Options } from '../options.js';
import { PreflightError, type DocumentRef, type ErrorDetails } from '../errors.js';
import { ANNOTATION_CONTAINERS, ANNOTATION_SKIP, imageIsVllmFamily, isHuggingfaceServer, mentionsVllmFlag, nameSelected, runsOnCpu, startsVllmInBackground, vllmEvidence } from './detect.js';
import { nvidiaGpuSignals, SIGNALS_CHECKED, type DeviceClaims, type GpuSignal } from '../tables/gpu.js';
import { parseImage, repositoryMatches } from '../tables/image-ref.js';
import { renderPreflightScript } from '../preflight.js';
import type { KeptAnchors } from '../yaml/edit.js';
import { isWrapped, resolveStart, WRAPPER_COMMAND, type ContainerStart, type StartEvidence, type StartSources } from './start.js';
import { readUtilization, type EnvVar, type Utilization } from './utilization.js';
import type { IntendedStart, ValuePath } from './values.js';
import { VERSION } from '../version.js';

export type Action = 'wrap' | 'rewrap' | 'unchanged' | 'unwrap' | 'skip' | 'cannot-wrap' | 'error';

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
  /** The GPU signals seen, for explain (`nvidia.com/gpu=2`, `runtimeClassName nvidia`). */
  gpus: string[];
  gpuSignals: GpuSignal[];
  startOrigin?: string;
  startEvidence?: StartEvidence;
  /** Seconds the kubelet gives the container before its startup (or liveness) probe kills it. */
  probeBudgetSeconds?: number;
  warnings: string[];
  /** Facts explain shows that are neither warnings nor errors. */
  notes: string[];
  error?: PreflightError;
}

export interface PodControls {
  skip: boolean;
  forced: boolean;
  utilizationAnnotation?: { key: string; value: string };
}

/** A container's `command` or `args` as the cluster reads them: null when absent, null or empty. */
export interface ArgvRead {
  items: string[] | null;
  /** Labels on the items that must travel with them (YAML anchors); opaque to the decision. */
  anchors?: (string | undefined)[];
}

/** Reads a container's command or args; throws PreflightError when they cannot be read as lists of strings. */
export type ArgvReader = (key: 'command' | 'args') => ArgvRead;

export interface ContainerInput {
  value: Record<string, unknown>;
  readArgv: ArgvReader;
  /** Path of the container in the document's value. */
  path: ValuePath;
  podSpec: Record<string, unknown>;
  controls: PodControls;
  /** Leave a container that is already wrapped exactly as it is (the webhook: the render or a reinvocation wrapped it). */
  keepWrapped?: boolean;
  claims: DeviceClaims;
  options: Options;
  sources: StartSources;
  context: ErrorDetails;
  onWanted: (image: string) => void;
}

/** The start a container gets, and the labels its old items carry to their new places. */
export interface ContainerEdit {
  intended: IntendedStart;
  anchors: KeptAnchors;
}

export interface ContainerDecision {
  report: ContainerReport;
  edit?: ContainerEdit;
}

/** Containers of one render share their settings: render each distinct script once (10,000 containers, one script). */
const scripts = new Map<string, string>();
function preflightScript(settings: Parameters<typeof renderPreflightScript>[0]): string {
  const key = JSON.stringify(settings);
  let script = scripts.get(key);
  if (script === undefined) {
    script = renderPreflightScript(settings);
    if (scripts.size > 64) scripts.clear();
    scripts.set(key, script);
  }
  return script;
}

function probeBudget(container: Record<string, unknown>): number | undefined {
  const probe = (container.startupProbe ?? container.livenessProbe) as Record<string, unknown> | undefined;
  if (!probe || typeof probe !== 'object') return undefined;
  const n = (v: unknown, d: number) => (typeof v === 'number' ? v : d);
  return n(probe.initialDelaySeconds, 0) + n(probe.failureThreshold, 3) * n(probe.periodSeconds, 10);
}

function hasConfigEntry(image: string | undefined, options: Options): boolean {
  if (image === undefined) return false;
  const reference = parseImage(image);
  return options.images.some((entry) => repositoryMatches(reference, entry.repository));
}

/** Anchors on the old command/args items, carried to where those items land in the new lists. */
function keptAnchors(command: (string | undefined)[] | undefined, args: (string | undefined)[] | undefined, wrapped: boolean, commandLength: number, startFromImage: number, unwrap: boolean): KeptAnchors {
  const inStart: (string | undefined)[] = [];
  if (wrapped) (args ?? []).slice(2).forEach((a, i) => (inStart[i] = a));
  else {
    (command ?? []).forEach((a, i) => (inStart[i] = a));
    (args ?? []).forEach((a, i) => (inStart[(commandLength || startFromImage) + i] = a));
  }
  if (!inStart.some(Boolean)) return {};
  return unwrap ? { command: inStart } : { args: [undefined, undefined, ...inStart] };
}

export function decideContainer(input: ContainerInput, base: Pick<ContainerReport, 'document' | 'workload' | 'template'>): ContainerDecision {
  const { value: container, options, controls, context } = input;
  const name = String(container.name ?? '?');
  const image = typeof container.image === 'string' ? container.image : undefined;
  const gpu = nvidiaGpuSignals({ container, podSpec: input.podSpec, claims: input.claims });
  const report: ContainerReport = { ...base, container: name, initContainer: false, image, action: 'skip', reason: '', gpus: gpu.signals.map((s) => s.detail), gpuSignals: gpu.signals, warnings: [], notes: [] };
  try {
    const command = input.readArgv('command');
    const args = input.readArgv('args');
    const wrapped = isWrapped(command.items, args.items);
    if (wrapped && input.keepWrapped) {
      report.action = 'unchanged';
      report.reason = 'already wrapped (by vram-preflight at render time, or by this webhook before)';
      return { report };
    }
    const written = wrapped ? args.items!.slice(2) : [...(command.items ?? []), ...(args.items ?? [])];
    let start: ContainerStart | undefined;
    const resolve = (): ContainerStart => (start ??= resolveStart({ command: command.items, args: args.items, image }, input.sources, context, input.onWanted));

    const skipBecause = ((): string | undefined => {
      if (controls.skip) return `opted out by annotation ${ANNOTATION_SKIP}`;
      if (controls.forced) return undefined;
      if (!nameSelected(name, options.containerNames)) return `name not matched by containerNames (${options.containerNames.join(', ')})`;
      const family = imageIsVllmFamily(image) || isHuggingfaceServer(image, written) || hasConfigEntry(image, options);
      const runsVllmAsWritten = vllmEvidence(image, written) !== undefined;
      if (gpu.signals.length === 0) {
        if (gpu.unknownClaims.length && (family || runsVllmAsWritten)) {
          report.warnings.push(`vLLM with DRA ${gpu.unknownClaims.join(', ')} defined outside this render: cannot tell whether it is an NVIDIA GPU, so it is not wrapped (name it in ${ANNOTATION_CONTAINERS} to wrap it)`);
          report.notes.push(`DRA claim unknown: ${gpu.unknownClaims.join(', ')}`);
        }
        if (family || runsVllmAsWritten) return `no NVIDIA GPU: checked ${SIGNALS_CHECKED}; vLLM on CPU, AMD or Intel needs no wait (name it in ${ANNOTATION_CONTAINERS} if it does run on an NVIDIA GPU)`;
        return 'not vLLM (neither its image nor its start names vLLM), and no NVIDIA GPU';
      }
      if (command.items !== null || wrapped) {
        // The start is written in the manifest: it alone decides.
        const evidence = vllmEvidence(image, written);
        if (!evidence) return `its start runs ${written[0]}, not vLLM (name it in ${ANNOTATION_CONTAINERS} if it starts vLLM indirectly)`;
        report.reason = evidence;
      } else if (family) {
        // No command: the image's ENTRYPOINT decides; an unknown one is refused, never skipped.
        const known = resolve();
        const evidence = vllmEvidence(image, known.start);
        if (!evidence && isHuggingfaceServer(image, known.start)) {
          if (!known.start.some((a) => a === '--backend' || a.startsWith('--backend='))) {
            report.warnings.push(`KServe huggingfaceserver picks its backend at run time (--backend auto) and may run vLLM, which is not wrapped: pass --backend=vllm, or name it in ${ANNOTATION_CONTAINERS}`);
          }
          return 'KServe huggingfaceserver without --backend=vllm';
        }
        if (!evidence) return `its start (${known.origin}) runs ${known.start[0] ?? 'nothing'}, not vLLM`;
        report.reason = `${evidence} (${known.origin})`;
      } else {
        if (mentionsVllmFlag(written)) report.warnings.push(`its args pass --gpu-memory-utilization (a vLLM flag) but the image is not known to run vLLM, so it is not wrapped: name it in ${ANNOTATION_CONTAINERS}, or add its image to the config file's images (like: vllm/vllm-openai for a mirror)`);
        return 'not vLLM (neither its image nor its start names vLLM)';
      }
      if (runsOnCpu(written)) return 'vLLM runs on CPU here (--device cpu)';
      report.reason += `; NVIDIA GPU: ${report.gpus.join(', ')}`;
      return undefined;
    })();
    if (controls.forced) report.reason = `named by annotation ${ANNOTATION_CONTAINERS}`;

    if (skipBecause !== undefined) {
      report.reason = skipBecause;
      if (!wrapped) return { report };
      // No longer a target: give it back its original start, which runs the same argv.
      report.action = 'unwrap';
      report.reason += '; restoring the start an earlier vram-preflight wrapped';
      const anchors = keptAnchors(command.anchors, args.anchors, true, 0, 0, true);
      return { report, edit: { anchors, intended: { path: input.path, command: written, args: null } } };
    }
    if (controls.forced && gpu.signals.length === 0) report.warnings.push('no NVIDIA GPU signal: the wait will see whatever GPUs nvidia-smi shows');

    const known = resolve();
    report.startOrigin = known.origin;
    report.startEvidence = known.evidence;
    report.warnings.push(...known.warnings);
    if (startsVllmInBackground(known.start)) {
      report.notes.push('its shell script starts vLLM in the background (`vllm serve … &`): the wait runs once before the script, not before a vLLM the script restarts itself');
    }
    const utilization = readUtilization({
      start: known.start,
      env: Array.isArray(container.env) ? (container.env as EnvVar[]) : [],
      hasEnvFrom: Array.isArray(container.envFrom) && container.envFrom.length > 0,
      annotation: controls.utilizationAnnotation,
      defaultValue: options.defaultUtilization,
      context,
    });
    report.utilization = utilization;
    if (utilization.source === 'default') {
      report.warnings.push(`no --gpu-memory-utilization: waiting for ${utilization.value} of each GPU; vLLM's own default is 0.9 before v0.21 and 0.92 since, so pass the flag explicitly`);
    }
    report.probeBudgetSeconds = probeBudget(container);
    if (report.probeBudgetSeconds !== undefined && options.timeoutSeconds >= report.probeBudgetSeconds) {
      const which = container.startupProbe ? 'startupProbe' : 'livenessProbe';
      report.warnings.push(`preflight timeout ${options.timeoutSeconds}s is not below the ${which} budget of ${report.probeBudgetSeconds}s: the kubelet, not the preflight, would end a long wait, without saying why`);
    }
    const terminationMessagePath = typeof container.terminationMessagePath === 'string' ? container.terminationMessagePath : '/dev/termination-log';
    const script = preflightScript({
      version: VERSION,
      utilization: utilization.value ?? 'from-args',
      headroomMiB: options.headroomMiB,
      nvidiaSmiTimeoutSeconds: options.nvidiaSmiTimeoutSeconds,
      timeoutSeconds: options.timeoutSeconds,
      pollIntervalSeconds: options.pollIntervalSeconds,
      logIntervalSeconds: options.logIntervalSeconds,
      onNvidiaSmiUnavailable: options.onNvidiaSmiUnavailable,
      terminationMessagePath,
    });
    const newArgs = [script, '--', ...known.start];
    if (wrapped && args.items!.length === newArgs.length && args.items!.every((item, i) => item === newArgs[i])) {
      report.action = 'unchanged';
      report.reason += '; already wrapped by this version with these options';
      return { report };
    }
    report.action = wrapped ? 'rewrap' : 'wrap';
    const fromImage = command.items === null && !wrapped ? known.start.length - (args.items?.length ?? 0) : 0;
    const anchors = keptAnchors(command.anchors, args.anchors, wrapped, command.items?.length ?? 0, fromImage, false);
    return { report, edit: { anchors, intended: { path: input.path, command: WRAPPER_COMMAND, args: newArgs } } };
  } catch (caught) {
    if (!(caught instanceof PreflightError)) throw caught;
    // The script renderer knows values, not containers: name the container in its errors.
    const error = caught.details.document ? caught : new PreflightError(caught.code, caught.message, { ...context, fix: caught.details.fix });
    report.action = 'error';
    report.reason = error.message;
    report.error = error;
    return { report };
  }
}
