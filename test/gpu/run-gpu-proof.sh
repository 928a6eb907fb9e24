#!/usr/bin/env bash
# Proof of the preflight on a real NVIDIA GPU (see docs/gpu-results.md).
#
# The one command, on the GPU machine (python3 + torch + nvidia-smi; no node there):
#
#   bash test/gpu/run-gpu-proof.sh test/gpu/out/preflight.sh "$OUT"
#
# after rendering the scripts here with `npx tsx test/gpu/render-script.ts` and carrying
# test/gpu/out (git-ignored) to that machine. Exit 0 and "VERDICT: PASS" when every scenario
# passed. "$OUT" gets exactly three files: results.json, proof.log, env.txt.
#
#   test/gpu/run-gpu-proof.sh [SCRIPT] [OUT_DIR] [proof.py options...]
#
# SCRIPT   the preflight script to prove (default test/gpu/out/preflight.sh, written by
#          `npx tsx test/gpu/render-script.ts`; or args[0] of a rewritten container,
#          extracted with test/gpu/extract-script.py). preflight-faults-warn.sh and
#          preflight-faults-fail.sh next to it (rendered with it) enable the fault proofs:
#          a slow nvidia-smi (over and under the per-query limit) and SIGTERM during a query;
#          preflight-threshold-U.sh the threshold proof (vLLM's own rule at each U).
# OUT_DIR  where results.json, proof.log and env.txt go (default test/gpu/out/results);
#          everything else (shims, per-run logs) goes to a temporary directory.
# Scenarios on two or more GPUs run only where nvidia-smi lists at least two.
# Needs: nvidia-smi, python3 with torch and a CUDA GPU that nothing else is using.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
script=${1:-$here/out/preflight.sh}
out=${2:-$here/out/results}
shift $(( $# < 2 ? $# : 2 ))
[ -r "$script" ] || { echo "no script at $script (run: npx tsx test/gpu/render-script.ts, and carry test/gpu/out)" >&2; exit 2; }
real=$(command -v nvidia-smi) || { echo "nvidia-smi not found" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/vram-preflight-gpu.XXXXXX")
mkdir -p "$work/shim"

# nvidia-smi as the preflight sees it: the real one, each call recorded in $NVSMI_LOG;
# with NVSMI_DELAY=S it first sleeps S seconds, in the same process (python sleeps, then
# execs the real nvidia-smi), so a killed query leaves no sleeping child behind.
py=$(command -v python3)
cat >"$work/shim/nvidia-smi" <<SHIM
#!/bin/sh
echo "\$*" >>"\${NVSMI_LOG:-/dev/null}"
[ -n "\${NVSMI_DELAY:-}" ] || exec "$real" "\$@"
exec "$py" -c 'import os, sys, time; time.sleep(float(os.environ["NVSMI_DELAY"])); os.execv(sys.argv[1], sys.argv[1:])' "$real" "\$@"
SHIM
chmod +x "$work/shim/nvidia-smi"
export NVSMI_REAL="$real" PATH="$work/shim:$PATH" PYTHONUNBUFFERED=1

shells=/bin/sh
sh_real=$(readlink -f /bin/sh)
if b=$(command -v bash) && [ "$(readlink -f "$b")" != "$sh_real" ]; then shells="$shells,$b"; fi
if bb=$(command -v busybox); then mkdir -p "$work/busybox"; ln -sf "$bb" "$work/busybox/sh"; shells="$shells,$work/busybox/sh"; fi

faults=()
sdir=$(dirname "$script")
for mode in warn fail; do
  f="$sdir/preflight-faults-$mode.sh"
  if [ -r "$f" ]; then faults+=("--faults-$mode" "$f"); fi
done
# the threshold proof: scripts rendered at other utilizations, next to the main one
threshold=()
for f in "$sdir"/preflight-threshold-*.sh; do
  if [ -r "$f" ]; then threshold+=("$f"); fi
done
if [ "${#threshold[@]}" -gt 0 ]; then faults+=(--threshold "${threshold[@]}"); fi

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "kernel: $(uname -srm)"
  echo "gpus: $("$real" --query-gpu=index,name,driver_version,memory.total,memory.reserved,memory.free,uuid --format=csv,noheader | tr '\n' ';')"
  echo "/bin/sh: $sh_real"
  echo "shells: $shells"
  echo "unshare --pid (PID 1 runs): $(unshare --pid --fork --kill-child true 2>/dev/null && echo yes || echo no)"
  echo "python: $(python3 -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)')"
  for f in "$script" "$sdir"/preflight-faults-*.sh "$sdir"/preflight-threshold-*.sh; do
    [ -r "$f" ] || continue
    echo "script: $f ($(wc -c <"$f") bytes, sha256 $(sha256sum "$f" | cut -c1-16)): $(grep -m1 '^util=' "$f")"
  done
} | tee "$out/env.txt"

rc=0
python3 "$here/proof.py" --script "$script" --out "$out" --work "$work" --shells "$shells" "${faults[@]}" "$@" 2>&1 | tee "$out/proof.log" || rc=$?
rm -rf "$work"
exit "$rc"
