#!/usr/bin/env bash
# A long linearizability run of our etcd under faults (e2e/tests/linearizability.rs): a
# 3-member cluster in network namespaces, concurrent get/put/CAS clients, and a nemesis that
# kills, power-cuts (lazyfs disks), pauses and partitions members; porcupine checks the history. Needs root.
#
#   hack/linearizability.sh                 # 300 s of workload
#   LIN_SECONDS=900 LIN_CLIENTS=8 hack/linearizability.sh
#   LIN_SEED=123 hack/linearizability.sh    # replay the random choices of an earlier run
#
# Other knobs: LIN_KEYS, LIN_OP_TIMEOUT_MS, LIN_CHECK_TIMEOUT (s), LIN_OUT (where a failing
# run writes its porcupine visualization).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

hack/install-deps.sh

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/k8s-rs-target}"
export LIN_SECONDS="${LIN_SECONDS:-300}"
export LIN_CHECK_TIMEOUT="${LIN_CHECK_TIMEOUT:-600}"

cargo build --release --workspace --bins --tests --locked
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --release --locked -p e2e --test linearizability --no-capture "$@"
else
  cargo test --release --locked -p e2e --test linearizability "$@" -- --nocapture
fi
