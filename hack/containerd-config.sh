#!/usr/bin/env bash
# Writes a private containerd configuration, so a test (or hack/local-up-cluster.sh) can run
# its own containerd beside others on the same host:
#
#   hack/containerd-config.sh DIR POD_CIDR BRIDGE_NAME
#   containerd --config DIR/config.toml     # socket: DIR/containerd.sock
#
# Everything an instance owns lives under DIR (root, state, socket, CNI config, IPAM
# leases, pod network namespaces); parallel instances need distinct DIR, POD_CIDR and
# BRIDGE_NAME. Facts behind the settings: /work/shared/MACHINE-NOTES.md, "containerd".
set -euo pipefail

die() { echo "containerd-config: $*" >&2; exit 1; }

(($# == 3)) || die "usage: $0 DIR POD_CIDR BRIDGE_NAME"
DIR="$1" POD_CIDR="$2" BRIDGE="$3"

[[ "$POD_CIDR" =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}/[0-9]{1,2}$ ]] || die "POD_CIDR must be IPv4 a.b.c.d/n, got '$POD_CIDR'"
# Linux interface names: at most 15 bytes, no '/', no whitespace.
[[ "$BRIDGE" =~ ^[A-Za-z0-9_.-]{1,15}$ ]] || die "BRIDGE_NAME must be 1-15 of [A-Za-z0-9_.-], got '$BRIDGE'"

mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)" # containerd resolves nothing relative: make every path absolute
mkdir -p "$DIR/root" "$DIR/state" "$DIR/cni" "$DIR/cni-ipam" "$DIR/opt"

cat >"$DIR/config.toml" <<EOF
version = 2
root = "$DIR/root"
state = "$DIR/state"
# Snapshotters we never use: at startup they only probe the host (modprobe aufs, statfs)
# and log failures. Startup time is the same (~0.1 s) either way; the log is cleaner.
# overlayfs is the one the CRI plugin uses; native stays as a fallback.
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
]

[grpc]
  address = "$DIR/containerd.sock"

[plugins."io.containerd.grpc.v1.cri"]
  # Built by hack/build-images.sh and imported: no registry is reachable.
  sandbox_image = "localhost/pause:3.10"
  # Required: without CAP_SYS_RESOURCE runc fails to create the sandbox otherwise.
  restrict_oom_score_adj = true
  # Pod network namespaces under DIR/state instead of the shared /run/netns, so a test's
  # teardown finds (and unmounts) everything its instance left under DIR.
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        # cgroupfs driver: PID 1 is not systemd, and the host has cgroup v1.
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$DIR/cni"
    max_conf_num = 1

[plugins."io.containerd.internal.v1.opt"]
  path = "$DIR/opt"
EOF

# One network: a bridge with the node's pod CIDR. containerd adds the loopback network
# itself. cniVersion 0.4.0 is supported by Debian's plugins 1.1.1 and containerd 1.6.
# The network name carries the bridge name so two instances never share CNI caches;
# dataDir keeps each instance's IP leases apart (the default is the shared /var/lib/cni).
cat >"$DIR/cni/10-k8srs.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "k8srs-$BRIDGE",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{ "subnet": "$POD_CIDR" }]],
        "routes": [{ "dst": "0.0.0.0/0" }],
        "dataDir": "$DIR/cni-ipam"
      }
    },
    {
      "type": "portmap",
      "capabilities": { "portMappings": true },
      "snat": true
    }
  ]
}
EOF
