/**
 * Reading vLLM's --gpu-memory-utilization from a container's start, in every
 * spelling vLLM's argument parser accepts. A value we cannot read for sure is
 * an error, not a default: waiting for the wrong amount either fails the
 * model (too much) or lets the race through (too little).
 */
import { PreflightError, type ErrorDetails } from '../errors.js';
import { readPythonFloat } from '../python-float.js';

const FLAG_NAMES = ['--gpu-memory-utilization', '--gpu_memory_utilization'];
/** The flag inside one shell-string argument (`sh -c "vllm serve … --gpu-memory-utilization 0.8"`). */
const FLAG_IN_TEXT = /--gpu[-_]memory[-_]utilization(?:=|[ \t]+)(['"]?)([^\s'";&|]+)\1(?=$|[\s;&|])/g;
/** `$(NAME)`: the kubelet replaces it with the container's env var NAME. */
const KUBE_REFERENCE = /^\$\(([^)]+)\)$/;

export type UtilizationSource = 'args' | 'annotation' | 'default' | 'runtime';

export interface Utilization {
  /** The fraction; absent when the script reads it from its own argv at run time (source 'runtime'). */
  value?: number;
  source: UtilizationSource;
  /** Where it was read, for messages (`args[13]`, `env GPU_UTIL via args[13]`, an annotation). */
  origin: string;
}

export interface EnvVar {
  name?: unknown;
  value?: unknown;
  valueFrom?: unknown;
}

export interface UtilizationInput {
  start: readonly string[];
  env: readonly EnvVar[];
  hasEnvFrom: boolean;
  annotation?: { key: string; value: string };
  defaultValue: number;
  context: ErrorDetails;
}

interface Found {
  raw: string;
  /** How messages show the value: quoted as written, or, for an env var's value, not at all (env values may be secrets, and messages reach logs and pod annotations). */
  shown?: string;
  origin: string;
  /** Found inside a shell string rather than as its own argv item. */
  inShellText: boolean;
}

/** The last occurrence wins, as in argparse. */
function findInArgv(start: readonly string[]): Found | 'unreadable' | undefined {
  let found: Found | undefined;
  let unreadable = false;
  for (let i = 0; i < start.length; i++) {
    const item = start[i]!;
    const eq = item.indexOf('=');
    const name = eq === -1 ? item : item.slice(0, eq);
    if (FLAG_NAMES.includes(name)) {
      if (eq !== -1) {
        found = { raw: item.slice(eq + 1), origin: `"${item}"`, inShellText: false };
      } else if (i + 1 < start.length) {
        found = { raw: start[i + 1]!, origin: `"${item} ${start[i + 1]}"`, inShellText: false };
        i += 1;
      } else {
        unreadable = true;
      }
      continue;
    }
    if (mentionsUtilizationFlag(item)) {
      const matches = [...item.matchAll(FLAG_IN_TEXT)];
      if (matches.length === 1 && !/\$/.test(matches[0]![2]!)) {
        found = { raw: matches[0]![2]!, origin: `"${matches[0]![0]}" inside a shell command`, inShellText: true };
      } else {
        unreadable = true;
      }
    }
  }
  if (unreadable) return 'unreadable';
  return found;
}

/**
 * `/gpu[-_]memory[-_]utilization/.test(item)`: the flag's name in any of its four spellings.
 * A scan, not the regex: a render runs it on every argv item in a fresh process, where each
 * regex costs its compilation on its first runs (docs/benchmarks.md).
 */
export function mentionsUtilizationFlag(item: string): boolean {
  for (let at = item.indexOf('memory', 4); at !== -1; at = item.indexOf('memory', at + 1)) {
    if (isDashOrUnderscore(item.charCodeAt(at - 1)) && item.startsWith('gpu', at - 4) && isDashOrUnderscore(item.charCodeAt(at + 6)) && item.startsWith('utilization', at + 7)) return true;
  }
  return false;
}

function isDashOrUnderscore(c: number): boolean {
  return c === 0x2d || c === 0x5f;
}

/** Python's float() syntax, as vLLM's argparse reads the flag: `0.9`, `.9`, `+0.9`, `9e-1`, `0.9_5` (no `-`: no fraction is negative). */
export function isPythonFloatText(text: string): boolean {
  const parts = readPythonFloat(text);
  return parts !== undefined && parts.sign !== '-';
}

export function parseUtilizationValue(raw: string, where: string, context: ErrorDetails, shown = `"${raw}"`): number {
  const text = raw.trim();
  const value = isPythonFloatText(text) ? Number(text.replaceAll('_', '')) : Number.NaN;
  if (!(value > 0 && value <= 1)) {
    throw new PreflightError('BAD_UTILIZATION', `--gpu-memory-utilization ${shown} (${where}) is not a number in (0, 1]`, {
      ...context,
      fix: 'give vLLM a fraction such as 0.9 (vLLM rejects anything else at start-up too)',
    });
  }
  return value;
}

const ANNOTATION_FIX = 'set the annotation vram-preflight.io/gpu-memory-utilization: "<the value>" on the pod template';

/** A value the kubelet expands only when the container starts: the script reads it from its own argv then. */
function runtime(found: Found, why: string): Utilization {
  return { source: 'runtime', origin: `${found.origin}: ${why}; the preflight reads the kubelet-expanded value from its own argv at run time` };
}

function resolveReference(found: Found, input: UtilizationInput): Found | Utilization {
  if (!found.raw.includes('$(')) return found;
  if (found.inShellText) {
    throw new PreflightError('UNREADABLE_UTILIZATION', `--gpu-memory-utilization "${found.raw}" (${found.origin}) is only known at run time, inside a shell command`, {
      ...input.context,
      fix: `${ANNOTATION_FIX}, or pass the flag as its own args item`,
    });
  }
  const reference = KUBE_REFERENCE.exec(found.raw.trim());
  if (!reference) return runtime(found, 'it mixes a $(VAR) reference with text');
  const name = reference[1]!;
  // The kubelet expands with the last definition of the name in env (env wins over envFrom).
  const definition = [...input.env].reverse().find((e) => e.name === name);
  if (!definition) {
    if (input.hasEnvFrom) return runtime(found, `$(${name}) may come from envFrom`);
    throw new PreflightError('UNREADABLE_UTILIZATION', `--gpu-memory-utilization refers to $(${name}) (${found.origin}), which the container's env does not define: the kubelet would pass "$(${name})" as written and vLLM would reject it`, {
      ...input.context,
      fix: `define env ${name}, or ${ANNOTATION_FIX}`,
    });
  }
  if (typeof definition.value !== 'string' || definition.valueFrom !== undefined) return runtime(found, `env ${name} comes from valueFrom`);
  if (definition.value.includes('$(')) return runtime(found, `env ${name} refers to other variables`);
  return { raw: definition.value, shown: `(the value of env ${name}, not shown)`, origin: `env ${name} via ${found.origin}`, inShellText: false };
}

function isUtilization(value: Found | Utilization): value is Utilization {
  return 'source' in value;
}

export function readUtilization(input: UtilizationInput): Utilization {
  const { context } = input;
  const inArgv = findInArgv(input.start);
  if (input.annotation) {
    const value = parseUtilizationValue(input.annotation.value, `annotation ${input.annotation.key}`, context);
    if (inArgv !== undefined && inArgv !== 'unreadable') {
      const found = resolveReference(inArgv, input);
      if (!isUtilization(found)) {
        const fromArgs = parseUtilizationValue(found.raw, found.origin, context, found.shown);
        if (fromArgs !== value) {
          throw new PreflightError('BAD_ANNOTATION', `annotation ${input.annotation.key}: "${input.annotation.value}" contradicts --gpu-memory-utilization ${found.shown ?? found.raw} (${found.origin})`, {
            ...context,
            fix: 'remove the annotation: it is only needed when the value cannot be read from the args',
          });
        }
      }
    }
    return { value, source: 'annotation', origin: `annotation ${input.annotation.key}` };
  }
  if (inArgv === 'unreadable') {
    throw new PreflightError('UNREADABLE_UTILIZATION', '--gpu-memory-utilization appears in the start but its value cannot be read for sure (computed inside a shell command, or given without a value)', {
      ...context,
      fix: `${ANNOTATION_FIX} (e.g. "0.9"), or pass the flag as its own args item (\`--gpu-memory-utilization\`, \`"0.9"\`)`,
    });
  }
  if (inArgv) {
    const found = resolveReference(inArgv, input);
    if (isUtilization(found)) return found;
    return { value: parseUtilizationValue(found.raw, found.origin, context, found.shown), source: 'args', origin: found.origin };
  }
  if (input.start.some((item) => item === '--config' || item.startsWith('--config='))) {
    throw new PreflightError('UNREADABLE_UTILIZATION', 'vLLM reads a --config file here, which may set gpu_memory_utilization', {
      ...context,
      fix: `${ANNOTATION_FIX}, or also pass --gpu-memory-utilization in the args`,
    });
  }
  return { value: input.defaultValue, source: 'default', origin: 'default (no --gpu-memory-utilization in the start)' };
}
