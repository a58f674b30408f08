#!/usr/bin/env bash
# A longer power-loss run of our etcd (e2e/tests/power_loss.rs): members with their data
# dirs on lazyfs disks, which keep unsynced writes in memory only, lose power under load
# (process killed, unsynced data dropped) and must keep every acknowledged write with no
# hole in the revisions. Needs root and /dev/fuse.
#
#   hack/power-loss.sh                        # 20 power cuts per test
#   POWER_LOSS_CYCLES=100 hack/power-loss.sh
#   POWER_LOSS_SEED=123 hack/power-loss.sh    # replay the random choices of an earlier run
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

hack/install-deps.sh

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/k8s-rs-target}"
export POWER_LOSS_CYCLES="${POWER_LOSS_CYCLES:-20}"

cargo build --release --workspace --bins --tests --locked
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --release --locked -p e2e --test power_loss --no-capture "$@"
else
  cargo test --release --locked -p e2e --test power_loss "$@" -- --nocapture
fi
