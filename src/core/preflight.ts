/**
 * The preflight: a POSIX sh script that runs as the container's start
 * (`/bin/sh -ec SCRIPT -- <original start...>`), waits until every visible GPU
 * has the memory vLLM will ask for, then `exec "$@"`.
 *
 * Behaviour, log lines and exit codes are documented for operators in
 * docs/restart-race.md; the tests in test/preflight/ run the text under dash,
 * busybox sh and bash.
 *
 * Constraints on the generated text:
 * - Kubernetes expands `$(NAME)` in command/args and turns `$$` into `$`, so the
 *   text contains neither (no `$(...)`, no `$((...))`): arithmetic is done in awk,
 *   command output is captured with backticks.
 * - Every value written into it is validated here first; no caller string is
 *   pasted in unchecked.
 */

import { PreflightError, type ErrorCode } from './errors.js';
import { readPythonFloat, trimPythonSpace } from './python-float.js';
import { isAsciiDigit } from './char-classes.js';
import { awkLine, LOG_PREFIX, shellText } from './preflight-lines.js';

/** First characters of every generated script; also how a wrapped container is recognised. */
export const PREFLIGHT_MARKER_PREFIX = '# vram-preflight ';

/** Exit code when the wait times out (EX_TEMPFAIL from sysexits.h). */
export const EXIT_TIMEOUT = 75;
/** Exit code when nvidia-smi cannot be used (missing, failing, unreadable or hung) and onNvidiaSmiUnavailable is 'fail' (EX_UNAVAILABLE). */
export const EXIT_NVIDIA_SMI_UNAVAILABLE = 69;
/** Exit code when there is no command after `--` (EX_USAGE). */
export const EXIT_NO_COMMAND = 64;
/**
 * Exit code when the utilization cannot be used (EX_CONFIG): 'from-args' and the start's arguments
 * have no valid --gpu-memory-utilization, or one that asks for the whole GPU (u = 1), which vLLM's
 * check can never pass (its own CUDA context takes memory before it checks).
 */
export const EXIT_BAD_UTILIZATION = 78;
/** Exit code when the start after `--` is not found (as a shell reports it). */
export const EXIT_START_NOT_FOUND = 127;
/** Exit code when the start after `--` is found but is not an executable file (as a shell reports it). */
export const EXIT_START_NOT_EXECUTABLE = 126;
/** How a poll tells the loop "start vLLM without a check" (it said why); never the script's own exit code. */
const POLL_START_UNCHECKED = 65;
/**
 * The --query-gpu field lists, asked in this order until nvidia-smi knows every field (exit
 * status 2 means it does not): memory.reserved came with driver R510, mig.mode.current with R450.
 * JUDGE_AWK reads the columns by position.
 */
const QUERY_FIELDS = [
  'index,uuid,memory.total,memory.free,mig.mode.current,memory.reserved',
  'index,uuid,memory.total,memory.free,mig.mode.current',
  'index,uuid,memory.total,memory.free',
] as const;
/** Exit code on SIGTERM while waiting (128 + 15). */
export const EXIT_SIGTERM = 143;
/** Exit code on SIGINT while waiting (128 + 2). */
export const EXIT_SIGINT = 130;

/**
 * A utilization the start's shell script puts on vLLM's command line from variables (KServe's
 * `${VLLM_ADDITIONAL_ARGS}`): the script reads the last --gpu-memory-utilization among these
 * words at run time (a variable's value split as the shell splits it), else `fallback`.
 */
export interface RuntimeUtilization {
  words: ({ literal: string } | { variable: string })[];
  fallback: number;
}

export interface PreflightSettings {
  /** Tool version, written into the marker line. */
  version: string;
  /**
   * vLLM's --gpu-memory-utilization: a number with 0 < u <= 1 (rounded UP to 6 decimals), or
   * 'from-args': the script reads the last --gpu-memory-utilization in the start's own arguments
   * at run time (for `$(VAR)` values the kubelet expands) and exits 78 when there is none or it is invalid.
   */
  utilization: number | 'from-args' | RuntimeUtilization;
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
export const DEFAULT_NVIDIA_SMI_TIMEOUT_SECONDS = 10;

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

function validUtilization(v: unknown): string {
  if (v === 'from-args') return v;
  if (!isNumber(v) || !(v > 0) || v > 1) fail('utilization', v, "must be a number with 0 < u <= 1, 'from-args' or run-time words");
  const s = roundUtilizationUp(String(v));
  if (s === undefined) fail('utilization', v, "must be a number with 0 < u <= 1, 'from-args' or run-time words");
  return s;
}

/** The run-time words as shell text: each literal single-quoted (it is a flag's name), each variable unquoted (split as the shell splits it). */
function runtimeWords(v: RuntimeUtilization): { words: string; fallback: string; names: string } {
  if (!Array.isArray(v.words) || v.words.length === 0 || v.words.length > 64) fail('utilization', v, 'run-time words must be 1 to 64 words');
  const words = v.words.map((w) => {
    if ('variable' in w && typeof w.variable === 'string' && isShellVariableName(w.variable)) return `$${w.variable}`;
    if ('literal' in w && (w.literal === '--gpu-memory-utilization' || w.literal === '--gpu_memory_utilization')) return `'${w.literal}'`;
    return fail('utilization', w, 'a run-time word must be a shell variable name or the flag --gpu-memory-utilization');
  });
  const names = v.words.flatMap((w) => ('variable' in w ? [`$${w.variable}`] : [])).join(' ');
  return { words: words.join(' '), fallback: validUtilization(v.fallback), names };
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

interface CheckedOptions {
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

/**
 * The awk program that judges one nvidia-smi reading. It prints exactly one line,
 * whose first word tells the poll what to do: `ok`, `bad` (cannot check), `mig` (a MIG
 * GPU: cannot be judged, start), `never` (no GPU can ever pass vLLM's check at this
 * utilization), `late` (the query ran into the overall deadline), `timeout` or
 * `wait CODE`; the rest is the message.
 * Inputs come in with -v (see poll() in the script below); `el` is the elapsed time and
 * `fields` the --query-gpu list that was answered (columns 5 and 6, mig.mode.current and
 * memory.reserved, are left out for a driver that does not know them).
 * The need is vLLM's own rule (request_memory() in vllm/v1/worker/utils.py): it asks for
 * ceil(CUDA total x u), where CUDA's total is nvidia-smi's total less memory.reserved (none
 * assumed when it is not reported: a stricter need), and it measures free memory after its
 * own CUDA context exists, so the context's cost (c1 on one GPU, cm on several, where
 * NCCL adds its buffers) comes on top, then the headroom h.
 * Integer-exact: utilization "0.9" becomes 9/10 and ceil(ct*9/10) is computed on integers;
 * total <= 1e8 MiB and numerator <= 1e6 keep every product below 2^53, where awk's
 * doubles are exact and int(x/den) is the true floor. A reading that cannot be true (no
 * number, over 1e8 MiB, a total of 0, more free than total, a reserve as large as the total)
 * is an unreadable GPU, never "enough". dec() strips leading zeros because busybox awk
 * reads "010" as octal.
 * A need over what the GPU can ever have free (CUDA's total, less 1 MiB for nvidia-smi's
 * rounding) is cut to what an idle GPU is sure to show (CUDA's total less 64 MiB where the
 * reserve is reported; vLLM's bare request where it is not, as the unreported reserve reads
 * as used), never below vLLM's request: the wait then ends when the GPU is idle and vLLM's
 * own check decides, never a wait that cannot end. A request of the whole GPU (u = 1) is `never`.
 * The exit status of a waiting poll is 32 + the number of GPUs listed (capped at 31),
 * so the loop can hand the first count back in `first` and a later reading that lists
 * a different number (a GPU fell off the bus) is caught rather than judged on the rest.
 */
const JUDGE_AWK = `
function trim(x) { gsub(/^[ \\t\\r]+|[ \\t\\r]+$/, "", x); return x }
function num(x) { return x ~ /^[0-9]+$/ && length(x) < 10 }
function dec(x) { sub(/^0+/, "", x); return x + 0 }
BEGIN { nf = split(fields, w, ",") }
/^[ \\t\\r]*$/ { next }
{ if (split($0, a, ",") != nf || !num(trim(a[1]))) { if (!bad) bad = "nvidia-smi printed an unreadable line: " $0; next }
  k++; id[k] = trim(a[1]); uu[k] = trim(a[2]); tot[k] = trim(a[3]); fr[k] = trim(a[4]); mig[k] = trim(a[5]); rs[k] = trim(a[6]) }
END {
  e1 = sprintf("%.1f", el)
  if (rc == 124 && lim < q) { print ${awkLine('gaveUp', { waited: 'sprintf("%.1f", el + lim)', timeout: 'ts', why: { format: 'lateWhy', values: { left: 'lim' } } }, 'late ')}; exit }
  if (rc == 124) bad = "nvidia-smi did not answer within " lim " s and was killed (it hangs like this when the driver is wedged, e.g. after Xid 79 \\"GPU has fallen off the bus\\")"
  else if (rc != 0) bad = "nvidia-smi failed (exit status " rc ")"
  else if (!bad && !k) bad = "nvidia-smi listed no GPU"
  cap = k < 31 ? k : 31
  if (!bad && first != "" && cap != first - 32) bad = "nvidia-smi now lists " k " GPU(s), " first - 32 " when the wait began (did a GPU fall off the bus?)"
  if (!bad && cvs != "") {
    m = split(cvd, w, ",")
    for (i = 1; i <= m; i++) {
      e = trim(w[i]); hit = 0
      if (e ~ /^MIG-/) { mg = "CUDA_VISIBLE_DEVICES names the MIG instance " e; continue }
      for (j = 1; j <= k; j++)
        if (e ~ /^[0-9]+$/ ? dec(e) == dec(id[j]) : e != "" && (index(uu[j], e) == 1 || index(uu[j], "GPU-" e) == 1)) { sel[j] = 1; hit = 1 }
      if (!hit && e != "") bad = "CUDA_VISIBLE_DEVICES entry \\"" e "\\" matches no GPU that nvidia-smi lists"
    }
  } else for (j = 1; j <= k; j++) sel[j] = 1
  for (j = 1; j <= k && !bad && mg == ""; j++) if (mig[j] == "Enabled") mg = "GPU " id[j] " is in MIG mode"
  if (!bad && mg != "") { print "mig " mg ": nvidia-smi reads the whole GPU, not the MIG instance of this container; starting vLLM without waiting"; exit }
  for (j = 1; j <= k; j++) if (sel[j]) n++
  if (!bad && !n) bad = "CUDA_VISIBLE_DEVICES=\\"" cvd "\\" selects no GPU"
  ctx = n > 1 ? cm : c1
  split(u, d, "."); den = 1
  for (i = length(d[2]); i > 0; i--) den *= 10
  nu = dec(d[1]) * den + dec(d[2])
  for (j = 1; j <= k && !bad; j++) if (sel[j]) {
    if (!num(tot[j]) || !num(fr[j]) || dec(tot[j]) > 1e8 || dec(tot[j]) == 0 || dec(fr[j]) > dec(tot[j])) { bad = "GPU " id[j] " memory reads total=" tot[j] " free=" fr[j]; break }
    r = num(rs[j]) ? dec(rs[j]) : 0
    if (r >= dec(tot[j])) { bad = "GPU " id[j] " memory reads total=" tot[j] " reserved=" rs[j]; break }
    ct = dec(tot[j]) - r
    x = ct * nu; req = int(x / den); if (req * den < x) req++
    if (req >= ct) {
      um = int((ct - ctx) * 100 / ct) / 100
      print "never cannot wait for GPU memory: --gpu-memory-utilization " u " asks vLLM for all " ct " MiB of GPU " id[j] " (what CUDA can use of it), but vLLM takes memory for its own CUDA context before it checks, so its check can never pass; lower --gpu-memory-utilization" (um > 0 ? " (at most " um " leaves room for a " ctx " MiB context here)" : "") "; not starting vLLM"
      exit
    }
    need = req + ctx + h; how = req " for vLLM: " u " x " ct " MiB CUDA total" (r ? " = " tot[j] " - " r " reserved" : " = " tot[j] ", no reserve reported") "; " ctx " for its CUDA context; " h " headroom"
    if (need > ct - 1) {
      # More than it can have free: cut to what an idle GPU surely shows (see the comment in preflight.ts).
      idle = r ? ct - 64 : req
      if (idle < req) idle = req
      need = idle; how = (r ? "the CUDA total less 64 MiB an idle GPU may use" : "the request of vLLM alone, no reserve reported") ", as " how " would be more: vLLM itself decides"
    }
    gap = need - dec(fr[j])
    if (g == "" || gap > worst) { worst = gap; g = ${awkLine('tightest', { gpu: 'id[j]', free: 'fr[j]', need: 'need', how: 'how' })} }
    if (gap > 0) short++
  }
  if (bad) { print "bad " bad; exit }
  more = short > 1 ? ${awkLine('moreShort', { count: 'short - 1' })} : ""
  if (!short) print "ok " (first == "" ? "" : ${awkLine('arrived', { waited: 'e1' })}) ${awkLine('checked', { gpus: 'n', tightest: 'g' })}
  else if (el >= ts) print ${awkLine('gaveUp', { waited: 'e1', timeout: 'ts', why: 'g more' }, 'timeout ')}
  else print "wait " 32 + cap ${awkLine('waiting', { tightest: 'g', moreShort: 'more', waited: 'e1', timeout: 'ts' }, ' ')}
}`;

/**
 * The awk program that advances the clock between polls; it never counts more time than
 * has passed, so the timeout never fires early. /proc/uptime only moves forward
 * (CLOCK_BOOTTIME), so its steps are taken as they are. Without it, `date +%s` is the
 * clock: whole seconds, so a reading may be up to 1 s behind the true time, and a step
 * between two readings may be 1 s more than the time that passed. So the elapsed time is
 * counted from the whole second after the first reading (`zero` + 1: the wall-clock
 * second at which the count stands at 0), and never less than the pauses slept since
 * (each round sleeps at least one pause): at most 2 s short. The wall clock jumps when it
 * is set, so a step no round can take (backwards, or longer than a pause, a query and
 * 2 s) counts as one pause and the count starts afresh from there; with no clock at all
 * every round counts as one pause. Either way the timeout fires late, never early.
 * Prints the elapsed seconds, the next query's limit (the per-query limit, cut to the time
 * that is left, at least 2 s), whether this round logs (1) or not (0), and `zero`.
 */
export const CLOCK_AWK = `BEGIN {
  d = raw - prev
  if (src == "u" && psrc == "u") el += d
  else if (src == "d" && psrc == "d" && d >= 0 && d <= poll + lim + 2) { el += poll; if (raw - zero - 1 > el) el = raw - zero - 1 }
  else { el += poll; if (src == "d") zero = raw - el }
  left = ts - el
  l = left < 2 ? 2 : int(left) + (left > int(left)); if (l > q) l = q
  printf "%.3f %d %d %.3f\\n", el, l, (el - lg >= ls), zero
}`;

/**
 * The awk program that reads a run-time --gpu-memory-utilization (from the environment, as
 * `u`: -v would turn backslashes into escapes) the way roundUtilizationUp() does: Python
 * float syntax, 1e-323 <= value <= 1, rounded UP to 6 decimals, digit by digit (no binary
 * float in between). Prints the value; exits 1 when it is invalid.
 */
export const UTIL_AWK = `function dec(x) { sub(/^0+/, "", x); return x + 0 }
BEGIN {
  s = ENVIRON["u"]; gsub(/^[ \\t\\n\\v\\f\\r]+|[ \\t\\n\\v\\f\\r]+$/, "", s)
  if (s !~ /^[+]?(([0-9]+(_[0-9]+)*)?[.][0-9]+(_[0-9]+)*|[0-9]+(_[0-9]+)*[.]?)([eE][-+]?[0-9]+(_[0-9]+)*)?$/) exit 1
  gsub(/_/, "", s); sub(/^[+]/, "", s); e = 0
  if (match(s, /[eE]/)) { x = substr(s, RSTART + 1); s = substr(s, 1, RSTART - 1); neg = sub(/^-/, "", x); sub(/^[+]/, "", x); e = neg ? -dec(x) : dec(x) }
  p = index(s, ".")
  if (p) { s = substr(s, 1, p - 1) substr(s, p + 1); p-- } else p = length(s)
  while (substr(s, 1, 1) == "0") { s = substr(s, 2); p-- }
  if (s == "") exit 1
  p += e; if (p > 1 || p < -322) exit 1
  n = p + 6
  if (n < 1) m = 1
  else { t = substr(s, 1, n); while (length(t) < n) t = t "0"; m = dec(t); if (substr(s, n + 1) ~ /[1-9]/) m++ }
  if (m > 1000000) exit 1
  if (m == 1000000) { print 1; exit }
  f = sprintf("%06d", m); sub(/0+$/, "", f); print "0." f
}`;

/**
 * The awk program that lists the descendants of process `root`, one pid a line, from the
 * /proc/PID/stat files it is given (the parent is the 4th field, after the command name in
 * parentheses, which may itself hold spaces and parentheses). It lists nothing unless /proc
 * says root's parent is `dad`: pids from a /proc of another PID namespace are not ours.
 */
const TREE_AWK = `BEGIN {
  for (i = 1; i < ARGC; i++) if ((getline s < ARGV[i]) > 0) {
    close(ARGV[i]); split(ARGV[i], f, "/"); sub(/.*[)] /, "", s); split(s, w, " "); up[f[3]] = w[2]
  }
  if (dad == "" || up[root] != dad) exit
  kin[root] = 1; more = 1
  while (more) { more = 0; for (p in up) if (!(p in kin) && ((up[p]) in kin)) { kin[p] = 1; more = 1 } }
  for (p in kin) if (p != root) print p
}`;

/** Formats nvidia-smi --query-compute-apps output for the timeout message. */
const APPS_AWK = `-F', *' 'NF >= 2 { a = a (a ? ", " : "") ${awkLine('holder', { pid: '$1', mib: '$2' })} } END { print a ? a : ${awkLine('noHolder')} }'`;

/** The loop that takes the last --gpu-memory-utilization of `list`, in any spelling vLLM accepts. */
function lastFlagLoop(list: string): string {
  return `for a in ${list}; do
  if [ -n "$take" ]; then u_raw=$a take=''; continue; fi
  case $a in
  --gpu[-_]memory[-_]utilization=*) u_raw=\${a#*=} u_seen=1 ;;
  --gpu[-_]memory[-_]utilization) u_raw='' u_seen=1 take=1 ;;
  esac
done
`;
}

/** Reads the utilization from the start's arguments; only in scripts rendered with 'from-args'. */
const FROM_ARGS = `# The utilization is only known at run time (the kubelet expanded a variable into the
# start's arguments): take the last --gpu-memory-utilization there.
u_raw='' u_seen='' take=''
${lastFlagLoop('"$@"')}[ -n "$u_seen" ] || die ${EXIT_BAD_UTILIZATION} 'cannot wait for GPU memory: the start has no --gpu-memory-utilization argument, and this preflight reads the utilization from there; not starting vLLM'
# shellcheck disable=SC2016 # an awk program: its $ are awk's, not the shell's
util=\`u=$u_raw awk '${UTIL_AWK}'\` || die ${EXIT_BAD_UTILIZATION} "cannot wait for GPU memory: --gpu-memory-utilization \\"$u_raw\\" in the start's arguments is not a number with 0 < u <= 1; not starting vLLM"
`;

/** Reads the utilization from the variables the start's script expands into vLLM's command line. */
function fromVariables(v: { words: string; fallback: string; names: string }): string {
  return `# The utilization is only known at run time: the script of the start puts ${v.names} on the
# command line of vLLM. Take the last --gpu-memory-utilization there (split as the shell splits
# it, no globbing), else ${v.fallback}, what vLLM gets without one there.
u_raw=${v.fallback} u_seen=1 take=''
set -f
# shellcheck disable=SC2086,SC2034 # split as the script splits them; u_seen: read by the other reader
${lastFlagLoop(v.words)}set +f
# shellcheck disable=SC2016 # an awk program: its $ are awk's, not the shell's
util=\`u=$u_raw awk '${UTIL_AWK}'\` || die ${EXIT_BAD_UTILIZATION} "cannot wait for GPU memory: --gpu-memory-utilization \\"$u_raw\\" in ${v.names.replaceAll('$', '\\$')} is not a number with 0 < u <= 1; not starting vLLM"
`;
}

export function renderPreflightScript(settings: PreflightSettings): string {
  if (typeof settings !== 'object' || settings === null) fail('settings', settings, 'must be an object');
  const version = validVersion(settings.version);
  const runtime = typeof settings.utilization === 'object' && settings.utilization !== null ? runtimeWords(settings.utilization) : undefined;
  const util = runtime ? 'from-start' : validUtilization(settings.utilization);
  const { headroom, contextOne, contextSeveral, timeout, poll, logEvery, mode, smiLimit } = checkOptions(settings);
  const msgFile = validPath(settings.terminationMessagePath);
  // The first query's limit: the per-query limit, cut to the whole timeout (at least 2 s), as CLOCK_AWK does later.
  const pollWhole = Math.max(1, Math.ceil(Number(poll)));
  const firstLimit = Math.min(Number(smiLimit), Math.max(2, Number(timeout)));

  const script = `${PREFLIGHT_MARKER_PREFIX}${version}: wait for GPU memory, then exec vLLM
# After an in-place restart the old engine may still hold VRAM and vLLM checks
# free memory only once, so wait until each GPU it will use has what that check asks, plus
# what vLLM takes before it checks, plus headroom. See docs/restart-race.md (vram-preflight).
# The kubelet rewrites dollar-paren and double-dollar in args; this text has neither.
# Nothing is written but msg_file (read-only root, no /tmp): no temp files, no here-documents.
# shellcheck disable=SC2006 # backticks instead of dollar-paren, for the reason above
util=${util} headroom_mib=${headroom} context_mib=${contextOne} context_several_mib=${contextSeveral} timeout_s=${timeout} poll_s=${poll} log_s=${logEvery} on_unavailable=${mode} smi_limit_s=${smiLimit}
msg_file=${msgFile}
say() { printf '${LOG_PREFIX}%s\\n' "$*" >&2; }
die() { [ -z "$mark" ] || sweep; say "$2"; printf '${LOG_PREFIX}%s\\n' "$2" 2>/dev/null >"$msg_file" || :; exit "$1"; }
unavailable() {
  [ "$on_unavailable" = warn ] || die ${EXIT_NVIDIA_SMI_UNAVAILABLE} "cannot check GPU memory, not starting vLLM (on-nvidia-smi-unavailable: fail): $1"
  say "${shellText('unchecked', { why: '$1' })}"
}
[ "$#" -gt 0 ] || die ${EXIT_NO_COMMAND} 'no command to start after --'
# A start that cannot run would fail only after the whole wait, with exec's terse error: say so now.
case $1 in
*/*)
  [ -e "$1" ] || die ${EXIT_START_NOT_FOUND} "cannot start vLLM: the start \\"$1\\" (the program after --) does not exist"
  if [ ! -f "$1" ] || [ ! -x "$1" ]; then die ${EXIT_START_NOT_EXECUTABLE} "cannot start vLLM: the start \\"$1\\" (the program after --) is not an executable file"; fi ;;
*) command -v "$1" >/dev/null 2>&1 || die ${EXIT_START_NOT_FOUND} "cannot start vLLM: the start \\"$1\\" (the program after --) is not found in PATH=$PATH" ;;
esac
${util === 'from-args' ? FROM_ARGS : runtime ? fromVariables(runtime) : ''}# A shell runs traps only between commands or in wait: all that can take long (nvidia-smi,
# the pause between polls) is a background job it waits for, so a signal ends it at once.
# As PID 1 the shell ignores signals it does not trap. The job gets KILL: a child still
# holds this shell's handler between its fork and its exec, and would lose a TERM.
job='' mark=''
# KILL process $1 and all its descendants (found in /proc; stopped first, so none forks
# unseen). $2: the pid of the parent of $1 in /proc; a /proc of another PID namespace fails
# that check, and then, as without /proc, only $1 is killed.
reap() {
  for sig in STOP KILL; do
    kin=\`awk -v root="$1" -v dad="$2" "$tree" /proc/[0-9]*/stat 2>/dev/null\` || kin=''
    # shellcheck disable=SC2086 # a list of pids
    kill -$sig "$1" $kin 2>/dev/null || :
  done
}
# shellcheck disable=SC2016 # an awk program: its $ are awk's, not the shell's
tree='${TREE_AWK}'
# KILL what a query left behind, no longer a descendant once its parent is gone: all that carries
# this run's mark (VRAM_PREFLIGHT_QUERY: nvidia-smi gets it, what it starts inherits it). Stopped
# first; grep's status is no guide (a process may end while it reads).
sweep() {
  for sig in STOP KILL; do
    kin=\`grep -lszxF "VRAM_PREFLIGHT_QUERY=$mark" /proc/[0-9]*/environ 2>/dev/null\` || :
    [ -n "$kin" ] || return 0
    swept=1
    for f in $kin; do f=\${f#/proc/}; kill -$sig "\${f%/environ}" 2>/dev/null || :; done
  done
  # A KILLed process ends only when it next runs, which a busy machine delays: look again
  # (at most 200 times) until none is left, so that vLLM never inherits one still running.
  n=x
  while [ \${#n} -lt 200 ] && grep -qszxF "VRAM_PREFLIGHT_QUERY=$mark" /proc/[0-9]*/environ 2>/dev/null; do n=x$n; done
}
# This shell's pid in /proc, if that /proc is of its own PID namespace (it names PPID as parent).
read -r me _ _ dad _ 2>/dev/null </proc/self/stat || me=''
[ "$dad" = "$PPID" ] || me=''
stop() {
  [ -z "$job" ] || reap "$job" "$me"
  [ -z "$mark" ] || sweep
  say "${shellText('signal', { signal: '$1' })}"; exit "$2"
}
trap 'stop SIGTERM ${EXIT_SIGTERM}' TERM
trap 'stop SIGINT ${EXIT_SIGINT}' INT
# nvidia-smi's deadline: after $lim s, KILL it and all it started (a process stuck in the
# driver may ignore TERM) and exit 1; exit 0 when told (TERM) it answered in time (quit: the
# TERM came first). The sleep gets KILL (a TERM between fork and exec is lost) and must not
# hold the capture (or stderr) open.
deadline() {
  s='' quit=''
  trap 'quit=1; [ -z "$s" ] || kill -KILL "$s" 2>/dev/null || :' TERM
  sleep "$lim" >/dev/null 2>&1 & s=$!
  [ -z "$quit" ] || kill -KILL "$s" 2>/dev/null || :
  wait "$s" 2>/dev/null || wait "$s" 2>/dev/null || :
  [ -z "$quit" ] || exit 0
  trap '' TERM
  read -r _ _ _ dad _ 2>/dev/null </proc/self/stat || dad=''
  reap "$1" "$dad"
  [ -z "$mark" ] || sweep
  exit 1
}
# nvidia-smi "$@", its output read here and passed on: killing this subshell ends the
# capture even if a process stuck in the driver (deaf to KILL) holds the output of nvidia-smi.
fetch() {
  if o=\`VRAM_PREFLIGHT_QUERY=$mark nvidia-smi "$@"\`; then rc=0; else rc=$?; fi
  [ -z "$o" ] || printf '%s\\n' "$o"
  exit "$rc"
}
# nvidia-smi "$@", for at most $lim s: prints its output, returns its status or 124 when it
# was killed for taking too long. Not timeout(1): images differ in having one, and in which.
smi() {
  fetch "$@" & q=$!
  deadline "$q" & d=$!
  if wait "$q" 2>/dev/null; then rc=0; else rc=$?; fi
  kill "$d" 2>/dev/null || :
  if wait "$d" 2>/dev/null; then ds=0; else ds=$?; fi
  [ "$ds:$rc" != 1:137 ] || rc=124
  return "$rc"
}
# One reading and its verdict, as a background job; it says what it found, and its exit
# status tells the loop: 0 start vLLM, ${POLL_START_UNCHECKED} start it unchecked (said why),
# ${EXIT_NVIDIA_SMI_UNAVAILABLE}, ${EXIT_TIMEOUT} or ${EXIT_BAD_UTILIZATION} exit (the message is written), 32..63 keep waiting.
# A driver that does not know a field (memory.reserved: R510+, mig.mode.current: R450+)
# answers exit status 2: ask again without it.
# shellcheck disable=SC2016 # an awk program: its $ are awk's, not the shell's
judge='${JUDGE_AWK.trim()}'
poll() {
  for fields in ${QUERY_FIELDS.join(' ')}; do
    if out=\`smi --query-gpu="$fields" --format=csv,noheader,nounits\`; then rc=0; else rc=$?; fi
    [ "$rc" = 2 ] || break
  done
  r=\`printf '%s\\n' "$out" | awk -v fields="$fields" -v rc="$rc" -v u="$util" -v h="$headroom_mib" -v c1="$context_mib" -v cm="$context_several_mib" -v ts="$timeout_s" -v el="$el" -v lim="$lim" -v q="$smi_limit_s" -v first="$first" -v cvs="\${CUDA_VISIBLE_DEVICES+set}" -v cvd="\${CUDA_VISIBLE_DEVICES-}" "$judge"\` || r="bad awk is missing or failed (exit status $?)"
  case $r in
  ok\\ *) say "\${r#ok }"; exit 0 ;;
  mig\\ *) say "${shellText('mig', { why: '${r#mig }' })}"; exit ${POLL_START_UNCHECKED} ;;
  never\\ *) die ${EXIT_BAD_UTILIZATION} "\${r#never }" ;;
  bad\\ *) unavailable "\${r#bad }"; exit ${POLL_START_UNCHECKED} ;;
  late\\ *) die ${EXIT_TIMEOUT} "\${r#late }. This is the preflight's wait, not vLLM's check: nvidia-smi hangs when the driver is wedged; look at the node." ;;
  timeout\\ *)
    apps=\`smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null | awk ${APPS_AWK}\`
    die ${EXIT_TIMEOUT} "${shellText('stillHolding', { gaveUp: '${r#timeout }', holders: '$apps' })}" ;;
  wait\\ *) r=\${r#wait }; [ "$logit" = 0 ] || say "\${r#* }"; exit "\${r%% *}" ;;
  esac
  unavailable "unexpected verdict: $r"
  exit ${POLL_START_UNCHECKED}
}
# Elapsed time: see the clock program. read is a builtin, so a cold start costs no process.
clock() {
  if read -r raw _ 2>/dev/null </proc/uptime && [ -n "$raw" ]; then src=u
  elif raw=\`date +%s 2>/dev/null\`; then src=d
  else raw='' src=n; fi
}
# shellcheck disable=SC2016 # an awk program: its $ are awk's, not the shell's
tick='${CLOCK_AWK}'
clock; prev=$raw psrc=$src zero=$raw el=0 lim=${firstLimit} logit=1 lg=0 first='' swept=''
# The mark of what nvidia-smi starts (see sweep); nothing to find it by without /proc.
[ -z "$me" ] || mark="$me.$raw"
while :; do
  poll & job=$!
  if wait "$job"; then v=0; else v=$?; fi
  case $v in
  0 | ${POLL_START_UNCHECKED}) break ;;
  ${EXIT_NVIDIA_SMI_UNAVAILABLE} | ${EXIT_TIMEOUT} | ${EXIT_BAD_UTILIZATION}) exit "$v" ;;
  3[2-9] | [45][0-9] | 6[0-3]) ;;
  *) unavailable "the check ended with exit status $v"; v=${POLL_START_UNCHECKED}; break ;;
  esac
  first=\${first:-$v}
  [ "$logit" = 0 ] || lg=$el
  sleep "$poll_s" & job=$!
  # A sleep that refuses fractions: whole seconds, never shorter than the pause (the clock counts on it).
  if ! wait "$job"; then sleep ${pollWhole} & job=$!; wait "$job" || :; fi
  clock
  r=\`awk -v raw="$raw" -v src="$src" -v prev="$prev" -v psrc="$psrc" -v zero="$zero" -v el="$el" -v lg="$lg" -v poll="$poll_s" -v lim="$lim" -v q="$smi_limit_s" -v ts="$timeout_s" -v ls="$log_s" "$tick"\` || { unavailable "awk is missing or failed (exit status $?)"; break; }
  el=\${r%% *} r=\${r#* } lim=\${r%% *} r=\${r#* } logit=\${r%% *} zero=\${r#* } prev=$raw psrc=$src
done
# vLLM inherits this process and its children: end what a query left behind. As PID 1 the shell
# adopts orphans; waiting for a no-op job reaps the ones killed.
[ -z "$mark" ] || sweep
if [ -n "$swept" ] || [ "$v" != 0 ]; then : & wait "$!" || :; fi
exec "$@"
`;
  if (script.includes('$(') || script.includes('$$')) {
    throw new Error('internal error: the preflight script contains $( or $$');
  }
  return script;
}
