/**
 * Detection: does a container start vLLM? (Whether it has an NVIDIA GPU is
 * src/core/tables/gpu.ts.) "Not vLLM" needs positive evidence: a vLLM-family image whose
 * start cannot be read is refused, not skipped.
 */
import { parseImage } from '../tables/image-ref.js';
import { isVllmFamilyImage } from '../tables/images.js';
import { globMatches } from './glob.js';

export const ANNOTATION_SKIP = 'vram-preflight.io/skip';
export const ANNOTATION_CONTAINERS = 'vram-preflight.io/containers';
export const ANNOTATION_UTILIZATION = 'vram-preflight.io/gpu-memory-utilization';

const PYTHON = /^python(\d+(\.\d+)?)?$/;
const SHELLS = new Set(['sh', 'bash', 'dash', 'ash', 'zsh']);
/** Programs that only exec the rest of their argv (an image's entrypoint script, init shims). */
const LAUNCHERS = new Set(['nvidia_entrypoint.sh', 'tini', 'dumb-init', 'env']);
/** vLLM's modules that serve a model in this process: the OpenAI server, the CLI, Dynamo's vLLM worker. */
const VLLM_MODULES = new Set(['vllm.entrypoints.openai.api_server', 'dynamo.vllm']);
const VLLM_IN_SHELL_TEXT = /(^|[\s;&|(/])vllm\s+serve(\s|$)|(^|\s)-m\s+(vllm\.entrypoints\.openai\.api_server|dynamo\.vllm)(\s|$)/;
/** `vllm serve …&` (not `&&`) on one line: vLLM in the background of a shell script. */
const VLLM_IN_BACKGROUND = /(^|[\s;&|(/])vllm\s+serve\b[^\n;&|]*&(?!&)|-m\s+vllm\.entrypoints\.openai\.api_server\b[^\n;&|]*&(?!&)/;

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
  if (PYTHON.test(program)) {
    const m = start.indexOf('-m');
    return m !== -1 && (VLLM_MODULES.has(start[m + 1] ?? '') || (start[m + 1] === 'vllm.entrypoints.cli.main' && start[m + 2] === 'serve'));
  }
  if (SHELLS.has(program)) return start.slice(1).some((item) => VLLM_IN_SHELL_TEXT.test(item));
  return false;
}

/** A shell script that leaves vLLM running in the background: the wrap covers the container's start only. */
export function startsVllmInBackground(argv: readonly string[]): boolean {
  const start = withoutLaunchers(argv);
  return SHELLS.has(basename(start[0] ?? '')) && start.slice(1).some((item) => VLLM_IN_BACKGROUND.test(item));
}

/** KServe's huggingfaceserver runs vLLM when told `--backend=vllm`. */
export function isHuggingfaceServer(image: string | undefined, argv: readonly string[]): boolean {
  return (image !== undefined && parseImage(image).repository.endsWith('huggingfaceserver')) || argv.includes('huggingfaceserver');
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
export function vllmEvidence(image: string | undefined, argv: readonly string[]): string | undefined {
  if (isHuggingfaceServer(image, argv)) return backendIsVllm(argv) ? 'KServe huggingfaceserver with --backend=vllm' : undefined;
  if (argvStartsVllm(argv)) return 'its start runs vLLM';
  return undefined;
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
