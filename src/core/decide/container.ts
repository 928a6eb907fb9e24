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
import { ANNOTATION_CONTAINERS, ANNOTATION_SKIP, huggingfaceServerMayRunVllm, imageIsVllmFamily, isHuggingfaceServerImage, mentionsVllmFlag, nameSelected, otherEngine, runsHuggingfaceServer, runsOnCpu, shellRunsPreflight, startsRayNode, startsVllmInBackground, vllmEvidence } from './detect.js';
import { nvidiaGpuSignals, otherAccelerators, SIGNALS_CHECKED, type DeviceClaims, type GpuFindings, type GpuSignal } from '../tables/gpu.js';
import { asBashWord, joinsAsOneCommand, kuberayStart, RAY_OVERWRITE_ANNOTATION, type RayStart } from './kuberay.js';
import { imageReferenceProblem, parseImage, repositoryMatches } from '../tables/image-ref.js';
import { PREFLIGHT_MARKER_PREFIX, renderPreflightScript } from '../preflight/script.js';
import type { KeptAnchors } from '../yaml/edit.js';
import { isWrapped, resolveStart, WRAPPER_COMMAND, type ContainerStart, type StartEvidence, type StartSources } from './start.js';
import { readUtilization, type EnvVar, type Utilization } from './utilization.js';
import { readScript } from './shell-script.js';
import type { IntendedStart, ValuePath } from '../values.js';
import { VERSION } from '../version.js';

export type Action = 'wrap' | 'rewrap' | 'unchanged' | 'unwrap' | 'skip' | 'cannot-wrap' | 'error';

/**
 * What each action means for the container's start, said once for every
 * reader (explain, the multi-node check, the webhook's annotations):
 * `waits`, it runs the preflight wait after this decision; `writes`, this
 * decision gives it a new start; `missed`, a container that should wait
 * does not, and the reason says why.
 */
export const ACTION_EFFECTS: Readonly<Record<Action, { waits: boolean; writes: boolean; missed: boolean }>> = {
  wrap: { waits: true, writes: true, missed: false },
  rewrap: { waits: true, writes: true, missed: false },
  unchanged: { waits: true, writes: false, missed: false },
  unwrap: { waits: false, writes: true, missed: false },
  skip: { waits: false, writes: false, missed: false },
  'cannot-wrap': { waits: false, writes: false, missed: true },
  error: { waits: false, writes: false, missed: true },
};

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
  /** Skipped because these DRA claims (`ResourceClaimTemplate x (claim "y")`) are not known, so its GPU cannot be told: a door that reads claims says why it could not. */
  unknownDeviceClaims?: string[];
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
  /** The Ray container of a KubeRay head or worker pod: KubeRay decides its start (./kuberay.ts). */
  ray?: { overwrite: boolean };
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

/** Why a written start is not vLLM: a known other engine by name; otherwise its program, with the way to opt in. */
function notVllmReason(written: readonly string[]): string {
  const engine = otherEngine(written);
  if (engine) return `its start runs ${engine}, not vLLM`;
  if (runsHuggingfaceServer(written)) return 'KServe huggingfaceserver without --backend=vllm';
  return `its start runs ${written[0]}, not vLLM (name it in ${ANNOTATION_CONTAINERS} if it starts vLLM indirectly)`;
}

/** huggingfaceserver left to pick its backend may run vLLM unwrapped: said, never guessed (docs/detection.md §5). */
const HUGGINGFACESERVER_RUN_TIME_BACKEND = `KServe huggingfaceserver picks its backend at run time (--backend auto) and may run vLLM, which is not wrapped: pass --backend=vllm, or name it in ${ANNOTATION_CONTAINERS}`;

/** Why a MIG instance cannot be waited on (docs/restart-race.md, MIG). */
const MIG_WHY = 'nvidia-smi reads the whole GPU there (or nothing, without privileges), never the instance, so a wait could not tell when the instance has memory (docs/restart-race.md#mig)';

/** The MIG signals of a container, for its reason; undefined when its GPU is no MIG instance. */
function migSignals(signals: readonly GpuSignal[]): string | undefined {
  const mig = signals.filter((s) => s.mig);
  return mig.length ? mig.map((s) => s.detail).join(', ') : undefined;
}

/**
 * Seconds the kubelet gives the container before a probe kills it: the startupProbe's, or
 * without one the livenessProbe's. A probe that cannot fail kills nothing: it is as if absent
 * (a startupProbe that cannot fail passes at once, and the livenessProbe then counts).
 */
function probeBudget(container: Record<string, unknown>): number | undefined {
  const probes = [container.startupProbe, container.livenessProbe].filter((p): p is Record<string, unknown> => typeof p === 'object' && p !== null);
  const probe = probes.find((p) => !cannotFail(p));
  if (!probe) return undefined;
  const n = (v: unknown, d: number) => (typeof v === 'number' ? v : d);
  return n(probe.initialDelaySeconds, 0) + n(probe.failureThreshold, 3) * n(probe.periodSeconds, 10);
}

/** Commands whose exit status is 0 whatever happens (a placeholder probe: `echo TBD`, `true`). */
const ALWAYS_SUCCEED = new Set(['true', ':', 'echo', 'printf']);

/**
 * An exec probe that cannot fail: its command (or each command of its `sh -c` script, read by
 * the one shell reader) only prints or returns true, with no redirection that could fail, or
 * is `exit 0`. A probe that runs anything else, or an HTTP, TCP or gRPC probe, can fail.
 */
function cannotFail(probe: Record<string, unknown>): boolean {
  const command = (probe.exec as { command?: unknown } | undefined)?.command;
  if (!Array.isArray(command) || command.length === 0 || !command.every((w) => typeof w === 'string')) return false;
  const argv = command as string[];
  const commands = SHELLS_FOR_PROBES.has(argv[0]!.slice(argv[0]!.lastIndexOf('/') + 1)) ? readScript(argv)?.commands : [{ words: argv }];
  if (!commands || commands.length === 0) return false;
  return commands.every(({ words }) => {
    if (words.some((w) => w.includes('>') || w.includes('<') || w.includes('$'))) return false;
    const program = words[0]!.slice(words[0]!.lastIndexOf('/') + 1);
    return ALWAYS_SUCCEED.has(program) || (program === 'exit' && (words[1] ?? '0') === '0');
  });
}
const SHELLS_FOR_PROBES = new Set(['sh', 'bash', 'dash', 'ash', 'zsh']);

function hasConfigEntry(image: string | undefined, options: Options): boolean {
  if (image === undefined) return false;
  const reference = parseImage(image);
  return options.images.some((entry) => repositoryMatches(reference, entry.repository));
}

/** A container we would look at whose image cannot be pulled is refused: no start can be read for it. */
function refuseImageNoRuntimePulls(image: string | undefined, ours: boolean): void {
  const problem = image === undefined || !ours ? undefined : imageReferenceProblem(image);
  if (problem) throw new PreflightError('BAD_CONTAINER', `the image is not an image reference: ${problem}`, { fix: 'write the image as [registry/]repository[:tag][@digest] with nothing around it; check the values that render it (a `|` block scalar or a value read from a file ends in a line break)' });
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

/** Why a container is not wrapped: its reason, and what its report says besides. */
interface Refusal {
  refused: string;
  warnings?: string[];
  notes?: string[];
  /** A vLLM that should wait but cannot be waited on (a MIG instance): 'cannot-wrap', not 'skip'. */
  cannotWrap?: true;
  unknownDeviceClaims?: string[];
}

/** The one way a check below says no. */
function refuse(reason: string, besides: Omit<Refusal, 'refused'> = {}): Refusal {
  return { refused: reason, ...besides };
}

/** A container to wrap, and why (the reason its report gives). */
interface Target {
  because: string;
}

/** What the checks below read of one container. */
interface Candidate {
  container: Record<string, unknown>;
  name: string;
  image: string | undefined;
  controls: PodControls;
  options: Options;
  gpu: GpuFindings;
  /** Its start as the manifest writes it (an earlier wrap's, unwrapped). */
  written: string[];
  wrapped: boolean;
  /** The manifest writes a command (or an earlier wrap, or KubeRay's join of command and args): that start alone decides. */
  startWritten: boolean;
  rayStart: RayStart | undefined;
  /** Its start, the image's ENTRYPOINT/CMD resolved where the manifest gives no command (once, on first use). */
  resolve: () => ContainerStart;
}

/** Whether to wrap: vLLM (by its image or its start), on an NVIDIA GPU, with a start of its own to wait before. */
function verdict(c: Candidate): Refusal | Target {
  if (c.controls.skip) return refuse(`opted out by annotation ${ANNOTATION_SKIP}`);
  refuseImageNoRuntimePulls(c.image, c.controls.forced || imageIsVllmFamily(c.image) || vllmEvidence(c.written) !== undefined);
  if (!c.wrapped && shellRunsPreflight(c.written, PREFLIGHT_MARKER_PREFIX)) return refuse('its shell script already runs the vram-preflight wait (a wrapped start that KubeRay joined into its bash -lc line)');
  const ray = kuberayRefusal(c);
  if (ray) return ray;
  if (c.controls.forced) return { because: `named by annotation ${ANNOTATION_CONTAINERS}` };
  if (!nameSelected(c.name, c.options.containerNames)) return refuse(`name not matched by containerNames (${c.options.containerNames.join(', ')})`);
  const family = imageIsVllmFamily(c.image) || isHuggingfaceServerImage(c.image) || hasConfigEntry(c.image, c.options);
  if (c.gpu.signals.length === 0) return noNvidiaGpu(c, family || vllmEvidence(c.written) !== undefined);
  const vllm = vllmStart(c, family);
  if ('refused' in vllm) return vllm;
  return noWaitPossible(c) ?? { because: `${vllm.because}; NVIDIA GPU: ${c.gpu.signals.map((s) => s.detail).join(', ')}` };
}

/** KubeRay's Ray container: a start KubeRay writes itself (`ray start`), or joins into a bash line it cannot be wrapped in. */
function kuberayRefusal(c: Candidate): Refusal | undefined {
  const forced = c.controls.forced;
  if (c.rayStart === 'ray-start') {
    return refuse('KubeRay starts this Ray container as `ray start` (no command or args), whatever its image: not a vLLM start of its own', {
      warnings: forced ? [`named by annotation ${ANNOTATION_CONTAINERS}, but KubeRay starts this Ray container as \`ray start\` (it gives no command or args): there is no start of its own to wait before, so it is not wrapped`] : [],
      notes: c.gpu.signals.length ? ['a vLLM that Ray starts on this GPU node (a Ray Serve deployment, a Ray actor) is not wrapped: it has no container start of its own to wait before'] : [],
    });
  }
  if (c.rayStart === 'joined' && !joinsAsOneCommand(c.written) && (forced || vllmEvidence(c.written) !== undefined)) {
    const why = `KubeRay joins this Ray container's command and args with spaces into one \`bash -lc\` line before \`ray start\`, and this start is not one plain command there (quotes, operators or a script)`;
    return refuse(`${why}: not wrapped`, {
      warnings: forced ? [`named by annotation ${ANNOTATION_CONTAINERS}, but ${why}: not wrapped; write the start as plain words (command: ["vllm", "serve", …]) or set ${RAY_OVERWRITE_ANNOTATION}: "true"`] : [],
    });
  }
  return undefined;
}

/** No NVIDIA GPU signal: why, for a container that looks like vLLM (by its image or its start) or not. */
function noNvidiaGpu(c: Candidate, looksLikeVllm: boolean): Refusal {
  const claims = c.gpu.unknownClaims;
  if (!looksLikeVllm) return refuse('not vLLM (neither its image nor its start names vLLM), and no NVIDIA GPU');
  if (claims.length) {
    // Unknown is not absent: say which claim could not be read, not "no NVIDIA GPU".
    return refuse(`GPU unknown: its DRA ${claims.join(', ')} is not in this render (or, at admission, could not be read), so whether it is an NVIDIA GPU cannot be told`, {
      warnings: [`vLLM with DRA ${claims.join(', ')} defined outside this render: cannot tell whether it is an NVIDIA GPU, so it is not wrapped (name it in ${ANNOTATION_CONTAINERS} to wrap it)`],
      notes: [`DRA claim unknown: ${claims.join(', ')}`],
      unknownDeviceClaims: claims,
    });
  }
  const others = otherAccelerators(c.container);
  if (others.length) return refuse(`no NVIDIA GPU: it asks for ${others.join(', ')}, where there is no nvidia-smi to wait on`);
  return refuse(`no NVIDIA GPU: checked ${SIGNALS_CHECKED}, none found, so there is no nvidia-smi to wait on (vLLM runs on the CPU or on another accelerator here; name it in ${ANNOTATION_CONTAINERS} if it does run on an NVIDIA GPU)`);
}

/** huggingfaceserver left to pick its backend: the warning its report carries. */
function backendWarning(start: readonly string[]): Omit<Refusal, 'refused'> {
  return huggingfaceServerMayRunVllm(start) ? { warnings: [HUGGINGFACESERVER_RUN_TIME_BACKEND] } : {};
}

/** Does the container start vLLM: by the start the manifest writes, else by its image's ENTRYPOINT (family images only; an unknown one is refused, never skipped). */
function vllmStart(c: Candidate, family: boolean): Refusal | Target {
  if (c.startWritten) {
    const evidence = vllmEvidence(c.written);
    if (!evidence && startsRayNode(c.written)) {
      return refuse(`a Ray node (its start runs \`ray start\`): vLLM runs here, if at all, in actors the Ray head schedules (Ray Serve, vLLM's Ray executor), not as this container's start (name it in ${ANNOTATION_CONTAINERS} to wait before it joins Ray)`);
    }
    if (!evidence) return refuse(notVllmReason(c.written), backendWarning(c.written));
    return { because: c.rayStart === 'joined' ? `${evidence} (KubeRay keeps it, joined into bash -lc before \`ray start\`)` : evidence };
  }
  if (family) {
    const known = c.resolve();
    const evidence = vllmEvidence(known.start);
    if (!evidence && runsHuggingfaceServer(known.start)) return refuse('KServe huggingfaceserver without --backend=vllm', backendWarning(known.start));
    if (!evidence) return refuse(`its start (${known.origin}) runs ${otherEngine(known.start) ?? known.start[0] ?? 'nothing'}, not vLLM`);
    return { because: `${evidence} (${known.origin})` };
  }
  const flagWarning = `its args pass --gpu-memory-utilization (a vLLM flag) but the image is not known to run vLLM, so it is not wrapped: name it in ${ANNOTATION_CONTAINERS}, or add its image to the config file's images (like: vllm/vllm-openai for a mirror)`;
  return refuse('not vLLM (neither its image nor its start names vLLM)', mentionsVllmFlag(c.written) ? { warnings: [flagWarning] } : {});
}

/** vLLM on an NVIDIA GPU that a wait cannot help: on the CPU, or on a MIG instance. */
function noWaitPossible(c: Candidate): Refusal | undefined {
  if (runsOnCpu(c.written)) return refuse('vLLM runs on CPU here (--device cpu)');
  const mig = migSignals(c.gpu.signals);
  if (!mig) return undefined;
  return refuse(`on a MIG instance (${mig}): ${MIG_WHY}`, {
    cannotWrap: true,
    warnings: [`vLLM on a MIG instance (${mig}) is not wrapped: ${MIG_WHY}; its in-place restarts are as without vram-preflight`],
  });
}

/** A refused container's report; one an earlier vram-preflight wrapped gets its original start back, which runs the same argv. */
function refused(report: ContainerReport, refusal: Refusal, input: ContainerInput, start: { command: ArgvRead; args: ArgvRead; wrapped: boolean; written: string[] }): ContainerDecision {
  report.reason = refusal.refused;
  report.warnings.push(...(refusal.warnings ?? []));
  report.notes.push(...(refusal.notes ?? []));
  if (refusal.unknownDeviceClaims) report.unknownDeviceClaims = refusal.unknownDeviceClaims;
  if (refusal.cannotWrap) report.action = 'cannot-wrap';
  if (!start.wrapped) return { report };
  report.action = 'unwrap';
  report.reason += '; restoring the start an earlier vram-preflight wrapped';
  const anchors = keptAnchors(start.command.anchors, start.args.anchors, true, 0, 0, true);
  return { report, edit: { anchors, intended: { path: input.path, command: start.written, args: null } } };
}

/** The utilization vLLM will ask for, read from the start, and the warning when it is only the default. */
function utilizationOf(container: Record<string, unknown>, start: readonly string[], input: ContainerInput, report: ContainerReport): Utilization {
  const { options } = input;
  const utilization = readUtilization({
    start,
    env: Array.isArray(container.env) ? (container.env as EnvVar[]) : [],
    hasEnvFrom: Array.isArray(container.envFrom) && container.envFrom.length > 0,
    annotation: input.controls.utilizationAnnotation,
    // The option is a number (a flag, a variable, a config file's JSON): its shortest decimal spelling is the value given.
    defaultValue: { text: String(options.defaultUtilization), value: options.defaultUtilization },
    context: input.context,
  });
  const ownDefault = "vLLM's own default is 0.9 before v0.21 and 0.92 since, so pass the flag explicitly";
  if (utilization.source === 'default') {
    report.warnings.push(`no --gpu-memory-utilization: waiting for ${utilization.value} of each GPU; ${ownDefault}`);
  } else if (utilization.runtime && utilization.defaulted) {
    const names = utilization.runtime.words.flatMap((w) => ('variable' in w ? [`$${w.variable}`] : [])).join(', ');
    report.warnings.push(`no --gpu-memory-utilization written: the preflight reads it from ${names} at run time, and waits for ${utilization.runtime.fallback.value} of each GPU when it is not there; ${ownDefault}`);
  }
  return utilization;
}

/** The preflight script for a container: the options, its utilization and its terminationMessagePath. */
function scriptFor(container: Record<string, unknown>, utilization: Utilization, options: Options): string {
  return preflightScript({
    version: VERSION,
    utilization: utilization.text ?? (utilization.runtime ? { words: utilization.runtime.words, fallback: utilization.runtime.fallback.text } : 'from-args'),
    headroomMiB: options.headroomMiB,
    contextMiB: options.contextMiB,
    nvidiaSmiTimeoutSeconds: options.nvidiaSmiTimeoutSeconds,
    timeoutSeconds: options.timeoutSeconds,
    pollIntervalSeconds: options.pollIntervalSeconds,
    logIntervalSeconds: options.logIntervalSeconds,
    onNvidiaSmiUnavailable: options.onNvidiaSmiUnavailable,
    terminationMessagePath: typeof container.terminationMessagePath === 'string' ? container.terminationMessagePath : '/dev/termination-log',
  });
}

/** A target's report and its new start: the wait, then its start as it ran before (or `unchanged` when an earlier wrap already is exactly that). */
function wrap(report: ContainerReport, c: Candidate, input: ContainerInput, argv: { command: ArgvRead; args: ArgvRead }): ContainerDecision {
  const { options, controls } = input;
  if (controls.forced && c.gpu.signals.length === 0) report.warnings.push('no NVIDIA GPU signal: the wait will see whatever GPUs nvidia-smi shows');
  const forcedMig = controls.forced ? migSignals(c.gpu.signals) : undefined;
  if (forcedMig) report.warnings.push(`named by annotation ${ANNOTATION_CONTAINERS} on a MIG instance (${forcedMig}): ${MIG_WHY}, so the wrapped start goes on to vLLM at once, with a note`);
  const known = c.resolve();
  report.startOrigin = known.origin;
  report.startEvidence = known.evidence;
  report.warnings.push(...known.warnings);
  if (startsVllmInBackground(known.start)) {
    report.notes.push('its shell script starts vLLM in the background (`vllm serve … &`): the wait runs once before the script, not before a vLLM the script restarts itself');
  }
  const utilization = utilizationOf(c.container, known.start, input, report);
  report.utilization = utilization;
  report.probeBudgetSeconds = probeBudget(c.container);
  if (report.probeBudgetSeconds !== undefined && options.timeoutSeconds >= report.probeBudgetSeconds) {
    const which = c.container.startupProbe ? 'startupProbe' : 'livenessProbe';
    report.warnings.push(`preflight timeout ${options.timeoutSeconds}s is not below the ${which} budget of ${report.probeBudgetSeconds}s: the kubelet, not the preflight, would end a long wait, without saying why`);
  }
  const script = scriptFor(c.container, utilization, options);
  // Under KubeRay's join the script must stay one bash word.
  const newArgs = [c.rayStart === 'joined' ? asBashWord(script) : script, '--', ...known.start];
  const { command, args } = argv;
  if (c.wrapped && args.items!.length === newArgs.length && args.items!.every((item, i) => item === newArgs[i])) {
    report.action = 'unchanged';
    report.reason += '; already wrapped by this version with these options';
    return { report };
  }
  report.action = c.wrapped ? 'rewrap' : 'wrap';
  const fromImage = command.items === null && !c.wrapped ? known.start.length - (args.items?.length ?? 0) : 0;
  const anchors = keptAnchors(command.anchors, args.anchors, c.wrapped, command.items?.length ?? 0, fromImage, false);
  return { report, edit: { anchors, intended: { path: input.path, command: WRAPPER_COMMAND, args: newArgs } } };
}

export function decideContainer(input: ContainerInput, base: Pick<ContainerReport, 'document' | 'workload' | 'template'>): ContainerDecision {
  const { value: container, context } = input;
  const name = String(container.name ?? '?');
  const image = typeof container.image === 'string' ? container.image : undefined;
  const gpu = nvidiaGpuSignals({ container, podSpec: input.podSpec, claims: input.claims });
  // Written out, not `{ ...base, … }`: spread into a literal that then grows took most of a container's decision time in the webhook (a profile: ~8 µs of ~10).
  const report: ContainerReport = { document: base.document, workload: base.workload, template: base.template, container: name, initContainer: false, image, action: 'skip', reason: '', gpus: gpu.signals.map((s) => s.detail), gpuSignals: gpu.signals, warnings: [], notes: [] };
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
    const rayStart: RayStart | undefined = input.ray ? kuberayStart(command.items, args.items, input.ray.overwrite) : undefined;
    let start: ContainerStart | undefined;
    const resolve = (): ContainerStart =>
      (start ??=
        rayStart === 'joined'
          ? { start: written, origin: 'command + args, which KubeRay runs joined in bash -lc before `ray start`', evidence: { source: wrapped ? 'wrapped' : 'command', detail: 'joined by KubeRay' }, wrappedBefore: wrapped, warnings: [] }
          : resolveStart({ command: command.items, args: args.items, image, rayPod: input.ray !== undefined }, input.sources, context, input.onWanted));
    const startWritten = command.items !== null || wrapped || rayStart === 'joined';
    const candidate: Candidate = { container, name, image, controls: input.controls, options: input.options, gpu, written, wrapped, startWritten, rayStart, resolve };
    const decided = verdict(candidate);
    if ('refused' in decided) return refused(report, decided, input, { command, args, wrapped, written });
    report.reason = decided.because;
    return wrap(report, candidate, input, { command, args });
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
