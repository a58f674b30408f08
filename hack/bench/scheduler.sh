#!/usr/bin/env bash
# Benchmark: kube-scheduler with our kube-apiserver and etcd on this machine, modelled on
# upstream's scheduler_perf. Each variant runs on a fresh cluster:
#   basic            NODES nodes, PODS pods requesting 100m/500Mi  (upstream: SchedulingBasic)
#   anti-affinity    NODES nodes, AA_PODS pods with required anti-affinity per host
#   topology-spread  NODES nodes in 10 zones, TS_PODS pods with maxSkew 1 over zones
#   preemption       PRE_NODES nodes filled by 4 low-priority 1-cpu pods each, then
#                    PRE_PODS high-priority pods that must each evict one
# and, as the same-run baseline, the API server alone creating PODS pods (no scheduler).
# Reports pods/s (first create to last binding), create→bound p50/p99, the scheduler's own
# p99 attempt duration (scheduler_scheduling_attempt_duration_seconds) and the CPU seconds
# each process used, which shows what bounds the run. Not a test: machines are shared and
# noisy; compare figures from the same run only.
#
#   hack/bench/scheduler.sh                     # all variants, ~10 minutes
#   VARIANTS=basic NODES=1000 PODS=3000 hack/bench/scheduler.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/k8s-rs-target}"
VARIANTS="${VARIANTS:-baseline basic anti-affinity topology-spread preemption}"
NODES="${NODES:-5000}"
PODS="${PODS:-10000}"
AA_PODS="${AA_PODS:-2000}"
TS_PODS="${TS_PODS:-5000}"
PRE_NODES="${PRE_NODES:-500}"
PRE_PODS="${PRE_PODS:-500}"
SCRATCH="${SCRATCH:-/var/tmp/scheduler-bench}"
HOST=127.0.0.1
TOKEN=bench-token

hack/install-deps.sh
. hack/bench/lib.sh
bench_build
B="$CARGO_TARGET_DIR/release"
TICK=$(getconf CLK_TCK)

sub() { awk -v a="$1" -v b="$2" 'BEGIN {print a - b}'; }
cpu_s() { awk -v t="$TICK" '{printf "%.1f", ($14+$15)/t}' "/proc/$1/stat"; }

PIDS=()
stop_all() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  PIDS=()
}
trap 'stop_all; rm -rf "$SCRATCH"' EXIT

# p99 of a Prometheus histogram from its cumulative buckets (upper bound of the bucket).
hist_p99() {
  python3 -c '
import re, sys
buckets = {}
for line in sys.stdin:
    m = re.match(r"scheduler_scheduling_attempt_duration_seconds_bucket\{.*le=\"([^\"]+)\".*\} (\S+)", line)
    if m:
        le = float("inf") if m.group(1) == "+Inf" else float(m.group(1))
        buckets[le] = buckets.get(le, 0) + float(m.group(2))
if not buckets:
    print("n/a"); sys.exit()
total = max(buckets.values())
for le in sorted(buckets):
    if buckets[le] >= 0.99 * total:
        print("%.0f" % (le * 1000) if le != float("inf") else "inf"); break
'
}

run_one() {
  local variant=$1
  rm -rf "$SCRATCH"
  start_control_plane "$B/etcd"
  local etcd_pid=$ETCD_PID api_pid=$API_PID sport
  PIDS+=("$etcd_pid" "$api_pid")
  sport=$(free_port)
  local sched_pid=""
  if [[ $variant != baseline ]]; then
    "$B/kube-scheduler" --kubeconfig="$SCRATCH/kubeconfig" --leader-elect=false --bind-address="$HOST" \
      --secure-port="$sport" --cert-dir="$SCRATCH/certs" >"$SCRATCH/scheduler.log" 2>&1 &
    sched_pid=$!; PIDS+=("$sched_pid")
    wait_until "kube-scheduler /readyz" 200 0.1 curl -skf "https://$HOST:$sport/readyz"
  fi
  local args=(--kubeconfig "$SCRATCH/kubeconfig" --nodes "$NODES" --pods "$PODS")
  case $variant in
    baseline) args+=(--variant basic --create-only) ;;
    basic) args+=(--variant basic) ;;
    anti-affinity) args=(--kubeconfig "$SCRATCH/kubeconfig" --nodes "$NODES" --pods "$AA_PODS" --variant anti-affinity) ;;
    topology-spread) args=(--kubeconfig "$SCRATCH/kubeconfig" --nodes "$NODES" --pods "$TS_PODS" --variant topology-spread) ;;
    preemption) args=(--kubeconfig "$SCRATCH/kubeconfig" --nodes "$PRE_NODES" --init-pods $((PRE_NODES * 4)) --pods "$PRE_PODS" --variant preemption) ;;
  esac
  local c0e c0a c0s=0
  c0e=$(cpu_s "$etcd_pid"); c0a=$(cpu_s "$api_pid"); [[ -n $sched_pid ]] && c0s=$(cpu_s "$sched_pid")
  local out
  out=$("$B/scheduler-bench" "${args[@]}")
  local ce ca cs=0 p99=n/a
  ce=$(cpu_s "$etcd_pid"); ca=$(cpu_s "$api_pid")
  if [[ -n $sched_pid ]]; then
    cs=$(cpu_s "$sched_pid")
    p99=$(curl -sk "https://$HOST:$sport/metrics" | hist_p99)
  fi
  printf '%-16s %s attempt_p99_ms<=%s cpu_s(etcd=%.1f apiserver=%.1f scheduler=%.1f)\n' "$variant" "$out" "$p99" \
    "$(sub "$ce" "$c0e")" "$(sub "$ca" "$c0a")" "$(sub "$cs" "$c0s")"
  stop_all
}

echo "nproc=$(nproc) nodes=$NODES pods=$PODS; cpu_s counts the measured phase only (after node/initial-pod setup)"
for v in $VARIANTS; do
  run_one "$v"
done
