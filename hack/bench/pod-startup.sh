#!/usr/bin/env bash
# Pod startup latency on one real node: our etcd, kube-apiserver, kube-scheduler, a private
# containerd and our kubelet. Creates 30, then 100 pods of the local busybox image and
# reports, per batch, the latency from each pod's creation to it being observed Running
# through a watch (p50/p90/p99; upstream's SLO is p99 <= 5 s), and the kubelet's CPU
# seconds and peak RSS and containerd's RSS (containerd's shims are not counted).
#
#   hack/bench/pod-startup.sh [BATCH...]     (default: 30 100; needs root)
#
# Everything lives in a scratch directory that is removed at the end.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/k8s-rs-target}"
B="$CARGO_TARGET_DIR/release"
BATCHES=("$@")
((${#BATCHES[@]})) || BATCHES=(30 100)
HOST=127.0.0.1
TOKEN=bench-token
SCRATCH="$(mktemp -d /tmp/pod-startup.XXXXXX)"
source hack/bench/lib.sh

bench_build

PIDS=()
cleanup() {
  set +e
  [[ -n "${KUBELET_PID:-}" ]] && kill "$KUBELET_PID" 2>/dev/null && wait "$KUBELET_PID" 2>/dev/null
  if [[ -S "$SCRATCH/ctrd/containerd.sock" ]]; then
    local ctr=(ctr --address "$SCRATCH/ctrd/containerd.sock" -n k8s.io) id
    for id in $("${ctr[@]}" tasks ls -q); do "${ctr[@]}" tasks kill -s SIGKILL "$id" >/dev/null 2>&1; done
    for id in $("${ctr[@]}" tasks ls -q); do "${ctr[@]}" tasks delete -f "$id" >/dev/null 2>&1; done
    for id in $("${ctr[@]}" containers ls -q); do "${ctr[@]}" containers delete "$id" >/dev/null 2>&1; done
  fi
  local p
  for p in "${PIDS[@]}" ${API_PID:-} ${ETCD_PID:-}; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  grep " $SCRATCH" /proc/self/mounts | awk '{print $2}' | sort -r | xargs -r -n1 umount -l
  ip link delete k8srsbench0 2>/dev/null
  find /sys/fs/cgroup -maxdepth 2 -name k8srs-bench -type d 2>/dev/null | while read -r d; do
    find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null
  done
  rm -rf "$SCRATCH"
}
trap cleanup EXIT

# No controller-manager runs here, so nothing would lift the not-ready taint that
# TaintNodesByCondition puts on a new Node: that plugin is off, with ServiceAccount (no
# controller makes `default` accounts either).
API_ARGS=(--disable-admission-plugins=ServiceAccount,TaintNodesByCondition)
start_control_plane "$B/etcd"
"$B/kube-scheduler" --kubeconfig="$SCRATCH/kubeconfig" --leader-elect=false --secure-port=0 >"$SCRATCH/scheduler.log" 2>&1 &
PIDS+=($!)

hack/containerd-config.sh "$SCRATCH/ctrd" 10.250.0.0/16 k8srsbench0
containerd --config "$SCRATCH/ctrd/config.toml" >"$SCRATCH/containerd.log" 2>&1 &
CTRD_PID=$!
PIDS+=("$CTRD_PID")
wait_until containerd 100 0.1 ctr --address "$SCRATCH/ctrd/containerd.sock" version
hack/build-images.sh --address "$SCRATCH/ctrd/containerd.sock" >/dev/null

KPORT=$(free_port); HPORT=$(free_port)
cat >"$SCRATCH/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$SCRATCH/ctrd/containerd.sock
podLogsDir: $SCRATCH/pod-logs
cgroupRoot: /k8srs-bench
address: $HOST
port: $KPORT
healthzBindAddress: $HOST
healthzPort: $HPORT
maxPods: 250
YAML
"$B/kubelet" --kubeconfig="$SCRATCH/kubeconfig" --config="$SCRATCH/kubelet.yaml" --hostname-override=bench-node \
  --node-ip="$HOST" --root-dir="$SCRATCH/kubelet" >"$SCRATCH/kubelet.log" 2>&1 &
KUBELET_PID=$!
export KUBECONFIG="$SCRATCH/kubeconfig"
ready=""
for _ in $(seq 1 300); do
  if kubectl get node bench-node -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null | grep -q True; then
    ready=1
    break
  fi
  sleep 0.2
done
if [[ -z "$ready" ]]; then
  echo "pod-startup: the node did not become Ready; kubelet log:" >&2
  tail -20 "$SCRATCH/kubelet.log" >&2
  exit 1
fi

cpu_seconds() { awk -v t="$(getconf CLK_TCK)" '{print ($14 + $15) / t}' "/proc/$1/stat"; }
# CPU seconds of this benchmark's containerd shims (one per pod; runc's and the CNI
# plugins' time is counted in the shim or containerd that waited for them).
shim_cpu_seconds() {
  local pid total=0
  for pid in $(pgrep -f "containerd-shim.*-address $SCRATCH/ctrd/containerd.sock"); do
    total=$(awk -v a="$total" -v b="$(cpu_seconds "$pid" 2>/dev/null || echo 0)" 'BEGIN{print a + b}')
  done
  echo "$total"
}
# Busy CPU seconds of the whole machine (all but idle and iowait).
machine_busy_seconds() {
  awk -v t="$(getconf CLK_TCK)" '$1 == "cpu" {print ($2 + $3 + $4 + $7 + $8 + $9) / t}' /proc/stat
}
status_kib() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status"; }

# measure N: creates N pods while a watch records, per pod, when it was first seen (ADDED)
# and first seen Running; prints the latency percentiles.
measure() {
  local n=$1 cpu0 ctrd0 busy0 t0
  cpu0=$(cpu_seconds "$KUBELET_PID")
  ctrd0=$(cpu_seconds "$CTRD_PID")
  busy0=$(machine_busy_seconds)
  t0=$(date +%s.%N)
  python3 - "$n" "$SCRATCH" <<'PY'
import json, subprocess, sys, time, threading
n, scratch = int(sys.argv[1]), sys.argv[2]
watch = subprocess.Popen(["kubectl", "get", "pods", "-l", "bench=startup", "--watch", "--output-watch-events", "-o", "json"],
                         stdout=subprocess.PIPE, text=True)
added, running = {}, {}
def read():
    dec, buf = json.JSONDecoder(), ""
    for line in watch.stdout:
        buf += line
        while buf.strip():
            try:
                obj, end = dec.raw_decode(buf.lstrip())
            except ValueError:
                break
            buf = buf.lstrip()[end:]
            pod, now = obj["object"], time.monotonic()
            name = pod["metadata"]["name"]
            added.setdefault(name, now)
            if pod.get("status", {}).get("phase") == "Running":
                running.setdefault(name, now)
        if len(running) >= n:
            return
threading.Thread(target=read, daemon=True).start()
time.sleep(1)
docs = [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"startup-{i}", "labels": {"bench": "startup"}},
         "spec": {"terminationGracePeriodSeconds": 1,
                  "containers": [{"name": "c", "image": "localhost/busybox:1.35", "command": ["sleep", "3600"]}]}}
        for i in range(n)]
start = time.monotonic()
subprocess.run(["kubectl", "create", "-f", "-"], input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}),
               text=True, check=True, stdout=subprocess.DEVNULL)
deadline = time.monotonic() + 600
while len(running) < n and time.monotonic() < deadline:
    time.sleep(0.2)
watch.kill()
lat = sorted(running[k] - added[k] for k in running)
if len(lat) < n:
    print(f"  only {len(lat)}/{n} pods Running after 600 s")
# Nearest-rank percentiles.
pct = lambda p: lat[max(0, -(-p * len(lat) // 100) - 1)]
print(f"  {n} pods: all Running after {max(running.values()) - start:.1f} s; "
      f"startup latency p50 {pct(50):.2f} s, p90 {pct(90):.2f} s, p99 {pct(99):.2f} s, max {lat[-1]:.2f} s")
PY
  echo "  kubelet CPU $(awk -v a="$(cpu_seconds "$KUBELET_PID")" -v b="$cpu0" 'BEGIN{printf "%.1f", a-b}') s;" \
    "kubelet RSS $(($(status_kib "$KUBELET_PID" VmRSS) / 1024)) MiB (peak $(($(status_kib "$KUBELET_PID" VmHWM) / 1024)) MiB);" \
    "containerd RSS $(($(status_kib "$CTRD_PID" VmRSS) / 1024)) MiB (peak $(($(status_kib "$CTRD_PID" VmHWM) / 1024)) MiB)"
  echo "  CPU over the batch: containerd $(awk -v a="$(cpu_seconds "$CTRD_PID")" -v b="$ctrd0" 'BEGIN{printf "%.1f", a-b}') s," \
    "its $n shims $(awk -v a="$(shim_cpu_seconds)" 'BEGIN{printf "%.1f", a}') s," \
    "whole machine $(awk -v a="$(machine_busy_seconds)" -v b="$busy0" -v w="$(date +%s.%N)" -v t="$t0" -v c="$(nproc)" \
      'BEGIN{printf "%.1f s busy of %.1f s available (%.0f%%)", a-b, (w-t)*c, 100*(a-b)/((w-t)*c)}')"
  kubectl delete pods -l bench=startup --wait=true --timeout=600s >/dev/null
}

echo "pod-startup: one node, $(nproc) cores"
for n in "${BATCHES[@]}"; do
  measure "$n"
done
