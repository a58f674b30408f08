# Shared by the benchmark scripts (sourced, not run): the build, bounded waits, free ports,
# and a fresh etcd with our kube-apiserver in front of it. Callers set HOST, TOKEN, SCRATCH
# and B (the binaries).

# bench_build: the release build the benchmark measures. A failed build stops the
# benchmark: the shared target directory still holds an older build's binaries, and
# measuring those would report another program's figures. BUILD=0 skips it (the caller
# has just built).
bench_build() {
  [[ "${BUILD:-1}" == 0 ]] && return 0
  local log
  log=$(mktemp)
  if ! cargo build --release --locked --workspace --bins --tests >"$log" 2>&1; then
    grep -E -A12 '^error' "$log" >&2 || tail -n 30 "$log" >&2
    rm -f "$log"
    echo "build failed: not measuring stale binaries" >&2
    exit 1
  fi
  rm -f "$log"
}

# wait_until DESC TRIES INTERVAL CMD...: runs CMD until it succeeds. After TRIES failures
# the benchmark stops: a component that never became ready must not be measured.
wait_until() {
  local desc=$1 tries=$2 interval=$3
  shift 3
  for _ in $(seq 1 "$tries"); do
    "$@" >/dev/null 2>&1 && return 0
    sleep "$interval"
  done
  echo "timed out waiting for $desc" >&2
  exit 1
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start_control_plane ETCD_BIN: etcd (ETCD_BIN: ours or Debian's) in $SCRATCH/etcd and
# kube-apiserver over it with a static admin token, waiting for both. Sets ETCD_PID,
# API_PID, API_PORT, and writes $SCRATCH/kubeconfig for the admin. Extra kube-apiserver
# flags come from the API_ARGS array; by default ServiceAccount admission is off, because
# the benchmarks create pods in fresh namespaces where no controller-manager has made a
# `default` ServiceAccount yet (upstream would refuse those pods). The token file also
# holds $USER_TOKEN for `bench-user`, a user in no group, for benchmarks that measure
# authorization.
# API_BIN runs another kube-apiserver binary (upstream's, with API_UPSTREAM=1 for the flags
# and serving certificate it needs).
start_control_plane() {
  local etcd_bin=$1 cport pport
  cport=$(free_port); pport=$(free_port); API_PORT=$(free_port)
  mkdir -p "$SCRATCH/certs"
  "$etcd_bin" --name bench --data-dir "$SCRATCH/etcd" --quota-backend-bytes=8589934592 \
    --listen-client-urls "http://$HOST:$cport" --advertise-client-urls "http://$HOST:$cport" \
    --listen-peer-urls "http://$HOST:$pport" --initial-advertise-peer-urls "http://$HOST:$pport" \
    --initial-cluster "bench=http://$HOST:$pport" >"$SCRATCH/etcd.log" 2>&1 &
  ETCD_PID=$!
  wait_until "etcd on $HOST:$cport" 100 0.1 env ETCDCTL_API=3 etcdctl --endpoints="$HOST:$cport" endpoint health
  printf '%s\n' "$TOKEN,bench,bench-uid,system:masters" "${USER_TOKEN:-bench-user-token},bench-user,bench-user-uid" >"$SCRATCH/tokens.csv"
  [[ -v API_ARGS ]] || API_ARGS=(--disable-admission-plugins=ServiceAccount)
  local api_bin="${API_BIN:-$B/kube-apiserver}" extra=()
  if [[ "${API_UPSTREAM:-0}" == 1 ]]; then
    # Upstream's server requires service-account keys, and its self-signed certificate names
    # the advertise address, not loopback: give it a serving certificate for $HOST.
    openssl ecparam -name prime256v1 -genkey -noout -out "$SCRATCH/certs/sa.key" 2>/dev/null
    # A CA (apiserver.crt, what the clients trust) and a serving certificate it signs.
    local c="$SCRATCH/certs"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj "/CN=bench-ca" \
      -keyout "$c/ca.key" -out "$c/apiserver.crt" 2>/dev/null
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=bench-apiserver" \
      -keyout "$c/serving.key" -out "$c/serving.csr" 2>/dev/null
    openssl x509 -req -in "$c/serving.csr" -CA "$c/apiserver.crt" -CAkey "$c/ca.key" -CAcreateserial -days 2 \
      -extfile <(printf 'subjectAltName=IP:%s\nextendedKeyUsage=serverAuth\n' "$HOST") -out "$c/serving.crt" 2>/dev/null
    extra=(--tls-cert-file="$c/serving.crt" --tls-private-key-file="$c/serving.key"
      --service-account-issuer=https://kubernetes.default.svc --service-account-key-file="$SCRATCH/certs/sa.key"
      --service-account-signing-key-file="$SCRATCH/certs/sa.key")
  fi
  "$api_bin" --etcd-servers="http://$HOST:$cport" --bind-address="$HOST" --secure-port="$API_PORT" \
    --cert-dir="$SCRATCH/certs" --token-auth-file="$SCRATCH/tokens.csv" \
    --max-requests-inflight=1000 --max-mutating-requests-inflight=500 "${extra[@]}" "${API_ARGS[@]}" >"$SCRATCH/apiserver.log" 2>&1 &
  API_PID=$!
  # With the admin token: upstream's server turns anonymous requests off under AlwaysAllow.
  wait_until "kube-apiserver /readyz on $API_PORT" 600 0.1 curl -skf -H "Authorization: Bearer $TOKEN" "https://$HOST:$API_PORT/readyz"
  cat >"$SCRATCH/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters: [{name: b, cluster: {server: "https://$HOST:$API_PORT", certificate-authority: "$SCRATCH/certs/apiserver.crt"}}]
users: [{name: b, user: {token: $TOKEN}}]
contexts: [{name: b, context: {cluster: b, user: b}}]
current-context: b
KC
}
