#!/usr/bin/env bash
# Argo CD CMP `generate` for vram-preflight: helm template | vram-preflight.
#
# Runs in the Application's source path (a chart) with the environment that
# argocd-cmp-server sets: ARGOCD_APP_NAME, ARGOCD_APP_NAMESPACE, KUBE_VERSION,
# KUBE_API_VERSIONS, ARGOCD_APP_PARAMETERS, ARGOCD_ENV_* (see params.cjs for
# the parameters). It prints the manifests on stdout ONLY when helm and
# vram-preflight both succeeded and the result is not empty; otherwise it
# prints nothing, explains on stderr (Argo CD shows it as the Application's
# ComparisonError) and exits non-zero. An empty or partial stdout would make
# an auto-pruning Application delete its resources.
#
# No user-supplied text is evaluated by a shell: every argument travels in a
# bash array, inline values go to a file, and values files must lie inside
# the source path.
#
# Environment for the sidecar (or for tests):
#   HELM_BIN            helm to run (default: helm on PATH)
#   VRAM_PREFLIGHT_BIN  vram-preflight to run (default: vram-preflight on PATH)
#   NODE_BIN            node for params.cjs (default: node on PATH)
#   VRAM_PREFLIGHT_*    tool defaults for every Application (see docs/argocd.md)
set -euo pipefail

prog=vram-preflight-cmp
die() {
  printf '%s: %s\n' "$prog" "$*" >&2
  exit 1
}

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
helm_bin=${HELM_BIN:-helm}
tool_bin=${VRAM_PREFLIGHT_BIN:-vram-preflight}
node_bin=${NODE_BIN:-node}

work=$(mktemp -d "${TMPDIR:-/tmp}/vram-preflight-cmp.XXXXXX")
trap 'rm -rf "$work"' EXIT

[[ -f Chart.yaml ]] ||
  die "no Chart.yaml in the source path '${ARGOCD_APP_SOURCE_PATH:-.}': this plugin renders Helm charts"

# --- what the Application asked for ------------------------------------------
release=${ARGOCD_APP_NAME:-}
namespace=${ARGOCD_APP_NAMESPACE:-}
values_files=()
tool_env=()
include_crds=true
skip_flags=()

"$node_bin" "$here/params.cjs" "$work" >"$work/params" ||
  die "the Application's plugin parameters or env were refused (see above); nothing was rendered"
while IFS= read -r -d '' key && IFS= read -r -d '' value; do
  case $key in
    release-name) release=$value ;;
    namespace) namespace=$value ;;
    values-file) values_files+=("$value") ;;
    skip-crds) if [[ $value == true ]]; then include_crds=false; else include_crds=true; fi ;;
    skip-tests) if [[ $value == true ]]; then skip_flags+=(--skip-tests); fi ;;
    skip-schema-validation) if [[ $value == true ]]; then skip_flags+=(--skip-schema-validation); fi ;;
    env) tool_env+=("$value") ;;
    *) die "internal error: unexpected record '$key' from params.cjs" ;;
  esac
done <"$work/params"

release_re='^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'
[[ -n $release ]] || die "no release name: ARGOCD_APP_NAME is empty; set the release-name parameter"
if ((${#release} > 53)) || ! [[ $release =~ $release_re ]]; then
  die "'$release' is not a valid Helm release name (lower-case letters, digits, '-' and '.', at most 53 characters); set the release-name parameter"
fi
namespace_re='^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'
if [[ -n $namespace ]] && { ((${#namespace} > 63)) || ! [[ $namespace =~ $namespace_re ]]; }; then
  die "'$namespace' is not a valid namespace name"
fi

# --- helm template, with the same flags Argo CD's built-in Helm passes -------
helm_args=(template . "--name-template=$release")
if [[ -n $namespace ]]; then helm_args+=("--namespace=$namespace"); fi
if [[ -n ${KUBE_VERSION:-} ]]; then helm_args+=("--kube-version=$KUBE_VERSION"); fi
for f in ${values_files[@]+"${values_files[@]}"}; do helm_args+=("--values=$f"); done
rest=${KUBE_API_VERSIONS:-}
while [[ -n $rest ]]; do
  entry=${rest%%,*}
  if [[ $rest == *,* ]]; then rest=${rest#*,}; else rest=; fi
  entry=${entry#"${entry%%[![:space:]]*}"}
  entry=${entry%"${entry##*[![:space:]]}"}
  if [[ -n $entry ]]; then helm_args+=("--api-versions=$entry"); fi
done
if [[ $include_crds == true ]]; then helm_args+=(--include-crds); fi
helm_args+=(${skip_flags[@]+"${skip_flags[@]}"})

# True when the file holds anything besides blank lines, comments and
# document markers.
has_manifests() {
  grep -Eqv '^([[:space:]]*(#.*)?|---([[:space:]].*)?|\.\.\.[[:space:]]*)$' "$1"
}

"$helm_bin" "${helm_args[@]}" >"$work/rendered.yaml" ||
  die "helm template failed (see above); nothing was output"
has_manifests "$work/rendered.yaml" ||
  die "helm template rendered no manifests; refusing to output an empty stream (an auto-pruning Application would delete all its resources)"

# --- vram-preflight ------------------------------------------------------------
(
  # vram-preflight refuses unknown VRAM_PREFLIGHT_* variables; VRAM_PREFLIGHT_BIN
  # is ours, not its.
  unset VRAM_PREFLIGHT_BIN
  # Each entry is NAME=VALUE with NAME from params.cjs's allow-list; export
  # takes it as one word, nothing is evaluated.
  # shellcheck disable=SC2163
  for kv in ${tool_env[@]+"${tool_env[@]}"}; do export "$kv"; done
  exec "$tool_bin"
) <"$work/rendered.yaml" >"$work/out.yaml" ||
  die "vram-preflight failed (see above); nothing was output"
has_manifests "$work/out.yaml" ||
  die "vram-preflight printed no manifests; refusing to output an empty stream"

cat "$work/out.yaml"
