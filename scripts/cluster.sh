#!/usr/bin/env bash
# A real Kubernetes cluster for the tests: etcd, kube-apiserver and
# kube-controller-manager built from their Go modules (test/cluster/go.mod),
# kubectl from the same release, KubeRay's operator and LeaderWorkerSet's
# controller (built here too; the tests that need them start them), and a real
# node (scripts/cluster-node.sh): containerd 2.x with runc and CNI, the kubelet,
# kube-proxy, kube-scheduler, 4 fake GPUs (nvidia.com/gpu) and the vLLM
# stand-in's image (test/README.md).
#
#   scripts/cluster.sh build   build the binaries into .cache/cluster/bin (once: a second
#                              run with the same go.sum and Go finds them and builds nothing)
#   scripts/cluster.sh up      build, then start the control plane (idempotent: a running one
#                              is kept); writes .cache/cluster/kubeconfig (admin, system:masters)
#   scripts/cluster.sh env     print KUBECONFIG=… and the other paths tests read, as shell
#                              assignments: eval "$(scripts/cluster.sh env)"
#   scripts/cluster.sh down    stop exactly the processes `up` started; remove their data
#   scripts/cluster.sh node-config DIR [cluster|standalone]
#                              write the node's kubelet, containerd and CNI configuration
#                              only (standalone: a kubelet without an API server)
#
# Everything listens on ports picked free at start, on 127.0.0.1, except the API
# server and the kubelet: they listen on the node's address (198.18.0.1, on the
# node's bridge: pods reach the API server there, through the kubernetes Service). Data, keys and logs live in a temporary directory named
# in .cache/cluster/state. Needs Go (GOTOOLCHAIN=local), openssl and node (to
# pick free ports); the node needs root, runc, iptables and iproute2, and takes
# a machine-wide lock: one node runs per machine. Without the node (another
# checkout's holds the lock, no root, VRAM_PREFLIGHT_NODE=off) the control plane
# runs on loopback alone, pods are admitted and stored, never run, and `env`
# says why in VRAM_PREFLIGHT_NODE_ERROR. Only the tests use it; the product is
# TypeScript.
#
# Times on a 2-core machine shared with other builds (load 7-15): the node's first
# build, with the control plane's Go caches warm (containerd, its shim, ctr, the CNI
# plugins, the stand-in and its images: 953 s; kubelet, kube-scheduler, kube-proxy and
# the device plugin, the control plane relinked: 259 s) took 20 min and 8.5 CPU
# minutes, so about 5 minutes on an idle machine. `up` with the node, binaries
# built: 13.5 s at load 2 (11.5 s without it), 18-20 s at load 7 (11-14 s); down 13 s.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
module="$root/test/cluster"
cache="$root/.cache/cluster"
bin="$cache/bin"
state="$cache/state"
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
# The Services' range: RFC 5737 TEST-NET-2, reserved for documentation and never
# routed; the first of its addresses is the API server's own Service, kubernetes.
service_net=198.51.100
# KubeRay's operator, for the tests that check the pods it makes (its module has
# no replace directives: go install takes it at this version).
kuberay_version=v1.5.0
# LeaderWorkerSet's controller: its own module (test/cluster/lws), whose go.mod
# pins the version.
lws_module="$module/lws"
lws_version() { sed -n 's/^[[:space:]]*sigs\.k8s\.io\/lws \(v[0-9.]*\).*$/\1/p' "$lws_module/go.mod" | head -n 1; }
# The Kubernetes binaries built in one go build (one compilation of what they share),
# the node's among them, and the fake GPUs' device plugin (test/cluster/fakegpu-plugin).
k8s_commands=(kube-apiserver kube-controller-manager kubectl kubelet kube-scheduler kube-proxy)

# The release built: the version of k8s.io/kubernetes that go.mod requires.
k8s_version() { sed -n 's/^[[:space:]]*k8s\.io\/kubernetes \(v[0-9.]*\)\([[:space:]].*\)\{0,1\}$/\1/p' "$module/go.mod" | head -n 1; }

log() { echo "cluster: $*" >&2; }

# A stamp is written as a new file: .cache/cluster/bin may be a hard-linked copy of
# another checkout's (cp -al), whose stamp must not change with ours.
write_stamp() { rm -f "$1" && echo "$2" >"$1"; }

build() {
  command -v go >/dev/null || { log "needs Go 1.26 (https://go.dev/dl) on PATH"; exit 1; }
  go_version=$(go version)
  local version
  version=$(k8s_version)
  [ -n "$version" ] || { log "cannot read the k8s.io/kubernetes version from $module/go.mod"; exit 1; }
  local minor=${version#v1.}
  minor=${minor%%.*}
  # As Kubernetes' own release builds: static, stripped, trimmed paths, and the
  # version stamped in (kubectl and /version read it).
  local tags=selinux,notest
  local ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
  mkdir -p "$bin"
  [ "${VRAM_PREFLIGHT_NODE:-on}" = off ] || node_build
  # The binaries are kept while go.mod, go.sum, Go, the build's flags, the list of
  # commands and the device plugin's source are the same.
  local want stamp="$bin/.stamp" command have=1
  want=$(cat "$module/go.mod" "$module/go.sum" "$lws_module/go.mod" "$lws_module/go.sum" "$module"/fakegpu-plugin/*.go <(echo "$go_version") <(echo "$tags $ldflags kuberay $kuberay_version ${k8s_commands[*]}") | sha256sum | cut -c1-16)
  for command in "${k8s_commands[@]}" etcd ray-operator lws-controller fakegpu-plugin; do
    [ -x "$bin/$command" ] || have=0
  done
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ "$have" = 1 ]; then
    return 0
  fi
  local started=$SECONDS
  log "building ${k8s_commands[*]} $version, etcd, KubeRay's operator $kuberay_version, LeaderWorkerSet's controller $(lws_version) and the fake GPUs' device plugin from Go modules (the first build took 15.5 min on 2 cores with empty Go caches, and the node's about 5 more; later ones reuse them)"
  (cd "$module" && CGO_ENABLED=0 go build -trimpath -tags "$tags" -ldflags "$ldflags" -o "$bin/" \
    "${k8s_commands[@]/#/k8s.io/kubernetes/cmd/}" ./fakegpu-plugin)
  # etcd's module root is its main package: -o names the binary (else "v3").
  (cd "$module" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin/etcd" go.etcd.io/etcd/server/v3)
  (cd "$module" && GOFLAGS='' GOBIN="$bin" CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "github.com/ray-project/kuberay/ray-operator@$kuberay_version")
  (cd "$lws_module" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin/lws-controller" sigs.k8s.io/lws/cmd)
  write_stamp "$stamp" "$want"
  log "built in $((SECONDS - started)) s: $(du -sh "$bin" | cut -f1) of binaries"
}

# Ports free on this machine now, one a line: all in one node process (each start of
# node costs a fraction of a second), for every listener of up.
free_ports() { # <count>
  node -e 'const net=require("net");const n=+process.argv[1];const ss=[];let k=0;for(let i=0;i<n;i++){const s=net.createServer();ss.push(s);s.listen(0,"127.0.0.1",()=>{if(++k===n){process.stdout.write(ss.map((x)=>x.address().port).join("\n")+"\n");ss.forEach((x)=>x.close())}})}' "$1"
}

# state file: one NAME=value per line, written by up, read by env and down.
read_state() {
  [ -f "$state" ] || return 1
  # shellcheck disable=SC1090
  . "$state"
}

alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }
# Whether <pid> is a process this checkout started: alive and running a binary of its $bin.
# A state file copied with .cache from another checkout (a worktree made with cp -a) names
# that checkout's processes and its node: they are not ours to keep or to end.
ours() { alive "$1" && case "$(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null)" in "$bin"/*) true ;; *) false ;; esac; }

# Whether this machine's addresses or routes use <prefix>.0/24. (Read whole first: under
# pipefail, grep -q ending the pipe early would make ip's SIGPIPE a "no".)
net_in_use() { # <a.b.c>
  local text
  text=$({ ip -o addr; ip route; } 2>/dev/null)
  grep -Eq "(^|[ /])${1//./\\.}\\." <<<"$text"
}

etcd_healthy() { curl -fsS --max-time 1 -o /dev/null "http://127.0.0.1:$1/health" 2>/dev/null; }

ready() { # <dir> <host> <port>
  curl -fsS --max-time 2 --cacert "$1/pki/ca.crt" --cert "$1/pki/admin.crt" --key "$1/pki/admin.key" \
    "https://$2:$3/readyz" >/dev/null 2>&1
}

# Waits for <what> with <check command…>, up to <seconds>; on failure shows the log.
wait_for() { # <seconds> <log> <what> <command…>
  local seconds=$1 logfile=$2 what=$3 i
  shift 3
  for ((i = 0; i < seconds * 4; i++)); do
    "$@" && return 0
    sleep 0.25
  done
  log "$what did not come up in $seconds s; the end of $logfile:"
  tail -n 30 "$logfile" >&2 || true
  return 1
}

pki() { # <dir>
  local p=$1/pki
  mkdir -p "$p"
  local ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
  openssl req -x509 "${ec[@]}" -days 7 -subj /CN=vram-preflight-test-cluster-ca -keyout "$p/ca.key" -out "$p/ca.crt" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
  # Each certificate is made beside the others (a serial of its own), then all are waited for.
  local serial=1000 jobs=()
  sign() { # <name> <subject> <extensions>
    serial=$((serial + 1))
    {
      printf '%s\n' "$3" >"$p/$1.ext"
      openssl req -new "${ec[@]}" -subj "$2" -keyout "$p/$1.key" -out "$p/$1.csr" 2>/dev/null
      openssl x509 -req -in "$p/$1.csr" -CA "$p/ca.crt" -CAkey "$p/ca.key" -set_serial "$serial" -days 7 \
        -extfile "$p/$1.ext" -out "$p/$1.crt" 2>/dev/null
    } &
    jobs+=($!)
  }
  sign apiserver /CN=kube-apiserver "subjectAltName=IP:127.0.0.1,IP:$service_net.1,IP:$node_ip,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
extendedKeyUsage=serverAuth"
  # system:masters: the admin bypasses RBAC (tests make their own, narrower, identities).
  sign admin "/O=system:masters/CN=vram-preflight-test-admin" "extendedKeyUsage=clientAuth"
  sign controller-manager "/CN=system:kube-controller-manager" "extendedKeyUsage=clientAuth"
  [ "$NODE" != 1 ] || node_pki
  openssl genrsa -out "$p/sa.key" 2048 2>/dev/null
  openssl rsa -in "$p/sa.key" -pubout -out "$p/sa.pub" 2>/dev/null
  local job
  for job in "${jobs[@]}"; do wait "$job" || { log "openssl could not make the cluster's certificates in $p"; exit 1; }; done
}

kubeconfig() { # <file> <dir> <port> <user cert name>
  local p=$2/pki
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: vram-preflight-test
  cluster:
    server: https://$api_host:$3
    certificate-authority-data: $(base64 -w0 "$p/ca.crt")
users:
- name: $4
  user:
    client-certificate-data: $(base64 -w0 "$p/$4.crt")
    client-key-data: $(base64 -w0 "$p/$4.key")
contexts:
- name: vram-preflight-test
  context: {cluster: vram-preflight-test, user: $4}
current-context: vram-preflight-test
EOF
}

start() { # <logfile> <command…>: a new session, so that `down` can end the whole group
  local logfile=$1
  shift
  setsid "$@" >"$logfile" 2>&1 </dev/null &
  echo $!
}

up() {
  # Up, and all of it (an interrupted up left no UP_COMPLETE): kept.
  if read_state && [ "${UP_COMPLETE:-}" = 1 ] && ours "${APISERVER_PID:-}" && ready "$DIR" "$APISERVER_HOST" "$APISERVER_PORT"; then
    log "already up (kube-apiserver on https://$APISERVER_HOST:$APISERVER_PORT; $(if [ "${NODE:-}" = 1 ]; then echo "node $node_name"; else echo "no node: ${NODE_ERROR:-}"; fi))"
    return 0
  fi
  [ -f "$state" ] && down
  build
  command -v openssl >/dev/null || { log "needs openssl"; exit 1; }
  if command -v ip >/dev/null && net_in_use "$service_net"; then
    log "this machine's network already uses $service_net.0/24, the range the test cluster gives Services"
    exit 1
  fi
  local dir etcd_port peer_port api_port kcm_port ports started=$SECONDS
  dir=$(mktemp -d "${TMPDIR:-/tmp}/vram-preflight-cluster.XXXXXX")
  mapfile -t ports < <(free_ports 10)
  etcd_port=${ports[0]} peer_port=${ports[1]} api_port=${ports[2]} kcm_port=${ports[3]}
  ports=("${ports[@]:4}")
  mkdir -p "$cache"
  {
    echo "DIR=$dir"
    echo "ETCD_PORT=$etcd_port"
    echo "APISERVER_PORT=$api_port"
  } >"$state"

  # The node first takes the machine's lock and its address, which the API server binds.
  NODE=0 NODE_ERROR='' api_host=127.0.0.1
  if node_prepare; then
    NODE=1 api_host=$node_ip
  else
    log "the control plane runs without a node: $NODE_ERROR"
  fi
  {
    echo "NODE=$NODE"
    echo "NODE_ERROR=$(printf '%q' "$NODE_ERROR")"
    echo "APISERVER_HOST=$api_host"
  } >>"$state"
  pki "$dir"
  # containerd and the images meanwhile: they need nothing of the API server.
  local runtime_job=''
  if [ "$NODE" = 1 ]; then
    kubelet_port=${ports[0]} kubelet_healthz_port=${ports[1]}
    ports=("${ports[@]:2}")
    node_config "$dir" cluster
    node_start_runtime "$dir" &
    runtime_job=$!
  fi

  local etcd_pid
  etcd_pid=$(start "$dir/etcd.log" "$bin/etcd" --name test --data-dir "$dir/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-cluster "test=http://127.0.0.1:$peer_port" --listen-metrics-urls "" \
    --unsafe-no-fsync --quota-backend-bytes 4294967296)
  echo "ETCD_PID=$etcd_pid" >>"$state"
  wait_for 30 "$dir/etcd.log" etcd etcd_healthy "$etcd_port"

  # Services get addresses of RFC 5737's TEST-NET-2 (never routed): the node's
  # kube-proxy leads them to their pods (without a node, nothing does).
  # Every request body logged at Metadata level: the fail-open tests read the
  # failed-open.mutation.webhook.admission.k8s.io annotations from it. Their exec and
  # log subresources too (a rule's `pods` is the resource alone): verify's tests read
  # from it which requests it made, and that without --yes it opened no exec.
  printf 'apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n  resources: [{group: "", resources: [pods, pods/exec, pods/log]}]\n- level: None\n' >"$dir/audit-policy.yaml"
  local p=$dir/pki api_pid node_flags=(--endpoint-reconciler-type none)
  # With the node: the kubernetes Service leads to the API server on the node's
  # address, and the API server reaches the kubelet there (exec, logs, port-forward).
  [ "$NODE" != 1 ] || node_flags=(--endpoint-reconciler-type lease --kubelet-preferred-address-types InternalIP
    --kubelet-certificate-authority "$p/ca.crt" --kubelet-client-certificate "$p/apiserver-kubelet-client.crt" --kubelet-client-key "$p/apiserver-kubelet-client.key")
  api_pid=$(start "$dir/kube-apiserver.log" "$bin/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address "$api_host" --advertise-address "$api_host" --secure-port "$api_port" \
    "${node_flags[@]}" \
    --tls-cert-file "$p/apiserver.crt" --tls-private-key-file "$p/apiserver.key" \
    --client-ca-file "$p/ca.crt" \
    --service-account-issuer "https://$api_host:$api_port" \
    --service-account-key-file "$p/sa.pub" --service-account-signing-key-file "$p/sa.key" \
    --service-cluster-ip-range "$service_net.0/24" \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
    --allow-privileged=true \
    --profiling=false \
    --audit-policy-file "$dir/audit-policy.yaml" --audit-log-path "$dir/audit.log" --audit-log-format json \
    --audit-log-mode blocking)
  echo "APISERVER_PID=$api_pid" >>"$state"
  if [ "$NODE" = 1 ]; then
    wait "$runtime_job" || { log "containerd did not start, or the images did not import; the end of $dir/containerd.log:"; tail -n 30 "$dir/containerd.log" >&2 || true; exit 1; }
    node_start "$dir" "$api_port"
  fi
  wait_for 90 "$dir/kube-apiserver.log" kube-apiserver ready "$dir" "$api_host" "$api_port"

  kubeconfig "$cache/kubeconfig" "$dir" "$api_port" admin
  kubeconfig "$dir/controller-manager.kubeconfig" "$dir" "$api_port" controller-manager
  local kcm_pid
  # The controllers a platform runs: deployments -> replicasets -> pods, service
  # accounts for every namespace, DRA resource claims from templates, garbage collection.
  kcm_pid=$(start "$dir/kube-controller-manager.log" "$bin/kube-controller-manager" \
    --kubeconfig "$dir/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$dir/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$dir/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$kcm_port" \
    --leader-elect=false --controllers '*' --use-service-account-credentials \
    --service-account-private-key-file "$p/sa.key" --root-ca-file "$p/ca.crt")
  echo "KCM_PID=$kcm_pid" >>"$state"
  [ "$NODE" != 1 ] || node_finish "$dir"
  # Ready when the service account controller has made the default namespace's account.
  wait_for 60 "$dir/kube-controller-manager.log" kube-controller-manager \
    "$bin/kubectl" --kubeconfig "$cache/kubeconfig" -n default get serviceaccount default -o name >/dev/null 2>&1
  echo "UP_COMPLETE=1" >>"$state"
  log "up in $((SECONDS - started)) s: kube-apiserver https://$api_host:$api_port, $(if [ "$NODE" = 1 ]; then echo "node $node_name ($gpu_count nvidia.com/gpu)"; else echo "no node"; fi), data in $dir"
}

down() {
  if ! read_state; then
    log "not up"
    return 0
  fi
  # Which of the state's processes are ours, decided before any is stopped (one that is
  # exiting has no command line to tell by).
  local pid mine=() foreign=0
  if alive "${APISERVER_PID:-}" && ! ours "${APISERVER_PID:-}"; then foreign=1; fi
  for pid in "${KCM_PID:-}" "${APISERVER_PID:-}" "${ETCD_PID:-}" "${SCHEDULER_PID:-}"; do
    if ours "$pid"; then mine+=("$pid"); fi
  done
  node_down
  # Stopped in reverse order; each got its own session (setsid), so the whole group goes.
  for pid in "${mine[@]}"; do
    [ "$pid" = "${SCHEDULER_PID:-}" ] || kill -TERM -- "-$pid" 2>/dev/null || true
  done
  for pid in "${mine[@]}"; do
    for _ in $(seq 40); do alive "$pid" || break; sleep 0.25; done
    if alive "$pid"; then kill -KILL -- "-$pid" 2>/dev/null || true; fi
  done
  # The data directory too, unless a live API server that is not ours uses it (a state
  # copied from another checkout names that checkout's directory).
  if [ "$foreign" = 1 ]; then
    log "the state names another checkout's running cluster ($DIR): left alone; this checkout's state is forgotten"
  else
    case "${DIR:-}" in
    */vram-preflight-cluster.*) rm -rf "$DIR" ;;
    esac
  fi
  rm -f "$state" "$cache/kubeconfig"
  log "down"
}

env_() {
  read_state || { log "not up: run scripts/cluster.sh up"; exit 1; }
  echo "KUBECONFIG=$cache/kubeconfig"
  echo "VRAM_PREFLIGHT_CLUSTER_DIR=$DIR"
  echo "VRAM_PREFLIGHT_CLUSTER_BIN=$bin"
  echo "VRAM_PREFLIGHT_CLUSTER_API=https://${APISERVER_HOST:-127.0.0.1}:$APISERVER_PORT"
  echo "VRAM_PREFLIGHT_KUBERAY_VERSION=$kuberay_version"
  echo "VRAM_PREFLIGHT_LWS_VERSION=$(lws_version)"
  node_env
}

# shellcheck source=scripts/cluster-node.sh
. "$root/scripts/cluster-node.sh"

case "${1:-}" in
build) build ;;
up) up ;;
down) down ;;
env) env_ ;;
node-config)
  # node-config <dir> [standalone]: the node's kubelet, containerd and CNI configuration
  # (for a kubelet of its own; certificates and the binaries are the caller's).
  [ -n "${2:-}" ] || { echo "usage: scripts/cluster.sh node-config <dir> [cluster|standalone]" >&2; exit 2; }
  kubelet_port=${KUBELET_PORT:-10250} kubelet_healthz_port=${KUBELET_HEALTHZ_PORT:-10248}
  node_config "$2" "${3:-standalone}"
  ;;
*)
  echo "usage: scripts/cluster.sh build|up|down|env|node-config" >&2
  exit 2
  ;;
esac
