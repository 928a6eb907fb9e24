/**
 * Detection: does a container start vLLM? (Whether it has an NVIDIA GPU is
 * src/core/tables/gpu.ts.) "Not vLLM" needs positive evidence: a vLLM-family image whose
 * start cannot be read is refused, not skipped.
 */
import { readScript, scriptCommands, type ShellCommand } from './shell-script.js';
import { parseImage } from '../tables/image-ref.js';
import { isVllmFamilyImage } from '../tables/images.js';
import { globMatches } from './glob.js';
import { isAsciiDigit } from '../char-classes.js';

export const ANNOTATION_SKIP = 'vram-preflight.io/skip';
export const ANNOTATION_CONTAINERS = 'vram-preflight.io/containers';
export const ANNOTATION_UTILIZATION = 'vram-preflight.io/gpu-memory-utilization';
/** Written by the webhook on a pod it admitted: the containers it wrapped; those it could not wrap, with why (`name: reason; …`). */
export const ANNOTATION_WRAPPED = 'vram-preflight.io/wrapped';
export const ANNOTATION_NOT_WRAPPED = 'vram-preflight.io/not-wrapped';

const SHELLS = new Set(['sh', 'bash', 'dash', 'ash', 'zsh']);
/** Programs that only exec the rest of their argv (an image's entrypoint script, init shims). */
const LAUNCHERS = new Set(['nvidia_entrypoint.sh', 'tini', 'dumb-init', 'env']);
/** vLLM's modules that serve a model in this process: the OpenAI server, the CLI, Dynamo's vLLM worker. */
const VLLM_MODULES = new Set(['vllm.entrypoints.openai.api_server', 'dynamo.vllm']);
/** A shell in a shell's script (`exec bash -c '…'`) is read too, this deep. */
const MAX_SHELL_DEPTH = 3;

function basename(path: string): string {
  return path.slice(path.lastIndexOf('/') + 1);
}

/** The argv after launchers that only exec the rest (`tini -- vllm serve`). */
function withoutLaunchers(argv: readonly string[]): readonly string[] {
  let rest = argv;
  while (rest.length && LAUNCHERS.has(basename(rest[0]!))) {
    rest = rest.slice(1);
    if (rest[0] === '--') rest = rest.slice(1);
  }
  return rest;
}

/** True when the argv starts vLLM's OpenAI server (directly, through python -m, or in a shell script). */
export function argvStartsVllm(argv: readonly string[], depth = 0): boolean {
  const start = withoutLaunchers(argv);
  const program = start[0] === undefined ? '' : basename(start[0]);
  if (program === 'vllm') return start[1] === 'serve';
  if (isPythonProgram(program)) {
    const m = pythonModuleAt(start);
    return m !== undefined && (VLLM_MODULES.has(start[m + 1] ?? '') || (start[m + 1] === 'vllm.entrypoints.cli.main' && start[m + 2] === 'serve'));
  }
  if (SHELLS.has(program)) return vllmCommands(start, depth).length > 0;
  return false;
}

/**
 * The commands of a shell start's script (and of the shells it runs) that start vLLM, in
 * order; [] for a start that is no shell script. A script without the letters `vllm` is not
 * read (the render asks for every container).
 */
function vllmCommands(argv: readonly string[], depth = 0): ShellCommand[] {
  const start = withoutLaunchers(argv);
  if (!SHELLS.has(basename(start[0] ?? '')) || depth > MAX_SHELL_DEPTH || !start.slice(1).some((item) => item.includes('vllm'))) return [];
  return scriptCommands(start).filter((command) => argvStartsVllm(command.words, depth + 1));
}

/**
 * The command line the container gives vLLM: its start, or in a shell script the command
 * that starts vLLM or KServe's huggingfaceserver (the last one in the foreground, else the
 * last one), with the script's reading (the variables it sets) for what its words expand to.
 */
export function vllmCommandLine(argv: readonly string[]): { command: ShellCommand; assigned?: Map<string, string[]> } {
  const start = withoutLaunchers(argv);
  if (!SHELLS.has(basename(start[0] ?? ''))) return { command: { words: [...argv], background: false } };
  const reading = readScript(start);
  // KServe's huggingfaceserver passes its vLLM flags on to vLLM, and a program that takes
  // vLLM's engine flag runs vLLM's engine: their command lines are vLLM's.
  let runs = (reading?.commands ?? []).filter((command) => argvStartsVllm(command.words, 1) || isHuggingfaceServerProgram(command.words));
  if (runs.length === 0) runs = (reading?.commands ?? []).filter((command) => engineFlagEvidence(command.words, 1) !== undefined);
  const command = runs.filter((c) => !c.background).at(-1) ?? runs.at(-1);
  return command ? { command, assigned: reading!.assigned } : { command: { words: [...argv], background: false } };
}

/**
 * A shell script that already runs our wait: a wrapped start that KubeRay
 * joined into its `bash -lc` line (the script is there as one quoted word).
 * Wrapping it again (the webhook sees KubeRay's pod) would wait twice.
 */
export function shellRunsPreflight(argv: readonly string[], marker: string): boolean {
  const start = withoutLaunchers(argv);
  return SHELLS.has(basename(start[0] ?? '')) && start.slice(1).some((item) => item.includes(`'${marker}`));
}

/** A shell script that leaves vLLM running in the background: the wrap covers the container's start only. */
export function startsVllmInBackground(argv: readonly string[]): boolean {
  return vllmCommands(argv).some((command) => command.background);
}

/** KServe's huggingfaceserver image: its own start runs huggingfaceserver, which runs vLLM when told `--backend=vllm`. */
export function isHuggingfaceServerImage(image: string | undefined): boolean {
  return image !== undefined && parseImage(image).repository.endsWith('huggingfaceserver');
}

/**
 * `python`, `python3`, `python3.12`: `/^python(\d+(\.\d+)?)?$/.test(program)`, by a scan:
 * a render asks for every container, in a fresh process where a regex costs its compilation
 * on its first runs (docs/benchmarks.md).
 */
export function isPythonProgram(program: string): boolean {
  if (!program.startsWith('python')) return false;
  let i = 6;
  if (i === program.length) return true;
  const major = i;
  while (isAsciiDigit(program.charCodeAt(i))) i++;
  if (i === major) return false;
  if (i === program.length) return true;
  if (program.charCodeAt(i) !== 0x2e) return false;
  const minor = ++i;
  while (isAsciiDigit(program.charCodeAt(i))) i++;
  return i > minor && i === program.length;
}

/** Python's options that take the next item as their value (`-W ignore`, `-X dev`). */
const PYTHON_OPTIONS_WITH_VALUE = new Set(['-W', '-X', '--check-hash-based-pycs']);

/**
 * Where a python argv's `-m` is (its module follows), or undefined when it runs a script, `-c`
 * code or nothing: python reads options up to `-m MOD`, `-c CMD` or the first other item (the
 * script), so a `-m` after those is the program's argument, not python's.
 */
function pythonModuleAt(start: readonly string[]): number | undefined {
  for (let i = 1; i < start.length; i++) {
    const item = start[i]!;
    if (item === '-m') return i;
    if (item === '-c' || item === '-' || item === '--' || !item.startsWith('-')) return undefined;
    if (item.startsWith('-m') || item.startsWith('-c')) return undefined; // `-mvllm…`: joined, not read here
    if (PYTHON_OPTIONS_WITH_VALUE.has(item)) i++;
  }
  return undefined;
}

/** The program the argv runs (after launchers), and for `python -m` the module: what decides, not a word elsewhere. */
function programOf(argv: readonly string[]): { program: string; module?: string } {
  const start = withoutLaunchers(argv);
  const program = start[0] === undefined ? '' : basename(start[0]);
  if (!isPythonProgram(program)) return { program };
  const m = pythonModuleAt(start);
  return { program, module: m === undefined ? undefined : start[m + 1] };
}

function isHuggingfaceServerProgram(argv: readonly string[]): boolean {
  const { program, module } = programOf(argv);
  return program === 'huggingfaceserver' || module === 'huggingfaceserver';
}

/** One run of KServe's huggingfaceserver: the words its parser reads, as far as they are written. */
export interface HuggingfaceServerRun {
  argv: readonly string[];
  /** Run by a shell script (its command there, with the args the script passes on). */
  inScript: boolean;
  /** The script starts a Ray head (`ray start --head`) first: KServe's multi-node runtime. */
  afterRayHead: boolean;
}

/** `ray start --head` that leaves the script going on (a daemon; `--block` only in the background). */
function startsRayHead({ words, background }: { words: readonly string[]; background: boolean }): boolean {
  return basename(words[0]!) === 'ray' && words[1] === 'start' && words.includes('--head') && (background || !words.includes('--block'));
}

/**
 * The runs of KServe's huggingfaceserver the argv makes: itself as the program
 * (`python -m huggingfaceserver`), or each foreground command of its shell
 * script that runs it (`exec`, after `&&`, `;` or a line break, any path to
 * python), with the script's `$0`/`$@` replaced by the container's items.
 * One left in the background (`… &`) is not the container's start.
 */
export function huggingfaceServerRuns(argv: readonly string[]): HuggingfaceServerRun[] {
  if (isHuggingfaceServerProgram(argv)) return [{ argv, inScript: false, afterRayHead: false }];
  const start = withoutLaunchers(argv);
  if (!SHELLS.has(basename(start[0] ?? '')) || !start.some((item) => item.includes('huggingfaceserver'))) return [];
  const runs: HuggingfaceServerRun[] = [];
  let rayHead = false;
  for (const command of scriptCommands(start)) {
    if (startsRayHead(command)) rayHead = true;
    else if (!command.background && isHuggingfaceServerProgram(command.words)) runs.push({ argv: command.words, inScript: true, afterRayHead: rayHead });
  }
  return runs;
}

/** True when the argv runs KServe's huggingfaceserver, as its program or in its shell script's foreground. */
export function runsHuggingfaceServer(argv: readonly string[]): boolean {
  return huggingfaceServerRuns(argv).length > 0;
}

/** huggingfaceserver's `--backend` (`--backend=X` or `--backend X`; the last one, as argparse reads them), or undefined. */
function backendOf(argv: readonly string[]): string | undefined {
  let backend: string | undefined;
  argv.forEach((item, i) => {
    if (item.startsWith('--backend=')) backend = item.slice('--backend='.length);
    else if (item === '--backend' && i + 1 < argv.length) backend = argv[i + 1];
  });
  return backend;
}

/**
 * vLLM when `--backend=vllm`; without one (or `auto`), KServe picks at run time,
 * except after `ray start --head`: KServe's multi-node runtime
 * (config/runtimes/kserve-huggingfaceserver-multinode.yaml) runs only on vLLM's
 * backend (docs/detection.md §5).
 */
function runVerdict(run: HuggingfaceServerRun): 'vllm' | 'multi-node' | 'run time' | 'other' {
  const backend = backendOf(run.argv);
  if (backend === 'vllm') return 'vllm';
  if (backend === undefined || backend === 'auto') return run.afterRayHead ? 'multi-node' : 'run time';
  // A backend only the shell knows (`--backend=$BACKEND`) may be vLLM: as undecided as none.
  return backend.includes('$') ? 'run time' : 'other';
}

/** KServe's huggingfaceserver that may run vLLM but is not known to: no `--backend` (KServe picks at run time), or one only the shell knows. */
export function huggingfaceServerMayRunVllm(argv: readonly string[]): boolean {
  return huggingfaceServerRuns(argv).some((run) => runVerdict(run) === 'run time');
}

function huggingfaceServerEvidence(argv: readonly string[]): string | undefined {
  const runs = huggingfaceServerRuns(argv);
  const verdicts = runs.map(runVerdict);
  // Every run the script may make must run vLLM: one that may not is no evidence.
  if (!verdicts.length || !verdicts.every((v) => v === 'vllm' || v === 'multi-node')) return undefined;
  if (verdicts.includes('multi-node')) return "KServe's multi-node huggingfaceserver (its script runs `ray start --head`, then huggingfaceserver), which runs only on vLLM's backend";
  return runs[0]!.inScript ? 'KServe huggingfaceserver with --backend=vllm, run by its shell script' : 'KServe huggingfaceserver with --backend=vllm';
}

export function imageIsVllmFamily(image: string | undefined): boolean {
  return image !== undefined && image.trim() !== '' && isVllmFamilyImage(parseImage(image));
}


/**
 * A start that makes this container a Ray node (`ray start`, KubeRay's own
 * or a script's `ray start … --block`): vLLM runs there, if at all, in actors
 * the Ray head schedules (Ray Serve, vLLM's Ray executor), never as this
 * container's start. (A script that starts Ray and then a server in the
 * foreground is not one.)
 */
export function startsRayNode(argv: readonly string[]): boolean {
  const start = withoutLaunchers(argv);
  const program = basename(start[0] ?? '');
  if (program === 'ray') return start[1] === 'start';
  // A blocking `ray start` in a shell script: the script's foreground ends as a Ray node.
  return SHELLS.has(program) && start.slice(1).some((item) => item.includes('ray')) && scriptCommands(start).some(({ words }) => basename(words[0]!) === 'ray' && words[1] === 'start' && words.includes('--block'));
}

/** Why the argv (the container's whole start) runs vLLM, or undefined when it does not. */
export function vllmEvidence(argv: readonly string[]): string | undefined {
  if (argvStartsVllm(argv)) return 'its start runs vLLM';
  return huggingfaceServerEvidence(argv) ?? engineFlagEvidence(argv);
}

/**
 * A program that takes vLLM's own engine flag `--gpu-memory-utilization` (its own argv item)
 * runs vLLM's engine in its process and vLLM's start-up check with it: KAITO's
 * `python3 /workspace/vllm/inference_api.py … --gpu-memory-utilization=0.84` parses its
 * arguments with vLLM's own parser. The flag is the amount the wait needs, so it is evidence
 * (docs/detection.md §5). Not for a known other engine, `ray start` or KServe's huggingfaceserver.
 */
function engineFlagEvidence(argv: readonly string[], depth = 0): string | undefined {
  const start = withoutLaunchers(argv);
  const program = basename(start[0] ?? '');
  if (SHELLS.has(program)) {
    if (depth > MAX_SHELL_DEPTH || !start.slice(1).some((item) => item.includes('memory'))) return undefined;
    for (const command of scriptCommands(start)) {
      const found = engineFlagEvidence(command.words, depth + 1);
      if (found) return `${found}, run by its shell script`;
    }
    return undefined;
  }
  // An args-only list (`--model …`) is no program: the image's start decides there.
  // KServe's huggingfaceserver takes vLLM's flags whatever backend it picks: its own rules decide (§5, 1).
  if (program === '' || program.startsWith('-') || program === 'ray' || otherEngine(start) || isHuggingfaceServerProgram(start) || !mentionsVllmFlag(start)) return undefined;
  const shown = isPythonProgram(program) && start[1] !== undefined && !start[1].startsWith('-') ? `${program} ${start[1]}` : program;
  return `its start passes vLLM's engine flag --gpu-memory-utilization to ${shown}, which runs vLLM's engine (and its start-up check) in its process`;
}

/**
 * Inference engines that are not vLLM, by the program or module they run: a
 * container running one is skipped by name, without the hint to opt it in
 * (the preflight waits for vLLM's --gpu-memory-utilization, which they lack).
 */
const OTHER_ENGINES: readonly { name: string; programs?: readonly string[]; modules?: readonly string[] }[] = [
  { name: 'SGLang', modules: ['sglang.launch_server'], programs: ['sglang'] },
  { name: 'TGI (text-generation-inference)', programs: ['text-generation-launcher', 'text-generation-router'] },
  { name: 'llama.cpp', programs: ['llama-server'] },
  { name: 'Ollama', programs: ['ollama'] },
  { name: 'Triton Inference Server', programs: ['tritonserver'] },
  { name: 'TensorRT-LLM', programs: ['trtllm-serve'] },
  { name: 'LMDeploy', programs: ['lmdeploy'] },
  { name: 'LocalAI', programs: ['local-ai'] },
];

/** The engine other than vLLM that the argv runs, if it is a known one. */
export function otherEngine(argv: readonly string[]): string | undefined {
  const { program, module } = programOf(argv);
  const start = withoutLaunchers(argv);
  // A shell's script: the engine its first command that runs one runs.
  if (SHELLS.has(program)) {
    for (const { words } of scriptCommands(start)) {
      const engine = otherEngine(words);
      if (engine) return engine;
    }
    return undefined;
  }
  return OTHER_ENGINES.find((e) => e.programs?.includes(program) || (module !== undefined && e.modules?.includes(module)))?.name;
}

/** vLLM on CPU asks for no GPU memory, whatever the pod requests. */
export function runsOnCpu(argv: readonly string[]): boolean {
  return argv.some((item, i) => item === '--device=cpu' || (item === '--device' && argv[i + 1] === 'cpu'));
}

/** vLLM's own engine flag `--gpu-memory-utilization` (any spelling, `=value` or not) as an argv item. */
export function mentionsVllmFlag(argv: readonly string[]): boolean {
  return argv.some((item) => item.startsWith('--gpu') && /^--gpu[-_]memory[-_]utilization(=|$)/.test(item));
}

export function nameSelected(name: string, patterns: readonly string[]): boolean {
  return patterns.length === 0 || patterns.some((p) => globMatches(p, name));
}
