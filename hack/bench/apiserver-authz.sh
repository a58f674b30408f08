#!/usr/bin/env bash
# Benchmark: what authorization costs kube-apiserver per request. Our etcd and our
# kube-apiserver twice on this machine, fresh data each time, the same admission plugins:
#   open  --authorization-mode=AlwaysAllow, the client a system:masters token (baseline)
#   rbac  --authorization-mode=Node,RBAC, the client `bench-user` (no groups) allowed by a
#         ClusterRoleBinding to a ClusterRole for pods and namespaces, among DECOYS other
#         users' ClusterRoleBindings and RoleBindings in every namespace (so the rule lookup
#         meets a populated policy, as in a real cluster)
# For each: create PODS pods with CLIENTS concurrent clients (one watcher following), then
# READ_SECONDS of concurrent gets and namespace lists. Prints both and rbac/open ratios.
# Not a test: compare figures from the same run only.
#
#   hack/bench/apiserver-authz.sh                 # ~2 minutes
#   PODS=20000 DECOYS=1000 hack/bench/apiserver-authz.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/k8s-rs-target}"
CLIENTS="${CLIENTS:-16}"
PODS="${PODS:-5000}"
DECOYS="${DECOYS:-300}"
READ_SECONDS="${READ_SECONDS:-15}"
SCRATCH="${SCRATCH:-/var/tmp/apiserver-authz-bench}"
HOST=127.0.0.1
TOKEN=bench-token
USER_TOKEN=bench-user-token
NAMESPACES=100

hack/install-deps.sh
. hack/bench/lib.sh
bench_build
B="$CARGO_TARGET_DIR/release"


ETCD_PID="" API_PID=""
stop_all() {
  for p in $API_PID $ETCD_PID; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  API_PID="" ETCD_PID=""
}
trap 'stop_all; rm -rf "$SCRATCH"' EXIT

# The policy of the rbac run: bench-user's grant, then DECOYS bindings of other users
# spread over the cluster scope and the benchmark's namespaces.
policy() {
  python3 - "$DECOYS" "$NAMESPACES" <<'PY'
import json, sys
decoys, namespaces = int(sys.argv[1]), int(sys.argv[2])
items = [
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "bench-pods"},
     "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]},
               {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "create"]}]},
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "bench-user"},
     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "bench-pods"},
     "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "bench-user"}]},
]
for i in range(namespaces):
    items.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"bench-{i}"}})
for i in range(decoys):
    subject = {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": f"decoy-{i}"}
    if i % 3 == 0:
        items.append({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                      "metadata": {"name": f"decoy-{i}"}, "subjects": [subject],
                      "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"}})
    else:
        items.append({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                      "metadata": {"name": f"decoy-{i}", "namespace": f"bench-{i % namespaces}"}, "subjects": [subject],
                      "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"}})
print(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
PY
}

declare -A R
run_one() {
  local name=$1 token=$2
  rm -rf "$SCRATCH"
  start_control_plane "$B/etcd"
  if [[ $name == rbac ]]; then
    policy >"$SCRATCH/policy.json"
    kubectl --kubeconfig "$SCRATCH/kubeconfig" apply -f "$SCRATCH/policy.json" >/dev/null
  fi
  local bench=("$B/apiserver-bench" --server "https://$HOST:$API_PORT" --token "$token" --ca "$SCRATCH/certs/apiserver.crt" --clients "$CLIENTS" --namespaces "$NAMESPACES")
  local out
  out=$("${bench[@]}" create --pods "$PODS" --watchers 1); echo "$out" >&2
  R[$name,create]=$(grep '^create ' <<<"$out")
  out=$("${bench[@]}" read --seconds "$READ_SECONDS" --pods "$PODS"); echo "$out" >&2
  R[$name,get]=$(grep '^get ' <<<"$out"); R[$name,listns]=$(grep '^list-namespace ' <<<"$out")
  stop_all
}

field() { grep -oE "$2=[0-9.]+" <<<"$1" | cut -d= -f2 || true; }
ratio() { python3 -c "import sys; a,b=float(sys.argv[1] or 0),float(sys.argv[2] or 0); print(f'{a/b:.2f}' if b else '-')" "$1" "$2"; }

echo "open: AlwaysAllow, system:masters client ..." >&2
API_ARGS=(--disable-admission-plugins=ServiceAccount --authorization-mode=AlwaysAllow)
run_one open "$TOKEN"
echo "rbac: Node,RBAC, bench-user among $DECOYS decoy bindings ..." >&2
API_ARGS=(--disable-admission-plugins=ServiceAccount --authorization-mode=Node,RBAC)
run_one rbac "$USER_TOKEN"

printf '\n%-34s %10s %10s %12s\n' "metric (CLIENTS=$CLIENTS, $PODS pods)" open rbac rbac/open
row() {
  local label=$1 key=$2 f=$3
  local a b
  a=$(field "${R[open,$key]}" "$f"); b=$(field "${R[rbac,$key]}" "$f")
  printf '%-34s %10s %10s %12s\n' "$label" "$a" "$b" "$(ratio "$b" "$a")"
}
row "create pods/s" create qps; row "  create p50 ms" create p50_ms; row "  create p99 ms" create p99_ms
row "get/s" get qps; row "  get p50 ms" get p50_ms; row "  get p99 ms" get p99_ms
row "list namespace/s" listns qps; row "  list namespace p50 ms" listns p50_ms
