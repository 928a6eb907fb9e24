#!/usr/bin/env bash
# Proof of the preflight on a real NVIDIA GPU (see docs/gpu-results.md).
#
#   test/gpu/run-gpu-proof.sh [SCRIPT] [OUT_DIR] [proof.py options...]
#
# SCRIPT   the preflight script to prove (default test/gpu/out/preflight.sh, written by
#          `npx tsx test/gpu/render-script.ts`; or args[0] of a rewritten container,
#          extracted with test/gpu/extract-script.py)
# OUT_DIR  where results.json, proof.log and env.txt go (default test/gpu/out/results)
# Needs: nvidia-smi, python3 with torch and a CUDA GPU that nothing else is using.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
script=${1:-$here/out/preflight.sh}
out=${2:-$here/out/results}
shift $(( $# < 2 ? $# : 2 ))
[ -r "$script" ] || { echo "no script at $script" >&2; exit 2; }
real=$(command -v nvidia-smi) || { echo "nvidia-smi not found" >&2; exit 2; }
mkdir -p "$out/shim"
out=$(cd "$out" && pwd)

# nvidia-smi as the preflight sees it: the real one, each call recorded in $NVSMI_LOG
cat >"$out/shim/nvidia-smi" <<SHIM
#!/bin/sh
echo "\$*" >>"\${NVSMI_LOG:-/dev/null}"
exec "$real" "\$@"
SHIM
chmod +x "$out/shim/nvidia-smi"
export NVSMI_REAL="$real" PATH="$out/shim:$PATH" PYTHONUNBUFFERED=1

shells=/bin/sh
sh_real=$(readlink -f /bin/sh)
if b=$(command -v bash) && [ "$(readlink -f "$b")" != "$sh_real" ]; then shells="$shells,$b"; fi
if bb=$(command -v busybox); then mkdir -p "$out/busybox"; ln -sf "$bb" "$out/busybox/sh"; shells="$shells,$out/busybox/sh"; fi

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "kernel: $(uname -srm)"
  echo "gpu: $("$real" --query-gpu=name,driver_version,memory.total,uuid --format=csv,noheader)"
  echo "/bin/sh: $sh_real"
  echo "shells: $shells"
  echo "python: $(python3 -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)')"
  echo "script: $script ($(wc -c <"$script") bytes, sha256 $(sha256sum "$script" | cut -c1-16))"
  echo "settings: $(grep -m1 '^util=' "$script")"
} | tee "$out/env.txt"

python3 "$here/proof.py" --script "$script" --out "$out" --shells "$shells" "$@" 2>&1 | tee "$out/proof.log"
