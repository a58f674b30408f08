#!/usr/bin/env bash
# Benchmark: each kube-apiserver (ours and upstream's v1.28.4 from ../shared/upstream) with
# each etcd behind it (Debian's real etcd 3.4 and ours), one after the other on this machine,
# with fresh data each time and the same client and load:
#   - create 10k pods with CLIENTS concurrent clients while WATCHERS cluster-scope watches
#     follow them (create QPS and p50/p99; watch delivery latency from create start)
#   - READ_SECONDS of concurrent gets and namespace lists over the 10k pods
#   - cluster-scope list latency at 10k pods (watch cache, consistent, paged by 500)
#   - grow to 50k pods and list again
#   - resident memory (VmRSS) of the apiserver and etcd, empty and per 10k pods
#   - custom resources (CUSTOM=1, the default): on real etcd, each API server creates,
#     gets, lists and watches CUSTOM_N CronTabs of a CRD with a CEL rule, beside the same
#     for CUSTOM_N ConfigMaps; reported as the ratio custom/built-in (issue 20's goal: >= 0.8)
# Not a test: machines are shared and noisy; compare figures from the same run only.
# Upstream's SLO for single-object calls is p99 <= 1 s.
#
#   hack/bench/apiserver.sh                       # ~5 minutes per pair
#   BACKENDS=ours APISERVERS=ours LARGE=20000 hack/bench/apiserver.sh
#
# BACKENDS lists the etcds (real, ours), APISERVERS the API servers (ours, upstream; upstream
# is left out, with a message, when ../shared/upstream is absent).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/k8s-rs-target}"
BACKENDS="${BACKENDS:-real ours}"
UPSTREAM_DIR="${UPSTREAM_DIR:-$ROOT/../shared/upstream}"
if [[ -z "${APISERVERS:-}" ]]; then
  APISERVERS=ours
  if [[ -x "$UPSTREAM_DIR/install.sh" ]]; then APISERVERS="ours upstream"; else echo "no $UPSTREAM_DIR: measuring our API server only" >&2; fi
fi
CLIENTS="${CLIENTS:-16}"
WATCHERS="${WATCHERS:-4}"
READ_SECONDS="${READ_SECONDS:-20}"
SMALL="${SMALL:-10000}"
LARGE="${LARGE:-50000}"
SCRATCH="${SCRATCH:-/var/tmp/apiserver-bench}"
CUSTOM="${CUSTOM:-1}"
CUSTOM_N="${CUSTOM_N:-10000}"
HOST=127.0.0.1
TOKEN=bench-token

hack/install-deps.sh
. hack/bench/lib.sh
bench_build
B="$CARGO_TARGET_DIR/release"
if [[ "$APISERVERS" == *upstream* ]]; then
  "$UPSTREAM_DIR/install.sh" "$CARGO_TARGET_DIR/upstream" >/dev/null
fi

rss_mib() { echo $(( $(awk '/VmRSS/ {print $2}' "/proc/$1/status") / 1024 )); }

ETCD_PID="" API_PID=""
stop_all() {
  for p in $API_PID $ETCD_PID; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  API_PID="" ETCD_PID=""
}
trap 'stop_all; [[ -n "${KEEP_SCRATCH:-}" ]] || rm -rf "$SCRATCH"' EXIT

# The runs: "<apiserver>-<etcd>" for every pair.
RUNS=()
for a in $APISERVERS; do for b in $BACKENDS; do RUNS+=("$a-$b"); done; done

declare -A R
run_one() {
  local name=$1 etcd_bin=$2
  rm -rf "$SCRATCH"
  if [[ "$name" == upstream-* ]]; then
    API_BIN="$CARGO_TARGET_DIR/upstream/kube-apiserver" API_UPSTREAM=1 start_control_plane "$etcd_bin"
  else
    API_BIN="$B/kube-apiserver" API_UPSTREAM=0 start_control_plane "$etcd_bin"
  fi
  local aport=$API_PORT
  local bench=("$B/apiserver-bench" --server "https://$HOST:$aport" --token "$TOKEN" --ca "$SCRATCH/certs/apiserver.crt" --clients "$CLIENTS")
  R[$name,api_rss0]=$(rss_mib "$API_PID"); R[$name,etcd_rss0]=$(rss_mib "$ETCD_PID")

  local out
  out=$("${bench[@]}" create --pods "$SMALL" --watchers "$WATCHERS"); echo "$out" >&2
  R[$name,create]=$(grep '^create ' <<<"$out"); R[$name,watch]=$(grep '^watch-event ' <<<"$out")
  R[$name,api_rss10k]=$(rss_mib "$API_PID"); R[$name,etcd_rss10k]=$(rss_mib "$ETCD_PID")
  out=$("${bench[@]}" read --seconds "$READ_SECONDS" --pods "$SMALL"); echo "$out" >&2
  R[$name,get]=$(grep '^get ' <<<"$out"); R[$name,listns]=$(grep '^list-namespace ' <<<"$out")
  out=$("${bench[@]}" list-all --times 5); echo "$out" >&2
  R[$name,small,rv0]=$(grep '^list-all-rv0 ' <<<"$out"); R[$name,small,cons]=$(grep '^list-all ' <<<"$out"); R[$name,small,paged]=$(grep '^list-all-paged ' <<<"$out")
  out=$("${bench[@]}" create --pods $((LARGE - SMALL)) --start "$SMALL" --watchers 1); echo "$out" >&2
  R[$name,create_large]=$(grep '^create ' <<<"$out")
  out=$("${bench[@]}" list-all --times 3); echo "$out" >&2
  R[$name,large,rv0]=$(grep '^list-all-rv0 ' <<<"$out"); R[$name,large,cons]=$(grep '^list-all ' <<<"$out"); R[$name,large,paged]=$(grep '^list-all-paged ' <<<"$out")
  R[$name,api_rss_large]=$(rss_mib "$API_PID"); R[$name,etcd_rss_large]=$(rss_mib "$ETCD_PID")
  stop_all
}

# The CronTab CRD of the custom-resource run: a schema, a default and a CEL rule.
CRONTAB_CRD='{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
 "metadata":{"name":"crontabs.stable.example.com"},
 "spec":{"group":"stable.example.com","scope":"Namespaced",
  "names":{"plural":"crontabs","singular":"crontab","kind":"CronTab"},
  "versions":[{"name":"v1","served":true,"storage":true,"subresources":{"status":{}},
   "schema":{"openAPIV3Schema":{"type":"object","properties":{"spec":{"type":"object",
    "x-kubernetes-validations":[{"rule":"self.replicas <= 100","message":"at most 100 replicas"}],
    "properties":{"cronSpec":{"type":"string"},"image":{"type":"string"},
     "replicas":{"type":"integer","minimum":0,"default":1}}}}}}}]}}'

# run_custom NAME: on real etcd, ConfigMaps then CronTabs, the same load for each.
run_custom() {
  local name=$1 out
  rm -rf "$SCRATCH"
  if [[ "$name" == upstream-* ]]; then
    API_BIN="$CARGO_TARGET_DIR/upstream/kube-apiserver" API_UPSTREAM=1 start_control_plane /usr/bin/etcd
  else
    API_BIN="$B/kube-apiserver" API_UPSTREAM=0 start_control_plane /usr/bin/etcd
  fi
  kubectl --kubeconfig "$SCRATCH/kubeconfig" create -f - <<<"$CRONTAB_CRD" >/dev/null
  kubectl --kubeconfig "$SCRATCH/kubeconfig" wait --for=condition=Established crd/crontabs.stable.example.com --timeout=60s >/dev/null
  wait_until "crontabs served" 100 0.1 kubectl --kubeconfig "$SCRATCH/kubeconfig" get crontabs -A
  for kind in configmaps crontabs; do
    local bench=("$B/apiserver-bench" --server "https://$HOST:$API_PORT" --token "$TOKEN" --ca "$SCRATCH/certs/apiserver.crt" --clients "$CLIENTS" --resource "$kind")
    out=$("${bench[@]}" create --pods "$CUSTOM_N" --watchers "$WATCHERS"); echo "$out" >&2
    R[$name,$kind,create]=$(grep '^create ' <<<"$out"); R[$name,$kind,watch]=$(grep '^watch-event ' <<<"$out")
    out=$("${bench[@]}" read --seconds "$READ_SECONDS" --pods "$CUSTOM_N"); echo "$out" >&2
    R[$name,$kind,get]=$(grep '^get ' <<<"$out"); R[$name,$kind,listns]=$(grep '^list-namespace ' <<<"$out")
    out=$("${bench[@]}" list-all --times 5); echo "$out" >&2
    R[$name,$kind,cons]=$(grep '^list-all ' <<<"$out")
  done
  stop_all
}

field() { grep -oE "$2=[0-9.]+" <<<"$1" | cut -d= -f2 || true; }
ratio() { python3 -c "import sys; a,b=float(sys.argv[1] or 0),float(sys.argv[2] or 0); print(f'{a/b:.2f}' if b else '-')" "$1" "$2"; }
per10k() { python3 -c "import sys; print(f'{(float(sys.argv[1])-float(sys.argv[2]))*10000/float(sys.argv[3]):.0f}')" "$1" "$2" "$3"; }

for r in "${RUNS[@]}"; do
  case ${r#*-} in
    real) echo "${r%-*} kube-apiserver on real etcd ($(/usr/bin/etcd --version | head -1)) ..." >&2; run_one "$r" /usr/bin/etcd ;;
    ours) echo "${r%-*} kube-apiserver on our etcd ..." >&2; run_one "$r" "$B/etcd" ;;
    *) echo "unknown etcd backend ${r#*-}" >&2; exit 2 ;;
  esac
done

if [[ "$CUSTOM" == 1 ]]; then
  for a in $APISERVERS; do
    echo "$a kube-apiserver on real etcd: $CUSTOM_N ConfigMaps, then $CUSTOM_N CronTabs ..." >&2
    run_custom "$a-custom"
  done
fi

printf '\n%-40s' "metric (CLIENTS=$CLIENTS)"; for r in "${RUNS[@]}"; do printf ' %16s' "api=${r%-*}"; done; echo
printf '%-40s' ""; for r in "${RUNS[@]}"; do printf ' %16s' "etcd=${r#*-}"; done; echo
row() {
  local label=$1 key=$2 f=$3
  printf '%-40s' "$label"
  for r in "${RUNS[@]}"; do printf ' %16s' "$(field "${R[$r,$key]}" "$f")"; done
  echo
}
row "create pods/s (to $SMALL)" create qps; row "  create p50 ms" create p50_ms; row "  create p99 ms" create p99_ms
row "watch delivery p50 ms ($WATCHERS watchers)" watch p50_ms; row "  watch delivery p99 ms" watch p99_ms
row "get/s" get qps; row "  get p50 ms" get p50_ms; row "  get p99 ms" get p99_ms
row "list namespace (${SMALL}/100 pods)/s" listns qps; row "  list namespace p50 ms" listns p50_ms; row "  list namespace p99 ms" listns p99_ms
row "list all $SMALL, rv=0, p50 ms" small,rv0 p50_ms; row "list all $SMALL, consistent, p50 ms" small,cons p50_ms; row "list all $SMALL, pages of 500, p50 ms" small,paged p50_ms
row "create pods/s ($SMALL to $LARGE)" create_large qps; row "  create p99 ms" create_large p99_ms
row "list all $LARGE, rv=0, p50 ms" large,rv0 p50_ms; row "list all $LARGE, consistent, p50 ms" large,cons p50_ms; row "list all $LARGE, pages of 500, p50 ms" large,paged p50_ms
for what in api etcd; do
  printf '%-40s' "$what RSS empty / $SMALL / $LARGE (MiB)"
  for r in "${RUNS[@]}"; do printf ' %16s' "${R[$r,${what}_rss0]}/${R[$r,${what}_rss10k]}/${R[$r,${what}_rss_large]}"; done; echo
  printf '%-40s' "  $what RSS per 10k pods (MiB)"
  for r in "${RUNS[@]}"; do printf ' %16s' "$(per10k "${R[$r,${what}_rss_large]}" "${R[$r,${what}_rss0]}" "$LARGE")"; done; echo
done
# ratios A B: A's figures over B's, where both ran.
ratios() {
  local a=$1 b=$2
  [[ -n "${R[$a,create]:-}" && -n "${R[$b,create]:-}" ]] || return 0
  echo "$a / $b: create qps $(ratio "$(field "${R[$a,create]}" qps)" "$(field "${R[$b,create]}" qps)")," \
    "get qps $(ratio "$(field "${R[$a,get]}" qps)" "$(field "${R[$b,get]}" qps)")," \
    "list-namespace qps $(ratio "$(field "${R[$a,listns]}" qps)" "$(field "${R[$b,listns]}" qps)")," \
    "list-all consistent at $LARGE $(ratio "$(field "${R[$a,large,cons]}" p50_ms)" "$(field "${R[$b,large,cons]}" p50_ms)")x latency," \
    "watch p99 $(ratio "$(field "${R[$a,watch]}" p99_ms)" "$(field "${R[$b,watch]}" p99_ms)")x," \
    "API server RSS at $LARGE $(ratio "${R[$a,api_rss_large]}" "${R[$b,api_rss_large]}")x"
}
echo
ratios ours-ours ours-real
ratios ours-real upstream-real
ratios ours-ours upstream-ours
ratios upstream-ours upstream-real

if [[ "$CUSTOM" == 1 ]]; then
  echo
  echo "custom resources, $CUSTOM_N objects on real etcd: CronTab (CEL rule) / ConfigMap"
  for a in $APISERVERS; do
    n="$a-custom"
    [[ -n "${R[$n,crontabs,create]:-}" ]] || continue
    echo "  $a: create qps $(ratio "$(field "${R[$n,crontabs,create]}" qps)" "$(field "${R[$n,configmaps,create]}" qps)")," \
      "get qps $(ratio "$(field "${R[$n,crontabs,get]}" qps)" "$(field "${R[$n,configmaps,get]}" qps)")," \
      "list-namespace qps $(ratio "$(field "${R[$n,crontabs,listns]}" qps)" "$(field "${R[$n,configmaps,listns]}" qps)")," \
      "list-all consistent latency $(ratio "$(field "${R[$n,crontabs,cons]}" p50_ms)" "$(field "${R[$n,configmaps,cons]}" p50_ms)")x," \
      "watch p99 $(ratio "$(field "${R[$n,crontabs,watch]}" p99_ms)" "$(field "${R[$n,configmaps,watch]}" p99_ms)")x" \
      "(create qps: ConfigMaps $(field "${R[$n,configmaps,create]}" qps), CronTabs $(field "${R[$n,crontabs,create]}" qps))"
  done
fi
