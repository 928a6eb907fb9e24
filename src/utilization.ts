/**
 * Reading vLLM's --gpu-memory-utilization from a container's start, in every
 * spelling vLLM's argument parser accepts. A value we cannot read for sure is
 * an error, not a default: waiting for the wrong amount either fails the
 * model (too much) or lets the race through (too little).
 */
import { PreflightError, type ErrorDetails } from './errors.js';

const FLAG_NAMES = ['--gpu-memory-utilization', '--gpu_memory_utilization'];
/** The flag inside one shell-string argument (`sh -c "vllm serve … --gpu-memory-utilization 0.8"`). */
const FLAG_IN_TEXT = /--gpu[-_]memory[-_]utilization(?:=|[ \t]+)(['"]?)([^\s'";&|]+)\1(?=$|[\s;&|])/g;
const MENTION = /gpu[-_]memory[-_]utilization/;
/** `$(NAME)`: the kubelet replaces it with the container's env var NAME. */
const KUBE_REFERENCE = /^\$\(([^)]+)\)$/;

export type UtilizationSource = 'args' | 'annotation' | 'default';

export interface Utilization {
  value: number;
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
  origin: string;
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
        found = { raw: item.slice(eq + 1), origin: `"${item}"` };
      } else if (i + 1 < start.length) {
        found = { raw: start[i + 1]!, origin: `"${item} ${start[i + 1]}"` };
        i += 1;
      } else {
        unreadable = true;
      }
      continue;
    }
    if (MENTION.test(item)) {
      const matches = [...item.matchAll(FLAG_IN_TEXT)];
      if (matches.length === 1 && !/\$/.test(matches[0]![2]!)) {
        found = { raw: matches[0]![2]!, origin: `"${matches[0]![0]}" inside a shell command` };
      } else {
        unreadable = true;
      }
    }
  }
  if (unreadable) return 'unreadable';
  return found;
}

export function parseUtilizationValue(raw: string, where: string, context: ErrorDetails): number {
  const text = raw.trim();
  const value = /^(\d+(\.\d*)?|\.\d+)$/.test(text) ? Number(text) : Number.NaN;
  if (!(value > 0 && value <= 1)) {
    throw new PreflightError('BAD_UTILIZATION', `--gpu-memory-utilization "${raw}" (${where}) is not a number in (0, 1]`, {
      ...context,
      fix: 'give vLLM a fraction such as 0.9 (vLLM rejects anything else at start-up too)',
    });
  }
  return value;
}

function resolveReference(found: Found, input: UtilizationInput): Found {
  const reference = KUBE_REFERENCE.exec(found.raw.trim());
  if (!reference) {
    if (found.raw.includes('$(')) {
      throw new PreflightError('UNREADABLE_UTILIZATION', `--gpu-memory-utilization "${found.raw}" (${found.origin}) mixes a $(VAR) reference with text`, {
        ...input.context,
        fix: 'write the number, or reference one env var holding only the number, or set the annotation vram-preflight.io/gpu-memory-utilization',
      });
    }
    return found;
  }
  const name = reference[1]!;
  // The kubelet expands with the last definition of the name in env.
  const definition = [...input.env].reverse().find((e) => e.name === name);
  const fix = `give env ${name} a literal value, or set the annotation vram-preflight.io/gpu-memory-utilization on the pod template`;
  if (!definition) {
    throw new PreflightError('UNREADABLE_UTILIZATION', `--gpu-memory-utilization refers to $(${name}) (${found.origin}), which the container's env does not define${input.hasEnvFrom ? ' literally (it may come from envFrom, which is only known at run time)' : ''}`, { ...input.context, fix });
  }
  if (typeof definition.value !== 'string' || definition.valueFrom !== undefined || definition.value.includes('$(')) {
    throw new PreflightError('UNREADABLE_UTILIZATION', `--gpu-memory-utilization refers to $(${name}) (${found.origin}), whose value is only known at run time`, { ...input.context, fix });
  }
  return { raw: definition.value, origin: `env ${name} via ${found.origin}` };
}

export function readUtilization(input: UtilizationInput): Utilization {
  const { context } = input;
  const inArgv = findInArgv(input.start);
  if (input.annotation) {
    const value = parseUtilizationValue(input.annotation.value, `annotation ${input.annotation.key}`, context);
    if (inArgv !== undefined && inArgv !== 'unreadable') {
      const found = resolveReference(inArgv, input);
      const fromArgs = parseUtilizationValue(found.raw, found.origin, context);
      if (fromArgs !== value) {
        throw new PreflightError('BAD_ANNOTATION', `annotation ${input.annotation.key}: "${input.annotation.value}" contradicts --gpu-memory-utilization ${found.raw} (${found.origin})`, {
          ...context,
          fix: 'remove the annotation: it is only needed when the value cannot be read from the args',
        });
      }
    }
    return { value, source: 'annotation', origin: `annotation ${input.annotation.key}` };
  }
  if (inArgv === 'unreadable') {
    throw new PreflightError('UNREADABLE_UTILIZATION', '--gpu-memory-utilization appears in the start but its value cannot be read for sure (inside a shell command with variables, or without a value)', {
      ...context,
      fix: 'pass it as its own args item (`--gpu-memory-utilization`, `"0.9"`), or set the annotation vram-preflight.io/gpu-memory-utilization on the pod template',
    });
  }
  if (inArgv) {
    const found = resolveReference(inArgv, input);
    return { value: parseUtilizationValue(found.raw, found.origin, context), source: 'args', origin: found.origin };
  }
  if (input.start.some((item) => item === '--config' || item.startsWith('--config='))) {
    throw new PreflightError('UNREADABLE_UTILIZATION', 'vLLM reads a --config file here, which may set gpu_memory_utilization', {
      ...context,
      fix: 'also pass --gpu-memory-utilization in the args, or set the annotation vram-preflight.io/gpu-memory-utilization on the pod template',
    });
  }
  return { value: input.defaultValue, source: 'default', origin: 'default (no --gpu-memory-utilization in the start)' };
}
