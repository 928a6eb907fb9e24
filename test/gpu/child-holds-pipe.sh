#!/bin/sh
# On the GPU machine, after run-gpu-proof.sh: the preflight with the real nvidia-smi behind a
# wrapper whose child keeps the output pipe open (a wrapper script that leaves a helper behind,
# or any descendant that inherits stdout: the shape of a query wedged in the driver). The
# capture then never sees EOF; the script must still end at the per-query limit: fail mode exits
# 69, warn mode starts (here: `true`) with a warning. Prints one line per shell and mode.
#
#   sh test/gpu/child-holds-pipe.sh test/gpu/out
set -u
dir=${1:-test/gpu/out}
real=$(command -v nvidia-smi) || { echo "nvidia-smi not found" >&2; exit 2; }
work=$(mktemp -d)
mkdir "$work/bin"
printf '#!/bin/sh\n"%s" "$@"\nsleep 30 &\n' "$real" >"$work/bin/nvidia-smi"
chmod +x "$work/bin/nvidia-smi"
fails=0
for mode in fail warn; do
  script="$dir/preflight-faults-$mode.sh"
  limit=$(sed -n 's/.*smi_limit_s=\([0-9]*\).*/\1/p' "$script" | head -n 1)
  want=69; [ "$mode" = warn ] && want=0
  for shell in /bin/sh bash "busybox sh"; do
    command -v "${shell%% *}" >/dev/null 2>&1 || { echo "SKIP child-holds-pipe shell=$shell (not installed)"; continue; }
    start=$(date +%s)
    # shellcheck disable=SC2086 # "busybox sh" is two words on purpose
    PATH="$work/bin:$PATH" timeout 60 $shell -ec "$(cat "$script")" -- true 2>"$work/err"
    rc=$?
    took=$(( $(date +%s) - start ))
    verdict=PASS
    if [ "$rc" != "$want" ] || [ "$took" -gt $((limit + 3)) ]; then verdict=FAIL; fails=$((fails + 1)); fi
    echo "$verdict child-holds-pipe mode=$mode shell=$shell exit=$rc (want $want) after ${took}s (limit ${limit}s): $(tail -n 1 "$work/err")"
  done
done
pkill -f 'sleep 30' 2>/dev/null
rm -rf "$work"
[ "$fails" = 0 ]
