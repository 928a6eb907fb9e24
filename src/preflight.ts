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

/** First characters of every generated script; also how a wrapped container is recognised. */
export const PREFLIGHT_MARKER_PREFIX = '# vram-preflight ';

/** Exit code when the wait times out (EX_TEMPFAIL from sysexits.h). */
export const EXIT_TIMEOUT = 75;
/** Exit code when nvidia-smi cannot be used and onNvidiaSmiUnavailable is 'fail' (EX_UNAVAILABLE). */
export const EXIT_NVIDIA_SMI_UNAVAILABLE = 69;
/** Exit code when there is no command after `--` (EX_USAGE). */
export const EXIT_NO_COMMAND = 64;
/** Exit code on SIGTERM while waiting (128 + 15). */
export const EXIT_SIGTERM = 143;
/** Exit code on SIGINT while waiting (128 + 2). */
export const EXIT_SIGINT = 130;

export interface PreflightSettings {
  /** Tool version, written into the marker line. */
  version: string;
  /** vLLM's --gpu-memory-utilization, validated: 0 < u <= 1. */
  utilization: number;
  /** Extra MiB required per GPU on top of ceil(total x utilization); integer >= 0. */
  headroomMiB: number;
  /** Give up after this many seconds of waiting; integer >= 1. */
  timeoutSeconds: number;
  /** Seconds between nvidia-smi polls while waiting; > 0 (fractions allowed). */
  pollIntervalSeconds: number;
  /** Seconds between progress lines while waiting; integer >= 1. */
  logIntervalSeconds: number;
  /** nvidia-smi missing, failing or unreadable: warn and start vLLM, or fail. */
  onNvidiaSmiUnavailable: 'warn' | 'fail';
  /** Where the timeout message is also written (the container's terminationMessagePath). */
  terminationMessagePath: string;
}

/** Limits enforced by renderPreflightScript (exported so callers and tests can refer to them). */
export const PREFLIGHT_LIMITS = {
  /** Decimal places accepted in utilization: keeps total x numerator far below 2^53 in awk. */
  utilizationMaxDecimals: 6,
  headroomMiBMax: 1_048_576,
  timeoutSecondsMax: 7 * 24 * 3600,
  pollIntervalSecondsMin: 0.01,
  pollIntervalSecondsMax: 3600,
  /** Decimal places accepted in pollIntervalSeconds. */
  pollIntervalMaxDecimals: 3,
  logIntervalSecondsMax: 86_400,
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
  return new RegExp(`^\\d+(\\.\\d{1,${maxDecimals}})?$`).test(s) ? s : undefined;
}

function validUtilization(v: unknown): string {
  const max = PREFLIGHT_LIMITS.utilizationMaxDecimals;
  if (!isNumber(v) || !(v > 0) || v > 1) fail('utilization', v, 'must be a number with 0 < u <= 1');
  const s = plainDecimal(v, max);
  if (s === undefined) fail('utilization', v, `must have at most ${max} decimal places`);
  return s;
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
  if (typeof v !== 'string' || !/^[0-9A-Za-z][0-9A-Za-z.+-]{0,63}$/.test(v)) {
    fail('version', v, 'must be 1-64 characters of [0-9A-Za-z.+-]');
  }
  return v;
}

function validPath(v: unknown): string {
  const max = PREFLIGHT_LIMITS.terminationMessagePathMaxLength;
  if (
    typeof v !== 'string' ||
    v.length > max ||
    !/^\/[A-Za-z0-9._/-]*$/.test(v) ||
    v.split('/').some((part) => part === '..')
  ) {
    fail('terminationMessagePath', v, 'must be an absolute path of [A-Za-z0-9._/-] without ".."');
  }
  return v;
}

function validMode(v: unknown): 'warn' | 'fail' {
  if (v !== 'warn' && v !== 'fail') fail('onNvidiaSmiUnavailable', v, "must be 'warn' or 'fail'");
  return v;
}

/**
 * The awk program that judges one nvidia-smi reading. It prints exactly one line,
 * whose first word tells the shell what to do: `ok`, `bad`, `timeout`, `log` or `wait`;
 * the rest is the message. Inputs come in with -v (see the script below).
 * Integer-exact need: utilization "0.9" becomes 9/10 and need = ceil(total*9/10);
 * total <= 1e8 MiB and numerator <= 1e6 keep every product below 2^53, where awk's
 * doubles are exact and int(x/den) is the true floor. dec() strips leading zeros
 * because busybox awk reads "010" as octal.
 */
const JUDGE_AWK = `
function trim(x) { gsub(/^[ \\t\\r]+|[ \\t\\r]+$/, "", x); return x }
function num(x) { return x ~ /^[0-9]+$/ && length(x) < 10 }
function dec(x) { sub(/^0+/, "", x); return x + 0 }
/^[ \\t\\r]*$/ { next }
{ if (split($0, a, ",") != 4 || !num(trim(a[1]))) { if (!bad) bad = "nvidia-smi printed an unreadable line: " $0; next }
  k++; id[k] = trim(a[1]); uu[k] = trim(a[2]); tot[k] = trim(a[3]); fr[k] = trim(a[4]) }
END {
  if (t0 == "") t0 = now
  if (rc != 0) bad = "nvidia-smi failed (exit status " rc ")"
  else if (!bad && !k) bad = "nvidia-smi listed no GPU"
  if (!bad && cvs != "") {
    m = split(cvd, w, ",")
    for (i = 1; i <= m; i++) {
      e = trim(w[i]); hit = 0
      for (j = 1; j <= k; j++)
        if (e ~ /^[0-9]+$/ ? dec(e) == dec(id[j]) : e != "" && (index(uu[j], e) == 1 || index(uu[j], "GPU-" e) == 1)) { sel[j] = 1; hit = 1 }
      if (!hit && e != "") bad = "CUDA_VISIBLE_DEVICES entry \\"" e "\\" matches no GPU that nvidia-smi lists"
    }
  } else for (j = 1; j <= k; j++) sel[j] = 1
  split(u, d, "."); den = 1
  for (i = length(d[2]); i > 0; i--) den *= 10
  nu = dec(d[1]) * den + dec(d[2])
  for (j = 1; j <= k && !bad; j++) if (sel[j]) {
    if (!num(tot[j]) || !num(fr[j]) || dec(tot[j]) > 1e8) { bad = "GPU " id[j] " memory reads total=" tot[j] " free=" fr[j]; break }
    x = dec(tot[j]) * nu; need = int(x / den); if (need * den < x) need++
    need += h; n++
    gap = need - dec(fr[j])
    if (n == 1 || gap > worst) { worst = gap; g = "GPU " id[j] " has " fr[j] " MiB free, needs " need " MiB (" u " x " tot[j] " MiB total + " h " MiB headroom)" }
    if (gap > 0) short++
  }
  if (!bad && !n) bad = "CUDA_VISIBLE_DEVICES=\\"" cvd "\\" selects no GPU"
  if (bad) { print "bad " bad; exit }
  el = sprintf("%.1f", now - t0)
  more = short > 1 ? "; " short - 1 " more GPU(s) short" : ""
  if (!short) print "ok " (lg == "" ? "" : "GPU memory arrived after " el " s of waiting; ") n " GPU(s) checked, tightest: " g "; starting"
  else if (now - t0 >= ts) print "timeout gave up after " el " s (timeout " ts " s) waiting for GPU memory before starting vLLM: " g more
  else if (lg == "" || now - lg >= ls) print "log waiting for GPU memory before starting vLLM: " g more "; waited " el " s (timeout " ts " s)"
  else print "wait"
}`;

/** Formats nvidia-smi --query-compute-apps output for the timeout message. */
const APPS_AWK = `-F', *' 'NF >= 2 { a = a (a ? ", " : "") "pid " $1 " (" $2 " MiB)" } END { print a ? a : "none that nvidia-smi can see from this container (look on the node)" }'`;

export function renderPreflightScript(settings: PreflightSettings): string {
  if (typeof settings !== 'object' || settings === null) fail('settings', settings, 'must be an object');
  const version = validVersion(settings.version);
  const util = validUtilization(settings.utilization);
  const headroom = integerIn('headroomMiB', settings.headroomMiB, 0, PREFLIGHT_LIMITS.headroomMiBMax);
  const timeout = integerIn('timeoutSeconds', settings.timeoutSeconds, 1, PREFLIGHT_LIMITS.timeoutSecondsMax);
  const poll = validPollInterval(settings.pollIntervalSeconds);
  const logEvery = integerIn('logIntervalSeconds', settings.logIntervalSeconds, 1, PREFLIGHT_LIMITS.logIntervalSecondsMax);
  const mode = validMode(settings.onNvidiaSmiUnavailable);
  const msgFile = validPath(settings.terminationMessagePath);

  const script = `${PREFLIGHT_MARKER_PREFIX}${version}: wait for GPU memory, then exec vLLM
# After an in-place restart the old engine may still hold VRAM and vLLM checks
# free memory only once, so wait until each GPU it will use has
# ceil(total x util) + headroom MiB free. See docs/restart-race.md (vram-preflight).
# The kubelet rewrites dollar-paren and double-dollar in args; this text has neither.
# shellcheck disable=SC2006 # backticks instead of dollar-paren, for the reason above
util=${util} headroom_mib=${headroom} timeout_s=${timeout} poll_s=${poll} log_s=${logEvery} on_unavailable=${mode}
msg_file=${msgFile}
say() { printf 'vram-preflight: %s\\n' "$*" >&2; }
die() { say "$2"; printf 'vram-preflight: %s\\n' "$2" 2>/dev/null >"$msg_file" || :; exit "$1"; }
[ "$#" -gt 0 ] || die ${EXIT_NO_COMMAND} 'no command to start after --'
t0='' logged='' s=''
# As PID 1 the shell ignores signals it does not trap.
trap 'kill "$s" 2>/dev/null || :; say "SIGTERM while waiting for GPU memory, exiting"; exit ${EXIT_SIGTERM}' TERM
trap 'kill "$s" 2>/dev/null || :; say "SIGINT while waiting for GPU memory, exiting"; exit ${EXIT_SIGINT}' INT
# shellcheck disable=SC2016 # an awk program: its $ are awk's, not the shell's
judge='${JUDGE_AWK.trim()}'
while :; do
  read -r now _ </proc/uptime || now=\`date +%s\`
  if out=\`nvidia-smi --query-gpu=index,uuid,memory.total,memory.free --format=csv,noheader,nounits\`; then rc=0; else rc=$?; fi
  r=\`printf '%s\\n' "$out" | awk -v rc="$rc" -v u="$util" -v h="$headroom_mib" -v ts="$timeout_s" -v ls="$log_s" -v now="$now" -v t0="$t0" -v lg="$logged" -v cvs="\${CUDA_VISIBLE_DEVICES+set}" -v cvd="\${CUDA_VISIBLE_DEVICES-}" "$judge"\` || r="bad awk is missing or failed (exit status $?)"
  case $r in
  ok\\ *) say "\${r#ok }"; break ;;
  bad\\ *)
    [ "$on_unavailable" = warn ] || die ${EXIT_NVIDIA_SMI_UNAVAILABLE} "cannot check GPU memory, not starting vLLM (on-nvidia-smi-unavailable: fail): \${r#bad }"
    say "WARNING: cannot check GPU memory, starting vLLM WITHOUT waiting: \${r#bad }"; break ;;
  timeout\\ *)
    apps=\`nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null | awk ${APPS_AWK}\`
    die ${EXIT_TIMEOUT} "\${r#timeout }. Still holding GPU memory: $apps. This is the preflight's wait, not vLLM's check: find what keeps the memory (often an orphaned vLLM EngineCore or worker, or a sidecar) or raise the preflight timeout." ;;
  log\\ *) say "\${r#log }"; logged=$now ;;
  esac
  t0=\${t0:-$now}
  sleep "$poll_s" & s=$!
  wait "$s" || sleep 1
done
exec "$@"
`;
  if (script.includes('$(') || script.includes('$$')) {
    throw new Error('internal error: the preflight script contains $( or $$');
  }
  return script;
}
