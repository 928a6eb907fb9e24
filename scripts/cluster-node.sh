# shellcheck shell=bash
# shellcheck disable=SC2154 # module, bin, cache, state, kubelet_port…: scripts/cluster.sh sets them
# The test cluster's node, sourced by scripts/cluster.sh: containerd 2.x with
# Debian's runc (cgroupfs), CNI (bridge, host-local, loopback), the kubelet,
# the real kube-proxy (iptables mode) and a device plugin that gives
# nvidia.com/gpu: 4 fake GPUs, whose memory is a ledger (test/README.md),
# used by the vLLM stand-in image the node's containerd holds under the real
# images' names. kube-scheduler (control plane) runs with it.
#
# Everything lives in the cluster's temporary directory, except what the
# kubelet and runc fix: /var/lib/kubelet/device-plugins, /var/log/containers,
# /run/containerd/s (shim sockets), /var/lib/cni (CNI's result cache), the
# cgroups under /sys/fs/cgroup/*/$node_cgroup, the bridge $node_bridge and
# kube-proxy's iptables rules. `down` removes each of them. Those are
# machine-wide, so one node runs per machine: $node_lock says whose it is.
#
# node_config writes the kubelet's, containerd's and CNI's configuration in one
# place, for this node and for a standalone kubelet (static pods, no API server).

node_module="$module/node"
standin_module="$module/standin"
# The node's name, its address (the bridge's, which the API server binds and
# advertises so that pods reach it through the kubernetes Service) and its pods'
# range: RFC 2544's benchmarking range, never routed: of RFC 5737's three,
# TEST-NET-1 (192.0.2.0/24) is CI's VMs' own network (eth0 192.0.2.2, the
# gateway 192.0.2.1) and TEST-NET-2 the Services'.
node_name=vram-preflight-test-node
node_net=198.18.0
node_ip=$node_net.1
node_bridge=vpt-br0
node_cgroup=${VRAM_PREFLIGHT_NODE_CGROUP:-vram-preflight-node}
# The node's scheduler (kube-scheduler with one profile of this name) schedules only
# the pods of namespaces labelled $node_opt_in=true (a MutatingAdmissionPolicy gives
# them to it); the many pods other tests only store are never looked at, as before.
node_scheduler=vram-preflight-test-scheduler
node_opt_in=vram-preflight.test/node
node_lock=${VRAM_PREFLIGHT_NODE_LOCK:-/run/lock/vram-preflight-test-node.lock}
gpu_count=4
# Where a container finds its GPUs (the device plugin mounts them there; the image's
# nvidia-smi and vLLM stand-in read them).
gpu_container_dir=/run/fake-gpu
# The test images, under the names of the images they stand for (ENTRYPOINTs as
# theirs: src/core/tables/images.ts), so that every door decides for them as it
# does for the real ones. v0.20.1: `vllm serve`, and vLLM's default utilization 0.9.
standin_image=vllm/vllm-openai:v0.20.1
lmcache_image=lmcache/vllm-openai:v0.5.2
pause_image=localhost/vram-preflight-test/pause:1
containerd_version() { sed -n 's/^[[:space:]]*github\.com\/containerd\/containerd\/v2 \(v[0-9.]*\).*$/\1/p' "$node_module/go.mod" | head -n 1; }

# --- build ---------------------------------------------------------------------

# A stamp for each part: the binaries are kept while its inputs are the same.
stamp_of() { sha256sum | cut -c1-16; }

node_build() {
  local started=$SECONDS want built=0
  # The fake GPU and the stand-in: standard library only, seconds.
  want=$( (cat "$standin_module/go.mod"; find "$standin_module" -name '*.go' -type f | LC_ALL=C sort | xargs cat; echo "$go_version") | stamp_of)
  if [ "$(cat "$bin/.stamp-standin" 2>/dev/null)" != "$want" ] || [ ! -x "$bin/fake-gpu" ] || [ ! -x "$bin/pause" ]; then
    (cd "$standin_module" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin/" ./cmd/fake-gpu ./cmd/pause)
    built=1
    write_stamp "$bin/.stamp-standin" "$want"
  fi
  # containerd, its runc shim, ctr (to import the images), the CNI plugins.
  local containerd_ldflags
  containerd_ldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=$(containerd_version)"
  want=$(cat "$node_module/go.mod" "$node_module/go.sum" <(echo "$go_version") <(echo "$containerd_ldflags") | stamp_of)
  if [ "$(cat "$bin/.stamp-node" 2>/dev/null)" != "$want" ] || [ ! -x "$bin/containerd" ] || [ ! -x "$bin/cni/bridge" ]; then
    log "building containerd $(containerd_version) and the CNI plugins from Go modules (test/cluster/node)"
    mkdir -p "$bin/cni"
    (cd "$node_module" && CGO_ENABLED=0 go build -trimpath -ldflags "$containerd_ldflags" -o "$bin/" \
      github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 github.com/containerd/containerd/v2/cmd/ctr)
    (cd "$node_module" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin/cni/" \
      github.com/containernetworking/plugins/plugins/main/bridge github.com/containernetworking/plugins/plugins/ipam/host-local github.com/containernetworking/plugins/plugins/main/loopback)
    built=1
    write_stamp "$bin/.stamp-node" "$want"
  fi
  node_images
  [ "$built" = 0 ] || log "the node's parts built in $((SECONDS - started)) s"
}

# The images' /bin/sh and tools: a static busybox. A static one on PATH is taken;
# else Debian's (package busybox-static) is unpacked into .cache, never installed:
# installing it replaces the package busybox, whose dynamic binary is the "busybox sh"
# of the preflight's tests, and Debian's static build runs its own applets (sleep,
# awk) before PATH, where those tests put their fakes.
static_busybox() {
  local found dir=$cache/busybox-static work
  found=$(command -v busybox || true)
  if [ -n "$found" ] && ! ldd "$found" >/dev/null 2>&1; then echo "$found"; return 0; fi
  if [ ! -x "$dir/busybox" ]; then
    if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
      log "the test images need a static busybox: put one on PATH, or run on Debian (apt-get download busybox-static)"
      exit 1
    fi
    work=$(mktemp -d)
    # apt's lists may be missing on a fresh machine: read them once, then ask again.
    if ! (cd "$work" && apt-get download -qq busybox-static >/dev/null 2>&1); then
      apt-get update -qq >/dev/null
      (cd "$work" && apt-get download -qq busybox-static >/dev/null 2>&1) ||
        { log "apt-get download busybox-static failed (the test images need a static busybox)"; rm -rf "$work"; exit 1; }
    fi
    dpkg-deb -x "$work"/busybox-static_*.deb "$work/root"
    if ldd "$work/root/bin/busybox" >/dev/null 2>&1; then
      log "Debian's busybox-static gave a dynamic $work/root/bin/busybox"
      exit 1
    fi
    mkdir -p "$dir"
    install -m 0755 "$work/root/bin/busybox" "$dir/busybox.partial"
    mv "$dir/busybox.partial" "$dir/busybox"
    rm -rf "$work"
  fi
  echo "$dir/busybox"
}

# The test images, built offline as scripts/build-image.sh builds the release's
# (buildah, vfs storage, no daemon, every timestamp 0), as Docker archives that
# `ctr images import` reads with their names.
node_images() {
  local images=$bin/images busybox
  busybox=$(static_busybox)
  local want
  want=$( (cat "$bin/fake-gpu" "$bin/pause" "$busybox" "$standin_module/Containerfile"; declare -f node_images) | stamp_of)
  if [ "$(cat "$images/.stamp" 2>/dev/null)" = "$want" ] && [ -f "$images/vllm-openai.tar" ] && [ -f "$images/lmcache-vllm-openai.tar" ] && [ -f "$images/pause.tar" ]; then
    return 0
  fi
  command -v buildah >/dev/null || { log "the test images are built with buildah (Debian package buildah)"; exit 1; }
  local work
  work=$(mktemp -d)
  local rootfs=$work/context/rootfs
  # The stand-in's image: one static binary that is vllm (at both images' paths)
  # and nvidia-smi (where the incident's image has it), and busybox for the shells
  # and tools the preflight's script runs.
  mkdir -p "$rootfs"/{bin,usr/bin,opt/venv/bin,etc,tmp,root} "$work/context/pause"
  chmod 1777 "$rootfs/tmp"
  install -m 0755 "$bin/fake-gpu" "$rootfs/usr/bin/fake-gpu"
  ln -s fake-gpu "$rootfs/usr/bin/vllm"
  ln -s fake-gpu "$rootfs/usr/bin/nvidia-smi"
  ln -s /usr/bin/fake-gpu "$rootfs/opt/venv/bin/vllm"
  install -m 0755 "$busybox" "$rootfs/bin/busybox"
  local applet
  for applet in $("$busybox" --list); do
    [ -e "$rootfs/bin/$applet" ] || ln -s busybox "$rootfs/bin/$applet"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\nvllm:x:2000:0:vllm:/tmp:/bin/sh\nnonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin\n' >"$rootfs/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$rootfs/etc/group"
  install -m 0755 "$bin/pause" "$work/context/pause/pause"
  find "$work/context" -exec touch -h -d @0 {} +
  local storage=(--storage-driver vfs --root "$work/storage" --runroot "$work/run") target name
  mkdir -p "$images"
  for target in vllm-openai:"$standin_image" lmcache-vllm-openai:"$lmcache_image" pause:"$pause_image"; do
    name=${target#*:}
    target=${target%%:*}
    buildah "${storage[@]}" bud --quiet --timestamp 0 --identity-label=false --omit-history --format docker \
      --target "$target" -f "$standin_module/Containerfile" -t "localhost/test-$target" "$work/context" >/dev/null
    rm -f "$images/$target.tar"
    buildah "${storage[@]}" push --quiet "localhost/test-$target" "docker-archive:$images/$target.tar:$name"
  done
  buildah "${storage[@]}" rmi --all >/dev/null
  rm -rf "$work"
  write_stamp "$images/.stamp" "$want"
  built=1 # node_build's
}

# --- configuration ------------------------------------------------------------------

# node_config <dir> <cluster|standalone>: containerd's config.toml, the CNI network
# and the kubelet's config.yaml under <dir>. Standalone: a kubelet with no API server,
# running the static pods of <dir>/kubelet/manifests (authentication by client
# certificate only). Reads kubelet_port and kubelet_healthz_port.
node_config() {
  local dir=$1 mode=$2
  mkdir -p "$dir/containerd" "$dir/cni/net.d" "$dir/kubelet/manifests"
  # containerd: state and data in <dir>; runc (cgroupfs) as the default runtime and
  # as the handler of RuntimeClass nvidia, which GPU charts name (the GPU Operator's);
  # the pause image is ours, never pulled.
  cat >"$dir/containerd/config.toml" <<EOF
version = 3
root = "$dir/containerd/root"
state = "$dir/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile", "io.containerd.snapshotter.v1.erofs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing", "io.containerd.nri.v1.nri"]

[grpc]
  address = "$dir/containerd/containerd.sock"

[ttrpc]
  address = "$dir/containerd/containerd.sock.ttrpc"

[plugins.'io.containerd.internal.v1.opt']
  path = "$dir/containerd/opt"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "$pause_image"

[plugins.'io.containerd.cri.v1.runtime']
  netns_mounts_under_state_dir = true
  # No negative OOM scores (the kubelet asks -998 for sandboxes): root here may lack
  # CAP_SYS_RESOURCE (CI's VMs do), and runc would fail every sandbox.
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        Root = "$dir/containerd/runc"
        SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia.options]
        BinaryName = "$(command -v runc)"
        Root = "$dir/containerd/runc"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["$bin/cni"]
    conf_dir = "$dir/cni/net.d"

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
EOF
  # Pods on a bridge whose address is the node's; host-local hands out the rest of the /24.
  cat >"$dir/cni/net.d/10-vram-preflight-test.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "vram-preflight-test",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$node_bridge",
      "isGateway": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$dir/cni/ipam",
        "ranges": [[{ "subnet": "$node_net.0/24", "rangeStart": "$node_net.10", "rangeEnd": "$node_net.250", "gateway": "$node_ip" }]],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    }
  ]
}
EOF
  # Cluster: the kubelet serves on the node's address with its certificate, and asks
  # the API server who may do what. Standalone: on loopback, a certificate of its
  # own, anyone allowed (`curl -k https://127.0.0.1:PORT/pods` reads its pods'
  # status: restartCount, back-off), no DNS; the caller makes /$node_cgroup (on
  # cgroup v2 with its controllers enabled in the parent's cgroup.subtree_control).
  local serving
  if [ "$mode" = standalone ]; then
    serving="address: 127.0.0.1
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization:
  mode: AlwaysAllow"
  else
    serving="address: $node_ip
tlsCertFile: $dir/pki/kubelet.crt
tlsPrivateKeyFile: $dir/pki/kubelet.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $dir/pki/ca.crt}
authorization:
  mode: Webhook
clusterDNS: [$node_ip]
clusterDomain: cluster.local"
  fi
  # The kubelet: cgroupfs under /$node_cgroup (cgroup v1 allowed: CI's hosts are v1),
  # its files in <dir>, no eviction and no image garbage collection (the test images
  # cannot be pulled again), node status computed every 2 s (the GPUs show sooner).
  cat >"$dir/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
failSwapOn: false
cgroupDriver: cgroupfs
cgroupRoot: /$node_cgroup
containerRuntimeEndpoint: unix://$dir/containerd/containerd.sock
port: $kubelet_port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $kubelet_healthz_port
rotateCertificates: false
serverTLSBootstrap: false
$serving
staticPodPath: $dir/kubelet/manifests
fileCheckFrequency: 5s
nodeStatusUpdateFrequency: 2s
podLogsDir: $dir/kubelet/pod-logs
volumePluginDir: $dir/kubelet/volume-plugins
evictionHard: {}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
shutdownGracePeriod: 0s
shutdownGracePeriodCriticalPods: 0s
EOF
}

# --- start and stop ------------------------------------------------------------------

# Every process of the node (and so every container, shim and pause) in one cgroup
# tree, so that `down` finds all of them, even after an interrupted run.
cgroup_dirs() { # every hierarchy's directory for the node
  local d
  for d in /sys/fs/cgroup/*/; do
    [ -e "$d/cgroup.procs" ] && echo "${d%/}/$node_cgroup"
  done
  [ -e /sys/fs/cgroup/cgroup.procs ] && echo "/sys/fs/cgroup/$node_cgroup"
  return 0
}

node_cgroups() {
  local d parent
  for d in $(cgroup_dirs); do
    mkdir -p "$d/runtime" 2>/dev/null || true
    parent=${d%/*}
    # cgroup v1's cpuset starts empty: a process can join only once cpus and mems are set.
    for f in cpuset.cpus cpuset.mems; do
      [ -e "$d/$f" ] && [ -z "$(cat "$d/$f")" ] && cat "$parent/$f" >"$d/$f"
      [ -e "$d/runtime/$f" ] && [ -z "$(cat "$d/runtime/$f")" ] && cat "$d/$f" >"$d/runtime/$f"
    done
  done
  return 0
}

# Starts a node process in the node's cgroups (and a session of its own, as start does).
start_in_node() { # <logfile> <command…>
  local logfile=$1
  shift
  # shellcheck disable=SC2016 # the inner shell's variables
  setsid sh -c 'cg=$1; shift; for d in /sys/fs/cgroup/*/"$cg"/runtime /sys/fs/cgroup/"$cg"/runtime; do [ -e "$d/cgroup.procs" ] && echo $$ >"$d/cgroup.procs"; done; exec "$@"' \
    sh "$node_cgroup" "$@" >"$logfile" 2>&1 </dev/null &
  echo $!
}

node_procs() { # the pids in the node's cgroups
  local d
  # (A missing directory is no failure: under pipefail it made `pids=$(node_procs)` end
  # down before its cleanup, once something else had removed the node's cgroups.)
  for d in $(cgroup_dirs); do
    [ ! -d "$d" ] || find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null || true
  done | sort -u
}

# Takes the machine's node lock for this checkout: a process that holds it (flock)
# for the node's life. Fails, saying whose it is, when another holds it.
take_node_lock() {
  mkdir -p "$(dirname "$node_lock")"
  exec 9>>"$node_lock"
  if ! flock -n 9; then
    # This checkout's own, from a run whose state is lost (up then down own the lock
    # through the state): end its holder, and take the lock.
    local owner holder
    owner=$(cat "$node_lock" 2>/dev/null || true)
    holder=$(sed -n 's/.* lock held by pid \([0-9]*\) .*/\1/p' <<<"$owner")
    if [ "${owner%%, lock held*}" = "$state" ] && [ -n "$holder" ] && ! grep -qx "LOCK_PID=$holder" "$state" 2>/dev/null; then
      log "the node lock is held by this checkout's own interrupted run (pid $holder): taking it back"
      kill -TERM "$holder" 2>/dev/null || true
      flock -w 10 9 || true
    fi
  fi
  # VRAM_PREFLIGHT_NODE_WAIT=<seconds>: wait that long for another checkout's node to go
  # (checkouts of one machine taking turns), instead of starting without a node at once.
  local wait_s=${VRAM_PREFLIGHT_NODE_WAIT:-0}
  if [ "$wait_s" != 0 ] && ! flock -n 9; then
    log "another checkout's node runs on this machine: waiting up to $wait_s s for it ($(cat "$node_lock" 2>/dev/null))"
    flock -w "$wait_s" 9 || true
  fi
  if ! flock -n 9; then
    exec 9>&-
    NODE_ERROR="another checkout's node runs on this machine ($(cat "$node_lock" 2>/dev/null || echo "owner unknown")): only one node runs per machine (cgroups, iptables); run scripts/cluster.sh down there, then scripts/cluster.sh up here"
    return 1
  fi
  # A holder the lock file names that is alive and holds the file open as its fd 9 holds
  # the node, even though flock let us in: until 2026-12-05 take_node_lock rewrote the file
  # with sed -i after locking it, which put a new file in its place and left the holder's
  # lock on the removed one. Wait for it (or end it, if it is this checkout's own).
  local named deadline=$((SECONDS + ${VRAM_PREFLIGHT_NODE_WAIT:-0}))
  while named=$(named_lock_holder) && [ -n "$named" ]; do
    if [ "$(sed -n 's/, lock held by pid .*//p' "$node_lock" 2>/dev/null)" = "$state" ]; then
      log "the node lock is held by this checkout's own interrupted run (pid $named): taking it back"
      kill -TERM "$named" 2>/dev/null || true
      sleep 1
    elif [ "$SECONDS" -lt "$deadline" ]; then
      sleep 2
    else
      exec 9>&-
      NODE_ERROR="another checkout's node runs on this machine ($(cat "$node_lock" 2>/dev/null)): only one node runs per machine (cgroups, iptables); run scripts/cluster.sh down there, then scripts/cluster.sh up here"
      return 1
    fi
  done
  setsid sleep infinity </dev/null >/dev/null 2>&1 &
  LOCK_PID=$!
  # Written in place, into the file the lock is on: a file put in its place (sed -i, mv)
  # would leave the lock on a removed file that the next checkout's flock never sees.
  echo "$state, lock held by pid $LOCK_PID from $(date -u +%FT%TZ)" >"$node_lock"
  exec 9>&-
  echo "LOCK_PID=$LOCK_PID" >>"$state"
}

# The pid the lock file names, if that process is alive and holds the lock file (or a removed
# earlier one) open as its fd 9, as every holder take_node_lock starts does.
named_lock_holder() {
  local holder
  holder=$(sed -n 's/.* lock held by pid \([0-9]*\) .*/\1/p' "$node_lock" 2>/dev/null)
  alive "$holder" || return 1
  case "$(readlink "/proc/$holder/fd/9" 2>/dev/null)" in "$node_lock" | "$node_lock (deleted)") echo "$holder" ;; *) return 1 ;; esac
}

# Why this machine cannot run the node, if it cannot.
node_unavailable() {
  [ "${VRAM_PREFLIGHT_NODE:-on}" != off ] || { echo "turned off (VRAM_PREFLIGHT_NODE=off)"; return; }
  [ "$(id -u)" = 0 ] || { echo "the node needs root (cgroups, network, mounts): run scripts/cluster.sh up as root"; return; }
  local tool missing=()
  for tool in runc iptables iptables-restore ip flock; do
    command -v "$tool" >/dev/null || missing+=("$tool")
  done
  [ "${#missing[@]}" = 0 ] || { echo "the node needs ${missing[*]} (Debian packages runc, iptables, iproute2, util-linux)"; return; }
  [ -e /sys/fs/cgroup/memory/cgroup.procs ] || [ -e /sys/fs/cgroup/cgroup.procs ] || { echo "no cgroup file system at /sys/fs/cgroup"; return; }
  return 0
}

# Before the control plane: the lock, leftovers of an interrupted node cleaned, the
# bridge with the node's address (the API server binds it). Sets NODE_ERROR on failure.
node_prepare() {
  NODE_ERROR=$(node_unavailable)
  [ -z "$NODE_ERROR" ] || return 1
  take_node_lock || return 1
  # The lock is ours: anything of a node still here is an interrupted run's.
  node_cleanup ""
  if net_in_use "$node_net"; then
    NODE_ERROR="this machine's network already uses $node_net.0/24, the node's range"
    release_node_lock
    return 1
  fi
  ip link add "$node_bridge" type bridge
  ip addr add "$node_ip/24" dev "$node_bridge"
  ip link set "$node_bridge" up
  SYSCTL_IP_FORWARD=$(cat /proc/sys/net/ipv4/ip_forward)
  echo "SYSCTL_IP_FORWARD=$SYSCTL_IP_FORWARD" >>"$state"
  # Pod to Service to a pod on the same bridge: iptables must see bridged packets.
  if [ -e /proc/sys/net/bridge/bridge-nf-call-iptables ]; then
    echo "SYSCTL_BRIDGE_NF=$(cat /proc/sys/net/bridge/bridge-nf-call-iptables)" >>"$state"
    echo 1 >/proc/sys/net/bridge/bridge-nf-call-iptables
  fi
  node_cgroups
}

node_pki() { # <dir>
  sign kubelet "/CN=$node_name" "subjectAltName=IP:$node_ip,DNS:$node_name
extendedKeyUsage=serverAuth"
  sign kubelet-client "/O=system:nodes/CN=system:node:$node_name" "extendedKeyUsage=clientAuth"
  # The API server's client of the kubelet (exec, logs, port-forward).
  sign apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "extendedKeyUsage=clientAuth"
  sign scheduler "/CN=system:kube-scheduler" "extendedKeyUsage=clientAuth"
  sign kube-proxy "/CN=system:kube-proxy" "extendedKeyUsage=clientAuth"
}

# containerd and the images: needs nothing of the API server, so it runs beside its start.
node_start_runtime() { # <dir>
  local dir=$1
  mkdir -p "$dir/ledger"
  "$bin/fake-gpu" init "$dir/ledger" --count "$gpu_count"
  CONTAINERD_PID=$(PATH="$bin:$PATH" start_in_node "$dir/containerd.log" "$bin/containerd" --config "$dir/containerd/config.toml")
  echo "CONTAINERD_PID=$CONTAINERD_PID" >>"$state"
  wait_for 30 "$dir/containerd.log" containerd "$bin/ctr" --address "$dir/containerd/containerd.sock" version >/dev/null 2>&1
  local image out
  for image in pause vllm-openai lmcache-vllm-openai; do
    # Quiet unless it fails (ctr repeats containerd's warning that cgroup v1 is deprecated).
    if ! out=$("$bin/ctr" --address "$dir/containerd/containerd.sock" -n k8s.io images import --local "$bin/images/$image.tar" 2>&1); then
      log "importing $bin/images/$image.tar into the node's containerd failed: $out"
      return 1
    fi
  done
}

# The kubelet, the device plugin, kube-proxy and kube-scheduler: started while the
# API server starts (they wait for it), so that their own start-ups overlap its.
node_start() { # <dir> <api port>
  local dir=$1 api_port=$2
  kubeconfig "$dir/kubelet.kubeconfig" "$dir" "$api_port" kubelet-client
  kubeconfig "$dir/scheduler.kubeconfig" "$dir" "$api_port" scheduler
  kubeconfig "$dir/kube-proxy.kubeconfig" "$dir" "$api_port" kube-proxy
  KUBELET_PID=$(start_in_node "$dir/kubelet.log" "$bin/kubelet" --config "$dir/kubelet/config.yaml" \
    --kubeconfig "$dir/kubelet.kubeconfig" --root-dir "$dir/kubelet/root" --cert-dir "$dir/kubelet/pki" \
    --hostname-override "$node_name" --node-ip "$node_ip" --node-labels nvidia.com/gpu.present=true)
  echo "KUBELET_PID=$KUBELET_PID" >>"$state"
  local scheduler_port=${ports[0]} proxy_healthz_port=${ports[1]} proxy_metrics_port=${ports[2]}
  cat >"$dir/kube-scheduler.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: $dir/scheduler.kubeconfig}
leaderElection: {leaderElect: false}
profiles:
- schedulerName: $node_scheduler
EOF
  SCHEDULER_PID=$(start "$dir/kube-scheduler.log" "$bin/kube-scheduler" --config "$dir/kube-scheduler.yaml" \
    --authentication-kubeconfig "$dir/scheduler.kubeconfig" --authorization-kubeconfig "$dir/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$scheduler_port")
  echo "SCHEDULER_PID=$SCHEDULER_PID" >>"$state"
  cat >"$dir/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection: {kubeconfig: $dir/kube-proxy.kubeconfig}
hostnameOverride: $node_name
clusterCIDR: $node_net.0/24
detectLocalMode: ClusterCIDR
healthzBindAddress: 127.0.0.1:$proxy_healthz_port
metricsBindAddress: 127.0.0.1:$proxy_metrics_port
# This machine's conntrack settings are left as they are.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
iptables: {localhostNodePorts: false, minSyncPeriod: 1s, syncPeriod: 30s}
EOF
  PROXY_PID=$(start_in_node "$dir/kube-proxy.log" "$bin/kube-proxy" --config "$dir/kube-proxy.yaml")
  echo "PROXY_PID=$PROXY_PID" >>"$state"
  # (It registers once the kubelet's device-plugin socket is there, and again whenever the kubelet restarts.)
  PLUGIN_PID=$(start_in_node "$dir/fakegpu-plugin.log" "$bin/fakegpu-plugin" --ledger "$dir/ledger" --container-dir "$gpu_container_dir")
  echo "PLUGIN_PID=$PLUGIN_PID" >>"$state"
}

# The node's objects, then the node Ready with its GPUs. Needs the API server.
node_finish() { # <dir>
  local dir=$1
  # RuntimeClass nvidia (runc here, as on a GPU Operator's node), and the opted-in
  # namespaces' pods given to the node's scheduler.
  "$bin/kubectl" --kubeconfig "$cache/kubeconfig" apply --server-side --field-manager=vram-preflight-test-node -f - >/dev/null <<EOF
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: nvidia}
handler: nvidia
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: vram-preflight-test-node}
spec:
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
  matchConditions:
  - name: for-the-default-scheduler
    expression: "!has(object.spec.schedulerName) || object.spec.schedulerName == 'default-scheduler'"
  failurePolicy: Fail
  reinvocationPolicy: Never
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: '[JSONPatch{op: "add", path: "/spec/schedulerName", value: "$node_scheduler"}]'
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: vram-preflight-test-node}
spec:
  policyName: vram-preflight-test-node
  matchResources:
    namespaceSelector: {matchLabels: {$node_opt_in: "true"}}
EOF
  wait_for 90 "$dir/kubelet.log" "the node (Ready, with $gpu_count nvidia.com/gpu)" node_ready
}

node_ready() {
  [ "$("$bin/kubectl" --kubeconfig "$cache/kubeconfig" get node "$node_name" \
    -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.allocatable.nvidia\.com/gpu}' 2>/dev/null)" = "True $gpu_count" ]
}

# Stops the node and removes all it made: processes (containers and shims too), mounts,
# kube-proxy's rules, cgroups, the bridge, the kubelet's and runc's files outside <dir>.
# With an empty <dir>: what an interrupted node of this machine left (the lock held).
node_cleanup() { # <dir>
  local dir=$1 pid
  for pid in "${PLUGIN_PID:-}" "${PROXY_PID:-}" "${KUBELET_PID:-}"; do
    if ours "$pid"; then kill -TERM -- "-$pid" 2>/dev/null || true; fi
  done
  # Everything else of the node dies at once: containers, shims, containerd.
  for _ in $(seq 50); do
    local pids
    pids=$(node_procs)
    [ -n "$pids" ] || break
    # shellcheck disable=SC2086 # a list of pids
    kill -KILL $pids 2>/dev/null || true
    sleep 0.1
  done
  # kube-proxy's own cleanup of its iptables (and nftables) rules, where it left some;
  # then the kubelet's chains (its martian-packet rule, the canary and hint chains).
  if [ -x "$bin/kube-proxy" ] && { iptables -w -t nat -n -L KUBE-SERVICES >/dev/null 2>&1 || nft list table ip kube-proxy >/dev/null 2>&1; }; then
    "$bin/kube-proxy" --cleanup >/dev/null 2>&1 || true
  fi
  local ipt table chain rules
  for ipt in iptables ip6tables; do
    command -v "$ipt" >/dev/null || continue
    rules=$("$ipt-save" 2>/dev/null || true)
    grep -q 'KUBE-' <<<"$rules" || continue
    for chain in INPUT OUTPUT; do
      while "$ipt" -w -t filter -D "$chain" -j KUBE-FIREWALL 2>/dev/null; do :; done
    done
    for table in filter nat mangle; do
      for chain in KUBE-FIREWALL KUBE-KUBELET-CANARY KUBE-IPTABLES-HINT; do
        if "$ipt" -w -t "$table" -F "$chain" 2>/dev/null; then "$ipt" -w -t "$table" -X "$chain" 2>/dev/null || true; fi
      done
    done
  done
  # Mounts of the node, deepest first (container root file systems, netns, volumes): under
  # <dir>, or, for an interrupted run, under any cluster directory's containerd/ or kubelet/.
  local mount
  awk -v dir="$dir/" '(dir != "/" && index($5, dir) == 1) || (dir == "/" && $5 ~ /\/vram-preflight-cluster\.[^\/]*\/(containerd|kubelet)\//) { print $5 }' /proc/self/mountinfo |
    sort -r | while read -r mount; do
      mount=$(printf '%b' "$mount")
      umount "$mount" 2>/dev/null || umount -l "$mount" 2>/dev/null || true
    done
  if [ -n "$dir" ]; then
    # The shims' sockets: named by a hash of containerd's address, the namespace and the id.
    local task
    for task in "$dir"/containerd/state/io.containerd.runtime.v2.task/k8s.io/*/; do
      [ -d "$task" ] || continue
      rm -f "/run/containerd/s/$(printf '%s' "$dir/containerd/containerd.sock/k8s.io/$(basename "$task")" | sha256sum | cut -c1-64)"
    done
    # The kubelet's links to its containers' logs.
    find /var/log/containers -maxdepth 1 -type l -lname "$dir/*" -delete 2>/dev/null || true
  fi
  rmdir /run/containerd/s /run/containerd/fifo /run/containerd/runc/k8s.io /run/containerd/runc /run/containerd 2>/dev/null || true
  rmdir /var/log/containers 2>/dev/null || true
  # CNI's result cache: our network's, and those of the sandboxes' loopback.
  rm -f /var/lib/cni/results/vram-preflight-test-*
  if [ -n "$dir" ]; then
    for task in "$dir"/containerd/root/io.containerd.grpc.v1.cri/sandboxes/*/; do
      [ -d "$task" ] && rm -f /var/lib/cni/results/*-"$(basename "$task")"-*
    done
  fi
  rmdir /var/lib/cni/results /var/lib/cni 2>/dev/null || true
  rm -f /var/lib/kubelet/device-plugins/kubelet.sock /var/lib/kubelet/device-plugins/fake-gpu.sock /var/lib/kubelet/device-plugins/kubelet_internal_checkpoint
  rmdir /var/lib/kubelet/device-plugins /var/lib/kubelet 2>/dev/null || true
  # Cgroups, deepest first.
  local d
  for d in $(cgroup_dirs); do
    if [ -d "$d" ]; then find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true; fi
  done
  ip link delete "$node_bridge" 2>/dev/null || true
}

# Whether this state's lock holder (LOCK_PID, a sleep that inherited the lock's fd 9) still
# holds the machine's node lock, and the lock names this checkout's state and that holder.
holds_node_lock() {
  lock_holder_ours && [ "$(readlink "/proc/$LOCK_PID/fd/9" 2>/dev/null)" = "$node_lock" ] &&
    [ "$(sed -n 's/, lock held by pid \([0-9]*\) .*/ \1/p' "$node_lock" 2>/dev/null)" = "$state $LOCK_PID" ]
}

# Whether LOCK_PID is this state's lock holder: alive, with the lock file open as fd 9 (also
# when that file has been removed since, and the lock on it means nothing any more).
lock_holder_ours() {
  alive "${LOCK_PID:-}" && case "$(readlink "/proc/$LOCK_PID/fd/9" 2>/dev/null)" in "$node_lock" | "$node_lock (deleted)") true ;; *) false ;; esac
}

release_node_lock() {
  if holds_node_lock; then : >"$node_lock"; fi
  if lock_holder_ours; then kill -TERM "$LOCK_PID" 2>/dev/null || true; fi
}

# Everything of the node goes, if this checkout's up took the machine's lock.
node_down() {
  [ -n "${LOCK_PID:-}" ] || return 0
  if ours "${SCHEDULER_PID:-}"; then kill -TERM -- "-$SCHEDULER_PID" 2>/dev/null || true; fi
  # The node's cleanup ends every process in the node's cgroups and removes the bridge and
  # the rules, machine-wide: only while this state holds the lock. A state whose lock is gone
  # (copied from another checkout, or its holder ended) would end another checkout's node;
  # the next up cleans what an interrupted node left, under the lock.
  if ! holds_node_lock; then
    log "this state (lock holder pid $LOCK_PID) does not hold the machine's node lock now: the node running now, if any, is another checkout's; left alone"
    release_node_lock
    return 0
  fi
  node_cleanup "${DIR:-}"
  if [ -n "${SYSCTL_IP_FORWARD:-}" ]; then echo "$SYSCTL_IP_FORWARD" >/proc/sys/net/ipv4/ip_forward; fi
  if [ -n "${SYSCTL_BRIDGE_NF:-}" ]; then echo "$SYSCTL_BRIDGE_NF" >/proc/sys/net/bridge/bridge-nf-call-iptables; fi
  release_node_lock
}

node_env() {
  if [ "${NODE:-}" != 1 ]; then
    # Single-quoted for eval; test/apiserver/harness.ts reads it as a shell would.
    echo "VRAM_PREFLIGHT_NODE_ERROR='$(printf '%s' "${NODE_ERROR:-not started}" | sed "s/'/'\\\\''/g")'"
    return 0
  fi
  echo "VRAM_PREFLIGHT_NODE=$node_name"
  echo "VRAM_PREFLIGHT_NODE_IP=$node_ip"
  echo "VRAM_PREFLIGHT_NODE_OPT_IN_LABEL=$node_opt_in=true"
  echo "VRAM_PREFLIGHT_NODE_SCHEDULER=$node_scheduler"
  echo "VRAM_PREFLIGHT_NODE_GPUS=$gpu_count"
  echo "VRAM_PREFLIGHT_FAKE_GPU_DIR=$DIR/ledger"
  echo "VRAM_PREFLIGHT_FAKE_GPU_CONTAINER_DIR=$gpu_container_dir"
  echo "VLLM_STANDIN_IMAGE=$standin_image"
  echo "VLLM_STANDIN_LMCACHE_IMAGE=$lmcache_image"
  echo "VRAM_PREFLIGHT_CONTAINERD_ADDRESS=$DIR/containerd/containerd.sock"
}
