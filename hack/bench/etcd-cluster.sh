#!/usr/bin/env bash
# Benchmark: a 3-member cluster of Debian's real etcd 3.4 and a 3-member cluster of ours,
# one after the other on this machine, every member with a fresh data dir under the same
# flags:
#   - etcdctl check perf --load=m and --load=l against all three endpoints
#   - etcd-read-bench: linearizable and serializable Range throughput and latency, the
#     connections spread over the three members
#   - leader failover: kill -9 the leader, time until a put through the two others is
#     acknowledged (etcd-put-probe starts one every 10 ms); repeated FAILOVERS times, the
#     killed member restarted and the cluster healthy again in between
# Prints both sets of figures and the ratio ours/real. Not a test: machines are shared
# and noisy, so compare figures from the same run only.
#
#   hack/bench/etcd-cluster.sh            # full run (~8 minutes)
#   LOADS="m" READ_SECONDS=5 FAILOVERS=1 hack/bench/etcd-cluster.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/k8s-rs-target}"
export ETCDCTL_API=3
LOADS="${LOADS:-m l}"
READ_SECONDS="${READ_SECONDS:-10}"
FAILOVERS="${FAILOVERS:-3}"
SCRATCH="${SCRATCH:-/var/tmp/etcd-cluster-bench}"
HOST=127.0.0.1
SIZE=3

hack/install-deps.sh
. hack/bench/lib.sh
bench_build
OURS="$CARGO_TARGET_DIR/release/etcd"
READ_BENCH="$CARGO_TARGET_DIR/release/etcd-read-bench"
PUT_PROBE="$CARGO_TARGET_DIR/release/etcd-put-probe"
REAL=/usr/bin/etcd


BIN=""
PIDS=()
ARGS=()
EPS=()
ALL=""

cleanup() {
  for pid in "${PIDS[@]}"; do
    if [[ -n "$pid" ]]; then kill -9 "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  done
  PIDS=()
  rm -rf "$SCRATCH"
}
trap cleanup EXIT

start_member() {
  local i=$1
  # shellcheck disable=SC2086 # ARGS[i] holds flags without spaces, split on purpose
  "$BIN" ${ARGS[$i]} >>"$SCRATCH/m$i.log" 2>&1 &
  PIDS[i]=$!
}

# Waits until every member answers `endpoint health` (a quorum read through each).
wait_healthy() {
  for _ in $(seq 1 300); do
    etcdctl --endpoints="$ALL" endpoint health >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "cluster not healthy after 30 s; logs in $SCRATCH" >&2
  tail -n 20 "$SCRATCH"/m*.log >&2
  return 1
}

start_cluster() {
  BIN=$1
  cleanup
  mkdir -p "$SCRATCH"
  local initial="" i cport pport
  local -a cports pports
  for i in $(seq 0 $((SIZE - 1))); do
    cports[i]=$(free_port); pports[i]=$(free_port)
    initial+="${initial:+,}b$i=http://$HOST:${pports[i]}"
  done
  EPS=()
  for i in $(seq 0 $((SIZE - 1))); do
    cport=${cports[i]}; pport=${pports[i]}
    EPS[i]="$HOST:$cport"
    ARGS[i]="--name b$i --data-dir $SCRATCH/m$i --initial-cluster-token bench
      --listen-client-urls http://$HOST:$cport --advertise-client-urls http://$HOST:$cport
      --listen-peer-urls http://$HOST:$pport --initial-advertise-peer-urls http://$HOST:$pport
      --initial-cluster $initial --initial-cluster-state new"
    start_member "$i"
  done
  ALL=$(IFS=,; echo "${EPS[*]}")
  wait_healthy
}

# Index (0..SIZE-1) of the member every endpoint names as leader; fails if they disagree.
leader_index() {
  etcdctl --endpoints="$ALL" endpoint status -w json 2>/dev/null | python3 -c '
import json, sys
rows = json.load(sys.stdin)
leaders = {r["Status"].get("leader", 0) for r in rows}
assert len(leaders) == 1 and 0 not in leaders, leaders
lead = leaders.pop()
print([r["Status"]["header"]["member_id"] for r in rows].index(lead))'
}

wait_leader() {
  for _ in $(seq 1 300); do
    leader_index 2>/dev/null && return 0
    sleep 0.1
  done
  echo "no agreed leader after 30 s" >&2
  return 1
}

declare -A R
run_one() {
  local name=$1 bin=$2
  # Reads: fresh cluster, preload through all members, then read from all of them.
  start_cluster "$bin"
  local lin ser
  lin=$("$READ_BENCH" --endpoint "$ALL" --duration "$READ_SECONDS")
  ser=$("$READ_BENCH" --endpoint "$ALL" --duration "$READ_SECONDS" --serializable --no-preload)
  echo "  $name linearizable: $lin" >&2
  echo "  $name serializable: $ser" >&2
  R[$name,lin]=$(grep -oE 'reads/s=[0-9]+' <<<"$lin" | cut -d= -f2); R[$name,lin_p99]=$(grep -oE 'p99_ms=[0-9.]+' <<<"$lin" | cut -d= -f2)
  R[$name,ser]=$(grep -oE 'reads/s=[0-9]+' <<<"$ser" | cut -d= -f2); R[$name,ser_p99]=$(grep -oE 'p99_ms=[0-9.]+' <<<"$ser" | cut -d= -f2)

  # Failover, on the same cluster: kill -9 the leader, time the first acknowledged put
  # through the others, restart the killed member, repeat.
  local k l others t0 out ms=()
  for k in $(seq 1 "$FAILOVERS"); do
    if ! l=$(wait_leader); then ms+=("no-leader"); break; fi
    others=$(for i in $(seq 0 $((SIZE - 1))); do [[ $i == "$l" ]] || echo "${EPS[i]}"; done | paste -sd,)
    t0=$(date +%s%N)
    kill -9 "${PIDS[l]}"
    # Reaped at once (a few µs, inside the measurement), so bash does not report the kill.
    wait "${PIDS[l]}" 2>/dev/null || true
    out=$("$PUT_PROBE" --endpoints "$others" --since-unix-ns "$t0" --give-up-s 30 2>&1) || out="failover_ms=none ($out)"
    echo "  $name failover $k (killed b$l): $out" >&2
    ms+=("$(grep -oE 'failover_ms=[a-z0-9]+' <<<"$out" | cut -d= -f2)")
    start_member "$l"
    # A cluster that does not recover ends the failover runs (its logs are printed).
    wait_healthy || { ms+=("unhealthy"); break; }
  done
  R[$name,failover]=$(printf '%s\n' "${ms[@]}" | python3 -c '
import sys, statistics
v = [float(x) for x in sys.stdin.read().split() if x.isdigit()]
print(f"{statistics.median(v):.0f}" if v else "-")')
  R[$name,failover_all]=$(IFS=/; echo "${ms[*]}")

  for load in $LOADS; do
    start_cluster "$bin"
    local perf
    # check perf exits 1 when it FAILs; the figures are what we want either way.
    perf=$(etcdctl --endpoints="$ALL" check perf --load="$load" 2>&1 | tr '\r' '\n' || true)
    R[$name,$load,tput]=$(grep -oE 'Throughput (too low: |is )[0-9]+' <<<"$perf" | grep -oE '[0-9]+$' || echo 0)
    R[$name,$load,slowest]=$(grep -oE 'took( too long:)? [0-9.]+s' <<<"$perf" | grep -oE '[0-9.]+' | head -1 || echo ?)
    R[$name,$load,stddev]=$(grep -oE 'Stddev (too high: |is )[0-9.]+' <<<"$perf" | grep -oE '[0-9.]+$' || echo ?)
    R[$name,$load,verdict]=$(tail -1 <<<"$perf")
    echo "  $name check perf --load=$load: ${R[$name,$load,tput]} writes/s, ${R[$name,$load,verdict]}" >&2
  done
  cleanup
}

ratio() { python3 -c "import sys; a,b=float(sys.argv[1] or 0),float(sys.argv[2] or 0); print(f'{a/b:.2f}' if b else '-')" "$1" "$2"; }

echo "benchmarking a $SIZE-member cluster of real etcd ($($REAL --version | head -1)) ..." >&2
run_one real "$REAL"
echo "benchmarking a $SIZE-member cluster of ours ..." >&2
run_one ours "$OURS"

printf '\n%s-member clusters on one machine (%s cores)\n' "$SIZE" "$(nproc)"
printf '%-34s %14s %14s %8s\n' "metric" "real etcd 3.4" "ours" "ours/real"
for load in $LOADS; do
  printf '%-34s %14s %14s %8s\n' "check perf --load=$load writes/s" "${R[real,$load,tput]}" "${R[ours,$load,tput]}" "$(ratio "${R[ours,$load,tput]}" "${R[real,$load,tput]}")"
  printf '%-34s %14s %14s %8s\n' "  slowest request (s)" "${R[real,$load,slowest]}" "${R[ours,$load,slowest]}" "$(ratio "${R[ours,$load,slowest]}" "${R[real,$load,slowest]}")"
  printf '%-34s %14s %14s %8s\n' "  stddev (s)" "${R[real,$load,stddev]}" "${R[ours,$load,stddev]}" "$(ratio "${R[ours,$load,stddev]}" "${R[real,$load,stddev]}")"
  printf '%-34s %14s %14s\n' "  verdict" "${R[real,$load,verdict]}" "${R[ours,$load,verdict]}"
done
printf '%-34s %14s %14s %8s\n' "linearizable reads/s" "${R[real,lin]}" "${R[ours,lin]}" "$(ratio "${R[ours,lin]}" "${R[real,lin]}")"
printf '%-34s %14s %14s %8s\n' "  p99 (ms)" "${R[real,lin_p99]}" "${R[ours,lin_p99]}" "$(ratio "${R[ours,lin_p99]}" "${R[real,lin_p99]}")"
printf '%-34s %14s %14s %8s\n' "serializable reads/s" "${R[real,ser]}" "${R[ours,ser]}" "$(ratio "${R[ours,ser]}" "${R[real,ser]}")"
printf '%-34s %14s %14s %8s\n' "  p99 (ms)" "${R[real,ser_p99]}" "${R[ours,ser_p99]}" "$(ratio "${R[ours,ser_p99]}" "${R[real,ser_p99]}")"
printf '%-34s %14s %14s %8s\n' "leader failover, median (ms)" "${R[real,failover]}" "${R[ours,failover]}" "$(ratio "${R[ours,failover]}" "${R[real,failover]}")"
printf '%-34s %14s %14s\n' "  each run (ms)" "${R[real,failover_all]}" "${R[ours,failover_all]}"
