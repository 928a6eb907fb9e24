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

import { checkSettings, type CheckedUtilization, type PreflightSettings } from './settings.js';
import { awkLine, LOG_PREFIX, shellText } from './lines.js';

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
      # More than it can have free: cut to what an idle GPU surely shows, never below what vLLM requests (docs/restart-race.md, section 6).
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
  else print "wait " 32 + cap ${awkLine('waiting', { tightest: 'g', moreShort: 'more', waited: 'e1', timeout: 'ts', holding: '' }, ' ')}
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
 * is set, so a step no round can take (backwards, or longer than a pause, two queries
 * (the reading and, for a logged line, what holds the memory) and 2 s) counts as one pause
 * and the count starts afresh from there; with no clock at all every round counts as one
 * pause. Either way the timeout fires late, never early.
 * Prints the elapsed seconds, the next query's limit (the per-query limit, cut to the time
 * that is left, at least 2 s), whether this round logs (1) or not (0), and `zero`.
 */
export const CLOCK_AWK = `BEGIN {
  d = raw - prev
  if (src == "u" && psrc == "u") el += d
  else if (src == "d" && psrc == "d" && d >= 0 && d <= poll + 2 * lim + 2) { el += poll; if (raw - zero - 1 > el) el = raw - zero - 1 }
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

/** Formats nvidia-smi --query-compute-apps output for the waiting lines and the timeout message. */
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

/**
 * Reads the utilization from the variables the start's script expands into vLLM's command line:
 * the words as the start's script has them, each literal single-quoted (it is a flag's name), each
 * variable unquoted (split as the shell splits it).
 */
function fromVariables(v: Extract<CheckedUtilization, { kind: 'from-variables' }>): string {
  const words = v.words.map((w) => ('variable' in w ? `$${w.variable}` : `'${w.literal}'`)).join(' ');
  const names = v.variables.map((name) => `$${name}`).join(' ');
  return `# The utilization is only known at run time: the script of the start puts ${names} on the
# command line of vLLM. Take the last --gpu-memory-utilization there (split as the shell splits
# it, no globbing), else ${v.fallback}, what vLLM gets without one there.
u_raw=${v.fallback} u_seen=1 take=''
set -f
# shellcheck disable=SC2086,SC2034 # split as the script splits them; u_seen: read by the other reader
${lastFlagLoop(words)}set +f
# shellcheck disable=SC2016 # an awk program: its $ are awk's, not the shell's
util=\`u=$u_raw awk '${UTIL_AWK}'\` || die ${EXIT_BAD_UTILIZATION} "cannot wait for GPU memory: --gpu-memory-utilization \\"$u_raw\\" in ${names.replaceAll('$', '\\$')} is not a number with 0 < u <= 1; not starting vLLM"
`;
}

/** The script's utilization: the value it is written with, or the reading that replaces it at run time. */
function utilizationText(u: CheckedUtilization): { value: string; reader: string } {
  if (u.kind === 'value') return { value: u.value, reader: '' };
  if (u.kind === 'from-args') return { value: 'from-args', reader: FROM_ARGS };
  return { value: 'from-start', reader: fromVariables(u) };
}

/**
 * The start: the marker line (how a wrapped container is recognised), what the script is for,
 * the settings as shell variables, how it speaks and exits, and the start it will exec, checked
 * before any wait (a start that cannot run would fail only after the whole wait).
 */
function head(version: string, s: { util: string; headroom: string; contextOne: string; contextSeveral: string; timeout: string; poll: string; logEvery: string; mode: string; smiLimit: string; msgFile: string }): string {
  const { util, headroom, contextOne, contextSeveral, timeout, poll, logEvery, mode, smiLimit, msgFile } = s;
  return `${PREFLIGHT_MARKER_PREFIX}${version}: wait for GPU memory, then exec vLLM
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
`;
}

/**
 * Signals and the processes a query leaves: all that can take long runs as a background job,
 * which a signal ends at once, with what it started (reap: its descendants in /proc; sweep:
 * what carries the run's mark).
 */
const JOBS = `# A shell runs traps only between commands or in wait: all that can take long (nvidia-smi,
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
`;

/** One nvidia-smi query under its deadline, its output read through a subshell that killing ends. */
const QUERY = `# nvidia-smi's deadline: after $lim s, KILL it and all it started (a process stuck in the
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
`;

/** One reading, judged by JUDGE_AWK, as a background job whose exit status tells the loop what to do. */
const POLL = `# One reading and its verdict, as a background job; it says what it found, and its exit
# status tells the loop: 0 start vLLM, ${POLL_START_UNCHECKED} start it unchecked (said why),
# ${EXIT_NVIDIA_SMI_UNAVAILABLE}, ${EXIT_TIMEOUT} or ${EXIT_BAD_UTILIZATION} exit (the message is written), 32..63 keep waiting.
# A driver that does not know a field (memory.reserved: R510+, mig.mode.current: R450+)
# answers exit status 2: ask again without it.
# shellcheck disable=SC2016 # an awk program: its $ are awk's, not the shell's
judge='${JUDGE_AWK.trim()}'
# What holds GPU memory, into apps: only for a logged waiting line, and at the timeout.
holders() {
  apps=\`smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null | awk ${APPS_AWK}\`
}
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
    holders
    die ${EXIT_TIMEOUT} "${shellText('stillHolding', { gaveUp: '${r#timeout }', holders: '$apps' })}" ;;
  wait\\ *)
    r=\${r#wait }
    [ "$logit" = 0 ] || { holders; say "\${r#* }${shellText('holding', { holders: '$apps' })}"; }
    exit "\${r%% *}" ;;
  esac
  unavailable "unexpected verdict: $r"
  exit ${POLL_START_UNCHECKED}
}
`;

/** The wait: poll, pause, advance the clock (CLOCK_AWK), until a verdict; then end what a query left, and exec the start. */
function loop(firstLimit: number, pollWhole: number): string {
  return `# Elapsed time: see the clock program. read is a builtin, so a cold start costs no process.
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
}

/** The script for these settings (a PreflightError when one is bad: ./settings.ts). */
export function renderPreflightScript(settings: PreflightSettings): string {
  const { version, utilization, ...checked } = checkSettings(settings);
  const util = utilizationText(utilization);
  // The first query's limit: the per-query limit, cut to the whole timeout (at least 2 s), as CLOCK_AWK does later.
  const pollWhole = Math.max(1, Math.ceil(Number(checked.poll)));
  const firstLimit = Math.min(Number(checked.smiLimit), Math.max(2, Number(checked.timeout)));
  const script = `${head(version, { ...checked, util: util.value })}${util.reader}${JOBS}${QUERY}${POLL}${loop(firstLimit, pollWhole)}`;
  if (script.includes('$(') || script.includes('$$')) {
    throw new Error('internal error: the preflight script contains $( or $$');
  }
  return script;
}
