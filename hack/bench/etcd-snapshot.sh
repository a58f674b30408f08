#!/usr/bin/env bash
# Benchmark: `etcdctl snapshot save` from our etcd and from Debian's real etcd 3.4, one
# after the other, each a single fresh member loaded with the same N keys (256-byte
# values, 100 puts per txn). Prints the time to save, the file size, the member's peak
# RSS before and after (VmHWM: ours builds the bbolt file in memory), and what
# `etcdctl snapshot status` reads from each file. Not a test: compare figures from the
# same run only.
#
#   hack/bench/etcd-snapshot.sh           # N=50000
#   N=200000 hack/bench/etcd-snapshot.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/k8s-rs-target}"
export ETCDCTL_API=3
N="${N:-50000}"
HOST=127.0.0.1
SCRATCH="$(mktemp -d /var/tmp/etcd-snapshot-bench.XXXXXX)"

hack/install-deps.sh
. hack/bench/lib.sh
bench_build

PID=""
cleanup() {
  if [[ -n "$PID" ]]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
  rm -rf "$SCRATCH"
}
trap cleanup EXIT

VALUE=$(head -c 192 /dev/urandom | base64 -w0)

# measure NAME BINARY: one member, N keys, one snapshot save; prints a line of figures.
measure() {
  local name=$1 bin=$2 cport pport ep t0 t1 hwm0 hwm1 status
  cport=$(free_port); pport=$(free_port); ep="$HOST:$cport"
  "$bin" --name bench --data-dir "$SCRATCH/$name" --quota-backend-bytes=8589934592 \
    --listen-client-urls "http://$ep" --advertise-client-urls "http://$ep" \
    --listen-peer-urls "http://$HOST:$pport" --initial-advertise-peer-urls "http://$HOST:$pport" \
    --initial-cluster "bench=http://$HOST:$pport" >"$SCRATCH/$name.log" 2>&1 &
  PID=$!
  wait_until "$name etcd at $ep" 100 0.1 etcdctl --endpoints="$ep" endpoint health
  for ((i = 0; i < N; i += 100)); do
    { echo; for ((j = i; j < i + 100 && j < N; j++)); do echo "put /bench/$j $VALUE"; done; echo; echo; } |
      etcdctl --endpoints="$ep" txn >/dev/null
  done
  hwm0=$(awk '/VmHWM/{print $2}' "/proc/$PID/status")
  t0=$(date +%s.%N)
  etcdctl --endpoints="$ep" snapshot save "$SCRATCH/$name.snap" >/dev/null 2>&1
  t1=$(date +%s.%N)
  hwm1=$(awk '/VmHWM/{print $2}' "/proc/$PID/status")
  status=$(etcdctl snapshot status "$SCRATCH/$name.snap" -w json)
  printf '%-5s save %.3f s  file %d bytes  VmHWM %d -> %d KiB  status %s\n' \
    "$name" "$(bc <<<"$t1 - $t0")" "$(stat -c %s "$SCRATCH/$name.snap")" "$hwm0" "$hwm1" "$status"
  kill "$PID"; wait "$PID" 2>/dev/null || true; PID=""
}

echo "N=$N keys of 256 bytes"
measure ours "$CARGO_TARGET_DIR/release/etcd"
measure real /usr/bin/etcd
