#!/usr/bin/env bash
# Benchmark: kube-proxy in both modes (nftables and iptables, same run) and kube-dns, against
# our etcd and kube-apiserver on this machine. No pods: Services and EndpointSlices are
# created through the API server by hack/src/bin/kube-proxy-bench.rs, and kube-proxy runs in
# a network namespace of its own (veth $NET.1 here <-> $NET.2 there), so it programs that
# namespace's nftables/iptables, never the host's. Phases:
#   proxy  for each size in SIZES (ascending): Services svc-<i> in namespace `bench` up to
#          that many, each with one EndpointSlice of ENDPOINTS ready endpoints (created
#          concurrently; later sizes add to earlier ones). Then for each mode in MODES, on a
#          flushed ruleset, a fresh kube-proxy (upstream defaults: min sync period 1s, sync
#          period 30s; conntrack sysctls left alone) and kube-proxy-bench measure:
#            - start -> first IPv4 sync done, and that full sync's duration (from its log:
#              the metrics mix the IPv4 and the (empty) IPv6 proxier),
#            - UPDATES EndpointSlice updates INTERVAL_MS apart (one endpoint replaced, the
#              last-change-trigger-time annotation set to now): the partial sync that
#              programmed each (sync_partial histogram delta) and the network-programming
#              latency p50/p99 = trigger time -> end of that sync (its last_timestamp metric;
#              the sync ends after the kernel accepted the rules; the value kube-proxy feeds
#              its network_programming histogram, whose 0.25s buckets are too coarse). The
#              kernel itself is checked (not timed) before and after the updates: every
#              endpoint of the updated Services must be in `nft list chains` / iptables-save
#              of the namespace. (Timing by polling the kernel was tried: one `nft list chain`
#              costs ~250ms at 1000 Services, too coarse and too much CPU.)
#            - kube-proxy's CPU seconds (utime+stime) and peak RSS (VmHWM).
#          Then the table, the ratios nftables/iptables per size, and the goals (nftables
#          full sync of the largest size <= 1s, one-endpoint change <= 50ms).
#   dns    kube-dns on loopback over the same cluster (the Services of the largest size),
#          forwarding to a fake upstream resolver on loopback (python3, answers every A
#          query with 192.0.2.1, TTL 300): dnsperf queries/s, latency and kube-dns CPU for
#          cluster names (svc-<i>.bench.svc.cluster.local) and for cached external names
#          (DNS_EXTERNAL names, asked once before the measured run).
# INTERVAL_MS is above twice the min sync period: in nftables mode each change brings a
# second sync 1.1s later (deleting the flushed chains), and syncs share a token bucket (1 per
# min sync period, burst 2); closer updates would measure the rate limiter.
# Env: SIZES (default "1000 5000 10000"), MODES ("nftables iptables"), ENDPOINTS (10),
# UPDATES (100), INTERVAL_MS (2200), PHASES ("proxy,dns"), KP_ARGS (extra kube-proxy flags,
# word-split), DNS_SECONDS (10), DNS_EXTERNAL (1000), NET (10.254.254; a /30 out of it),
# RESULTS (a path to keep the results TSV at), SCRATCH (/var/tmp/kube-proxy-bench), BUILD
# (0: skip the workspace build and use the binaries already in $CARGO_TARGET_DIR/release).
# Needs root, ip, nft, iptables (hack/install-deps.sh) and dnsperf (installed if missing).
# Not a test: compare figures from the same run only.
#
#   hack/bench/kube-proxy.sh
#   SIZES=1000 UPDATES=20 PHASES=proxy hack/bench/kube-proxy.sh
#   PHASES=dns SIZES=10000 hack/bench/kube-proxy.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/k8s-rs-target}"
SIZES="${SIZES:-1000 5000 10000}"
MODES="${MODES:-nftables iptables}"
ENDPOINTS="${ENDPOINTS:-10}"
UPDATES="${UPDATES:-100}"
INTERVAL_MS="${INTERVAL_MS:-2200}"
PHASES="${PHASES:-proxy,dns}"
KP_ARGS="${KP_ARGS:-}"
DNS_SECONDS="${DNS_SECONDS:-10}"
DNS_EXTERNAL="${DNS_EXTERNAL:-1000}"
NET="${NET:-10.254.254}"
RESULTS="${RESULTS:-}"
SCRATCH="${SCRATCH:-/var/tmp/kube-proxy-bench}"
HOST="$NET.1"
NODE_IP="$NET.2"
NODE=kpbench-node
NETNS="kpbench$$"
VETH="kpb$$"
CLUSTER_CIDR=10.128.0.0/12
TOKEN=bench-token

hack/install-deps.sh
if [[ ",$PHASES," == *,dns,* ]] && ! command -v dnsperf >/dev/null; then
  echo "installing dnsperf" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dnsperf >/dev/null ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dnsperf >/dev/null; }
fi
B="$CARGO_TARGET_DIR/release"
TICK=$(getconf CLK_TCK)
SIZES_SORTED=$(tr ' ' '\n' <<<"$SIZES" | grep -E '^[0-9]+$' | sort -n | uniq | tr '\n' ' ')
MAX_SIZE=$(tr ' ' '\n' <<<"$SIZES_SORTED" | grep . | tail -1)

. hack/bench/lib.sh
bench_build
cpu_s() { awk -v t="$TICK" '{printf "%.2f", ($14+$15)/t}' "/proc/$1/stat"; }

PIDS=()
KP_PID=""
NETNS_CREATED=""
cleanup() {
  set +e
  # kube-proxy finishes a running sync before it exits: stop its iptables-restore too.
  [[ -n "$KP_PID" ]] && { kill "$KP_PID" 2>/dev/null; pkill -TERM -P "$KP_PID" 2>/dev/null; wait "$KP_PID" 2>/dev/null; }
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  if [[ -n "$NETNS_CREATED" ]]; then
    # Only what this script started runs in its namespace.
    for p in $(ip netns pids "$NETNS" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    ip link del "$VETH" 2>/dev/null
    ip netns del "$NETNS" 2>/dev/null
  fi
  rm -rf "$SCRATCH"
}
trap cleanup EXIT

if ip -br addr | grep -q " $NET\."; then
  echo "$NET.0/30 is in use on this host; pick another NET" >&2
  exit 1
fi
rm -rf "$SCRATCH"
mkdir -p "$SCRATCH"
ip netns add "$NETNS"
NETNS_CREATED=1
ip link add "$VETH" type veth peer name eth0 netns "$NETNS"
ip addr add "$HOST/30" dev "$VETH"
ip link set "$VETH" up
ip -n "$NETNS" link set lo up
ip -n "$NETNS" addr add "$NODE_IP/30" dev eth0
ip -n "$NETNS" link set eth0 up
ip -n "$NETNS" route add default via "$HOST"

# etcd and kube-apiserver on the host end of the veth, reachable from the namespace.
API_ARGS=(--disable-admission-plugins=ServiceAccount --service-cluster-ip-range=10.96.0.0/16)
start_control_plane "$B/etcd"
PIDS+=("$ETCD_PID" "$API_PID")
curl -skf "https://$HOST:$API_PORT/readyz" >/dev/null || { echo "kube-apiserver not ready; see below" >&2; tail -20 "$SCRATCH/apiserver.log" >&2; exit 1; }
echo "nproc=$(nproc) sizes=$SIZES_SORTED x $ENDPOINTS endpoints, modes=$MODES, updates=$UPDATES every ${INTERVAL_MS}ms, phases=$PHASES, kernel $(uname -r), $(nft --version), $(iptables --version)"

populate() {
  "$B/kube-proxy-bench" populate --kubeconfig "$SCRATCH/kubeconfig" --services "$1" --endpoints "$ENDPOINTS" \
    --node "$NODE" --node-ip "$NODE_IP"
}

if [[ ",$PHASES," == *,proxy,* ]]; then
  run=0
  for size in $SIZES_SORTED; do
    populate "$size"
    for mode in $MODES; do
      ip netns exec "$NETNS" nft flush ruleset
      log="$SCRATCH/kube-proxy-$mode-$size.log"
      start=$(date +%s.%N)
      # shellcheck disable=SC2086 # KP_ARGS is a list of flags
      ip netns exec "$NETNS" "$B/kube-proxy" --kubeconfig="$SCRATCH/kubeconfig" --proxy-mode="$mode" \
        --hostname-override="$NODE" --cluster-cidr="$CLUSTER_CIDR" \
        --metrics-bind-address="$NODE_IP:10249" --healthz-bind-address="$NODE_IP:10256" \
        --conntrack-max-per-core=0 $KP_ARGS >"$log" 2>&1 &
      KP_PID=$!
      if ! "$B/kube-proxy-bench" measure --kubeconfig "$SCRATCH/kubeconfig" --mode "$mode" --services "$size" \
        --endpoints "$ENDPOINTS" --pid "$KP_PID" --start-unix "$start" --metrics "$NODE_IP:10249" \
        --netns "$NETNS" --log "$log" --updates "$UPDATES" --interval-ms "$INTERVAL_MS" --run-index "$run" \
        --results "$SCRATCH/results.tsv"; then
        echo "kube-proxy $mode, $size Services: measurement failed; the end of its log:" >&2
        tail -30 "$log" >&2
        exit 1
      fi
      kill "$KP_PID"
      wait "$KP_PID" 2>/dev/null || true
      KP_PID=""
      run=$((run + 1))
    done
  done
  ip netns exec "$NETNS" nft flush ruleset
  "$B/kube-proxy-bench" report --results "$SCRATCH/results.tsv"
  [[ -z "$RESULTS" ]] || cp "$SCRATCH/results.tsv" "$RESULTS"
else
  populate "$MAX_SIZE"
fi

if [[ ",$PHASES," == *,dns,* ]]; then
  echo
  cat >"$SCRATCH/upstream.py" <<'PY'
# A fake upstream resolver: every A question gets 192.0.2.1 (TTL 300), others an empty answer.
import socket, struct, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", int(sys.argv[1])))
while True:
    d, peer = s.recvfrom(4096)
    if len(d) < 17:
        continue
    i = 12
    while i < len(d) and d[i] != 0:
        i += 1 + d[i]
    if i + 5 > len(d):
        continue
    question = d[12:i + 5]
    qtype = struct.unpack(">H", d[i + 1:i + 3])[0]
    answer = b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 300, 4) + bytes([192, 0, 2, 1]) if qtype == 1 else b""
    flags = 0x8180 | (struct.unpack(">H", d[2:4])[0] & 0x0100)
    s.sendto(d[:2] + struct.pack(">HHHHH", flags, 1, 1 if answer else 0, 0, 0) + question + answer, peer)
PY
  up_port=$(free_port)
  python3 "$SCRATCH/upstream.py" "$up_port" >"$SCRATCH/upstream.log" 2>&1 &
  UP_PID=$!; PIDS+=("$UP_PID")
  dns_port=$(free_port); m_port=$(free_port); h_port=$(free_port); r_port=$(free_port)
  "$B/kube-dns" --kubeconfig "$SCRATCH/kubeconfig" --dns-bind-address 127.0.0.1 --dns-port "$dns_port" \
    --upstream "127.0.0.1:$up_port" --metrics-bind-address "127.0.0.1:$m_port" \
    --health-bind-address "127.0.0.1:$h_port" --ready-bind-address "127.0.0.1:$r_port" >"$SCRATCH/kube-dns.log" 2>&1 &
  DNS_PID=$!; PIDS+=("$DNS_PID")
  wait_until "kube-dns /ready" 600 0.1 curl -sf "http://127.0.0.1:$r_port/ready"
  curl -sf "http://127.0.0.1:$r_port/ready" >/dev/null || { echo "kube-dns not ready:" >&2; tail -20 "$SCRATCH/kube-dns.log" >&2; exit 1; }
  seq 0 $((MAX_SIZE - 1)) | shuf | awk '{print "svc-" $1 ".bench.svc.cluster.local A"}' >"$SCRATCH/cluster.q"
  seq 0 $((DNS_EXTERNAL - 1)) | shuf | awk '{print "host-" $1 ".bench.example A"}' >"$SCRATCH/external.q"
  dig +short -p "$dns_port" @127.0.0.1 svc-0.bench.svc.cluster.local A | grep -q '^10\.96\.' ||
    { echo "kube-dns does not answer svc-0.bench.svc.cluster.local" >&2; tail -20 "$SCRATCH/kube-dns.log" >&2; exit 1; }
  cache_metric() { curl -s "http://127.0.0.1:$m_port/metrics" | awk -v n="$1" '$1 ~ "^"n {s += $NF} END {printf "%d", s}'; }
  dns_run() {
    local label=$1 file=$2 c0 c1 h0 h1 mi0 mi1 out
    c0=$(cpu_s "$DNS_PID"); h0=$(cache_metric coredns_cache_hits); mi0=$(cache_metric coredns_cache_misses)
    out=$(dnsperf -s 127.0.0.1 -p "$dns_port" -d "$file" -l "$DNS_SECONDS" -c 4 2>&1) || { echo "$out" >&2; return 1; }
    c1=$(cpu_s "$DNS_PID"); h1=$(cache_metric coredns_cache_hits); mi1=$(cache_metric coredns_cache_misses)
    local qps lost lat rcodes runtime
    qps=$(awk '/Queries per second/ {print $4}' <<<"$out")
    lost=$(awk '/Queries lost/ {print $3, $4}' <<<"$out")
    lat=$(awk '/Average Latency/ {printf "%.3f", $4 * 1000}' <<<"$out")
    runtime=$(awk '/Run time/ {print $4}' <<<"$out")
    rcodes=$(awk -F': *' '/Response codes/ {print $2}' <<<"$out")
    printf 'dns %-32s %9.0f queries/s, avg latency %s ms, lost %s, rcodes %s; kube-dns CPU %.2fs (%.0f%% of a core), cache hits %d misses %d\n' \
      "$label" "$qps" "$lat" "$lost" "$rcodes" "$(awk -v a="$c0" -v b="$c1" 'BEGIN {print b - a}')" \
      "$(awk -v a="$c0" -v b="$c1" -v t="$runtime" 'BEGIN {print (b - a) * 100 / t}')" "$((h1 - h0))" "$((mi1 - mi0))"
  }
  # The external names once through upstream (not measured), then from the cache.
  dnsperf -s 127.0.0.1 -p "$dns_port" -d "$SCRATCH/external.q" -n 1 -c 4 >/dev/null 2>&1 || true
  dns_run "cluster names ($MAX_SIZE Services)" "$SCRATCH/cluster.q"
  dns_run "cached external ($DNS_EXTERNAL names)" "$SCRATCH/external.q"
  printf 'dns kube-dns peak RSS %s MiB (dnsperf %ss per run, 4 sockets, up to 100 queries in flight, on the same 2 cores)\n' \
    "$(awk '/VmHWM/ {printf "%.0f", $2/1024}' "/proc/$DNS_PID/status")" "$DNS_SECONDS"
fi
