#!/usr/bin/env bash
# Captures upstream kube-apiserver's discovery as golden files for the discovery-parity test
# (e2e/tests/apiserver_discovery.rs): runs upstream's v1.28.4 kube-apiserver
# (../shared/upstream) on Debian's etcd, with default API enablement, and writes
#
#   api-resources.txt      `kubectl api-resources -o wide`
#   api.json, apis.json    the legacy /api and /apis documents
#   aggregated-api.json, aggregated-apis.json
#                          the aggregated forms (apidiscovery.k8s.io/v2beta1 in v1.28)
#   resources/<group>_<version>.json
#                          every served APIResourceList (/api/v1, /apis/<g>/<v>)
#
# into DIR (default e2e/golden/upstream-v1.28.4). The files are a captured fact: rerun this
# to refresh them, never edit them by hand.
#
#   hack/capture-upstream-discovery.sh [DIR]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$ROOT/e2e/golden/upstream-v1.28.4}"
UPSTREAM="${UPSTREAM:-$ROOT/../shared/upstream}"

die() { echo "capture-upstream-discovery: $*" >&2; exit 1; }
[[ -x "$UPSTREAM/install.sh" ]] || die "no upstream components in $UPSTREAM (set UPSTREAM)"
command -v etcd >/dev/null || die "needs Debian's etcd (hack/install-deps.sh installs etcd-server)"
command -v openssl >/dev/null || die "needs openssl"

WORK="$(mktemp -d)"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

"$UPSTREAM/install.sh" "$WORK/bin" >/dev/null
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ETCD_PORT=$(free_port) PEER_PORT=$(free_port) API_PORT=$(free_port)

openssl req -x509 -newkey rsa:2048 -nodes -keyout "$WORK/ca.key" -out "$WORK/ca.crt" -days 2 \
  -subj /CN=capture-ca 2>/dev/null
openssl genrsa -out "$WORK/sa.key" 2048 2>/dev/null
echo "capture-token,admin,admin,system:masters" >"$WORK/tokens.csv"

etcd --data-dir "$WORK/etcd" --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" --listen-peer-urls "http://127.0.0.1:$PEER_PORT" \
  >"$WORK/etcd.log" 2>&1 &
PIDS+=($!)
# A non-loopback advertise address: upstream refuses loopback for the kubernetes Endpoints.
"$WORK/bin/kube-apiserver" --etcd-servers="http://127.0.0.1:$ETCD_PORT" --bind-address=127.0.0.1 \
  --secure-port="$API_PORT" --cert-dir="$WORK/certs" --client-ca-file="$WORK/ca.crt" \
  --token-auth-file="$WORK/tokens.csv" --service-account-issuer=https://kubernetes.default.svc \
  --service-account-key-file="$WORK/sa.key" --service-account-signing-key-file="$WORK/sa.key" \
  --authorization-mode=Node,RBAC --advertise-address=10.99.0.1 --service-cluster-ip-range=10.0.0.0/24 \
  >"$WORK/kube-apiserver.log" 2>&1 &
PIDS+=($!)

cat >"$WORK/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: up, cluster: {server: "https://127.0.0.1:$API_PORT", insecure-skip-tls-verify: true}}]
users: [{name: admin, user: {token: capture-token}}]
contexts: [{name: up, context: {cluster: up, user: admin}}]
current-context: up
EOF
export KUBECONFIG="$WORK/kubeconfig"
for _ in $(seq 120); do
  [[ "$(kubectl get --raw /readyz 2>/dev/null)" == ok ]] && break
  sleep 0.5
done
[[ "$(kubectl get --raw /readyz 2>/dev/null)" == ok ]] || { tail -20 "$WORK/kube-apiserver.log"; die "upstream kube-apiserver not ready"; }

get() { curl -sfk -H "Authorization: Bearer capture-token" ${2:+-H "Accept: $2"} "https://127.0.0.1:$API_PORT$1"; }
pretty() { python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin), indent=2, sort_keys=True))'; }
AGG='application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList'

rm -rf "$OUT" && mkdir -p "$OUT/resources"
kubectl api-resources -o wide >"$OUT/api-resources.txt"
get /api | pretty >"$OUT/api.json"
get /apis | pretty >"$OUT/apis.json"
get /api "$AGG" | pretty >"$OUT/aggregated-api.json"
get /apis "$AGG" | pretty >"$OUT/aggregated-apis.json"
get /api/v1 | pretty >"$OUT/resources/core_v1.json"
for gv in $(python3 -c 'import json,sys; [print(v["groupVersion"]) for g in json.load(sys.stdin)["groups"] for v in g["versions"]]' <"$OUT/apis.json"); do
  get "/apis/$gv" | pretty >"$OUT/resources/${gv%/*}_${gv#*/}.json"
done
"$WORK/bin/kube-apiserver" --version >"$OUT/VERSION"
echo "capture-upstream-discovery: wrote $OUT"
