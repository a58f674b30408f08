#!/usr/bin/env bash
# Brings up a local cluster of the components that exist so far, in the foreground, like
# upstream's hack/local-up-cluster.sh: builds what it needs, keeps all state under
# $LOCAL_UP_DIR, prints how to reach each component, and stops everything it started on
# Ctrl-C or SIGTERM.
#
# Components today: etcd, kube-apiserver, kube-scheduler and kube-controller-manager. (The kubelet
# is added here when it lands; it will use $LOCAL_UP_DIR/manifests.) kubectl reaches
# the cluster with KUBECONFIG=$LOCAL_UP_DIR/admin.kubeconfig (a static admin token; the
# serving certificate is self-signed and its CA is in $LOCAL_UP_DIR/certs/apiserver.crt).
#
# Environment:
#   LOCAL_UP_DIR      state directory (default /tmp/local-up-cluster)
#   ETCD_HOST         address etcd listens on (default 127.0.0.1)
#   ETCD_PORT         etcd client port (default 2379); ETCD_PEER_PORT (2380)
#   ETCD_METRICS_PORT etcd metrics port (default 2381)
#   API_HOST          address kube-apiserver listens on (default 127.0.0.1)
#   API_SECURE_PORT   kube-apiserver port (default 6443)
#   SCHEDULER_HOST    address kube-scheduler serves on (default 127.0.0.1); SCHEDULER_SECURE_PORT (10259)
#   CONTROLLER_MANAGER_HOST  address kube-controller-manager serves on (default 127.0.0.1);
#                     CONTROLLER_MANAGER_SECURE_PORT (10257)
#   CLUSTER_CIDR      pod network, one /24 per node from it (default 10.88.0.0/16)
#   SERVICE_CLUSTER_IP_RANGE (default 10.0.0.0/24)
#   CARGO_TARGET_DIR  build directory (default /var/tmp/k8s-rs-target)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

LOCAL_UP_DIR="${LOCAL_UP_DIR:-/tmp/local-up-cluster}"
ETCD_HOST="${ETCD_HOST:-127.0.0.1}"
ETCD_PORT="${ETCD_PORT:-2379}"
ETCD_PEER_PORT="${ETCD_PEER_PORT:-2380}"
ETCD_METRICS_PORT="${ETCD_METRICS_PORT:-2381}"
API_HOST="${API_HOST:-127.0.0.1}"
API_SECURE_PORT="${API_SECURE_PORT:-6443}"
SCHEDULER_HOST="${SCHEDULER_HOST:-127.0.0.1}"
SCHEDULER_SECURE_PORT="${SCHEDULER_SECURE_PORT:-10259}"
CONTROLLER_MANAGER_HOST="${CONTROLLER_MANAGER_HOST:-127.0.0.1}"
CONTROLLER_MANAGER_SECURE_PORT="${CONTROLLER_MANAGER_SECURE_PORT:-10257}"
CLUSTER_CIDR="${CLUSTER_CIDR:-10.88.0.0/16}"
SERVICE_CLUSTER_IP_RANGE="${SERVICE_CLUSTER_IP_RANGE:-10.0.0.0/24}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/k8s-rs-target}"
BIN="$CARGO_TARGET_DIR/release"

PIDS=()
cleanup() {
  trap - EXIT INT TERM
  echo
  echo "local-up-cluster: stopping ${#PIDS[@]} component(s)"
  # Last started first: clients stop while the API server can still take their last
  # writes (the scheduler hands back its leader Lease), the API server before etcd.
  local i
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
    kill -TERM "${PIDS[i]}" 2>/dev/null || true
    wait "${PIDS[i]}" 2>/dev/null || true
  done
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

hack/install-deps.sh
echo "local-up-cluster: building (first build takes ~20 minutes on 2 cores)"
# The same build as hack/test.sh (whole workspace), so the two share every artifact.
cargo build --release --locked --workspace --bins

mkdir -p "$LOCAL_UP_DIR/logs"

# wait_up NAME URL [CURL_ARGS...]: waits (30 s at most) until URL answers 2xx, failing
# with NAME's log tail if the component (the last one started) exits first.
wait_up() {
  local name=$1 url=$2
  shift 2
  local pid=${PIDS[-1]}
  for _ in $(seq 1 300); do
    if curl -fsS "$@" "$url" >/dev/null 2>&1; then
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "local-up-cluster: $name exited; see $LOCAL_UP_DIR/logs/$name.log" >&2
      tail -20 "$LOCAL_UP_DIR/logs/$name.log" >&2
      exit 1
    fi
    sleep 0.1
  done
  curl -fsS "$@" "$url" >/dev/null
}

ETCD_CLIENT_URL="http://${ETCD_HOST}:${ETCD_PORT}"
ETCD_PEER_URL="http://${ETCD_HOST}:${ETCD_PEER_PORT}"
"$BIN/etcd" \
  --name local-up \
  --data-dir "$LOCAL_UP_DIR/etcd" \
  --listen-client-urls "$ETCD_CLIENT_URL" \
  --advertise-client-urls "$ETCD_CLIENT_URL" \
  --listen-peer-urls "$ETCD_PEER_URL" \
  --initial-advertise-peer-urls "$ETCD_PEER_URL" \
  --initial-cluster "local-up=$ETCD_PEER_URL" \
  --listen-metrics-urls "http://${ETCD_HOST}:${ETCD_METRICS_PORT}" \
  >"$LOCAL_UP_DIR/logs/etcd.log" 2>&1 &
PIDS+=($!)
wait_up etcd "$ETCD_CLIENT_URL/health"

# kube-apiserver with Node,RBAC authorization as upstream's script runs it. Static tokens
# name the admin (system:masters), the scheduler and the controller manager; service
# account tokens are signed with an ECDSA key made here once.
mkdir -p "$LOCAL_UP_DIR/certs"
new_token() { head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
if [[ ! -s "$LOCAL_UP_DIR/tokens.csv" ]] || ! grep -q system:kube-scheduler "$LOCAL_UP_DIR/tokens.csv"; then
  {
    echo "$(new_token),admin,admin,system:masters"
    echo "$(new_token),system:kube-scheduler,system:kube-scheduler"
    echo "$(new_token),system:kube-controller-manager,system:kube-controller-manager"
  } >"$LOCAL_UP_DIR/tokens.csv"
fi
token_of() { grep ",$1," "$LOCAL_UP_DIR/tokens.csv" | cut -d, -f1; }
SA_KEY="$LOCAL_UP_DIR/certs/service-account.key"
if [[ ! -s "$SA_KEY" ]]; then
  openssl ecparam -name prime256v1 -genkey -noout -out "$SA_KEY" 2>/dev/null
  chmod 600 "$SA_KEY"
fi
"$BIN/kube-apiserver" \
  --etcd-servers="$ETCD_CLIENT_URL" \
  --bind-address="$API_HOST" \
  --secure-port="$API_SECURE_PORT" \
  --cert-dir="$LOCAL_UP_DIR/certs" \
  --token-auth-file="$LOCAL_UP_DIR/tokens.csv" \
  --authorization-mode=Node,RBAC \
  --enable-admission-plugins=NodeRestriction \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$SA_KEY" \
  --service-account-signing-key-file="$SA_KEY" \
  --service-cluster-ip-range="$SERVICE_CLUSTER_IP_RANGE" \
  >"$LOCAL_UP_DIR/logs/kube-apiserver.log" 2>&1 &
PIDS+=($!)
API_URL="https://${API_HOST}:${API_SECURE_PORT}"
wait_up kube-apiserver "$API_URL/readyz" --cacert "$LOCAL_UP_DIR/certs/apiserver.crt"
# kubeconfig NAME USER: a kubeconfig for one of the static-token users.
kubeconfig() {
  cat >"$LOCAL_UP_DIR/$1.kubeconfig" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: local-up-cluster
  cluster:
    server: $API_URL
    certificate-authority: $LOCAL_UP_DIR/certs/apiserver.crt
users:
- name: $2
  user:
    token: $(token_of "$2")
contexts:
- name: local-up-cluster
  context:
    cluster: local-up-cluster
    user: $2
current-context: local-up-cluster
KUBECONFIG
}
kubeconfig admin admin
kubeconfig scheduler system:kube-scheduler
kubeconfig controller system:kube-controller-manager

# kube-scheduler, as system:kube-scheduler (the bootstrap RBAC policy's scheduler roles).
"$BIN/kube-scheduler" \
  --kubeconfig="$LOCAL_UP_DIR/scheduler.kubeconfig" \
  --bind-address="$SCHEDULER_HOST" \
  --secure-port="$SCHEDULER_SECURE_PORT" \
  --cert-dir="$LOCAL_UP_DIR/certs" \
  >"$LOCAL_UP_DIR/logs/kube-scheduler.log" 2>&1 &
PIDS+=($!)
# Its serving certificate is self-signed in --cert-dir, with no CA of its own to trust.
wait_up kube-scheduler "https://${SCHEDULER_HOST}:${SCHEDULER_SECURE_PORT}/healthz" --insecure

# kube-controller-manager, as system:kube-controller-manager, each controller with its own
# kube-system service account's token (--use-service-account-credentials, as upstream's
# script); it publishes the API server's CA to every namespace and allocates node pod CIDRs
# from $CLUSTER_CIDR.
"$BIN/kube-controller-manager" \
  --kubeconfig="$LOCAL_UP_DIR/controller.kubeconfig" \
  --use-service-account-credentials=true \
  --bind-address="$CONTROLLER_MANAGER_HOST" \
  --secure-port="$CONTROLLER_MANAGER_SECURE_PORT" \
  --cert-dir="$LOCAL_UP_DIR/certs" \
  --root-ca-file="$LOCAL_UP_DIR/certs/apiserver.crt" \
  --allocate-node-cidrs=true \
  --cluster-cidr="$CLUSTER_CIDR" \
  --service-cluster-ip-range="$SERVICE_CLUSTER_IP_RANGE" \
  >"$LOCAL_UP_DIR/logs/kube-controller-manager.log" 2>&1 &
PIDS+=($!)
wait_up kube-controller-manager "https://${CONTROLLER_MANAGER_HOST}:${CONTROLLER_MANAGER_SECURE_PORT}/healthz" --insecure

cat <<INFO
Local cluster is running. State: $LOCAL_UP_DIR, logs: $LOCAL_UP_DIR/logs

  etcd            $ETCD_CLIENT_URL (metrics and health: http://${ETCD_HOST}:${ETCD_METRICS_PORT}/metrics)
                  ETCDCTL_API=3 etcdctl --endpoints=$ETCD_CLIENT_URL endpoint status -w table
  kube-apiserver  $API_URL
                  export KUBECONFIG=$LOCAL_UP_DIR/admin.kubeconfig; kubectl get ns
  kube-scheduler  https://${SCHEDULER_HOST}:${SCHEDULER_SECURE_PORT}/metrics (self-signed)
  kube-controller-manager  https://${CONTROLLER_MANAGER_HOST}:${CONTROLLER_MANAGER_SECURE_PORT}/metrics (self-signed)

Press Ctrl-C to stop.
INFO

# Stay in the foreground until a component exits or we are told to stop.
wait -n "${PIDS[@]}"
echo "local-up-cluster: a component exited; see $LOCAL_UP_DIR/logs" >&2
exit 1
