#!/usr/bin/env bash
# Runs upstream's conformance suite (../shared/conformance/e2e.test, v1.28.4) against a
# cluster of ours and writes a JUnit report and a per-SIG summary under a results directory.
#
#   hack/conformance.sh [--quick] [--focus REGEX] [--skip REGEX] [--results DIR]
#                       [--timeout DURATION] [--nodes N] [--parallel P]
#
#   --quick      skip [Serial] and [Disruptive] specs (the full run includes them)
#   --focus RE   run only the conformance specs that also match RE
#   --skip RE    also skip specs matching RE
#   --results D  results directory (default: _output/conformance/<UTC timestamp>)
#   --timeout T  ginkgo suite timeout (default 6h full, 3h quick)
#   --nodes N    nodes of the cluster brought up here (default 2: this host and one node in
#                a network namespace; the suite expects at least two schedulable nodes)
#   --parallel P e2e.test processes at once, each with a fixed share of the specs (default
#                3; most of a run is waiting on pods and timeouts). [Serial] specs run
#                alone afterwards (hack/conformance-shards.py).
#
# Without KUBECONFIG it brings up a cluster with hack/local-up-cluster.sh (state under the
# results directory), imports the suite's images into every node's containerd, runs the
# suite, and stops the cluster. With KUBECONFIG it uses that cluster; the images must then be
# imported beforehand into each node's containerd (CONFORMANCE_CONTAINERD_SOCKETS, a
# space-separated list of sockets, does it here).
#
# The summary (summary.md, per SIG passed/failed/skipped and every failed spec) is written
# by hack/conformance-summary.py from the JUnit report. Needs root (containerd, network).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

CONFORMANCE_DIR="${CONFORMANCE_DIR:-$ROOT/../shared/conformance}"
QUICK=0 FOCUS="" EXTRA_SKIP="" RESULTS="" TIMEOUT="" NODES=2 PARALLEL=3
while (($#)); do
  case "$1" in
    --quick) QUICK=1 ;;
    --focus) FOCUS="$2"; shift ;;
    --skip) EXTRA_SKIP="$2"; shift ;;
    --results) RESULTS="$2"; shift ;;
    --timeout) TIMEOUT="$2"; shift ;;
    --nodes) NODES="$2"; shift ;;
    --parallel) PARALLEL="$2"; shift ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    *) echo "conformance: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

die() { echo "conformance: $*" >&2; exit 1; }
[[ -x "$CONFORMANCE_DIR/e2e.test" ]] || die "no e2e.test in $CONFORMANCE_DIR (set CONFORMANCE_DIR)"
(($(id -u) == 0)) || die "needs root (containerd, network namespaces)"

RESULTS="${RESULTS:-$ROOT/_output/conformance/$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$RESULTS"
RESULTS="$(cd "$RESULTS" && pwd)"
if ((QUICK)); then TIMEOUT="${TIMEOUT:-3h}"; else TIMEOUT="${TIMEOUT:-6h}"; fi

CLUSTER_PID=""
stop_cluster() {
  if [[ -n "$CLUSTER_PID" ]] && kill -0 "$CLUSTER_PID" 2>/dev/null; then
    echo "conformance: stopping the cluster"
    kill -TERM "$CLUSTER_PID" 2>/dev/null || true
    wait "$CLUSTER_PID" 2>/dev/null || true
  fi
}
trap stop_cluster EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [[ -z "${KUBECONFIG:-}" ]]; then
  export LOCAL_UP_DIR="$RESULTS/cluster"
  export NODES
  # Its own session, so our Ctrl-C reaches it only through stop_cluster (it cleans up).
  setsid hack/local-up-cluster.sh >"$RESULTS/local-up-cluster.log" 2>&1 &
  CLUSTER_PID=$!
  echo "conformance: bringing up a $NODES-node cluster (log: $RESULTS/local-up-cluster.log)"
  until grep -q "^Local cluster is running" "$RESULTS/local-up-cluster.log" 2>/dev/null; do
    kill -0 "$CLUSTER_PID" 2>/dev/null || { tail -30 "$RESULTS/local-up-cluster.log" >&2; die "the cluster did not come up"; }
    sleep 2
  done
  export KUBECONFIG="$LOCAL_UP_DIR/admin.kubeconfig"
  CONFORMANCE_CONTAINERD_SOCKETS="$(cat "$LOCAL_UP_DIR/containerd-sockets")"
fi

for sock in ${CONFORMANCE_CONTAINERD_SOCKETS:-}; do
  "$CONFORMANCE_DIR/import.sh" "$sock" >"$RESULTS/import-$(basename "$(dirname "$sock")").log" 2>&1 ||
    die "importing images into $sock failed (see $RESULTS)"
done

kubectl get nodes -o wide | tee "$RESULTS/nodes.txt"

quick=()
((QUICK)) && quick=(--quick)
python3 hack/conformance-shards.py "$CONFORMANCE_DIR/conformance-specs.txt" "$RESULTS/shards" "$PARALLEL" \
  "${quick[@]}" --focus "$FOCUS" --skip "$EXTRA_SKIP" | tee "$RESULTS/shards.txt"

# run_e2e NAME: e2e.test over the specs of $RESULTS/shards/NAME.regex, its JUnit report in
# $RESULTS/NAME/ and its log in $RESULTS/e2e-NAME.log.
run_e2e() {
  local name=$1 focus
  focus="$(cat "$RESULTS/shards/$name.regex")"
  [[ -n "$focus" ]] || return 0
  mkdir -p "$RESULTS/$name"
  "$CONFORMANCE_DIR/e2e.test" \
    --provider=skeleton \
    --kubeconfig="$KUBECONFIG" \
    --ginkgo.focus="$focus" \
    --ginkgo.no-color \
    --ginkgo.timeout="$TIMEOUT" \
    --ginkgo.v \
    --report-dir="$RESULTS/$name" \
    --disable-log-dump \
    >"$RESULTS/e2e-$name.log" 2>&1
}
echo "conformance: running e2e.test in $PARALLEL processes (logs: $RESULTS/e2e-*.log)"
rc=0
pids=()
for ((i = 1; i <= PARALLEL; i++)); do
  run_e2e "shard-$i" &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
echo "conformance: running the [Serial] specs alone"
run_e2e serial || rc=1
python3 hack/conformance-summary.py "$RESULTS" >"$RESULTS/summary.md" || die "no JUnit report in $RESULTS"
cat "$RESULTS/summary.md"
echo "conformance: e2e.test runs $( ((rc == 0)) && echo passed || echo failed); results in $RESULTS"
exit "$rc"
