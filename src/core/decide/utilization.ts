/**
 * Reading vLLM's --gpu-memory-utilization from a container's start, in every
 * spelling vLLM's argument parser accepts. A value we cannot read for sure is
 * an error, not a default: waiting for the wrong amount either fails the
 * model (too much) or lets the race through (too little).
 */
import { PreflightError, type ErrorDetails } from '../errors.js';
import { roundUtilizationUp, type RuntimeWord } from '../preflight/settings.js';
import { readPythonFloat } from '../python-float.js';
import { vllmCommandLine } from './detect.js';
import { isShellName } from './shell-script.js';

const FLAG_NAMES = ['--gpu-memory-utilization', '--gpu_memory_utilization'];
/** `$(NAME)`: the kubelet replaces it with the container's env var NAME. */
const KUBE_REFERENCE = /^\$\(([^)]+)\)$/;

export type UtilizationSource = 'args' | 'annotation' | 'default' | 'runtime';

export type { RuntimeWord };

/**
 * A utilization as written and as read: the decimal text the preflight is given (it rounds the
 * digits up, src/core/preflight/settings.ts, never a binary float), and the number vLLM's
 * float() makes of it, which reports and messages show.
 */
export interface Fraction {
  text: string;
  value: number;
}

export interface Utilization {
  /** The fraction, as vLLM reads it; absent when the script reads it at run time (source 'runtime'). */
  value?: number;
  /** The same, as the decimal text it was written in: what the script is given. Present with value. */
  text?: string;
  source: UtilizationSource;
  /** Where it was read, for messages (`args[13]`, `env GPU_UTIL via args[13]`, an annotation). */
  origin: string;
  /**
   * Source 'runtime' from variables the start's shell script expands into vLLM's command line
   * (KServe's `${VLLM_ADDITIONAL_ARGS}`): the words the preflight reads at run time, in order,
   * and the value vLLM gets when they hold no --gpu-memory-utilization. Absent: the preflight
   * reads its own argv (a `$(VAR)` the kubelet expands).
   */
  runtime?: { words: RuntimeWord[]; fallback: Fraction };
  /** The value, or the run-time reading's fallback, is the default: no --gpu-memory-utilization is written. */
  defaulted?: true;
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
  /** The utilization assumed without a --gpu-memory-utilization (the option defaultUtilization). */
  defaultValue: Fraction;
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
    // The flag's name elsewhere in an item (a shell string this reader does not follow): not for sure.
    if (mentionsUtilizationFlag(item)) unreadable = true;
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

/**
 * A --gpu-memory-utilization as vLLM reads it (float(), 0 < u <= 1) and as the script will: its
 * digits rounded up to 6 decimals must be at most 1 too (`1.00000000000000001` is 1 to float()).
 */
function parseUtilizationValue(raw: string, where: string, context: ErrorDetails, shown = `"${raw}"`): Fraction {
  const text = raw.trim();
  const value = isPythonFloatText(text) ? Number(text.replaceAll('_', '')) : Number.NaN;
  if (!(value > 0 && value <= 1) || roundUtilizationUp(text) === undefined) {
    throw new PreflightError('BAD_UTILIZATION', `--gpu-memory-utilization ${shown} (${where}) is not a number in (0, 1]`, {
      ...context,
      fix: 'give vLLM a fraction such as 0.9 (vLLM rejects anything else at start-up too)',
    });
  }
  return { text, value };
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

/** One word of vLLM's command line in a shell script, as far as the utilization goes. */
type Segment =
  | { kind: 'item'; text: string; origin: string; inShellText: boolean }
  | { kind: 'variable'; name: string }
  /** The script computes it (or a value this reader does not follow) and it mentions the flag. */
  | { kind: 'unknown'; text: string };

const ORIGIN_IN_SCRIPT = 'in the shell script that starts vLLM';

/** `$NAME` or `${NAME}` (also `${NAME:-}` / `${NAME-}`, an empty default): the variable's name. */
function variableOf(word: string): string | undefined {
  if (word.startsWith('${') && word.endsWith('}')) {
    let inner = word.slice(2, -1);
    if (inner.endsWith(':-')) inner = inner.slice(0, -2);
    else if (inner.endsWith('-')) inner = inner.slice(0, -1);
    return isShellName(inner) ? inner : undefined;
  }
  return word.startsWith('$') && isShellName(word.slice(1)) ? word.slice(1) : undefined;
}

/**
 * vLLM's command line in a start's shell script, as segments: the words the reader knows
 * (the script's own and the container's items `$@` passes on), the variables it expands
 * (a variable of the container's env with a literal value is split into its words here; one
 * the script sets itself to plain text is that text), and what only the script computes.
 */
function commandSegments(input: UtilizationInput): Segment[] | undefined {
  const { command, assigned } = vllmCommandLine(input.start);
  if (!assigned) return undefined;
  const segments: Segment[] = [];
  const pushVariable = (name: string, seen: Set<string>, isValue: boolean): void => {
    const set = assigned.get(name);
    if (set && !seen.has(name)) {
      seen.add(name);
      // What the script gives it: one plain text is that text's words; one variable is that
      // variable; several, or one it computes, are unknown where they could be the flag or its value.
      if (set.length === 1 && variableOf(set[0]!) !== undefined) return pushVariable(variableOf(set[0]!)!, seen, isValue);
      if (set.length === 1 && !set[0]!.includes('$')) {
        for (const text of splitWords(set[0]!)) segments.push({ kind: 'item', text, origin: `"${text}" from ${name}, which the script sets`, inShellText: true });
        return;
      }
      if (isValue || set.some((value) => mentionsUtilizationFlag(value))) segments.push({ kind: 'unknown', text: `$${name}` });
      return;
    }
    const definition = [...input.env].reverse().find((e) => e.name === name);
    if (definition && typeof definition.value === 'string' && definition.valueFrom === undefined && !definition.value.includes('$(')) {
      for (const text of splitWords(definition.value)) segments.push({ kind: 'item', text, origin: `env ${name} ("${definition.value.trim()}"), expanded ${ORIGIN_IN_SCRIPT}`, inShellText: true });
      return;
    }
    segments.push({ kind: 'variable', name });
  };
  command.words.forEach((word, i) => {
    if (command.passed?.[i] || !word.includes('$')) {
      segments.push({ kind: 'item', text: word, origin: command.passed?.[i] ? `"${word}", passed on by the script's $@` : `"${word}" ${ORIGIN_IN_SCRIPT}`, inShellText: !command.passed?.[i] });
      return;
    }
    const eq = word.indexOf('=');
    if (eq !== -1 && FLAG_NAMES.includes(word.slice(0, eq)) && variableOf(word.slice(eq + 1)) !== undefined) {
      segments.push({ kind: 'item', text: word.slice(0, eq), origin: `"${word}" ${ORIGIN_IN_SCRIPT}`, inShellText: true });
      pushVariable(variableOf(word.slice(eq + 1))!, new Set(), true);
      return;
    }
    const name = variableOf(word);
    if (name !== undefined) pushVariable(name, new Set(), i > 0 && FLAG_NAMES.includes(command.words[i - 1]!));
    else if (mentionsUtilizationFlag(word) || (i > 0 && FLAG_NAMES.includes(command.words[i - 1]!))) segments.push({ kind: 'unknown', text: word });
  });
  return segments;
}

/** A variable's value as the shell splits it (the default IFS). */
function splitWords(value: string): string[] {
  return value.split(/[ \t\n]+/).filter((w) => w !== '');
}

/**
 * The utilization from vLLM's command line in a shell script (its last occurrence, as
 * argparse reads it). Variables whose values only the run knows, after the last occurrence
 * the render can read, make it a run-time reading of those variables.
 */
function readFromScript(segments: Segment[], input: UtilizationInput): Utilization | Found | 'unreadable' | undefined {
  let last: { found: Found; at: number } | undefined;
  let runtimeValueAt: number | undefined;
  for (let i = 0; i < segments.length; i++) {
    const seg = segments[i]!;
    if (seg.kind !== 'item') continue;
    const eq = seg.text.indexOf('=');
    const name = eq === -1 ? seg.text : seg.text.slice(0, eq);
    if (FLAG_NAMES.includes(name)) {
      if (eq !== -1) {
        last = { found: { raw: seg.text.slice(eq + 1), origin: seg.origin, inShellText: seg.inShellText }, at: i };
        continue;
      }
      const next = segments[i + 1];
      if (next?.kind === 'item') {
        last = { found: { raw: next.text, origin: `"${seg.text} ${next.text}" (${next.origin})`, inShellText: next.inShellText }, at: i + 1 };
        i++;
      } else if (next?.kind === 'variable') {
        runtimeValueAt = i;
        last = undefined;
        i++;
      } else return 'unreadable';
    } else if (mentionsUtilizationFlag(seg.text)) return 'unreadable';
  }
  const after = last?.at ?? -1;
  if (segments.some((seg, i) => i > after && seg.kind === 'unknown')) return 'unreadable';
  const from = runtimeValueAt !== undefined && runtimeValueAt > after ? runtimeValueAt : after + 1;
  const variables = segments.slice(from).filter((seg): seg is Extract<Segment, { kind: 'variable' }> => seg.kind === 'variable');
  if (variables.length === 0) return last?.found;
  // vLLM's value comes from variables the container's env does not spell out: read them at run time.
  const words: RuntimeWord[] = [];
  if (runtimeValueAt !== undefined && runtimeValueAt >= from) words.push({ literal: FLAG_NAMES[0]! });
  for (const seg of segments.slice(from)) if (seg.kind === 'variable') words.push({ variable: seg.name });
  const known = last ? resolveReference(last.found, input) : undefined;
  if (known && isUtilization(known)) {
    throw new PreflightError('UNREADABLE_UTILIZATION', `--gpu-memory-utilization is known only at run time twice over: ${known.origin}, and from ${variables.map((v) => `$${v.name}`).join(', ')} in the shell script that starts vLLM`, {
      ...input.context,
      fix: ANNOTATION_FIX,
    });
  }
  const fallback = known ? parseUtilizationValue(known.raw, known.origin, input.context) : input.defaultValue;
  const names = [...new Set(variables.map((v) => `$${v.name}`))].join(', ');
  // `--gpu-memory-utilization $U`: the flag is written, its value is the variable's.
  const flagWritten = words[0] !== undefined && 'literal' in words[0];
  return {
    source: 'runtime',
    origin: flagWritten
      ? `--gpu-memory-utilization ${names} in the shell script that starts vLLM (a value known only when the container starts): the preflight reads the variable at run time`
      : `${names}, which the shell script that starts vLLM expands into vLLM's command line (their values are known only when the container starts): the preflight reads the last --gpu-memory-utilization there at run time, else ${fallback.value} (${known ? known.origin : 'the default'})`,
    runtime: { words, fallback },
    ...(known || flagWritten ? {} : { defaulted: true as const }),
  };
}

export function readUtilization(input: UtilizationInput): Utilization {
  const { context } = input;
  const segments = commandSegments(input);
  const fromScript = segments ? readFromScript(segments, input) : undefined;
  if (fromScript !== undefined && fromScript !== 'unreadable' && isUtilization(fromScript)) {
    if (input.annotation) return { ...parseUtilizationValue(input.annotation.value, `annotation ${input.annotation.key}`, context), source: 'annotation', origin: `annotation ${input.annotation.key}` };
    return fromScript;
  }
  const inArgv = segments ? fromScript : findInArgv(input.start);
  if (input.annotation) {
    const annotated = parseUtilizationValue(input.annotation.value, `annotation ${input.annotation.key}`, context);
    if (inArgv !== undefined && inArgv !== 'unreadable') {
      const found = resolveReference(inArgv, input);
      if (!isUtilization(found)) {
        // Compared as vLLM reads them: the same float, however written.
        const fromArgs = parseUtilizationValue(found.raw, found.origin, context, found.shown);
        if (fromArgs.value !== annotated.value) {
          throw new PreflightError('BAD_ANNOTATION', `annotation ${input.annotation.key}: "${input.annotation.value}" contradicts --gpu-memory-utilization ${found.shown ?? found.raw} (${found.origin})`, {
            ...context,
            fix: 'remove the annotation: it is only needed when the value cannot be read from the args',
          });
        }
      }
    }
    return { ...annotated, source: 'annotation', origin: `annotation ${input.annotation.key}` };
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
    return { ...parseUtilizationValue(found.raw, found.origin, context, found.shown), source: 'args', origin: found.origin };
  }
  if (input.start.some((item) => item === '--config' || item.startsWith('--config='))) {
    throw new PreflightError('UNREADABLE_UTILIZATION', 'vLLM reads a --config file here, which may set gpu_memory_utilization', {
      ...context,
      fix: `${ANNOTATION_FIX}, or also pass --gpu-memory-utilization in the args`,
    });
  }
  return { ...input.defaultValue, source: 'default', origin: 'default (no --gpu-memory-utilization in the start)', defaulted: true };
}
