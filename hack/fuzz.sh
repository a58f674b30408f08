#!/usr/bin/env bash
# Long fuzzing of what takes outside input (every tests/fuzz.rs of the workspace, on stable
# Rust through component_base::fuzz): etcd's snapshot and bbolt readers, its gRPC request
# handlers and raft peer messages on a running member; the API server's protobuf, JSON and
# YAML bodies through every resource's create and update checks, patches (JSON, merge,
# strategic), server-side apply, selectors, query strings, SPDY and WebSocket frames,
# quantities, its configuration files and pretty re-indenter; kubeconfig files; the
# kubelet's config, static pod manifests and resolv.conf; kube-proxy's config. hack/test.sh runs the same targets briefly from a fixed
# seed; this runs each for FUZZ_SECONDS from a random seed (printed; FUZZ_SEED=<n> replays).
#
#   hack/fuzz.sh                 # 60 s per target
#   FUZZ_SECONDS=600 hack/fuzz.sh
#   FUZZ_SEED=1234 FUZZ_SECONDS=10 hack/fuzz.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/k8s-rs-target}"
export FUZZ_SECONDS="${FUZZ_SECONDS:-60}"

hack/install-deps.sh
# The whole workspace, as hack/test.sh builds it: building one package alone would
# unify features differently and rebuild rocksdb.
cargo build --release --workspace --bins --tests --locked
# One target at a time: each is single-threaded and the timed runs should not share
# the machine's cores with each other.
cargo nextest run --release --workspace --locked --no-capture --test-threads 1 \
  -E 'binary(fuzz)'
