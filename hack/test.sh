#!/usr/bin/env bash
# The project's test command (README, .ci/run): installs system packages, builds every
# binary, then runs every test (unit, integration, e2e) with cargo-nextest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

hack/install-deps.sh

# Reuse compiled dependencies across clones and CI runs: rocksdb alone takes ~15 min.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/k8s-rs-target}"
# One profile everywhere (tests, local cluster, benchmarks), so heavy C++ builds once.
PROFILE=(--release)

# Binaries and tests in one build: the test build turns on dev-dependencies' features, so
# a build of the binaries alone would be another set of artifacts, built twice. Every
# script here builds this same set (local-up-cluster, benchmarks) and shares it.
cargo build "${PROFILE[@]}" --workspace --bins --tests --locked
if cargo nextest --version >/dev/null 2>&1; then
  run_tests() { cargo nextest run "${PROFILE[@]}" --workspace --locked --no-fail-fast "$@"; }
  grpc_filter=(-E 'binary(grpc)')
else
  run_tests() { cargo test "${PROFILE[@]}" --workspace --locked --no-fail-fast "$@"; }
  grpc_filter=(--test grpc)
fi
rc=0
run_tests "$@" || rc=$?
# The etcd gRPC suite once more against Debian's real etcd: every expectation in it must
# hold for upstream too, or it would be testing our quirks rather than etcd's API. (Only
# on a whole run; a filtered run is someone's focused loop.)
if (($# == 0)); then
  E2E_GRPC_FLAVOR=real run_tests "${grpc_filter[@]}" || rc=$?
fi
exit "$rc"
