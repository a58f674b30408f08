#!/usr/bin/env bash
# Benchmark: kube-controller-manager with our etcd, kube-apiserver and kube-scheduler on this
# machine, kubelets played by the fake kubelet (pods marked Ready, graceful deletions
# finished). Phases, on one cluster (hack/src/bin/controllers-bench.rs):
#   baseline  the tool itself creating BIG pods (what apiserver + etcd allow; same run)
#   big       one Deployment of BIG replicas: time until every pod exists / is ready
#   many      DEPLOYMENTS Deployments x REPLICAS: time until every pod exists / is ready
#   rolling   a new image for all DEPLOYMENTS: time until every rollout completed
#   job       a Job of JOB_COMPLETIONS completions, JOB_PARALLELISM at a time, its pods
#             finished by the fake kubelet: completions/s and the controller-manager's CPU
#   daemonset fake nodes added up to DS_NODES (default 1000), one DaemonSet: time until a pod
#             exists for every node, and until all are scheduled and ready
# then the controller-manager's CPU seconds and peak RSS, and the other processes' CPU.
# PHASES (comma-separated, default all) runs only some, e.g. PHASES=job.
# The controller-manager runs with --kube-api-qps/--kube-api-burst raised (KCM_QPS, default
# 1000): upstream's defaults (20/30) would make client-side throttling, not the controllers,
# the measured limit. Not a test: compare figures from the same run only.
#
#   hack/bench/controllers.sh
#   BIG=1000 DEPLOYMENTS=20 hack/bench/controllers.sh
#   PHASES=job JOB_COMPLETIONS=1000 JOB_PARALLELISM=100 hack/bench/controllers.sh
#   PHASES=daemonset DS_NODES=1000 hack/bench/controllers.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/k8s-rs-target}"
NODES="${NODES:-50}"
BIG="${BIG:-3000}"
DEPLOYMENTS="${DEPLOYMENTS:-100}"
REPLICAS="${REPLICAS:-30}"
KCM_QPS="${KCM_QPS:-1000}"
JOB_COMPLETIONS="${JOB_COMPLETIONS:-1000}"
JOB_PARALLELISM="${JOB_PARALLELISM:-100}"
PHASES="${PHASES:-baseline,big,many,rolling,job,daemonset}"
DS_NODES="${DS_NODES:-1000}"
SCRATCH="${SCRATCH:-/var/tmp/controllers-bench}"
HOST=127.0.0.1
TOKEN=bench-token

hack/install-deps.sh
. hack/bench/lib.sh
bench_build
B="$CARGO_TARGET_DIR/release"
TICK=$(getconf CLK_TCK)

cpu_s() { awk -v t="$TICK" '{printf "%.1f", ($14+$15)/t}' "/proc/$1/stat"; }
peak_rss_mib() { awk '/VmHWM/ {printf "%.0f", $2/1024}' "/proc/$1/status"; }

PIDS=()
stop_all() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  PIDS=()
}
trap 'stop_all; rm -rf "$SCRATCH"' EXIT

rm -rf "$SCRATCH"
start_control_plane "$B/etcd"
PIDS+=("$ETCD_PID" "$API_PID")
sport=$(free_port)
"$B/kube-scheduler" --kubeconfig="$SCRATCH/kubeconfig" --leader-elect=false --bind-address="$HOST" \
  --secure-port="$sport" --cert-dir="$SCRATCH/certs" >"$SCRATCH/scheduler.log" 2>&1 &
SCHED_PID=$!; PIDS+=("$SCHED_PID")
cport=$(free_port)
"$B/kube-controller-manager" --kubeconfig="$SCRATCH/kubeconfig" --leader-elect=false --bind-address="$HOST" \
  --secure-port="$cport" --cert-dir="$SCRATCH/certs" --kube-api-qps="$KCM_QPS" --kube-api-burst="$KCM_QPS" \
  >"$SCRATCH/controller-manager.log" 2>&1 &
KCM_PID=$!; PIDS+=("$KCM_PID")
wait_until "kube-apiserver /readyz" 200 0.1 curl -skf "https://$HOST:$cport/readyz"

echo "nproc=$(nproc) nodes=$NODES big=$BIG deployments=${DEPLOYMENTS}x$REPLICAS job=${JOB_COMPLETIONS}/${JOB_PARALLELISM} kcm qps/burst=$KCM_QPS phases=$PHASES"
"$B/controllers-bench" --kubeconfig "$SCRATCH/kubeconfig" --nodes "$NODES" --big "$BIG" \
  --deployments "$DEPLOYMENTS" --replicas "$REPLICAS" --job-completions "$JOB_COMPLETIONS" \
  --job-parallelism "$JOB_PARALLELISM" --kcm-pid "$KCM_PID" --phases "$PHASES" --ds-nodes "$DS_NODES"
printf 'cpu_s(etcd=%s apiserver=%s scheduler=%s controller-manager=%s) controller-manager peak RSS %s MiB\n' \
  "$(cpu_s "$ETCD_PID")" "$(cpu_s "$API_PID")" "$(cpu_s "$SCHED_PID")" "$(cpu_s "$KCM_PID")" "$(peak_rss_mib "$KCM_PID")"
