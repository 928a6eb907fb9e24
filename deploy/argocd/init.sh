#!/usr/bin/env bash
# Argo CD CMP `init` for vram-preflight: fetch the chart's dependencies.
#
# Runs in the Application's source path before generate.sh. When Chart.yaml
# declares dependencies and the source has no charts/ directory (dependencies
# not vendored), runs `helm dependency build`, which resolves file://, oci://
# and https:// dependencies (Chart.lock pins them when present). The sidecar has
# none of Argo CD's repository credentials: private registries need their own
# login in the sidecar (docs/argocd.md). Argo CD ignores init's stdout; helm's
# chatter goes to stderr so it shows in the sidecar log.
#
#   HELM_BIN  helm to run (default: helm on PATH)
set -euo pipefail

helm_bin=${HELM_BIN:-helm}

# No chart: nothing to prepare; generate.sh explains.
[[ -f Chart.yaml ]] || exit 0
# Vendored dependencies: use them as they are.
[[ ! -e charts ]] || exit 0
# A top-level `dependencies:` key (block or flow style, optionally quoted).
grep -Eq '^["'\'']?dependencies["'\'']?[[:space:]]*:' Chart.yaml || exit 0

"$helm_bin" dependency build >&2 || {
  printf 'vram-preflight-cmp: helm dependency build failed (see above)\n' >&2
  exit 1
}
