#!/usr/bin/env bash
# Installs the system packages the build and the tests need. Idempotent: packages that are
# already present are not fetched again, so hack/test.sh calls it on every run.
set -euo pipefail

PACKAGES=(
  # the build: raft-proto's build script runs protoc; librocksdb-sys runs bindgen (libclang)
  protobuf-compiler libclang-dev clang
  # real etcdctl 3.4 for compatibility tests, real etcd 3.4 as the benchmark baseline
  etcd-client etcd-server
  # promtool, to check that /metrics parses
  prometheus
  # TLS fixtures in tests and benchmarks
  openssl
  # the durability and process tests look at processes and ports
  procps iproute2 curl
  # the partition and linearizability tests: members in network namespaces, cut off by
  # iptables DROP rules inside those namespaces (Debian 12: iptables-nft)
  iptables
  # the kubelet's container runtime: containerd + runc over CRI, Debian's CNI plugins
  # (/usr/lib/cni: bridge, host-local, loopback, portmap), and busybox-static, from which
  # hack/build-images.sh makes the test image (no registry is reachable)
  containerd runc containernetworking-plugins busybox-static
  # component images of our own binaries (build-images.sh --component): objcopy, ldd
  binutils libc-bin
  # Service networking: nft for hostgw's masquerade table and to read kube-proxy's rules
  # back in tests (kube-proxy itself writes nftables over netlink); dig for the DNS tests
  nftables bind9-dnsutils
  # the time zone database: CronJob schedules in spec.timeZone (read from /usr/share/zoneinfo)
  tzdata
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# Never let a package start its service (real etcd would take 2379): policy-rc.d exit 101.
created_policy=""
if [[ ! -e /usr/sbin/policy-rc.d ]]; then
  printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
  chmod +x /usr/sbin/policy-rc.d
  created_policy=1
fi
trap '[[ -n "$created_policy" ]] && rm -f /usr/sbin/policy-rc.d' EXIT

apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
