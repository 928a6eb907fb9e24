/**
 * Detection: does a container start vLLM? (Whether it has an NVIDIA GPU is
 * src/core/tables/gpu.ts.) "Not vLLM" needs positive evidence: a vLLM-family image whose
 * start cannot be read is refused, not skipped.
 */
import { parseImage } from '../tables/image-ref.js';
import { isVllmFamilyImage } from '../tables/images.js';
import { globMatches } from './glob.js';
import { isAsciiDigit } from '../char-classes.js';

export const ANNOTATION_SKIP = 'vram-preflight.io/skip';
export const ANNOTATION_CONTAINERS = 'vram-preflight.io/containers';
export const ANNOTATION_UTILIZATION = 'vram-preflight.io/gpu-memory-utilization';

const SHELLS = new Set(['sh', 'bash', 'dash', 'ash', 'zsh']);
/** Programs that only exec the rest of their argv (an image's entrypoint script, init shims). */
const LAUNCHERS = new Set(['nvidia_entrypoint.sh', 'tini', 'dumb-init', 'env']);
/** vLLM's modules that serve a model in this process: the OpenAI server, the CLI, Dynamo's vLLM worker. */
const VLLM_MODULES = new Set(['vllm.entrypoints.openai.api_server', 'dynamo.vllm']);
// Every match of these two holds `vllm` (case-sensitive): a plain search for it first spares
// most shell scripts the regex and its `\s` (every Unicode space) on the render's hot path.
// Exported for the test that checks the search never changes an answer.
export const VLLM_IN_SHELL_TEXT = /(^|[\s;&|(/])vllm\s+serve(\s|$)|(^|\s)-m\s+(vllm\.entrypoints\.openai\.api_server|dynamo\.vllm)(\s|$)/;
/** `vllm serve …&` (not `&&`) on one line: vLLM in the background of a shell script. */
export const VLLM_IN_BACKGROUND = /(^|[\s;&|(/])vllm\s+serve\b[^\n;&|]*&(?!&)|-m\s+vllm\.entrypoints\.openai\.api_server\b[^\n;&|]*&(?!&)/;

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
export function argvStartsVllm(argv: readonly string[]): boolean {
  const start = withoutLaunchers(argv);
  const program = start[0] === undefined ? '' : basename(start[0]);
  if (program === 'vllm') return start[1] === 'serve';
  if (isPythonProgram(program)) {
    const m = start.indexOf('-m');
    return m !== -1 && (VLLM_MODULES.has(start[m + 1] ?? '') || (start[m + 1] === 'vllm.entrypoints.cli.main' && start[m + 2] === 'serve'));
  }
  if (SHELLS.has(program)) return start.slice(1).some((item) => item.includes('vllm') && VLLM_IN_SHELL_TEXT.test(item));
  return false;
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
  const start = withoutLaunchers(argv);
  return SHELLS.has(basename(start[0] ?? '')) && start.slice(1).some((item) => item.includes('vllm') && VLLM_IN_BACKGROUND.test(item));
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

/** The program the argv runs (after launchers), and for `python -m` the module: what decides, not a word elsewhere. */
function programOf(argv: readonly string[]): { program: string; module?: string } {
  const start = withoutLaunchers(argv);
  const program = start[0] === undefined ? '' : basename(start[0]);
  if (!isPythonProgram(program)) return { program };
  const m = start.indexOf('-m');
  return { program, module: m === -1 ? undefined : start[m + 1] };
}

/** True when the argv runs KServe's huggingfaceserver as its program (`python -m huggingfaceserver`). */
export function runsHuggingfaceServer(argv: readonly string[]): boolean {
  const { program, module } = programOf(argv);
  return program === 'huggingfaceserver' || module === 'huggingfaceserver';
}

function backendIsVllm(argv: readonly string[]): boolean {
  return argv.some((item, i) => item === '--backend=vllm' || (item === '--backend' && argv[i + 1] === 'vllm'));
}

export function imageIsVllmFamily(image: string | undefined): boolean {
  return image !== undefined && image.trim() !== '' && isVllmFamilyImage(parseImage(image));
}

/**
 * Why the argv (the container's whole start) runs vLLM, or undefined when it
 * does not.
 */
/** A blocking `ray start` in a shell script: the script's foreground ends as a Ray node. */
const BLOCKING_RAY_START_IN_SHELL_TEXT = /(^|[\s;&|(/])ray\s+start\s[^\n;&|]*--block(\s|$)/;

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
  return SHELLS.has(program) && start.slice(1).some((item) => BLOCKING_RAY_START_IN_SHELL_TEXT.test(item));
}

export function vllmEvidence(argv: readonly string[]): string | undefined {
  if (argvStartsVllm(argv)) return 'its start runs vLLM';
  if (runsHuggingfaceServer(argv) && backendIsVllm(argv)) return 'KServe huggingfaceserver with --backend=vllm';
  return undefined;
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
  // A shell's script: the first engine it names as a command word.
  if (SHELLS.has(program)) {
    const text = start.slice(1).join(' ');
    return OTHER_ENGINES.find((e) => [...(e.programs ?? []), ...(e.modules ?? []).map((m) => `-m ${m}`)].some((word) => new RegExp(`(^|[\\s;&|(/])${word.replace(/[.]/g, '\\.')}(\\s|$)`).test(text)))?.name;
  }
  return OTHER_ENGINES.find((e) => e.programs?.includes(program) || (module !== undefined && e.modules?.includes(module)))?.name;
}

/** vLLM on CPU asks for no GPU memory, whatever the pod requests. */
export function runsOnCpu(argv: readonly string[]): boolean {
  return argv.some((item, i) => item === '--device=cpu' || (item === '--device' && argv[i + 1] === 'cpu'));
}

/** vLLM's own flag in a start that is not recognised as vLLM: worth a word, never a guess. */
export function mentionsVllmFlag(argv: readonly string[]): boolean {
  return argv.some((item) => /^--gpu[-_]memory[-_]utilization(=|$)/.test(item));
}

export function nameSelected(name: string, patterns: readonly string[]): boolean {
  return patterns.length === 0 || patterns.some((p) => globMatches(p, name));
}
