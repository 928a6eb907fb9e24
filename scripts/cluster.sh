#!/usr/bin/env bash
# A real Kubernetes control plane for the tests, on loopback: etcd,
# kube-apiserver and kube-controller-manager built from their Go modules
# (test/cluster/go.mod), kubectl from the same release, and KubeRay's operator
# (built here too; the tests that need it start it).
#
#   scripts/cluster.sh build   build the binaries into .cache/cluster/bin (once: a second
#                              run with the same go.sum and Go finds them and builds nothing)
#   scripts/cluster.sh up      build, then start the control plane (idempotent: a running one
#                              is kept); writes .cache/cluster/kubeconfig (admin, system:masters)
#   scripts/cluster.sh env     print KUBECONFIG=… and the other paths tests read, as shell
#                              assignments: eval "$(scripts/cluster.sh env)"
#   scripts/cluster.sh down    stop exactly the processes `up` started; remove their data
#
# Everything listens on 127.0.0.1 on ports picked free at start; data, keys and
# logs live in a temporary directory named in .cache/cluster/state. No kubelet:
# pods are admitted and stored, never run. Needs Go (GOTOOLCHAIN=local), openssl
# and node (to pick free ports). Only the tests use it; the product is TypeScript.
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

# The release built: the version of k8s.io/kubernetes that go.mod requires.
k8s_version() { sed -n 's/^[[:space:]]*k8s\.io\/kubernetes \(v[0-9.]*\)\([[:space:]].*\)\{0,1\}$/\1/p' "$module/go.mod" | head -n 1; }

log() { echo "cluster: $*" >&2; }

build() {
  command -v go >/dev/null || { log "needs Go 1.26 (https://go.dev/dl) on PATH"; exit 1; }
  local version
  version=$(k8s_version)
  [ -n "$version" ] || { log "cannot read the k8s.io/kubernetes version from $module/go.mod"; exit 1; }
  local minor=${version#v1.}
  minor=${minor%%.*}
  # As Kubernetes' own release builds: static, stripped, trimmed paths, and the
  # version stamped in (kubectl and /version read it).
  local tags=selinux,notest
  local ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
  # The binaries are kept while go.mod, go.sum, Go and the build's flags are the same.
  local want stamp="$bin/.stamp"
  want=$(cat "$module/go.mod" "$module/go.sum" "$lws_module/go.mod" "$lws_module/go.sum" <(go version) <(echo "$tags $ldflags kuberay $kuberay_version") | sha256sum | cut -c1-16)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] &&
    [ -x "$bin/etcd" ] && [ -x "$bin/kube-apiserver" ] && [ -x "$bin/kube-controller-manager" ] && [ -x "$bin/kubectl" ] && [ -x "$bin/ray-operator" ] && [ -x "$bin/lws-controller" ]; then
    return 0
  fi
  local started=$SECONDS
  mkdir -p "$bin"
  log "building kube-apiserver, kube-controller-manager, kubectl $version, etcd, KubeRay's operator $kuberay_version and LeaderWorkerSet's controller $(lws_version) from Go modules (the first build took 15.5 min on 2 cores with empty Go caches; later ones reuse them)"
  (cd "$module" && CGO_ENABLED=0 go build -trimpath -tags "$tags" -ldflags "$ldflags" -o "$bin/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl)
  # etcd's module root is its main package: -o names the binary (else "v3").
  (cd "$module" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin/etcd" go.etcd.io/etcd/server/v3)
  (cd "$module" && GOFLAGS='' GOBIN="$bin" CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "github.com/ray-project/kuberay/ray-operator@$kuberay_version")
  (cd "$lws_module" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin/lws-controller" sigs.k8s.io/lws/cmd)
  echo "$want" >"$stamp"
  log "built in $((SECONDS - started)) s: $(du -sh "$bin" | cut -f1) of binaries"
}

free_port() {
  node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{process.stdout.write(String(s.address().port));s.close()})'
}

# state file: one NAME=value per line, written by up, read by env and down.
read_state() {
  [ -f "$state" ] || return 1
  # shellcheck disable=SC1090
  . "$state"
}

alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }

etcd_healthy() { curl -fsS --max-time 1 -o /dev/null "http://127.0.0.1:$1/health" 2>/dev/null; }

ready() { # <dir> <port>
  curl -fsS --max-time 2 --cacert "$1/pki/ca.crt" --cert "$1/pki/admin.crt" --key "$1/pki/admin.key" \
    "https://127.0.0.1:$2/readyz" >/dev/null 2>&1
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
  sign() { # <name> <subject> <extensions>
    printf '%s\n' "$3" >"$p/$1.ext"
    openssl req -new "${ec[@]}" -subj "$2" -keyout "$p/$1.key" -out "$p/$1.csr" 2>/dev/null
    openssl x509 -req -in "$p/$1.csr" -CA "$p/ca.crt" -CAkey "$p/ca.key" -CAcreateserial -days 7 \
      -extfile "$p/$1.ext" -out "$p/$1.crt" 2>/dev/null
  }
  sign apiserver /CN=kube-apiserver "subjectAltName=IP:127.0.0.1,IP:$service_net.1,DNS:localhost,DNS:kubernetes.default.svc
extendedKeyUsage=serverAuth"
  # system:masters: the admin bypasses RBAC (tests make their own, narrower, identities).
  sign admin "/O=system:masters/CN=vram-preflight-test-admin" "extendedKeyUsage=clientAuth"
  sign controller-manager "/CN=system:kube-controller-manager" "extendedKeyUsage=clientAuth"
  openssl genrsa -out "$p/sa.key" 2048 2>/dev/null
  openssl rsa -in "$p/sa.key" -pubout -out "$p/sa.pub" 2>/dev/null
}

kubeconfig() { # <file> <dir> <port> <user cert name>
  local p=$2/pki
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: vram-preflight-test
  cluster:
    server: https://127.0.0.1:$3
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
  if read_state && alive "${APISERVER_PID:-}" && ready "$DIR" "$APISERVER_PORT"; then
    log "already up (kube-apiserver on 127.0.0.1:$APISERVER_PORT)"
    return 0
  fi
  [ -f "$state" ] && down
  build
  command -v openssl >/dev/null || { log "needs openssl"; exit 1; }
  if command -v ip >/dev/null && { ip -o addr; ip route; } | grep -q "$service_net\."; then
    log "this machine's network already uses $service_net.0/24, the range the test cluster gives Services"
    exit 1
  fi
  local dir etcd_port peer_port api_port started=$SECONDS
  dir=$(mktemp -d "${TMPDIR:-/tmp}/vram-preflight-cluster.XXXXXX")
  pki "$dir"
  etcd_port=$(free_port)
  peer_port=$(free_port)
  api_port=$(free_port)
  {
    echo "DIR=$dir"
    echo "ETCD_PORT=$etcd_port"
    echo "APISERVER_PORT=$api_port"
  } >"$state"

  local etcd_pid
  etcd_pid=$(start "$dir/etcd.log" "$bin/etcd" --name test --data-dir "$dir/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-cluster "test=http://127.0.0.1:$peer_port" --listen-metrics-urls "" \
    --unsafe-no-fsync --quota-backend-bytes 4294967296)
  echo "ETCD_PID=$etcd_pid" >>"$state"
  wait_for 30 "$dir/etcd.log" etcd etcd_healthy "$etcd_port"

  # Services get addresses of RFC 5737's TEST-NET-2 (never routed): the tests'
  # own kube-proxy (test/apiserver/kube-proxy.ts) puts them on a dummy interface
  # of this machine and forwards them to the pods' endpoints.
  # Every request for pods logged at Metadata level: the fail-open tests read the
  # failed-open.mutation.webhook.admission.k8s.io annotations from it. Their exec and
  # log subresources too (a rule's `pods` is the resource alone): verify's tests read
  # from it which requests it made, and that without --yes it opened no exec.
  printf 'apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n  resources: [{group: "", resources: [pods, pods/exec, pods/log]}]\n- level: None\n' >"$dir/audit-policy.yaml"
  local p=$dir/pki api_pid
  api_pid=$(start "$dir/kube-apiserver.log" "$bin/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port" \
    --endpoint-reconciler-type none \
    --tls-cert-file "$p/apiserver.crt" --tls-private-key-file "$p/apiserver.key" \
    --client-ca-file "$p/ca.crt" \
    --service-account-issuer "https://127.0.0.1:$api_port" \
    --service-account-key-file "$p/sa.pub" --service-account-signing-key-file "$p/sa.key" \
    --service-cluster-ip-range "$service_net.0/24" \
    --authorization-mode RBAC \
    --allow-privileged=true \
    --profiling=false \
    --audit-policy-file "$dir/audit-policy.yaml" --audit-log-path "$dir/audit.log" --audit-log-format json \
    --audit-log-mode blocking)
  echo "APISERVER_PID=$api_pid" >>"$state"
  wait_for 90 "$dir/kube-apiserver.log" kube-apiserver ready "$dir" "$api_port"

  mkdir -p "$cache"
  kubeconfig "$cache/kubeconfig" "$dir" "$api_port" admin
  kubeconfig "$dir/controller-manager.kubeconfig" "$dir" "$api_port" controller-manager
  local kcm_pid
  # The controllers a platform runs: deployments -> replicasets -> pods, service
  # accounts for every namespace, DRA resource claims from templates, garbage collection.
  kcm_pid=$(start "$dir/kube-controller-manager.log" "$bin/kube-controller-manager" \
    --kubeconfig "$dir/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$dir/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$dir/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$(free_port)" \
    --leader-elect=false --controllers '*' --use-service-account-credentials \
    --service-account-private-key-file "$p/sa.key" --root-ca-file "$p/ca.crt")
  echo "KCM_PID=$kcm_pid" >>"$state"
  # Ready when the service account controller has made the default namespace's account.
  wait_for 60 "$dir/kube-controller-manager.log" kube-controller-manager \
    "$bin/kubectl" --kubeconfig "$cache/kubeconfig" -n default get serviceaccount default -o name >/dev/null 2>&1
  log "up in $((SECONDS - started)) s: kube-apiserver https://127.0.0.1:$api_port, data in $dir"
}

down() {
  if ! read_state; then
    log "not up"
    return 0
  fi
  local pid
  # Stopped in reverse order; each got its own session (setsid), so the whole group goes.
  for pid in "${KCM_PID:-}" "${APISERVER_PID:-}" "${ETCD_PID:-}"; do
    if alive "$pid"; then kill -TERM -- "-$pid" 2>/dev/null || true; fi
  done
  for pid in "${KCM_PID:-}" "${APISERVER_PID:-}" "${ETCD_PID:-}"; do
    for _ in $(seq 40); do alive "$pid" || break; sleep 0.25; done
    if alive "$pid"; then kill -KILL -- "-$pid" 2>/dev/null || true; fi
  done
  case "${DIR:-}" in
  */vram-preflight-cluster.*) rm -rf "$DIR" ;;
  esac
  rm -f "$state" "$cache/kubeconfig"
  log "down"
}

env_() {
  read_state || { log "not up: run scripts/cluster.sh up"; exit 1; }
  echo "KUBECONFIG=$cache/kubeconfig"
  echo "VRAM_PREFLIGHT_CLUSTER_DIR=$DIR"
  echo "VRAM_PREFLIGHT_CLUSTER_BIN=$bin"
  echo "VRAM_PREFLIGHT_CLUSTER_API=https://127.0.0.1:$APISERVER_PORT"
  echo "VRAM_PREFLIGHT_KUBERAY_VERSION=$kuberay_version"
  echo "VRAM_PREFLIGHT_LWS_VERSION=$(lws_version)"
}

case "${1:-}" in
build) build ;;
up) up ;;
down) down ;;
env) env_ ;;
*)
  echo "usage: scripts/cluster.sh build|up|down|env" >&2
  exit 2
  ;;
esac
