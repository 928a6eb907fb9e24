#!/usr/bin/env bash
# The one command that runs every test on a fresh machine (CI runs it through
# .ci/run): installs the Debian packages the tests execute (real shells, the
# linters and tools: shellcheck, unzip, hyperfine; docker-registry, skopeo and
# openssl for the registry lookup tests; git and gpg for the release tests;
# python3-jsonpatch to apply the webhook's patches; curl and jq for the docs recipes;
# promtool (Debian prometheus) to check and unit-test the chart's alert rules; buildah and umoci to build and unpack
# the images, daemonless and offline; for the test cluster's node: runc, iptables, conntrack, iproute2,
# and busybox, the dynamic build the preflight's tests run as "busybox sh"; the node's test image
# unpacks Debian's busybox-static itself, scripts/cluster-node.sh),
# the npm dependencies and the real helm binaries, builds the bundle,
# type-checks, builds and starts the test cluster (scripts/cluster.sh: etcd,
# kube-apiserver, kube-controller-manager and kubectl from their Go modules, and
# the node: containerd, the kubelet, kube-scheduler, kube-proxy; Go 1.26 must be
# on PATH), runs vitest, and stops the cluster.
set -euo pipefail
cd "$(dirname "$0")/.."

# command -> Debian package that provides it
packages=(python3:python3 dash:dash busybox:busybox shellcheck:shellcheck unzip:unzip unshare:util-linux setpriv:util-linux mount:mount hyperfine:hyperfine docker-registry:docker-registry skopeo:skopeo openssl:openssl git:git gpg:gpg gpg-agent:gpg-agent gpgconf:gpgconf buildah:buildah umoci:umoci curl:curl jq:jq promtool:prometheus setsid:util-linux flock:util-linux ip:iproute2 runc:runc iptables:iptables conntrack:conntrack)
missing=()
for entry in "${packages[@]}"; do
  command -v "${entry%%:*}" >/dev/null 2>&1 || missing+=("${entry#*:}")
done
# "busybox sh" in the preflight's tests is Debian's dynamic busybox: its static build (package busybox-static,
# which an earlier version of this script installed in its place) runs its own sleep and awk before PATH,
# where the tests put their fakes. Installing busybox replaces busybox-static.
if command -v busybox >/dev/null 2>&1 && ! ldd "$(command -v busybox)" >/dev/null 2>&1; then missing+=(busybox); fi
# Python modules for Debian's own python3 (an independent RFC 6902 implementation for the JSON Patch tests)
/usr/bin/python3 -c 'import jsonpatch' >/dev/null 2>&1 || missing+=(python3-jsonpatch)
# ... and a YAML 1.1 reader (PyYAML) standing in for go-yaml, which Helm and kubectl read manifests with (admit's YAML output)
/usr/bin/python3 -c 'import yaml' >/dev/null 2>&1 || missing+=(python3-yaml)
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "test.sh: installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "test.sh: missing Debian packages: ${missing[*]} (install them, or run as root with apt-get)" >&2
    exit 1
  fi
fi

command -v go >/dev/null 2>&1 || { echo "test.sh: the control plane of the tests is built with Go 1.26 (https://go.dev/dl); put go on PATH" >&2; exit 1; }

npm ci --no-audit --no-fund
bash scripts/fetch-helm.sh
bash scripts/build-image.sh fetch-node
node scripts/generate-validator.mjs --check
node scripts/build.mjs

# The cluster is built and started beside the type check; then vitest runs the unit files
# and, after them, the cluster project's (one at a time: they share one API server and
# one node). Run side by side as two processes (tried: 1,035 s against about 1,500 s this
# way), the cluster's load made the preflight's timing tests seconds late (3-8 failures a
# run on 2 cores): one after the other, each has the machine to itself.
status=0
trap 'bash scripts/cluster.sh down' EXIT
bash scripts/cluster.sh up &
up_pid=$!
npm run typecheck || status=1
wait "$up_pid"
npx vitest run || status=1
exit "$status"
