#!/bin/sh
# On the GPU machine, after run-gpu-proof.sh: the preflight with the real nvidia-smi behind a
# wrapper that leaves a child holding the output pipe (a wrapper script that leaves a helper
# behind, or any descendant that inherits stdout: the shape of a query wedged in the driver). The
# capture then never sees EOF; the script must still end at the per-query limit: fail mode exits
# 69, warn mode starts (here: `true`) with a warning. And nothing it started may be left running:
# the child, an orphan once the wrapper exits, carries the script's mark and is ended by it.
# Prints one line per shell and mode; what is left is listed, then killed by pid.
#
#   sh test/gpu/child-holds-pipe.sh test/gpu/out
set -u
dir=${1:-test/gpu/out}
real=$(command -v nvidia-smi) || { echo "nvidia-smi not found" >&2; exit 2; }
work=$(mktemp -d)
mkdir "$work/bin"
printf '#!/bin/sh\n"%s" "$@"\nsleep 30 &\n' "$real" >"$work/bin/nvidia-smi"
chmod +x "$work/bin/nvidia-smi"
# live (not zombie) processes whose environment holds CHP_RUN=$1
left() {
  for e in /proc/[0-9]*/environ; do
    p=${e#/proc/}; p=${p%/environ}
    { tr '\0' '\n' <"$e" | grep -qx "CHP_RUN=$1"; } 2>/dev/null || continue
    st=$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | cut -d' ' -f1)
    [ -n "$st" ] && [ "$st" != Z ] && echo "$p"
  done
}
fails=0 n=0
for mode in fail warn; do
  script="$dir/preflight-faults-$mode.sh"
  limit=$(sed -n 's/.*smi_limit_s=\([0-9]*\).*/\1/p' "$script" | head -n 1)
  want=69; [ "$mode" = warn ] && want=0
  for shell in /bin/sh bash "busybox sh"; do
    command -v "${shell%% *}" >/dev/null 2>&1 || { echo "SKIP child-holds-pipe shell=$shell (not installed)"; continue; }
    n=$((n + 1)) run="chp-$n-$mode"
    start=$(date +%s)
    # shellcheck disable=SC2086 # "busybox sh" is two words on purpose
    CHP_RUN=$run PATH="$work/bin:$PATH" timeout 60 $shell -ec "$(cat "$script")" -- true 2>"$work/err"
    rc=$?
    took=$(( $(date +%s) - start ))
    sleep 0.5
    still=$(left "$run" | tr '\n' ' ')
    verdict=PASS
    if [ "$rc" != "$want" ] || [ "$took" -gt $((limit + 3)) ] || [ -n "$still" ]; then verdict=FAIL; fails=$((fails + 1)); fi
    echo "$verdict child-holds-pipe mode=$mode shell=$shell exit=$rc (want $want) after ${took}s (limit ${limit}s), left running: ${still:-none}: $(tail -n 1 "$work/err")"
    # shellcheck disable=SC2086 # a list of pids
    [ -z "$still" ] || kill $still 2>/dev/null
  done
done
rm -rf "$work"
[ "$fails" = 0 ]
