#!/usr/bin/env bash
# Brings up a local cluster of the components that exist so far, in the foreground, like
# upstream's hack/local-up-cluster.sh: builds what it needs, keeps all state under
# $LOCAL_UP_DIR, prints how to reach each component, and stops everything it started on
# Ctrl-C or SIGTERM.
#
# Components: containerd (private config, socket and CNI bridge under $LOCAL_UP_DIR), etcd,
# kube-apiserver, kube-scheduler, kube-controller-manager and a kubelet whose static pod
# directory is $LOCAL_UP_DIR/manifests. Images come from hack/build-images.sh
# (localhost/pause:3.10, localhost/busybox:latest): no registry is reachable. kubectl reaches
# the cluster with KUBECONFIG=$LOCAL_UP_DIR/admin.kubeconfig (a static admin token; the
# serving certificate is self-signed and its CA is in $LOCAL_UP_DIR/certs/apiserver.crt).
#
# Environment:
#   LOCAL_UP_DIR      state directory (default /tmp/local-up-cluster)
#   ETCD_HOST         address etcd listens on (default 127.0.0.1)
#   ETCD_PORT         etcd client port (default 2379); ETCD_PEER_PORT (2380)
#   ETCD_METRICS_PORT etcd metrics port (default 2381)
#   ETCD_MEMBERS      etcd members (default 1); member m > 1 listens on the three ports plus
#                     10000 * (m - 1), and the API server is given every member
#   API_HOST          address kube-apiserver is reached at (default 127.0.0.1). When it is a
#                     loopback address the API server listens on every address (upstream's
#                     default --bind-address 0.0.0.0) and advertises API_ADVERTISE_ADDRESS
#   API_ADVERTISE_ADDRESS  the kubernetes Service's endpoint, which pods reach through
#                     kube-proxy: API_HOST unless that is loopback, else 10.89.255.1, which
#                     this script adds to lo (this kernel has no dummy links)
#   API_SECURE_PORT   kube-apiserver port (default 6443)
#   SCHEDULER_HOST    address kube-scheduler serves on (default 127.0.0.1); SCHEDULER_SECURE_PORT (10259)
#   CONTROLLER_MANAGER_HOST  address kube-controller-manager serves on (default 127.0.0.1);
#                     CONTROLLER_MANAGER_SECURE_PORT (10257)
#   CLUSTER_CIDR      pod network, one /24 per node from it (default 10.88.0.0/16)
#   POD_CIDR          this node's pod network, the first /24 of CLUSTER_CIDR (default 10.88.0.0/24)
#   HOSTNAME_OVERRIDE the node's name (default: the host name, lower case)
#   KUBELET_HOST      address the kubelet serves on (default 127.0.0.1); KUBELET_PORT (10250),
#                     KUBELET_HEALTHZ_PORT (10248)
#   SERVICE_CLUSTER_IP_RANGE (default 10.0.0.0/24)
#   NODES             number of nodes (default 1). This host is the first; each other node is a
#                     network namespace k8srs-node<k> with its own containerd, kubelet and
#                     hostgw, on a switch k8srs-switch ($NODE_NET_PREFIX.0/24, this host .1,
#                     node k at .k). With NODES > 1, API_HOST and KUBELET_HOST default to
#                     this host's address on the switch so the other nodes reach them.
#   NODE_NET_PREFIX   first three octets of the nodes' network (default 10.89.0)
#   KUBE_PROXY_MODE   kube-proxy's mode on every node: nftables (default) or iptables; empty
#                     runs no kube-proxy
#   ENABLE_CLUSTER_DNS  true (default): the DNS addon (cluster/addons/dns: our kube-dns as a
#                     Deployment in kube-system behind the kube-dns Service, image
#                     localhost/kube-dns:local built from the binary); pods resolve
#                     <service>.<namespace>.svc.$DNS_DOMAIN
#   DNS_SERVER_IP     the kube-dns Service's ClusterIP, the kubelets' clusterDNS (default 10.0.0.10)
#   DNS_DOMAIN        the cluster domain (default cluster.local)
#   DNS_REPLICAS      kube-dns servers (default 2, as kubeadm's CoreDNS)
#   CARGO_TARGET_DIR  build directory (default /var/tmp/k8s-rs-target)
#   LOCAL_UP_BIN_DIR  run the binaries in this directory instead of building (e.g. a copy
#                     kept stable while the tree changes, as hack/conformance.sh can use)
#   ETCD_BIN, KUBE_APISERVER_BIN, KUBE_SCHEDULER_BIN, KUBE_CONTROLLER_MANAGER_BIN, KUBELET_BIN,
#   KUBE_PROXY_BIN    run this binary for that component instead of ours, e.g. upstream's
#                     (hack/interop.sh runs mixed clusters this way; the flags given are
#                     upstream's, so either takes them)
#   KUBELET_TLS_BOOTSTRAP  true: every kubelet joins by bootstrap token with TLS bootstrap (as
#                     kubeadm join): the API server gets --enable-bootstrap-token-auth, a
#                     token and kubeadm's RBAC bindings are made, and each kubelet starts with
#                     --bootstrap-kubeconfig and asks for its client certificate by CSR. Needs a
#                     kubelet that does TLS bootstrap (upstream's; ours does not yet) and a
#                     kubernetes.io/kube-apiserver-client-kubelet signer whose CA the API server
#                     trusts: the controller manager with --cluster-signing-cert-file/-key-file
#                     and the API server with --client-ca-file of that CA (the *_EXTRA_ARGS)
#   ETCD_EXTRA_ARGS, KUBE_APISERVER_EXTRA_ARGS, KUBE_SCHEDULER_EXTRA_ARGS,
#   KUBE_CONTROLLER_MANAGER_EXTRA_ARGS, KUBELET_EXTRA_ARGS, KUBE_PROXY_EXTRA_ARGS
#                     more flags for that component (split on white space)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

LOCAL_UP_DIR="${LOCAL_UP_DIR:-/tmp/local-up-cluster}"
ETCD_HOST="${ETCD_HOST:-127.0.0.1}"
ETCD_PORT="${ETCD_PORT:-2379}"
ETCD_PEER_PORT="${ETCD_PEER_PORT:-2380}"
ETCD_METRICS_PORT="${ETCD_METRICS_PORT:-2381}"
ETCD_MEMBERS="${ETCD_MEMBERS:-1}"
[[ "$ETCD_MEMBERS" =~ ^[1-9]$ ]] || { echo "local-up-cluster: ETCD_MEMBERS must be 1..9, got '$ETCD_MEMBERS'" >&2; exit 1; }
NODES="${NODES:-1}"
NODE_NET_PREFIX="${NODE_NET_PREFIX:-10.89.0}"
[[ "$NODES" =~ ^[1-9][0-9]?$ ]] || { echo "local-up-cluster: NODES must be 1..99, got '$NODES'" >&2; exit 1; }
HOST_NODE_IP=127.0.0.1
((NODES > 1)) && HOST_NODE_IP="$NODE_NET_PREFIX.1"
API_HOST="${API_HOST:-$HOST_NODE_IP}"
API_SECURE_PORT="${API_SECURE_PORT:-6443}"
API_BIND_ADDRESS="$API_HOST"
API_LO_ADDRESS=""
if [[ "$API_HOST" == 127.* ]]; then
  API_BIND_ADDRESS=0.0.0.0
  API_ADVERTISE_ADDRESS="${API_ADVERTISE_ADDRESS:-10.89.255.1}"
  API_LO_ADDRESS="$API_ADVERTISE_ADDRESS"
fi
API_ADVERTISE_ADDRESS="${API_ADVERTISE_ADDRESS:-$API_HOST}"
SCHEDULER_HOST="${SCHEDULER_HOST:-127.0.0.1}"
SCHEDULER_SECURE_PORT="${SCHEDULER_SECURE_PORT:-10259}"
CONTROLLER_MANAGER_HOST="${CONTROLLER_MANAGER_HOST:-127.0.0.1}"
CONTROLLER_MANAGER_SECURE_PORT="${CONTROLLER_MANAGER_SECURE_PORT:-10257}"
CLUSTER_CIDR="${CLUSTER_CIDR:-10.88.0.0/16}"
POD_CIDR="${POD_CIDR:-10.88.0.0/24}"
HOSTNAME_OVERRIDE="${HOSTNAME_OVERRIDE:-$(hostname | tr '[:upper:]' '[:lower:]')}"
KUBELET_HOST="${KUBELET_HOST:-$HOST_NODE_IP}"
KUBELET_PORT="${KUBELET_PORT:-10250}"
KUBELET_HEALTHZ_PORT="${KUBELET_HEALTHZ_PORT:-10248}"
SERVICE_CLUSTER_IP_RANGE="${SERVICE_CLUSTER_IP_RANGE:-10.0.0.0/24}"
KUBE_PROXY_MODE="${KUBE_PROXY_MODE-nftables}"
[[ -z "$KUBE_PROXY_MODE" || "$KUBE_PROXY_MODE" == nftables || "$KUBE_PROXY_MODE" == iptables ]] ||
  { echo "local-up-cluster: KUBE_PROXY_MODE must be nftables, iptables or empty, got '$KUBE_PROXY_MODE'" >&2; exit 1; }
ENABLE_CLUSTER_DNS="${ENABLE_CLUSTER_DNS:-true}"
DNS_SERVER_IP="${DNS_SERVER_IP:-10.0.0.10}"
DNS_DOMAIN="${DNS_DOMAIN:-cluster.local}"
DNS_REPLICAS="${DNS_REPLICAS:-2}"
if [[ "$ENABLE_CLUSTER_DNS" == true && -z "$KUBE_PROXY_MODE" ]]; then
  echo "local-up-cluster: cluster DNS is reached through its Service: it needs kube-proxy (KUBE_PROXY_MODE)" >&2
  exit 1
fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/k8s-rs-target}"
BIN="${LOCAL_UP_BIN_DIR:-$CARGO_TARGET_DIR/release}"
ETCD_BIN="${ETCD_BIN:-$BIN/etcd}"
KUBE_APISERVER_BIN="${KUBE_APISERVER_BIN:-$BIN/kube-apiserver}"
KUBE_SCHEDULER_BIN="${KUBE_SCHEDULER_BIN:-$BIN/kube-scheduler}"
KUBE_CONTROLLER_MANAGER_BIN="${KUBE_CONTROLLER_MANAGER_BIN:-$BIN/kube-controller-manager}"
KUBELET_BIN="${KUBELET_BIN:-$BIN/kubelet}"
KUBE_PROXY_BIN="${KUBE_PROXY_BIN:-$BIN/kube-proxy}"
# Word-split on purpose: each holds zero or more flags without spaces in them.
read -r -a ETCD_EXTRA <<<"${ETCD_EXTRA_ARGS:-}"
read -r -a KUBE_APISERVER_EXTRA <<<"${KUBE_APISERVER_EXTRA_ARGS:-}"
read -r -a KUBE_SCHEDULER_EXTRA <<<"${KUBE_SCHEDULER_EXTRA_ARGS:-}"
read -r -a KUBE_CONTROLLER_MANAGER_EXTRA <<<"${KUBE_CONTROLLER_MANAGER_EXTRA_ARGS:-}"
read -r -a KUBELET_EXTRA <<<"${KUBELET_EXTRA_ARGS:-}"
read -r -a KUBE_PROXY_EXTRA <<<"${KUBE_PROXY_EXTRA_ARGS:-}"
KUBELET_TLS_BOOTSTRAP="${KUBELET_TLS_BOOTSTRAP:-false}"
[[ "$KUBELET_TLS_BOOTSTRAP" == true ]] && KUBE_APISERVER_EXTRA+=(--enable-bootstrap-token-auth)

PIDS=()
# containerd's PID -> its socket: before a containerd stops, its pods' containers are killed.
declare -A CTRD_OF_PID=()
NETNS=()
cleanup() {
  trap - EXIT INT TERM
  echo
  echo "local-up-cluster: stopping ${#PIDS[@]} component(s)"
  # Last started first: clients stop while the API server can still take their last
  # writes (the scheduler hands back its leader Lease), the API server before etcd.
  local i
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
    # The pods' containers outlive the kubelet (as upstream) and containerd (their shims
    # are separate processes): kill them before containerd, the first one started, stops.
    local sock="${CTRD_OF_PID[${PIDS[i]}]:-}"
    if [[ -n "$sock" && -S "$sock" ]]; then
      local ctr=(ctr --address "$sock" -n k8s.io) id
      for id in $("${ctr[@]}" tasks ls -q 2>/dev/null); do
        "${ctr[@]}" tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
      done
      # Deleting a task ends its shim; a killed but undeleted task keeps it alive.
      for id in $("${ctr[@]}" tasks ls -q 2>/dev/null); do
        "${ctr[@]}" tasks delete -f "$id" >/dev/null 2>&1 || true
      done
      for id in $("${ctr[@]}" containers ls -q 2>/dev/null); do
        "${ctr[@]}" containers delete "$id" >/dev/null 2>&1 || true
      done
      # Their pod cgroups are empty now (rmdir refuses any that is not); the kubelet
      # removes them only for deleted pods.
      find /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/*/k8srs-node* -depth -type d -exec rmdir {} \; 2>/dev/null || true
    fi
    kill -TERM "${PIDS[i]}" 2>/dev/null || true
    wait "${PIDS[i]}" 2>/dev/null || true
  done
  # What containerd leaves behind once its containers are gone: the sandboxes' netns and
  # shm mounts (whose veths stay on the bridge while they exist) and the CNI bridge.
  grep " $LOCAL_UP_DIR/" /proc/self/mounts | awk '{print $2}' | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  ip link delete k8srs0 2>/dev/null || true
  # The other nodes' namespaces (their bridges and veths go with them), the nodes' bridge,
  # and hostgw's routes and masquerade table on this host.
  local ns
  for ns in "${NETNS[@]}"; do ip netns delete "$ns" 2>/dev/null || true; done
  ((NODES > 1)) && ip link delete k8srsnodes 2>/dev/null || true
  [[ -x "$BIN/hostgw" ]] && "$BIN/hostgw" --cleanup >/dev/null 2>&1 || true
  # kube-proxy's rules on this host (both modes'), and the API server's address on lo.
  [[ -n "$KUBE_PROXY_MODE" && -x "$BIN/kube-proxy" ]] && "$BIN/kube-proxy" --cleanup >/dev/null 2>&1 || true
  [[ -n "$API_LO_ADDRESS" ]] && ip addr delete "$API_LO_ADDRESS/32" dev lo 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

hack/install-deps.sh
if [[ -z "${LOCAL_UP_BIN_DIR:-}" ]]; then
  echo "local-up-cluster: building (first build takes ~20 minutes on 2 cores)"
  # The same build as hack/test.sh (whole workspace), so the two share every artifact.
  cargo build --release --locked --workspace --bins --tests
fi

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

# The nodes' network: a switch (a bridge in a network namespace of its own, k8srs-switch)
# that this host (veth k8srsnodes) and every other node's namespace join, created before
# anything binds to the host's address. The bridge is not this host's own: with
# br_netfilter (on here), a frame crossing a bridge of this host goes through this host's
# PREROUTING, where kube-proxy would DNAT one node's NodePort packet for another node and
# the bridge would drop it as a hairpin, which a real switch between machines never does.
if ((NODES > 1)); then
  ip netns delete k8srs-switch 2>/dev/null || true
  ip link delete k8srsnodes 2>/dev/null || true
  ip netns add k8srs-switch
  NETNS+=(k8srs-switch)
  ip -n k8srs-switch link add br0 type bridge
  ip -n k8srs-switch link set br0 up
  ip link add k8srsnodes type veth peer name host netns k8srs-switch
  ip -n k8srs-switch link set host master br0 up
  ip addr add "$HOST_NODE_IP/24" dev k8srsnodes
  ip link set k8srsnodes up
fi

# containerd first: the kubelet's runtime, with its own root, state, socket and CNI bridge.
CTRD_DIR="$LOCAL_UP_DIR/containerd"
CTRD_SOCK="$CTRD_DIR/containerd.sock"
hack/containerd-config.sh "$CTRD_DIR" "$POD_CIDR" k8srs0
# In its own session: Ctrl-C (SIGINT to the terminal's process group) must not stop it
# before cleanup has removed the pods' containers through it.
setsid containerd --config "$CTRD_DIR/config.toml" >"$LOCAL_UP_DIR/logs/containerd.log" 2>&1 &
PIDS+=($!)
CTRD_OF_PID[$!]="$CTRD_SOCK"
echo "$CTRD_SOCK" >"$LOCAL_UP_DIR/containerd-sockets"
for _ in $(seq 1 300); do
  ctr --address "$CTRD_SOCK" version >/dev/null 2>&1 && break
  if ! kill -0 "${PIDS[-1]}" 2>/dev/null; then
    echo "local-up-cluster: containerd exited; see $LOCAL_UP_DIR/logs/containerd.log" >&2
    exit 1
  fi
  sleep 0.1
done
hack/build-images.sh --address "$CTRD_SOCK"

# etcd: one member, or ETCD_MEMBERS of them; member m > 1 on the ports plus 10000 * (m - 1).
etcd_port() { echo $(($1 + 10000 * ($2 - 1))); }
ETCD_INITIAL_CLUSTER="local-up=http://${ETCD_HOST}:${ETCD_PEER_PORT}"
ETCD_CLIENT_URLS="http://${ETCD_HOST}:${ETCD_PORT}"
for ((m = 2; m <= ETCD_MEMBERS; m++)); do
  ETCD_INITIAL_CLUSTER+=",local-up-$m=http://${ETCD_HOST}:$(etcd_port "$ETCD_PEER_PORT" "$m")"
  ETCD_CLIENT_URLS+=",http://${ETCD_HOST}:$(etcd_port "$ETCD_PORT" "$m")"
done
for ((m = 1; m <= ETCD_MEMBERS; m++)); do
  name=local-up data="$LOCAL_UP_DIR/etcd" log="$LOCAL_UP_DIR/logs/etcd.log"
  ((m == 1)) || name="local-up-$m" data="$LOCAL_UP_DIR/etcd-$m" log="$LOCAL_UP_DIR/logs/etcd-$m.log"
  client="http://${ETCD_HOST}:$(etcd_port "$ETCD_PORT" "$m")"
  peer="http://${ETCD_HOST}:$(etcd_port "$ETCD_PEER_PORT" "$m")"
  "$ETCD_BIN" \
    --name "$name" \
    --data-dir "$data" \
    --listen-client-urls "$client" \
    --advertise-client-urls "$client" \
    --listen-peer-urls "$peer" \
    --initial-advertise-peer-urls "$peer" \
    --initial-cluster "$ETCD_INITIAL_CLUSTER" \
    --listen-metrics-urls "http://${ETCD_HOST}:$(etcd_port "$ETCD_METRICS_PORT" "$m")" \
    "${ETCD_EXTRA[@]}" \
    >"$log" 2>&1 &
  PIDS+=($!)
done
# A member is healthy once the cluster has a leader: wait for the last one started.
wait_up etcd "http://${ETCD_HOST}:$(etcd_port "$ETCD_PORT" "$ETCD_MEMBERS")/health"

# kube-apiserver with Node,RBAC authorization as upstream's script runs it. Static tokens
# name the admin (system:masters), the scheduler and the controller manager; service
# account tokens are signed with an ECDSA key made here once.
mkdir -p "$LOCAL_UP_DIR/certs"
new_token() { head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
if [[ ! -s "$LOCAL_UP_DIR/tokens.csv" ]] || ! grep -q "system:node:$HOSTNAME_OVERRIDE," "$LOCAL_UP_DIR/tokens.csv"; then
  {
    echo "$(new_token),admin,admin,system:masters"
    echo "$(new_token),system:kube-scheduler,system:kube-scheduler"
    echo "$(new_token),system:kube-controller-manager,system:kube-controller-manager"
    # The kubelet's identity for the Node authorizer and NodeRestriction.
    echo "$(new_token),system:node:$HOSTNAME_OVERRIDE,system:node:$HOSTNAME_OVERRIDE,system:nodes"
  } >"$LOCAL_UP_DIR/tokens.csv"
fi
for ((k = 2; k <= NODES; k++)); do
  user="system:node:$HOSTNAME_OVERRIDE-node$k"
  grep -q ",$user," "$LOCAL_UP_DIR/tokens.csv" || echo "$(new_token),$user,$user,system:nodes" >>"$LOCAL_UP_DIR/tokens.csv"
done
# kube-proxy as upstream's system:kube-proxy (bound to system:node-proxier by the bootstrap
# policy).
for user in system:kube-proxy; do
  grep -q ",$user," "$LOCAL_UP_DIR/tokens.csv" || echo "$(new_token),$user,$user" >>"$LOCAL_UP_DIR/tokens.csv"
done
token_of() { grep ",$1," "$LOCAL_UP_DIR/tokens.csv" | cut -d, -f1; }
SA_KEY="$LOCAL_UP_DIR/certs/service-account.key"
if [[ ! -s "$SA_KEY" ]]; then
  openssl ecparam -name prime256v1 -genkey -noout -out "$SA_KEY" 2>/dev/null
  chmod 600 "$SA_KEY"
fi
# client_cert NAME CA SUBJECT: a CA certs/CA.{crt,key} (made once) and a client certificate
# certs/NAME.{crt,key} it signed for SUBJECT, unless the certificate exists already.
client_cert() {
  local name=$1 ca=$2 subject=$3 dir="$LOCAL_UP_DIR/certs"
  [[ -s "$dir/$name.crt" ]] && return 0
  [[ -s "$dir/$ca.crt" ]] || openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj "/CN=$ca" \
    -keyout "$dir/$ca.key" -out "$dir/$ca.crt" 2>/dev/null
  openssl req -new -newkey rsa:2048 -nodes -subj "$subject" \
    -keyout "$dir/$name.key" -out "$dir/$name.csr" 2>/dev/null
  openssl x509 -req -in "$dir/$name.csr" -days 365 \
    -CA "$dir/$ca.crt" -CAkey "$dir/$ca.key" -CAcreateserial \
    -extfile <(printf 'extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature,keyEncipherment\n') \
    -out "$dir/$name.crt" 2>/dev/null
  chmod 600 "$dir"/*.key
}
# The API server's client certificate towards kubelets (logs, exec, port-forward), signed by a
# CA the kubelet trusts (its clientCAFile), as kubeadm's apiserver-kubelet-client.
KUBELET_CA="$LOCAL_UP_DIR/certs/kubelet-client-ca.crt"
client_cert apiserver-kubelet-client kubelet-client-ca "/O=system:masters/CN=kube-apiserver-kubelet-client"
# The front proxy (kubeadm's front-proxy-ca and front-proxy-client): the API server presents
# this client certificate to extension API servers behind APIServices, which trust the CA
# and the X-Remote-* headers through the extension-apiserver-authentication ConfigMap.
# Left out when KUBE_APISERVER_EXTRA_ARGS configures the request-header authenticator itself
# (our flags, like clap's, may be given once).
FRONT_PROXY_ARGS=()
if [[ " ${KUBE_APISERVER_EXTRA[*]} " != *" --requestheader-client-ca-file"* ]]; then
  client_cert front-proxy-client front-proxy-ca "/CN=front-proxy-client"
  FRONT_PROXY_ARGS=(
    --requestheader-client-ca-file="$LOCAL_UP_DIR/certs/front-proxy-ca.crt"
    --requestheader-allowed-names=front-proxy-client
    --requestheader-username-headers=X-Remote-User
    --requestheader-group-headers=X-Remote-Group
    --requestheader-extra-headers-prefix=X-Remote-Extra-
    --proxy-client-cert-file="$LOCAL_UP_DIR/certs/front-proxy-client.crt"
    --proxy-client-key-file="$LOCAL_UP_DIR/certs/front-proxy-client.key"
  )
fi
[[ -n "$API_LO_ADDRESS" ]] && ip addr replace "$API_LO_ADDRESS/32" dev lo
"$KUBE_APISERVER_BIN" \
  --etcd-servers="$ETCD_CLIENT_URLS" \
  --bind-address="$API_BIND_ADDRESS" \
  --advertise-address="$API_ADVERTISE_ADDRESS" \
  --secure-port="$API_SECURE_PORT" \
  --cert-dir="$LOCAL_UP_DIR/certs" \
  --token-auth-file="$LOCAL_UP_DIR/tokens.csv" \
  --authorization-mode=Node,RBAC \
  --enable-admission-plugins=NodeRestriction \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$SA_KEY" \
  --service-account-signing-key-file="$SA_KEY" \
  --service-cluster-ip-range="$SERVICE_CLUSTER_IP_RANGE" \
  --kubelet-client-certificate="$LOCAL_UP_DIR/certs/apiserver-kubelet-client.crt" \
  --kubelet-client-key="$LOCAL_UP_DIR/certs/apiserver-kubelet-client.key" \
  --kubelet-preferred-address-types=InternalIP,Hostname \
  "${FRONT_PROXY_ARGS[@]}" \
  "${KUBE_APISERVER_EXTRA[@]}" \
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
kubeconfig kubelet "system:node:$HOSTNAME_OVERRIDE"
kubeconfig kube-proxy system:kube-proxy

# TLS bootstrap as kubeadm sets it up: a bootstrap token (a Secret in kube-system), the
# bootstrappers allowed to create CSRs and have node client CSRs auto-approved, nodes allowed
# to renew their own, and a kubeconfig holding only the token.
if [[ "$KUBELET_TLS_BOOTSTRAP" == true ]]; then
  BOOTSTRAP_ID="$(head -c 3 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  BOOTSTRAP_SECRET="$(new_token | cut -c1-16)"
  KUBECONFIG="$LOCAL_UP_DIR/admin.kubeconfig" kubectl apply -f - >/dev/null <<BOOTSTRAP
apiVersion: v1
kind: Secret
metadata: {name: bootstrap-token-$BOOTSTRAP_ID, namespace: kube-system}
type: bootstrap.kubernetes.io/token
stringData:
  token-id: "$BOOTSTRAP_ID"
  token-secret: "$BOOTSTRAP_SECRET"
  usage-bootstrap-authentication: "true"
  usage-bootstrap-signing: "true"
  auth-extra-groups: system:bootstrappers:kubeadm:default-node-token
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: kubeadm:kubelet-bootstrap}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:node-bootstrapper}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: Group, name: system:bootstrappers:kubeadm:default-node-token}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: kubeadm:node-autoapprove-bootstrap}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:certificates.k8s.io:certificatesigningrequests:nodeclient}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: Group, name: system:bootstrappers:kubeadm:default-node-token}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: kubeadm:node-autoapprove-certificate-rotation}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:certificates.k8s.io:certificatesigningrequests:selfnodeclient}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: Group, name: system:nodes}]
BOOTSTRAP
  cat >"$LOCAL_UP_DIR/bootstrap.kubeconfig" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: local-up-cluster
  cluster: {server: "$API_URL", certificate-authority: "$LOCAL_UP_DIR/certs/apiserver.crt"}
users:
- name: tls-bootstrap-token-user
  user: {token: "$BOOTSTRAP_ID.$BOOTSTRAP_SECRET"}
contexts:
- name: local-up-cluster
  context: {cluster: local-up-cluster, user: tls-bootstrap-token-user}
current-context: local-up-cluster
KUBECONFIG
fi
# kubelet_identity KUBECONFIG DIR: the kubelet's credentials flags: the node's token
# kubeconfig, or with TLS bootstrap the bootstrap kubeconfig and where the certificate goes.
kubelet_identity() {
  if [[ "$KUBELET_TLS_BOOTSTRAP" == true ]]; then
    echo "--bootstrap-kubeconfig=$LOCAL_UP_DIR/bootstrap.kubeconfig --kubeconfig=$2/kubelet/bootstrapped.kubeconfig --cert-dir=$2/kubelet/pki"
  else
    echo "--kubeconfig=$1"
  fi
}

# kube-scheduler, as system:kube-scheduler (the bootstrap RBAC policy's scheduler roles).
"$KUBE_SCHEDULER_BIN" \
  --kubeconfig="$LOCAL_UP_DIR/scheduler.kubeconfig" \
  --bind-address="$SCHEDULER_HOST" \
  --secure-port="$SCHEDULER_SECURE_PORT" \
  --cert-dir="$LOCAL_UP_DIR/certs" \
  "${KUBE_SCHEDULER_EXTRA[@]}" \
  >"$LOCAL_UP_DIR/logs/kube-scheduler.log" 2>&1 &
PIDS+=($!)
# Its serving certificate is self-signed in --cert-dir, with no CA of its own to trust.
wait_up kube-scheduler "https://${SCHEDULER_HOST}:${SCHEDULER_SECURE_PORT}/healthz" --insecure

# kube-controller-manager, as system:kube-controller-manager, each controller with its own
# kube-system service account's token (--use-service-account-credentials, as upstream's
# script); it publishes the API server's CA to every namespace and allocates node pod CIDRs
# from $CLUSTER_CIDR.
"$KUBE_CONTROLLER_MANAGER_BIN" \
  --kubeconfig="$LOCAL_UP_DIR/controller.kubeconfig" \
  --use-service-account-credentials=true \
  --bind-address="$CONTROLLER_MANAGER_HOST" \
  --secure-port="$CONTROLLER_MANAGER_SECURE_PORT" \
  --cert-dir="$LOCAL_UP_DIR/certs" \
  --root-ca-file="$LOCAL_UP_DIR/certs/apiserver.crt" \
  --allocate-node-cidrs=true \
  --cluster-cidr="$CLUSTER_CIDR" \
  --service-cluster-ip-range="$SERVICE_CLUSTER_IP_RANGE" \
  "${KUBE_CONTROLLER_MANAGER_EXTRA[@]}" \
  >"$LOCAL_UP_DIR/logs/kube-controller-manager.log" 2>&1 &
PIDS+=($!)
wait_up kube-controller-manager "https://${CONTROLLER_MANAGER_HOST}:${CONTROLLER_MANAGER_SECURE_PORT}/healthz" --insecure

# The kubelet, as system:node:<name>: registers the Node, runs its pods through containerd
# and the static pods in $LOCAL_UP_DIR/manifests.
# write_kubelet_config FILE STATE_DIR CONTAINERD_SOCKET ADDRESS CGROUP_ROOT: one node's
# configuration (every node's the same but for its paths, address and cgroup root: kubelets
# sharing a cgroup root would take each other's pod cgroups for orphans).
CLUSTER_DNS_LINE=""
[[ "$ENABLE_CLUSTER_DNS" == true ]] && CLUSTER_DNS_LINE="clusterDNS: [$DNS_SERVER_IP]"
write_kubelet_config() {
  local file=$1 dir=$2 sock=$3 address=$4 cgroup_root=$5
  mkdir -p "$dir/manifests"
  cat >"$file" <<KUBELET
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: $dir/manifests
cgroupRoot: $cgroup_root
containerRuntimeEndpoint: unix://$sock
podLogsDir: $dir/pod-logs
address: $address
port: $KUBELET_PORT
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
clusterDomain: $DNS_DOMAIN
$CLUSTER_DNS_LINE
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $KUBELET_CA
authorization:
  mode: Webhook
KUBELET
}
write_kubelet_config "$LOCAL_UP_DIR/kubelet-config.yaml" "$LOCAL_UP_DIR" "$CTRD_SOCK" "$KUBELET_HOST" /
# shellcheck disable=SC2046 # the identity flags hold no spaces
"$KUBELET_BIN" \
  $(kubelet_identity "$LOCAL_UP_DIR/kubelet.kubeconfig" "$LOCAL_UP_DIR") \
  --config="$LOCAL_UP_DIR/kubelet-config.yaml" \
  --hostname-override="$HOSTNAME_OVERRIDE" \
  --node-ip="$KUBELET_HOST" \
  --root-dir="$LOCAL_UP_DIR/kubelet" \
  "${KUBELET_EXTRA[@]}" \
  >"$LOCAL_UP_DIR/logs/kubelet.log" 2>&1 &
PIDS+=($!)
wait_up kubelet "http://127.0.0.1:${KUBELET_HEALTHZ_PORT}/healthz"

# hostgw: this node's CNI network from its allocated pod CIDR, routes to the other nodes'
# pods, masquerade for pod traffic leaving $CLUSTER_CIDR. With the kubelet's identity (the
# Node authorizer lets a node list and watch Nodes).
# start_hostgw NAME KUBECONFIG CONTAINERD_DIR BRIDGE LOG [nsenter...]
start_hostgw() {
  local name=$1 kc=$2 cdir=$3 bridge=$4 log=$5
  shift 5
  "$@" "$BIN/hostgw" \
    --kubeconfig="$kc" \
    --node-name="$name" \
    --cluster-cidr="$CLUSTER_CIDR" \
    --cni-conf-file="$cdir/cni/10-k8srs.conflist" \
    --cni-bridge="$bridge" \
    --cni-network-name="k8srs-$bridge" \
    --cni-ipam-data-dir="$cdir/cni-ipam" \
    >"$log" 2>&1 &
  PIDS+=($!)
}
start_hostgw "$HOSTNAME_OVERRIDE" "$LOCAL_UP_DIR/kubelet.kubeconfig" "$CTRD_DIR" k8srs0 "$LOCAL_UP_DIR/logs/hostgw.log"

# kube-proxy: Services (ClusterIP, NodePort, ...) routed to their endpoints by nftables or
# iptables rules in the node's network namespace; healthz on :10256, metrics on
# 127.0.0.1:10249 of that namespace.
# start_kube_proxy NAME LOG [nsenter...]
start_kube_proxy() {
  local name=$1 log=$2
  shift 2
  [[ -n "$KUBE_PROXY_MODE" ]] || return 0
  "$@" "$KUBE_PROXY_BIN" \
    --kubeconfig="$LOCAL_UP_DIR/kube-proxy.kubeconfig" \
    --proxy-mode="$KUBE_PROXY_MODE" \
    --hostname-override="$name" \
    --cluster-cidr="$CLUSTER_CIDR" \
    "${KUBE_PROXY_EXTRA[@]}" \
    >"$log" 2>&1 &
  PIDS+=($!)
  local pid=$! i
  for i in $(seq 1 300); do
    "$@" curl -fsS "http://127.0.0.1:10256/healthz" >/dev/null 2>&1 && return 0
    kill -0 "$pid" 2>/dev/null || { echo "local-up-cluster: kube-proxy of $name exited; see $log" >&2; tail -20 "$log" >&2; exit 1; }
    sleep 0.1
  done
  echo "local-up-cluster: kube-proxy of $name not healthy after 30 s; see $log" >&2
  exit 1
}
start_kube_proxy "$HOSTNAME_OVERRIDE" "$LOCAL_UP_DIR/logs/kube-proxy.log"

# The other nodes, each in a network namespace of its own (a host on the k8srs-switch bridge):
# containerd, kubelet and hostgw started through nsenter, which changes only the network
# namespace (containerd and runc need the host's mounts and cgroups).
start_node() {
  local k=$1
  local name="$HOSTNAME_OVERRIDE-node$k" ns="k8srs-node$k" ip="$NODE_NET_PREFIX.$k" dir="$LOCAL_UP_DIR/node$k"
  local in_ns=(nsenter "--net=/var/run/netns/$ns")
  ip netns delete "$ns" 2>/dev/null || true
  ip netns add "$ns"
  NETNS+=("$ns")
  ip -n k8srs-switch link add "node$k" type veth peer name eth0 netns "$ns"
  ip -n k8srs-switch link set "node$k" master br0 up
  ip -n "$ns" link set lo up
  ip -n "$ns" addr add "$ip/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" route add default via "$HOST_NODE_IP"
  # A placeholder pod CIDR until hostgw writes the one the node IPAM controller allocates.
  hack/containerd-config.sh "$dir/containerd" "10.88.$((k - 1)).0/24" "k8srs$k"
  local sock="$dir/containerd/containerd.sock"
  setsid "${in_ns[@]}" containerd --config "$dir/containerd/config.toml" >"$LOCAL_UP_DIR/logs/containerd-node$k.log" 2>&1 &
  PIDS+=($!)
  CTRD_OF_PID[$!]="$sock"
  for _ in $(seq 1 300); do
    ctr --address "$sock" version >/dev/null 2>&1 && break
    sleep 0.1
  done
  hack/build-images.sh --address "$sock" >/dev/null
  echo "$sock" >>"$LOCAL_UP_DIR/containerd-sockets"
  kubeconfig "node$k" "system:node:$name"
  write_kubelet_config "$dir/kubelet-config.yaml" "$dir" "$sock" "$ip" "/k8srs-node$k"
  # Upstream's kubelet refuses a cgroup root that does not exist yet (ours makes it).
  local c
  for c in /sys/fs/cgroup/*/; do
    [[ -L "${c%/}" || ! -f "$c/cgroup.procs" ]] || mkdir -p "$c/k8srs-node$k"
  done
  # shellcheck disable=SC2046 # the identity flags hold no spaces
  "${in_ns[@]}" "$KUBELET_BIN" \
    $(kubelet_identity "$LOCAL_UP_DIR/node$k.kubeconfig" "$dir") \
    --config="$dir/kubelet-config.yaml" \
    --hostname-override="$name" \
    --node-ip="$ip" \
    --root-dir="$dir/kubelet" \
    "${KUBELET_EXTRA[@]}" \
    >"$LOCAL_UP_DIR/logs/kubelet-node$k.log" 2>&1 &
  PIDS+=($!)
  local pid=$!
  until "${in_ns[@]}" curl -fsS "http://127.0.0.1:${KUBELET_HEALTHZ_PORT}/healthz" >/dev/null 2>&1; do
    kill -0 "$pid" 2>/dev/null || { echo "local-up-cluster: kubelet of node $k exited; see $LOCAL_UP_DIR/logs/kubelet-node$k.log" >&2; exit 1; }
    sleep 0.1
  done
  start_hostgw "$name" "$LOCAL_UP_DIR/node$k.kubeconfig" "$dir/containerd" "k8srs$k" "$LOCAL_UP_DIR/logs/hostgw-node$k.log" "${in_ns[@]}"
  start_kube_proxy "$name" "$LOCAL_UP_DIR/logs/kube-proxy-node$k.log" "${in_ns[@]}"
}
for ((k = 2; k <= NODES; k++)); do
  start_node "$k"
done

# Storage: the default StorageClass "standard" (WaitForFirstConsumer) and one
# local-path-provisioner per node, making each claim's volume in that node's directory
# ($LOCAL_UP_DIR/local-path for this host, $LOCAL_UP_DIR/node<k>/local-path for the others;
# they share this host's disk, the namespaces being network-only). They act with the admin
# identity.
KUBECONFIG="$LOCAL_UP_DIR/admin.kubeconfig" kubectl apply -f - >/dev/null <<'CLASS'
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: standard
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: k8s-rs.io/local-path
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Delete
CLASS
start_provisioner() {
  local name=$1 dir=$2
  "$BIN/local-path-provisioner" \
    --kubeconfig="$LOCAL_UP_DIR/admin.kubeconfig" \
    --node-name="$name" \
    --base-dir="$dir/local-path" \
    >"$LOCAL_UP_DIR/logs/local-path-provisioner-$name.log" 2>&1 &
  PIDS+=($!)
}
start_provisioner "$HOSTNAME_OVERRIDE" "$LOCAL_UP_DIR"
for ((k = 2; k <= NODES; k++)); do
  start_provisioner "$HOSTNAME_OVERRIDE-node$k" "$LOCAL_UP_DIR/node$k"
done

# Cluster DNS: the addon in cluster/addons/dns, kube-dns as a Deployment behind the kube-dns
# Service at $DNS_SERVER_IP, from an image of $BIN/kube-dns imported into every node's
# containerd. It reaches the API server through the kubernetes Service (in-cluster config)
# and forwards names outside $DNS_DOMAIN to its node's resolvers (dnsPolicy Default).
if [[ "$ENABLE_CLUSTER_DNS" == true ]]; then
  while read -r sock; do
    hack/build-images.sh --address "$sock" --component "kube-dns=$BIN/kube-dns" >/dev/null
  done <"$LOCAL_UP_DIR/containerd-sockets"
  sed -e "s|__DNS__DOMAIN__|$DNS_DOMAIN|g" -e "s|__DNS__SERVER__|$DNS_SERVER_IP|g" \
    -e "s|__DNS__IMAGE__|localhost/kube-dns:local|g" -e "s|__DNS__REPLICAS__|$DNS_REPLICAS|g" \
    cluster/addons/dns/kube-dns.yaml.in >"$LOCAL_UP_DIR/kube-dns.yaml"
  KUBECONFIG="$LOCAL_UP_DIR/admin.kubeconfig" kubectl apply -f "$LOCAL_UP_DIR/kube-dns.yaml" >/dev/null
  if ! KUBECONFIG="$LOCAL_UP_DIR/admin.kubeconfig" kubectl -n kube-system rollout status deployment/kube-dns --timeout=180s >/dev/null; then
    echo "local-up-cluster: kube-dns did not become ready; kubectl -n kube-system describe pods -l k8s-app=kube-dns:" >&2
    KUBECONFIG="$LOCAL_UP_DIR/admin.kubeconfig" kubectl -n kube-system describe pods -l k8s-app=kube-dns >&2 || true
    exit 1
  fi
fi

cat <<INFO
Local cluster is running. State: $LOCAL_UP_DIR, logs: $LOCAL_UP_DIR/logs

  etcd            $ETCD_CLIENT_URLS (metrics and health of the first: http://${ETCD_HOST}:${ETCD_METRICS_PORT}/metrics)
                  ETCDCTL_API=3 etcdctl --endpoints=$ETCD_CLIENT_URLS endpoint status -w table
  kube-apiserver  $API_URL
                  export KUBECONFIG=$LOCAL_UP_DIR/admin.kubeconfig; kubectl get ns
  kube-scheduler  https://${SCHEDULER_HOST}:${SCHEDULER_SECURE_PORT}/metrics (self-signed)
  kube-controller-manager  https://${CONTROLLER_MANAGER_HOST}:${CONTROLLER_MANAGER_SECURE_PORT}/metrics (self-signed)
  kubelet         node $HOSTNAME_OVERRIDE, https://${KUBELET_HOST}:${KUBELET_PORT} (containerd: $CTRD_SOCK)
                  static pods: $LOCAL_UP_DIR/manifests; images: localhost/busybox:latest
  kube-proxy      mode ${KUBE_PROXY_MODE:-(none)} on every node; healthz http://127.0.0.1:10256/healthz,
                  metrics http://127.0.0.1:10249/metrics (in each node's network namespace)
  cluster DNS     $( [[ "$ENABLE_CLUSTER_DNS" == true ]] && echo "Deployment kube-system/kube-dns, Service kube-system/kube-dns $DNS_SERVER_IP; pods resolve
                  <service>.<namespace>.svc.$DNS_DOMAIN (and <service> in their namespace)" || echo "off")
  storage         default StorageClass "standard" (local-path, WaitForFirstConsumer): volumes under
                  $LOCAL_UP_DIR/local-path

Press Ctrl-C to stop.
INFO

# Stay in the foreground until a component exits or we are told to stop.
wait -n "${PIDS[@]}"
echo "local-up-cluster: a component exited; see $LOCAL_UP_DIR/logs" >&2
exit 1
