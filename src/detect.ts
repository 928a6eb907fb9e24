/**
 * Detection: which containers start vLLM on an NVIDIA GPU. Every other
 * container, init containers included, is left alone.
 */
import { parseImage } from './images.js';
import { globMatches } from './glob.js';

export const ANNOTATION_SKIP = 'vram-preflight.io/skip';
export const ANNOTATION_CONTAINERS = 'vram-preflight.io/containers';
export const ANNOTATION_UTILIZATION = 'vram-preflight.io/gpu-memory-utilization';

/** Resource names that give a container an NVIDIA GPU (whole, or a MIG slice). */
export function isNvidiaGpuResource(name: string): boolean {
  return name === 'nvidia.com/gpu' || name.startsWith('nvidia.com/mig-');
}

function quantity(value: unknown): number {
  if (typeof value === 'number') return value;
  if (typeof value === 'string') {
    const n = Number(value.trim());
    return Number.isFinite(n) ? n : 0;
  }
  return 0;
}

/** The NVIDIA GPUs a container asks for, e.g. `nvidia.com/gpu=2`; empty when none. */
export function nvidiaGpus(resources: unknown): string[] {
  if (!resources || typeof resources !== 'object') return [];
  const { limits, requests } = resources as { limits?: unknown; requests?: unknown };
  const found = new Map<string, number>();
  for (const list of [requests, limits]) {
    if (!list || typeof list !== 'object') continue;
    for (const [name, value] of Object.entries(list)) {
      // Extended resources must have limits == requests; limits win when both are given.
      if (isNvidiaGpuResource(name) && quantity(value) > 0) found.set(name, quantity(value));
    }
  }
  return [...found].map(([name, n]) => `${name}=${n}`);
}

const PYTHON = /^python(\d+(\.\d+)?)?$/;
const SHELLS = new Set(['sh', 'bash', 'dash', 'ash', 'zsh']);
const VLLM_IN_SHELL_TEXT = /(^|[\s;&|(/])vllm\s+serve(\s|$)|vllm\.entrypoints\.openai\.api_server/;

function basename(path: string): string {
  return path.slice(path.lastIndexOf('/') + 1);
}

/** True when the argv starts vLLM's OpenAI server. */
export function argvStartsVllm(argv: readonly string[]): boolean {
  const program = argv[0] === undefined ? '' : basename(argv[0]);
  if (program === 'vllm') return argv[1] === 'serve';
  if (PYTHON.test(program)) {
    const m = argv.indexOf('-m');
    return m !== -1 && (argv[m + 1] === 'vllm.entrypoints.openai.api_server' || (argv[m + 1] === 'vllm.entrypoints.cli.main' && argv[m + 2] === 'serve'));
  }
  if (SHELLS.has(program)) return argv.slice(1).some((item) => VLLM_IN_SHELL_TEXT.test(item));
  return false;
}

/** KServe's huggingfaceserver runs vLLM when told `--backend=vllm`. */
function isHuggingfaceServerOnVllm(image: string | undefined, argv: readonly string[]): boolean {
  const runsServer = (image !== undefined && parseImage(image).repository.endsWith('huggingfaceserver')) || argv.includes('huggingfaceserver');
  if (!runsServer) return false;
  return argv.some((item, i) => item === '--backend=vllm' || (item === '--backend' && argv[i + 1] === 'vllm'));
}

export function imageNamesVllm(image: string | undefined): boolean {
  return image !== undefined && parseImage(image).repository.includes('vllm');
}

/**
 * Why a container is vLLM, or undefined when it is not. `argv` is the start as
 * written (command + args); `hasCommand` says whether a command replaces the
 * image's ENTRYPOINT, in which case the image name alone proves nothing: an
 * LMCache server or a download step in a vLLM image runs something else.
 */
export function vllmEvidence(image: string | undefined, argv: readonly string[], hasCommand: boolean): string | undefined {
  if (isHuggingfaceServerOnVllm(image, argv)) return 'KServe huggingfaceserver with --backend=vllm';
  if (argvStartsVllm(argv)) return 'its command starts vLLM';
  if (!hasCommand && imageNamesVllm(image)) return 'its image is a vLLM image';
  return undefined;
}

/** vLLM on CPU asks for no GPU memory, whatever the pod requests. */
export function runsOnCpu(argv: readonly string[]): boolean {
  return argv.some((item, i) => item === '--device=cpu' || (item === '--device' && argv[i + 1] === 'cpu'));
}

export function nameSelected(name: string, patterns: readonly string[]): boolean {
  return patterns.length === 0 || patterns.some((p) => globMatches(p, name));
}
