#!/usr/bin/env bash
# Benchmark: Debian's real etcd 3.4 and ours, one after the other on this machine, each a
# single member with a fresh data dir under the same flags:
#   - etcdctl check perf --load=m and --load=l (writes/s, slowest request, stddev)
#   - etcd-read-bench: linearizable and serializable Range throughput and latency
#   - resident memory after the runs (VmRSS) and its peak (VmHWM)
# With AUTH=1 both servers run with auth enabled and every request comes from a
# non-root user whose role grants readwrite on "/" (simple tokens), so the figures
# include token lookup and the key-range permission check.
# Prints both sets of figures and the ratio ours/real. Not a test: machines are shared
# and noisy, so compare figures from the same run only.
#
#   hack/bench/etcd.sh            # full run (~5 minutes)
#   LOADS="m" READ_SECONDS=5 hack/bench/etcd.sh
#   AUTH=1 hack/bench/etcd.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/k8s-rs-target}"
LOADS="${LOADS:-m l}"
READ_SECONDS="${READ_SECONDS:-10}"
AUTH="${AUTH:-0}"
SCRATCH="${SCRATCH:-/var/tmp/etcd-bench}"
HOST=127.0.0.1

hack/install-deps.sh
. hack/bench/lib.sh
bench_build
OURS="$CARGO_TARGET_DIR/release/etcd"
READ_BENCH="$CARGO_TARGET_DIR/release/etcd-read-bench"
REAL=/usr/bin/etcd


PID=""
cleanup() {
  if [[ -n "$PID" ]]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
  rm -rf "$SCRATCH"
}
trap cleanup EXIT

declare -A R
EP=""
start_server() {
  local bin=$1
  rm -rf "$SCRATCH" && mkdir -p "$SCRATCH"
  local cport pport
  cport=$(free_port); pport=$(free_port)
  "$bin" --name bench --data-dir "$SCRATCH/data" \
    --listen-client-urls "http://$HOST:$cport" --advertise-client-urls "http://$HOST:$cport" \
    --listen-peer-urls "http://$HOST:$pport" --initial-advertise-peer-urls "http://$HOST:$pport" \
    --initial-cluster "bench=http://$HOST:$pport" >"$SCRATCH/log" 2>&1 &
  PID=$!
  EP="$HOST:$cport"
  wait_until "etcd at $EP" 100 0.1 env ETCDCTL_API=3 etcdctl --endpoints="$EP" endpoint health
  if [[ "$AUTH" == 1 ]]; then
    local c
    for c in "user add root:rootpw" "role add root" "user grant-role root root" "user add bench:pw" \
      "role add bench" "role grant-permission bench readwrite --prefix /" "user grant-role bench bench" \
      "auth enable"; do
      # shellcheck disable=SC2086
      ETCDCTL_API=3 etcdctl --endpoints="$EP" $c >/dev/null
    done
  fi
}
# The identity requests run as (none without AUTH=1).
USER_ARGS=()
if [[ "$AUTH" == 1 ]]; then USER_ARGS=(--user bench:pw); fi
stop_server() {
  R[$1,rss]=$(( $(awk '/VmRSS/ {print $2}' /proc/$PID/status) / 1024 ))
  R[$1,hwm]=$(( $(awk '/VmHWM/ {print $2}' /proc/$PID/status) / 1024 ))
  kill "$PID"; wait "$PID" 2>/dev/null || true; PID=""
}

# Each measurement gets a fresh server and data dir, so one run's leftovers (480k deleted
# keys after --load=l) do not distort the next.
run_one() {
  local name=$1 bin=$2
  start_server "$bin"
  local lin ser
  lin=$("$READ_BENCH" --endpoint "$EP" --duration "$READ_SECONDS" "${USER_ARGS[@]}")
  ser=$("$READ_BENCH" --endpoint "$EP" --duration "$READ_SECONDS" --serializable --no-preload "${USER_ARGS[@]}")
  R[$name,lin]=$(grep -oE 'reads/s=[0-9]+' <<<"$lin" | cut -d= -f2); R[$name,lin_p99]=$(grep -oE 'p99_ms=[0-9.]+' <<<"$lin" | cut -d= -f2)
  R[$name,ser]=$(grep -oE 'reads/s=[0-9]+' <<<"$ser" | cut -d= -f2); R[$name,ser_p99]=$(grep -oE 'p99_ms=[0-9.]+' <<<"$ser" | cut -d= -f2)
  stop_server "$name,reads"
  for load in $LOADS; do
    start_server "$bin"
    local out
    # check perf exits 1 when it FAILs; the figures are what we want either way.
    out=$(ETCDCTL_API=3 etcdctl --endpoints="$EP" "${USER_ARGS[@]}" check perf --load="$load" 2>&1 | tr '\r' '\n' || true)
    R[$name,$load,tput]=$(grep -oE 'Throughput (too low: |is )[0-9]+' <<<"$out" | grep -oE '[0-9]+$' || echo 0)
    R[$name,$load,slowest]=$(grep -oE 'took( too long:)? [0-9.]+s' <<<"$out" | grep -oE '[0-9.]+' | head -1 || echo ?)
    R[$name,$load,stddev]=$(grep -oE 'Stddev (too high: |is )[0-9.]+' <<<"$out" | grep -oE '[0-9.]+$' || echo ?)
    R[$name,$load,verdict]=$(tail -1 <<<"$out")
    stop_server "$name,$load"
  done
}

ratio() { python3 -c "import sys; a,b=float(sys.argv[1] or 0),float(sys.argv[2] or 0); print(f'{a/b:.2f}' if b else '-')" "$1" "$2"; }

echo "benchmarking real etcd ($($REAL --version | head -1)) ..." >&2
run_one real "$REAL"
echo "benchmarking ours ..." >&2
run_one ours "$OURS"

printf '\n%-34s %14s %14s %8s\n' "metric" "real etcd 3.4" "ours" "ours/real"
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
printf '%-34s %14s %14s %8s\n' "RSS after reads (MiB)" "${R[real,reads,rss]}" "${R[ours,reads,rss]}" "$(ratio "${R[ours,reads,rss]}" "${R[real,reads,rss]}")"
for load in $LOADS; do
  printf '%-34s %14s %14s %8s\n' "peak RSS, --load=$load (MiB)" "${R[real,$load,hwm]}" "${R[ours,$load,hwm]}" "$(ratio "${R[ours,$load,hwm]}" "${R[real,$load,hwm]}")"
done
