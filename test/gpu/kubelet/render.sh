#!/usr/bin/env bash
# Gathers what the kubelet proof (test/gpu/kubelet_proof.py) needs on the GPU machine,
# which has no Go, no node and no registry, into test/gpu/out/node (git-ignored; carried):
#
#   bin/      kubelet, containerd, containerd-shim-runc-v2, ctr (xz), runc and its
#             libseccomp (Debian's, as the test node runs it), from scripts/cluster.sh's build
#   images/   the test node's images (pause; the vLLM stand-in under lmcache/vllm-openai:v0.5.2,
#             the incident's image name, whose /opt/venv/bin the proof mounts over)
#   starts.json  the container's start as vram-preflight writes it: the post-renderer run here
#             on the pod of pod.yaml, with its defaults and with --timeout-seconds 20 (step 5),
#             and the start it had before (the unwrapped baseline)
#
#   bash test/gpu/kubelet/render.sh      (after scripts/cluster.sh build and node scripts/build.mjs)
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
here=$root/test/gpu/kubelet
bin=$root/.cache/cluster/bin
out=$root/test/gpu/out/node
rm -rf "$out"
mkdir -p "$out/bin" "$out/images"
for b in kubelet containerd containerd-shim-runc-v2 ctr; do
  [ -x "$bin/$b" ] || { echo "no $bin/$b: run scripts/cluster.sh build" >&2; exit 1; }
  xz -T0 -6 -c "$bin/$b" >"$out/bin/$b.xz"
done
runc=$(command -v runc) || { echo "runc (Debian package runc) is not installed" >&2; exit 1; }
xz -6 -c "$runc" >"$out/bin/runc.xz"
seccomp=$(ldd "$runc" | sed -n 's/.*libseccomp[^ ]* => \([^ ]*\) .*/\1/p')
[ -n "$seccomp" ] && cp -L "$seccomp" "$out/bin/"
cp "$bin/images/pause.tar" "$bin/images/lmcache-vllm-openai.tar" "$out/images/"

# The start, as the post-renderer writes it for the pod (and as it was).
node "$here/starts.mjs" "$here/pod.yaml" "$root/dist/vram-preflight.cjs" >"$out/starts.json"
du -sh "$out" >&2
