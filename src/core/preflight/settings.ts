/**
 * The preflight's settings: what a caller may ask of the script (PreflightSettings), their
 * limits, and their validation into the exact decimal text the script is written with
 * (./script.ts). Every value is checked here first; no caller string reaches the script
 * unchecked. A bad value is a PreflightError, which a caller reports against its container.
 */

import { PreflightError, type ErrorCode } from '../errors.js';
import { readPythonFloat, trimPythonSpace } from '../python-float.js';
import { isAsciiDigit } from '../char-classes.js';

/** A word of vLLM's command line as the script reads it at run time: the flag's name as written, or a variable's value split by the shell. */
export type RuntimeWord = { literal: string } | { variable: string };

/**
 * A utilization the start's shell script puts on vLLM's command line from variables (KServe's
 * `${VLLM_ADDITIONAL_ARGS}`): the script reads the last --gpu-memory-utilization among these
 * words at run time (a variable's value split as the shell splits it), else `fallback`
 * (decimal text, as `utilization`).
 */
export interface RuntimeUtilization {
  words: RuntimeWord[];
  fallback: string;
}

export interface PreflightSettings {
  /** Tool version, written into the marker line. */
  version: string;
  /**
   * vLLM's --gpu-memory-utilization as the decimal text it was written in, as Python's float()
   * reads it (`0.9`, `.9`, `9e-1`, `0.9_5`), with 0 < u <= 1 once rounded UP to 6 decimals
   * (roundUtilizationUp: on the digits, never through a binary float); or 'from-args': the
   * script reads the last --gpu-memory-utilization in the start's own arguments at run time
   * (for `$(VAR)` values the kubelet expands) and exits 78 when there is none or it is invalid;
   * or run-time words.
   */
  utilization: string | RuntimeUtilization;
  /** Extra MiB required per GPU on top of vLLM's request and its context (contextMiB); integer >= 0. */
  headroomMiB: number;
  /**
   * MiB of each GPU's free memory that vLLM's own process takes before its check (its CUDA
   * context; NCCL's buffers too when the engine spans GPUs): integer 0..65536, or 'auto'
   * (the default): CONTEXT_MIB_AUTO.oneGpu where the script checks one GPU, .severalGpus where
   * it checks more.
   */
  contextMiB?: number | 'auto';
  /** Give up after this many seconds of waiting; integer >= 1. */
  timeoutSeconds: number;
  /** Seconds between nvidia-smi polls while waiting; > 0 (fractions allowed). */
  pollIntervalSeconds: number;
  /** Seconds between progress lines while waiting; integer >= 1. */
  logIntervalSeconds: number;
  /** nvidia-smi missing, failing, unreadable or hung: warn and start vLLM, or fail. */
  onNvidiaSmiUnavailable: 'warn' | 'fail';
  /**
   * Seconds one nvidia-smi query may take before it is killed and counted as "nvidia-smi
   * unavailable" (hung); integer >= 1. Default DEFAULT_NVIDIA_SMI_TIMEOUT_SECONDS.
   */
  nvidiaSmiTimeoutSeconds?: number;
  /** Where the final message is also written (the container's terminationMessagePath). */
  terminationMessagePath: string;
}

/**
 * contextMiB 'auto': the estimate of what vLLM's process takes of a GPU's free memory before its
 * check. Measured on an H200 (docs/gpu-results.md): a fresh process's CUDA context costs 525-620
 * MiB there, and a one-process NCCL group with a first all-reduce 558 MiB more; B200 has more SMs
 * (more context), so one GPU gets 768, several (tensor or pipeline parallel: NCCL) 1536.
 */
export const CONTEXT_MIB_AUTO = { oneGpu: 768, severalGpus: 1536 } as const;

/** Per-query limit when PreflightSettings.nvidiaSmiTimeoutSeconds is not given. */
const DEFAULT_NVIDIA_SMI_TIMEOUT_SECONDS = 10;

/** Limits enforced by renderPreflightScript (exported so callers and tests can refer to them). */
export const PREFLIGHT_LIMITS = {
  /** Utilization is rounded UP to this many decimals: keeps total x numerator far below 2^53 in awk. */
  utilizationMaxDecimals: 6,
  headroomMiBMax: 1_048_576,
  contextMiBMax: 65_536,
  timeoutSecondsMax: 7 * 24 * 3600,
  pollIntervalSecondsMin: 0.01,
  pollIntervalSecondsMax: 3600,
  /** Decimal places accepted in pollIntervalSeconds. */
  pollIntervalMaxDecimals: 3,
  logIntervalSecondsMax: 86_400,
  nvidiaSmiTimeoutSecondsMax: 600,
  terminationMessagePathMaxLength: 4096,
} as const;

const CODES: Partial<Record<keyof PreflightSettings, ErrorCode>> = {
  utilization: 'BAD_UTILIZATION',
  terminationMessagePath: 'BAD_CONTAINER',
};

/** Throws the project's PreflightError, so a caller reports it against the container. */
function fail(what: keyof PreflightSettings | 'settings', value: unknown, rule: string): never {
  const shown = typeof value === 'number' ? String(value) : (JSON.stringify(value) ?? String(value));
  throw new PreflightError(
    (what !== 'settings' && CODES[what]) || 'BAD_OPTION',
    `invalid ${what} ${shown} for the preflight script: ${rule}`,
    { fix: `${what} ${rule}` },
  );
}

function isNumber(v: unknown): v is number {
  return typeof v === 'number' && Number.isFinite(v);
}

function integerIn(what: keyof PreflightSettings, v: unknown, min: number, max: number): string {
  if (!isNumber(v) || !Number.isInteger(v) || v < min || v > max) {
    fail(what, v, `must be an integer from ${min} to ${max}`);
  }
  return String(v);
}

/** A number's shortest decimal spelling, if it is plain `D+(.D{1,maxDecimals})?`. */
function plainDecimal(v: number, maxDecimals: number): string | undefined {
  const s = String(v);
  return isPlainDecimal(s, maxDecimals) ? s : undefined;
}

/** `new RegExp(`^\\d+(\\.\\d{1,${maxDecimals}})?$`).test(s)`, without building and compiling a regex per call in a render (docs/benchmarks.md). */
export function isPlainDecimal(s: string, maxDecimals: number): boolean {
  let i = 0;
  while (isAsciiDigit(s.charCodeAt(i))) i++;
  if (i === 0) return false;
  if (i === s.length) return true;
  if (s.charCodeAt(i) !== 0x2e) return false;
  const point = i++;
  while (isAsciiDigit(s.charCodeAt(i))) i++;
  return i === s.length && i - point - 1 >= 1 && i - point - 1 <= maxDecimals;
}

/**
 * A utilization written the way Python's float() reads it (readPythonFloat, with ASCII
 * whitespace around it, trimPythonSpace: a Secret made with --from-file ends in a newline), rounded UP to 6
 * decimals and spelled `1` or `0.DDDDDD` without trailing zeros; undefined unless
 * 1e-323 <= value <= 1 (below that float() reads 0 or a denormal). Exact: works on the
 * digits, not on a binary float. Rounding up asks for at most 1e-6 x total more, 1 MiB on
 * a 143 GiB GPU. The script's UTIL_AWK does the same for a value read at run time.
 */
export function roundUtilizationUp(text: string): string | undefined {
  const m = readPythonFloat(trimPythonSpace(text));
  if (!m || m.sign === '-') return undefined;
  const mantissa = m.mantissa.replaceAll('_', '');
  const dot = mantissa.indexOf('.');
  let digits = mantissa.replace('.', '');
  let point = dot < 0 ? mantissa.length : dot; // value = 0.digits x 10^point
  const lead = leadingZeros(digits);
  digits = digits.slice(lead);
  point -= lead;
  if (digits === '') return undefined; // zero
  point += Number((m.exponent ?? '0').replaceAll('_', ''));
  if (point > 1 || point < -322) return undefined; // >= 10, or < 1e-323
  const n = point + PREFLIGHT_LIMITS.utilizationMaxDecimals;
  let micro = n < 1 ? 1 : Number(digits.slice(0, n).padEnd(n, '0'));
  if (n >= 1 && hasNonZeroDigit(digits, n)) micro++;
  if (micro > 1_000_000) return undefined;
  return micro === 1_000_000 ? '1' : `0.${withoutTrailingZeros(String(micro).padStart(6, '0'))}`;
}

// The small scans below stand for regexes (named in each): a render runs them in a fresh
// process, where each regex costs its compilation on its first runs (docs/benchmarks.md).

// `/^0*/.exec(digits)[0].length`: the leading zeros.
export function leadingZeros(digits: string): number {
  let n = 0;
  while (digits.charCodeAt(n) === 0x30) n++;
  return n;
}

/** `/[1-9]/.test(digits.slice(from))` */
export function hasNonZeroDigit(digits: string, from: number): boolean {
  for (let i = Math.max(from, 0); i < digits.length; i++) {
    const c = digits.charCodeAt(i);
    if (c >= 0x31 && c <= 0x39) return true;
  }
  return false;
}

/** `text.replace(/0+$/, '')` */
export function withoutTrailingZeros(text: string): string {
  let end = text.length;
  while (end > 0 && text.charCodeAt(end - 1) === 0x30) end--;
  return text.slice(0, end);
}

const UTILIZATION_RULE = "must be decimal text (as Python's float() reads it) with 0 < u <= 1, 'from-args' or run-time words";

/** Decimal text rounded UP to 6 decimals, the one rounding of a utilization written into the script. */
function roundedUtilization(v: unknown): string {
  const s = typeof v === 'string' ? roundUtilizationUp(v) : undefined;
  if (s === undefined) fail('utilization', v, UTILIZATION_RULE);
  return s;
}

/** What the script does about the utilization: a value it is written with, its own argv at run time, or the start's variables at run time. */
export type CheckedUtilization =
  | { kind: 'value'; value: string }
  | { kind: 'from-args' }
  | { kind: 'from-variables'; words: readonly RuntimeWord[]; variables: readonly string[]; fallback: string };

function checkUtilization(v: PreflightSettings['utilization']): CheckedUtilization {
  if (v === 'from-args') return { kind: v };
  if (typeof v !== 'object' || v === null) return { kind: 'value', value: roundedUtilization(v) };
  if (!Array.isArray(v.words) || v.words.length === 0 || v.words.length > 64) fail('utilization', v, 'run-time words must be 1 to 64 words');
  for (const w of v.words) {
    const variable = 'variable' in w && typeof w.variable === 'string' && isShellVariableName(w.variable);
    const flag = 'literal' in w && (w.literal === '--gpu-memory-utilization' || w.literal === '--gpu_memory_utilization');
    if (!variable && !flag) fail('utilization', w, 'a run-time word must be a shell variable name or the flag --gpu-memory-utilization');
  }
  const variables = v.words.flatMap((w) => ('variable' in w ? [w.variable] : []));
  return { kind: 'from-variables', words: v.words, variables, fallback: roundedUtilization(v.fallback) };
}

/** `/^[A-Za-z_][A-Za-z0-9_]{0,127}$/` */
function isShellVariableName(v: string): boolean {
  if (v.length === 0 || v.length > 128) return false;
  for (let i = 0; i < v.length; i++) {
    const c = v.charCodeAt(i);
    if (!((c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a) || c === 0x5f || (i > 0 && isAsciiDigit(c)))) return false;
  }
  return true;
}

function validPollInterval(v: unknown): string {
  const { pollIntervalSecondsMin: min, pollIntervalSecondsMax: max, pollIntervalMaxDecimals: dec } =
    PREFLIGHT_LIMITS;
  if (!isNumber(v) || v < min || v > max) fail('pollIntervalSeconds', v, `must be from ${min} to ${max}`);
  const s = plainDecimal(v, dec);
  if (s === undefined) fail('pollIntervalSeconds', v, `must have at most ${dec} decimal places`);
  return s;
}

function validVersion(v: unknown): string {
  if (typeof v !== 'string' || !isVersionText(v)) {
    fail('version', v, 'must be 1-64 characters of [0-9A-Za-z.+-]');
  }
  return v;
}

function validPath(v: unknown): string {
  const max = PREFLIGHT_LIMITS.terminationMessagePathMaxLength;
  if (
    typeof v !== 'string' ||
    v.length > max ||
    !isPlainAbsolutePath(v) ||
    v.split('/').some((part) => part === '..')
  ) {
    fail('terminationMessagePath', v, 'must be an absolute path of [A-Za-z0-9._/-] without ".."');
  }
  return v;
}

/** `/^[0-9A-Za-z][0-9A-Za-z.+-]{0,63}$/.test(v)` (a scan: cold-start cost of a regex in a render; docs/benchmarks.md) */
export function isVersionText(v: string): boolean {
  if (v.length < 1 || v.length > 64 || !isAsciiAlphanumeric(v.charCodeAt(0))) return false;
  for (let i = 1; i < v.length; i++) {
    const c = v.charCodeAt(i);
    if (!isAsciiAlphanumeric(c) && c !== 0x2e && c !== 0x2b && c !== 0x2d) return false;
  }
  return true;
}

/** `/^\/[A-Za-z0-9._/-]*$/.test(v)` (a scan: cold-start cost of a regex in a render; docs/benchmarks.md) */
export function isPlainAbsolutePath(v: string): boolean {
  if (v.charCodeAt(0) !== 0x2f) return false;
  for (let i = 1; i < v.length; i++) {
    const c = v.charCodeAt(i);
    if (!isAsciiAlphanumeric(c) && c !== 0x2e && c !== 0x5f && c !== 0x2f && c !== 0x2d) return false;
  }
  return true;
}

function isAsciiAlphanumeric(c: number): boolean {
  return isAsciiDigit(c) || (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a);
}

function validMode(v: unknown): 'warn' | 'fail' {
  if (v !== 'warn' && v !== 'fail') fail('onNvidiaSmiUnavailable', v, "must be 'warn' or 'fail'");
  return v;
}

/** The options a CLI takes for every container alike (what checkPreflightOptions checks). */
export interface PreflightOptions {
  timeoutSeconds: unknown;
  pollIntervalSeconds: unknown;
  logIntervalSeconds: unknown;
  headroomMiB: unknown;
  contextMiB?: unknown;
  onNvidiaSmiUnavailable: unknown;
  nvidiaSmiTimeoutSeconds?: unknown;
}

export interface CheckedOptions {
  headroom: string;
  /** Context cost on one GPU, and on each of several. */
  contextOne: string;
  contextSeveral: string;
  timeout: string;
  poll: string;
  logEvery: string;
  mode: 'warn' | 'fail';
  smiLimit: string;
}

function contextCosts(v: unknown): { contextOne: string; contextSeveral: string } {
  if (v === undefined || v === 'auto') {
    return { contextOne: String(CONTEXT_MIB_AUTO.oneGpu), contextSeveral: String(CONTEXT_MIB_AUTO.severalGpus) };
  }
  if (!isNumber(v) || !Number.isInteger(v) || v < 0 || v > PREFLIGHT_LIMITS.contextMiBMax) {
    fail('contextMiB', v, `must be 'auto' or an integer from 0 to ${PREFLIGHT_LIMITS.contextMiBMax}`);
  }
  return { contextOne: String(v), contextSeveral: String(v) };
}

function checkOptions(o: PreflightOptions): CheckedOptions {
  return {
    headroom: integerIn('headroomMiB', o.headroomMiB, 0, PREFLIGHT_LIMITS.headroomMiBMax),
    ...contextCosts(o.contextMiB),
    timeout: integerIn('timeoutSeconds', o.timeoutSeconds, 1, PREFLIGHT_LIMITS.timeoutSecondsMax),
    poll: validPollInterval(o.pollIntervalSeconds),
    logEvery: integerIn('logIntervalSeconds', o.logIntervalSeconds, 1, PREFLIGHT_LIMITS.logIntervalSecondsMax),
    mode: validMode(o.onNvidiaSmiUnavailable),
    smiLimit: integerIn(
      'nvidiaSmiTimeoutSeconds',
      o.nvidiaSmiTimeoutSeconds ?? DEFAULT_NVIDIA_SMI_TIMEOUT_SECONDS,
      1,
      PREFLIGHT_LIMITS.nvidiaSmiTimeoutSecondsMax,
    ),
  };
}

/**
 * Throws the PreflightError (code BAD_OPTION) that renderPreflightScript would throw for these
 * options, so a CLI can reject a bad option once, up front, instead of once per container.
 */
export function checkPreflightOptions(o: PreflightOptions): void {
  if (typeof o !== 'object' || o === null) fail('settings', o, 'must be an object');
  checkOptions(o);
}

/** Every setting, checked: the text the script is written with. */
export interface CheckedSettings extends CheckedOptions {
  version: string;
  utilization: CheckedUtilization;
  msgFile: string;
}

/** Checks every setting (a PreflightError for the first that is bad) into the text the script is written with. */
export function checkSettings(settings: PreflightSettings): CheckedSettings {
  if (typeof settings !== 'object' || settings === null) fail('settings', settings, 'must be an object');
  return {
    version: validVersion(settings.version),
    utilization: checkUtilization(settings.utilization),
    ...checkOptions(settings),
    msgFile: validPath(settings.terminationMessagePath),
  };
}
