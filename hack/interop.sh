#!/usr/bin/env bash
# Drop-in checks: clusters in which some components are upstream's own (v1.28.4, from
# ../shared/upstream) and the rest ours, each brought up by hack/local-up-cluster.sh (its
# *_BIN and *_EXTRA_ARGS variables) with two nodes, driven with kubectl, then stopped.
#
#   hack/interop.sh [--combos 1,2,3,4,5] [--results DIR] [--conformance] [--write-doc]
#
#   --combos L     which combinations to run (default 1,2,2b,3,4,5,5b):
#     1  upstream kube-scheduler + kube-controller-manager (every controller, the CSR
#        signer, bootstrapsigner, tokencleaner; delegated authn/authz) on our API server
#        and etcd
#     2  upstream kubelets on both nodes (containerd), by kubeconfig, on our control plane
#     2b upstream kubelets joining by bootstrap token and TLS bootstrap, their CSRs approved
#        and signed by our controller manager, on our control plane
#     3  upstream kube-proxy (iptables mode) on both nodes, on our control plane
#     4  ours (scheduler, controller manager, kubelets, kube-proxy) on upstream's API server
#        on real etcd (Debian's etcd-server)
#     5  upstream's API server on our etcd, with our other components
#     5b the same on three members of our etcd
#   --conformance  with 4, 5 and 5b: also run upstream's [sig-api-machinery] conformance specs
#                  (non-serial) on each, to compare upstream's API server on real etcd and
#                  on ours in the same run (adds ~15 min per combination)
#   --results D    results directory (default _output/interop/<UTC timestamp>)
#   --write-doc    write the summary table to docs/interop.md
#
# Each combination runs the same checks (nodes Ready; a Deployment, its Service reached by
# ClusterIP and by DNS name from a pod, EndpointSlices; a Job, CronJob, DaemonSet,
# StatefulSet, PodDisruptionBudget and HorizontalPodAutoscaler acted on; logs, exec and
# port-forward through the API server; a CSR signed when a signer runs) and counts the
# `Failed to watch` and `could not find the requested resource` lines in the upstream
# components' logs (the goal is 0). Results: DIR/summary.md, DIR/<combo>/checks.tsv and each
# cluster's logs under DIR/<combo>/cluster/logs. Needs root, containerd and
# ../shared/upstream; not part of hack/test.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

COMBOS="1,2,2b,3,4,5,5b" RESULTS="" CONFORMANCE=0 WRITE_DOC=0
while (($#)); do
  case "$1" in
    --combos) COMBOS="$2"; shift ;;
    --results) RESULTS="$2"; shift ;;
    --conformance) CONFORMANCE=1 ;;
    --write-doc) WRITE_DOC=1 ;;
    -h|--help) sed -n '2,33p' "$0"; exit 0 ;;
    *) echo "interop: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

die() { echo "interop: $*" >&2; exit 1; }
UPSTREAM_DIR="${UPSTREAM_DIR:-$ROOT/../shared/upstream}"
CONFORMANCE_DIR="${CONFORMANCE_DIR:-$ROOT/../shared/conformance}"
(($(id -u) == 0)) || die "needs root (containerd, network namespaces)"
[[ -x "$UPSTREAM_DIR/install.sh" ]] || die "no upstream components in $UPSTREAM_DIR (set UPSTREAM_DIR)"
command -v etcd >/dev/null || die "needs Debian's etcd (hack/install-deps.sh installs etcd-server)"
((CONFORMANCE == 0)) || [[ -x "$CONFORMANCE_DIR/e2e.test" ]] || die "--conformance needs $CONFORMANCE_DIR/e2e.test"

RESULTS="${RESULTS:-$ROOT/_output/interop/$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$RESULTS"
RESULTS="$(cd "$RESULTS" && pwd)"
UP="$RESULTS/upstream"
"$UPSTREAM_DIR/install.sh" "$UP" >/dev/null
UPSTREAM_VERSION="$("$UP/kube-apiserver" --version)"

hack/install-deps.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/k8s-rs-target}"
echo "interop: building ours"
cargo build --release --locked --workspace --bins --tests
export LOCAL_UP_BIN_DIR="$CARGO_TARGET_DIR/release"
COMMIT="$(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo '+changes')"

# The cluster signing CA (the CSR signer's, when upstream's controller manager runs it),
# trusted by the API server for client certificates.
PKI="$RESULTS/pki"
mkdir -p "$PKI"
openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=interop-cluster-ca" \
  -keyout "$PKI/ca.key" -out "$PKI/ca.crt" 2>/dev/null
# The front-proxy CA of the request-header authenticator, as kubeadm configures every API
# server (components with delegated authentication read it from
# kube-system/extension-apiserver-authentication).
openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=front-proxy-ca" \
  -keyout "$PKI/front-proxy-ca.key" -out "$PKI/front-proxy-ca.crt" 2>/dev/null
APISERVER_PKI_ARGS="--client-ca-file=$PKI/ca.crt --requestheader-client-ca-file=$PKI/front-proxy-ca.crt --requestheader-allowed-names=front-proxy-client --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group --requestheader-extra-headers-prefix=X-Remote-Extra-"

CLUSTER_PID=""
stop_cluster() {
  if [[ -n "$CLUSTER_PID" ]] && kill -0 "$CLUSTER_PID" 2>/dev/null; then
    kill -TERM "$CLUSTER_PID" 2>/dev/null || true
    wait "$CLUSTER_PID" 2>/dev/null || true
  fi
  CLUSTER_PID=""
  [[ -n "${PF_PID:-}" ]] && kill "$PF_PID" 2>/dev/null || true
  PF_PID=""
}
trap stop_cluster EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start_cluster DIR: hack/local-up-cluster.sh with the environment the combination set,
# waiting until it says it is running.
start_cluster() {
  local dir=$1
  export LOCAL_UP_DIR="$dir/cluster" NODES=2
  rm -rf "$LOCAL_UP_DIR"
  setsid hack/local-up-cluster.sh >"$dir/local-up-cluster.log" 2>&1 &
  CLUSTER_PID=$!
  local i
  for i in $(seq 1 600); do
    grep -q "^Local cluster is running" "$dir/local-up-cluster.log" 2>/dev/null && break
    if ! kill -0 "$CLUSTER_PID" 2>/dev/null; then
      tail -30 "$dir/local-up-cluster.log" >&2
      return 1
    fi
    sleep 1
  done
  grep -q "^Local cluster is running" "$dir/local-up-cluster.log"
  export KUBECONFIG="$LOCAL_UP_DIR/admin.kubeconfig"
}

# check NAME CMD...: runs CMD, records PASS or FAIL (with CMD's last output line) in the
# combination's checks.tsv.
check() {
  local name=$1 out rc=0
  shift
  out="$("$@" 2>&1)" || rc=$?
  printf '%s\n' "$out" >>"$COMBO_DIR/checks.log"
  if ((rc == 0)); then
    printf '%s\tPASS\t\n' "$name" >>"$COMBO_DIR/checks.tsv"
    echo "  PASS  $name"
  else
    local why
    why="$(printf '%s\n' "$out" | grep -v '^$' | tail -1 | tr '\t' ' ' | cut -c1-160)"
    printf '%s\tFAIL\t%s\n' "$name" "$why" >>"$COMBO_DIR/checks.tsv"
    echo "  FAIL  $name: $why"
  fi
}

# until_true SECONDS CMD...: retries CMD every second until it succeeds or time runs out.
until_true() {
  local t=$1 i
  shift
  for ((i = 0; i < t; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 1
  done
  "$@"
}

jsonpath() { kubectl -n interop get "$1" -o "jsonpath=$2"; }
equals() { [[ "$(jsonpath "$1" "$2")" == "$3" ]] || { echo "$1 $2 = '$(jsonpath "$1" "$2")', want '$3'"; return 1; }; }

nodes_ready() {
  local ready
  ready="$(kubectl get nodes -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c True)"
  ((ready == 2)) || { echo "$ready of 2 nodes Ready"; return 1; }
}

apply_workloads() {
  kubectl create namespace interop
  kubectl -n interop apply -f - <<'YAML'
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: httpd
        image: localhost/busybox:latest
        imagePullPolicy: IfNotPresent
        command: ["sh", "-c", "mkdir -p /www && echo hello-interop >/www/index.html && echo interop-log-line && exec httpd -f -p 8080 -h /www"]
        ports: [{containerPort: 8080}]
        readinessProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Pod
metadata: {name: client}
spec:
  containers:
  - {name: client, image: localhost/busybox:latest, imagePullPolicy: IfNotPresent, command: ["sleep", "3600"]}
---
apiVersion: batch/v1
kind: Job
metadata: {name: once}
spec:
  completions: 2
  template:
    spec:
      restartPolicy: Never
      containers: [{name: once, image: localhost/busybox:latest, imagePullPolicy: IfNotPresent, command: ["true"]}]
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: every-minute}
spec:
  schedule: "* * * * *"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          containers: [{name: tick, image: localhost/busybox:latest, imagePullPolicy: IfNotPresent, command: ["true"]}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      containers: [{name: agent, image: localhost/busybox:latest, imagePullPolicy: IfNotPresent, command: ["sleep", "3600"]}]
---
apiVersion: v1
kind: Service
metadata: {name: db}
spec:
  clusterIP: None
  selector: {app: db}
  ports: [{port: 80}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  serviceName: db
  replicas: 2
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers: [{name: db, image: localhost/busybox:latest, imagePullPolicy: IfNotPresent, command: ["sleep", "3600"]}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web}
spec:
  minAvailable: 1
  selector: {matchLabels: {app: web}}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: web}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minReplicas: 2
  maxReplicas: 3
  metrics:
  - type: Resource
    resource: {name: cpu, target: {type: Utilization, averageUtilization: 50}}
YAML
}

deployment_ready() { kubectl -n interop rollout status deployment/web --timeout=180s; }
endpoints_ready() {
  until_true 60 sh -c "[ \"\$(kubectl -n interop get endpointslices -l kubernetes.io/service-name=web -o jsonpath='{range .items[*].endpoints[*]}{.conditions.ready}{\"\\n\"}{end}' | grep -c true)\" = 2 ]"
}
# busybox's `timeout`, not `wget -T`, which crashes in Debian's static busybox.
client_wget() {
  kubectl -n interop wait --for=condition=Ready pod/client --timeout=120s >/dev/null &&
    until_true 30 sh -c "kubectl -n interop exec client -- timeout 5 wget -qO- '$1' | grep -q hello-interop"
}
service_by_ip() { client_wget "http://$(jsonpath service/web '{.spec.clusterIP}')/"; }
service_by_dns() { client_wget "http://web.interop.svc.cluster.local/"; }
job_complete() { kubectl -n interop wait --for=condition=Complete job/once --timeout=180s; }
cronjob_ran() { until_true 130 sh -c "kubectl -n interop get cronjob every-minute -o jsonpath='{.status.lastSuccessfulTime}' | grep -q ."; }
daemonset_ready() { until_true 120 equals daemonset/agent '{.status.numberReady}/{.status.desiredNumberScheduled}' 2/2; }
statefulset_ready() { until_true 180 equals statefulset/db '{.status.readyReplicas}' 2 && kubectl -n interop get pod db-0 db-1; }
pdb_status() { until_true 60 equals pdb/web '{.status.expectedPods}/{.status.currentHealthy}/{.status.disruptionsAllowed}' 2/2/1; }
hpa_acted() { until_true 90 sh -c "kubectl -n interop get hpa web -o jsonpath='{.status.conditions[*].type}' | grep -q AbleToScale"; }
pod_logs() { kubectl -n interop logs deployment/web | grep -q interop-log-line; }
pod_exec() { [[ "$(kubectl -n interop exec deployment/web -- cat /www/index.html)" == hello-interop ]]; }
port_forward() {
  # A free port (a stale CNI hostPort DNAT on a fixed one would swallow the connection).
  local pod port
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  pod="$(kubectl -n interop get pods -l app=web -o jsonpath='{.items[0].metadata.name}')"
  kubectl -n interop port-forward "pod/$pod" "$port:8080" >"$COMBO_DIR/port-forward.log" 2>&1 &
  PF_PID=$!
  until_true 20 curl -fsS -m 5 "http://127.0.0.1:$port/" >/dev/null
  local body rc=0
  body="$(curl -fsS -m 5 "http://127.0.0.1:$port/")" || rc=1
  kill "$PF_PID" 2>/dev/null || true
  wait "$PF_PID" 2>/dev/null || true
  PF_PID=""
  ((rc == 0)) && [[ "$body" == hello-interop ]]
}
# A client certificate through the Certificates API: the CSR approved with kubectl, signed by
# the controller manager's kubernetes.io/kube-apiserver-client signer, then used.
csr_signed() {
  local d="$COMBO_DIR/csr"
  mkdir -p "$d"
  openssl req -new -newkey rsa:2048 -nodes -subj "/O=interop-group/CN=interop-user" \
    -keyout "$d/user.key" -out "$d/user.csr" 2>/dev/null
  kubectl apply -f - <<YAML
apiVersion: certificates.k8s.io/v1
kind: CertificateSigningRequest
metadata: {name: interop-user}
spec:
  request: $(base64 -w0 <"$d/user.csr")
  signerName: kubernetes.io/kube-apiserver-client
  expirationSeconds: 3600
  usages: [client auth]
YAML
  kubectl certificate approve interop-user
  until_true 60 sh -c "kubectl get csr interop-user -o jsonpath='{.status.certificate}' | grep -q ."
  kubectl get csr interop-user -o jsonpath='{.status.certificate}' | base64 -d >"$d/user.crt"
  kubectl --kubeconfig=/dev/null --server="$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')" \
    --certificate-authority="$LOCAL_UP_DIR/certs/apiserver.crt" \
    --client-certificate="$d/user.crt" --client-key="$d/user.key" auth whoami -o jsonpath='{.status.userInfo.username}' |
    grep -qx interop-user
}
# Upstream's delegated authentication and authorization (TokenReview, SubjectAccessReview
# against our API server): /metrics with the admin token is served, anonymous is refused.
delegated_metrics() {
  local url=$1 token
  token="$(grep ',admin,' "$LOCAL_UP_DIR/tokens.csv" | cut -d, -f1)"
  # Read whole before grep: `grep -q` stopping early would fail curl's write (pipefail).
  local body
  body="$(curl -fsSk -H "Authorization: Bearer $token" "$url/metrics")" || { echo "admin scrape of $url/metrics failed"; return 1; }
  grep -q '^# HELP' <<<"$body" || { echo "admin scrape of $url/metrics: no metrics"; return 1; }
  local code
  code="$(curl -sk -o /dev/null -w '%{http_code}' "$url/metrics")"
  [[ "$code" == 403 || "$code" == 401 ]] || { echo "anonymous scrape of $url/metrics: $code, want 403"; return 1; }
}

# Each kubelet that joined by bootstrap token asked for its client certificate by CSR; both
# were approved and issued, and the certificates name the nodes.
node_csrs_issued() {
  local issued
  issued="$(kubectl get csr -o jsonpath='{range .items[?(@.spec.signerName=="kubernetes.io/kube-apiserver-client-kubelet")]}{.status.conditions[0].type}{" "}{.status.certificate}{"\n"}{end}' | grep -c '^Approved .')"
  ((issued >= 2)) || { echo "$issued kubelet client CSRs approved and issued, want 2"; kubectl get csr; return 1; }
  openssl x509 -noout -subject -in "$LOCAL_UP_DIR/kubelet/pki/kubelet-client-current.pem" | grep -q 'CN = system:node:'
}

run_checks() {
  check "nodes Ready" until_true 120 nodes_ready
  check "workloads created" apply_workloads
  check "Deployment available" deployment_ready
  check "EndpointSlices ready" endpoints_ready
  check "Service by ClusterIP from a pod" service_by_ip
  check "Service by DNS name from a pod" service_by_dns
  check "Job complete" job_complete
  check "DaemonSet on both nodes" daemonset_ready
  check "StatefulSet ready" statefulset_ready
  check "PDB status" pdb_status
  check "HPA acted on" hpa_acted
  check "kubectl logs" pod_logs
  check "kubectl exec" pod_exec
  check "kubectl port-forward" port_forward
  check "CronJob ran" cronjob_ran
  check "CSR signed and used" csr_signed
  [[ "${KUBELET_TLS_BOOTSTRAP:-}" == true ]] && check "kubelets' client certificates from CSRs" node_csrs_issued
  local url
  for url in ${DELEGATED_URLS:-}; do
    check "delegated authn/authz $url" delegated_metrics "$url"
  done
}

# upstream_log_lines LOG...: the count of missing-resource lines in upstream components' logs.
# The metrics API (metrics.k8s.io, served through the aggregation layer by metrics-server:
# issue 21) is counted apart: upstream's HPA controller asks for it on any cluster without
# metrics-server.
upstream_log_lines() {
  local watch=0 missing=0 metrics=0 f
  for f in "$@"; do
    [[ -f "$f" ]] || continue
    watch=$((watch + $(grep -c 'Failed to watch' "$f" || true)))
    missing=$((missing + $(grep 'could not find the requested resource' "$f" | grep -vc 'metrics.k8s.io' || true)))
    metrics=$((metrics + $(grep 'could not find the requested resource' "$f" | grep -c 'metrics.k8s.io' || true)))
  done
  echo "$watch $missing $metrics"
}

run_api_machinery_conformance() {
  local name=$1
  CONFORMANCE_CONTAINERD_SOCKETS="$(cat "$LOCAL_UP_DIR/containerd-sockets")" \
    hack/conformance.sh --quick --focus '\[sig-api-machinery\]' --parallel 3 --timeout 40m \
    --results "$COMBO_DIR/conformance" >"$COMBO_DIR/conformance.log" 2>&1 || true
  # The summary's sig-api-machinery row: | SIG | passed | failed | skipped | not run | total |
  local row
  row="$(grep '^| sig-api-machinery ' "$COMBO_DIR/conformance/summary.md" 2>/dev/null || true)"
  if [[ -z "$row" ]]; then
    printf '%s\tFAIL\t%s\n' "api-machinery conformance ($name)" "no summary: see $COMBO_DIR/conformance.log" >>"$COMBO_DIR/checks.tsv"
    return
  fi
  IFS='|' read -r _ _ passed failed skipped _ <<<"$row"
  printf '%s\tINFO\t%s\n' "api-machinery conformance ($name)" \
    "passed $((passed)), failed $((failed)), skipped (serial) $((skipped))" >>"$COMBO_DIR/checks.tsv"
}

# run_combo N TITLE UPSTREAM_LOGS: brings up the cluster the caller's environment describes,
# runs the checks, stops it.
run_combo() {
  local n=$1 title=$2 logs=$3
  # In the combination's subshell, which does not inherit the script's traps.
  trap stop_cluster EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  COMBO_DIR="$RESULTS/combo$n"
  rm -rf "$COMBO_DIR"
  mkdir -p "$COMBO_DIR"
  : >"$COMBO_DIR/checks.tsv"
  echo "interop: combination $n: $title"
  local t0
  t0="$(date +%s)"
  if ! start_cluster "$COMBO_DIR"; then
    printf '%s\tFAIL\t%s\n' "cluster up" "hack/local-up-cluster.sh failed: $(tail -1 "$COMBO_DIR/local-up-cluster.log")" >>"$COMBO_DIR/checks.tsv"
  else
    printf '%s\tPASS\t\n' "cluster up" >>"$COMBO_DIR/checks.tsv"
    run_checks
    ((CONFORMANCE)) && [[ -n "${CONFORMANCE_NAME:-}" ]] && run_api_machinery_conformance "$CONFORMANCE_NAME"
  fi
  local l
  l=()
  local f
  for f in $logs; do l+=("$LOCAL_UP_DIR/logs/$f"); done
  read -r watch missing metrics < <(upstream_log_lines "${l[@]}")
  stop_cluster
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$n" "$title" "$watch" "$missing" "$metrics" "$(($(date +%s) - t0))" >"$COMBO_DIR/combo.tsv"
}

# Every API server trusts the cluster CA for client certificates and the front-proxy CA
# for request headers; every controller manager signs CSRs with the cluster CA (ours and
# upstream's take the same flags).
export KUBE_APISERVER_EXTRA_ARGS="$APISERVER_PKI_ARGS"
OUR_KCM_ARGS="--cluster-signing-cert-file=$PKI/ca.crt --cluster-signing-key-file=$PKI/ca.key"
# upstream_kcm_args DIR: upstream's controller manager as kubeadm runs it: every controller
# plus the bootstrap-token ones, the token controller's key, delegated authentication and
# authorization against our API server.
upstream_kcm_args() {
  echo "$OUR_KCM_ARGS --controllers=*,bootstrapsigner,tokencleaner --service-account-private-key-file=$1/certs/service-account.key --authentication-kubeconfig=$1/controller.kubeconfig --authorization-kubeconfig=$1/controller.kubeconfig"
}

# Each combination in a subshell, so its environment is its own.
for n in ${COMBOS//,/ }; do
  d="$RESULTS/combo$n/cluster"
  export KUBE_CONTROLLER_MANAGER_EXTRA_ARGS="$OUR_KCM_ARGS"
  case "$n" in
    1) (
         export KUBE_SCHEDULER_BIN="$UP/kube-scheduler" KUBE_CONTROLLER_MANAGER_BIN="$UP/kube-controller-manager"
         export KUBE_SCHEDULER_EXTRA_ARGS="--authentication-kubeconfig=$d/scheduler.kubeconfig --authorization-kubeconfig=$d/scheduler.kubeconfig"
         export KUBE_CONTROLLER_MANAGER_EXTRA_ARGS="$(upstream_kcm_args "$d")"
         DELEGATED_URLS="https://127.0.0.1:10259 https://127.0.0.1:10257"
         run_combo 1 "upstream kube-scheduler + kube-controller-manager on our kube-apiserver and etcd" \
           "kube-scheduler.log kube-controller-manager.log"
       ) ;;
    2) (
         export KUBELET_BIN="$UP/kubelet"
         run_combo 2 "upstream kubelet (both nodes, containerd, by kubeconfig) on our control plane" \
           "kubelet.log kubelet-node2.log"
       ) ;;
    2b) (
         export KUBELET_BIN="$UP/kubelet" KUBELET_TLS_BOOTSTRAP=true
         run_combo 2b "upstream kubelet (both nodes) joining by bootstrap token + TLS bootstrap, CSRs approved and signed by our controller manager" \
           "kubelet.log kubelet-node2.log"
       ) ;;
    3) (
         export KUBE_PROXY_BIN="$UP/kube-proxy" KUBE_PROXY_MODE=iptables
         run_combo 3 "upstream kube-proxy (iptables, both nodes) on our control plane" "kube-proxy.log kube-proxy-node2.log"
       ) ;;
    4) (
         export ETCD_BIN="$(command -v etcd)" KUBE_APISERVER_BIN="$UP/kube-apiserver"
         CONFORMANCE_NAME="upstream kube-apiserver on real etcd"
         run_combo 4 "ours (scheduler, controller manager, kubelet, kube-proxy) on upstream kube-apiserver on real etcd" ""
       ) ;;
    5) (
         export KUBE_APISERVER_BIN="$UP/kube-apiserver"
         CONFORMANCE_NAME="upstream kube-apiserver on our etcd"
         run_combo 5 "upstream kube-apiserver on our etcd (one member), our other components" "kube-apiserver.log"
       ) ;;
    5b) (
         export KUBE_APISERVER_BIN="$UP/kube-apiserver" ETCD_MEMBERS=3
         CONFORMANCE_NAME="upstream kube-apiserver on our etcd, three members"
         run_combo 5b "upstream kube-apiserver on our etcd (three members), our other components" "kube-apiserver.log"
       ) ;;
    *) die "unknown combination $n" ;;
  esac
done

# The summary: one table of combinations, then each combination's checks: every combination
# whose results are in DIR (a later run with --results DIR and other --combos adds to it).
ALL_COMBOS="1 2 2b 3 4 5 5b"
{
  echo "# Interoperability with upstream's components"
  echo
  echo "Last run: $(date -u +%Y-%m-%d), commit $COMMIT, upstream $UPSTREAM_VERSION, by \`hack/interop.sh$( ((CONFORMANCE)) && echo ' --conformance')\` (this run: combinations $COMBOS)."
  echo "Two-node clusters from \`hack/local-up-cluster.sh\` (this host and one network namespace)."
  echo
  echo "| # | combination | checks passed | failed | \`Failed to watch\` lines | \`could not find the requested resource\` lines | of those, for metrics.k8s.io (issue 21) | seconds |"
  echo "|---|---|---|---|---|---|---|---|"
  for n in $ALL_COMBOS; do
    f="$RESULTS/combo$n"
    [[ -f "$f/combo.tsv" ]] || continue
    IFS=$'\t' read -r num title watch missing metrics secs <"$f/combo.tsv"
    echo "| $num | $title | $(grep -c $'\tPASS\t' "$f/checks.tsv" || true) | $(grep -c $'\tFAIL\t' "$f/checks.tsv" || true) | $watch | $((missing + metrics)) | $metrics | $secs |"
  done
  for n in $ALL_COMBOS; do
    f="$RESULTS/combo$n"
    [[ -f "$f/combo.tsv" ]] || continue
    echo
    echo "## $n. $(cut -f2 "$f/combo.tsv")"
    echo
    echo "| check | result | detail |"
    echo "|---|---|---|"
    while IFS=$'\t' read -r name result why; do
      echo "| $name | $result | ${why//|/\\|} |"
    done <"$f/checks.tsv"
  done
  echo
  echo "## Not covered by this script yet"
  echo
  echo "- The api-machinery conformance comparison of 4, 5 and 5b unless \`--conformance\` was given"
  echo "  (then it is in their rows above)."
  echo "- 6, \`kubeadm join\` of a node to a control plane made by ours: waits for our kubeadm (issue 18)."
  echo "- 7, kubemark hollow nodes at 100 and 1000 nodes."
  echo "- Ours with delegated authentication (\`--authentication-kubeconfig\` on our scheduler and"
  echo "  controller manager, issue 18): only upstream's are checked (combination 1)."
} >"$RESULTS/summary.md"
cat "$RESULTS/summary.md"
((WRITE_DOC)) && cp "$RESULTS/summary.md" docs/interop.md
if grep -q $'\tFAIL\t' "$RESULTS"/combo*/checks.tsv; then
  echo "interop: some checks failed; results in $RESULTS"
  exit 1
fi
echo "interop: every check passed; results in $RESULTS"
