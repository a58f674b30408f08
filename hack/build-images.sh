#!/usr/bin/env bash
# Builds the container images the kubelet tests need, as OCI image-layout tarballs, because
# no registry is reachable: localhost/pause:3.10 (the sandbox image) and
# localhost/busybox:latest (the workload image, also tagged localhost/busybox:1.35).
#
#   hack/build-images.sh [--address CONTAINERD_SOCK] [--component NAME=BINARY]...
#
# Output: ${IMAGES_DIR:-/var/tmp/k8s-rs-images}/{pause,busybox}.tar. Rebuilt only when
# missing or older than this script / pause.rs / busybox, so calling it on every test run
# is cheap. With --address it also imports both into containerd's "k8s.io" namespace (the
# one the CRI plugin uses). Each --component makes localhost/NAME:$COMPONENT_TAG (default
# "local") of one of our binaries (entrypoint /NAME; the binary without debug info plus
# the shared libraries ldd lists) in $IMAGES_DIR/NAME.tar, imported too with --address.
# Needs bash, coreutils, tar, gzip, rustc, busybox-static, binutils (objcopy) and ldd.
set -euo pipefail

usage() { sed -n '2,11s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }
die() { echo "build-images: $*" >&2; exit 1; }

ADDRESS=""
COMPONENTS=()
while (($#)); do
  case "$1" in
    --component) (($# >= 2)) || die "--component needs NAME=BINARY"; COMPONENTS+=("$2"); shift 2 ;;
    --component=*) COMPONENTS+=("${1#*=}"); shift ;;
    --address) (($# >= 2)) || die "--address needs a socket path"; ADDRESS="$2"; shift 2 ;;
    --address=*) ADDRESS="${1#*=}"; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
done

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SELF="$HERE/$(basename "${BASH_SOURCE[0]}")"
PAUSE_SRC="$HERE/images/pause.rs"
BUSYBOX=/bin/busybox
IMAGES_DIR="${IMAGES_DIR:-/var/tmp/k8s-rs-images}"
PAUSE_NAME="localhost/pause:3.10"
BUSYBOX_NAME="localhost/busybox:latest"
BUSYBOX_VERSIONED="localhost/busybox:1.35"
COMPONENT_TAG="${COMPONENT_TAG:-local}"
EPOCH="1970-01-01T00:00:00Z" # fixed timestamps keep digests stable across rebuilds

# OCI platform of this machine (Go's GOARCH names), from Debian's architecture name.
oci_arch() {
  local a
  a="$(dpkg --print-architecture 2>/dev/null || uname -m)"
  case "$a" in
    amd64 | x86_64) echo "amd64" ;;
    arm64 | aarch64) echo "arm64" ;;
    armhf | armel | arm*) echo "arm" ;;
    i386 | i686) echo "386" ;;
    ppc64el | ppc64le) echo "ppc64le" ;;
    *) echo "$a" ;; # s390x, riscv64, ... are spelled the same
  esac
}
ARCH="$(oci_arch)"

# True if $1 is missing or any of the other files is newer.
stale() {
  local out="$1" dep
  shift
  [[ -s "$out" ]] || return 0
  for dep in "$@"; do
    [[ "$dep" -nt "$out" ]] && return 0
  done
  return 1
}

sha256() { sha256sum "$1" | cut -d' ' -f1; }

# Moves file $1 into the layout's blob store ($2) and prints its OCI descriptor (JSON).
add_blob() {
  local file="$1" layout="$2" media="$3" digest size
  digest="$(sha256 "$file")"
  size="$(stat -c %s "$file")"
  mv "$file" "$layout/blobs/sha256/$digest"
  printf '{"mediaType":"%s","digest":"sha256:%s","size":%s}' "$media" "$digest" "$size"
}

# Packs directory $1 as a reproducible tar on stdout: sorted names, epoch mtimes, root
# owner and numeric ids, so the same inputs always give the same digest.
repro_tar() {
  local dir="$1"
  (cd "$dir" && LC_ALL=C tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
    --format=gnu -cf - -- *)
}

# make_image NAME ROOTFS_DIR CONFIG_JSON_FRAGMENT OUT_TAR
# Writes a one-layer OCI image layout tarball for ROOTFS_DIR. The fragment is the
# "config" object of the image config (Entrypoint, Cmd, Env, ...).
make_image() {
  local name="$1" rootfs="$2" runconfig="$3" out="$4"
  local work layout diff_id layer_desc config_desc manifest_desc tag
  work="$(mktemp -d "$IMAGES_DIR/.build.XXXXXX")"
  layout="$work/layout"
  mkdir -p "$layout/blobs/sha256"

  # Layer: diff_id is the digest of the *uncompressed* tar; the blob is its gzip
  # (-n: no name/timestamp in the gzip header, again for stable digests).
  repro_tar "$rootfs" >"$work/layer.tar"
  diff_id="$(sha256 "$work/layer.tar")"
  gzip -n -6 "$work/layer.tar"
  layer_desc="$(add_blob "$work/layer.tar.gz" "$layout" application/vnd.oci.image.layer.v1.tar+gzip)"

  printf '{"created":"%s","architecture":"%s","os":"linux","config":%s,"rootfs":{"type":"layers","diff_ids":["sha256:%s"]},"history":[{"created":"%s","created_by":"hack/build-images.sh"}]}' \
    "$EPOCH" "$ARCH" "$runconfig" "$diff_id" "$EPOCH" >"$work/config.json"
  config_desc="$(add_blob "$work/config.json" "$layout" application/vnd.oci.image.config.v1+json)"

  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":%s,"layers":[%s]}' \
    "$config_desc" "$layer_desc" >"$work/manifest.json"
  manifest_desc="$(add_blob "$work/manifest.json" "$layout" application/vnd.oci.image.manifest.v1+json)"

  # index.json names the manifest: containerd's importer takes the full name from
  # io.containerd.image.name; ref.name (the tag alone) is what other OCI tools read.
  tag="${name##*:}"
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[%s]}\n' \
    "${manifest_desc%\}},\"platform\":{\"architecture\":\"$ARCH\",\"os\":\"linux\"},\"annotations\":{\"io.containerd.image.name\":\"$name\",\"org.opencontainers.image.ref.name\":\"$tag\"}}" \
    >"$layout/index.json"
  printf '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"

  repro_tar "$layout" >"$work/image.tar"
  mv -f "$work/image.tar" "$out" # atomic: a parallel reader never sees half a tarball
  rm -rf "$work"
  echo "build-images: built $out ($name)" >&2
}

build_pause() {
  local out="$IMAGES_DIR/pause.tar" rustc rootfs
  stale "$out" "$SELF" "$PAUSE_SRC" || return 0
  # CI runs as root with rustup's toolchain in ~/.cargo/bin, not always on PATH.
  rustc="$(command -v rustc || true)"
  [[ -n "$rustc" ]] || rustc="$HOME/.cargo/bin/rustc"
  [[ -x "$rustc" ]] || die "rustc not found (PATH or ~/.cargo/bin)"
  rootfs="$(mktemp -d "$IMAGES_DIR/.rootfs.XXXXXX")"
  # Static (crt-static) so the image needs no libc; stripped to keep it ~1 MB.
  "$rustc" --edition 2021 -O -C target-feature=+crt-static -C panic=abort -C strip=symbols \
    -o "$rootfs/pause" "$PAUSE_SRC"
  chmod 0755 "$rootfs/pause"
  make_image "$PAUSE_NAME" "$rootfs" '{"Entrypoint":["/pause"],"WorkingDir":"/"}' "$out"
  rm -rf "$rootfs"
}

build_busybox() {
  local out="$IMAGES_DIR/busybox.tar" rootfs applet
  stale "$out" "$SELF" "$BUSYBOX" || return 0
  [[ -x "$BUSYBOX" ]] || die "$BUSYBOX missing: apt-get install busybox-static"
  rootfs="$(mktemp -d "$IMAGES_DIR/.rootfs.XXXXXX")"
  mkdir -p "$rootfs/bin" "$rootfs/etc" "$rootfs/root" "$rootfs/tmp" "$rootfs/usr/bin"
  cp "$BUSYBOX" "$rootfs/bin/busybox"
  # Every applet as /bin/NAME -> busybox (as the upstream busybox image does), so PATH
  # lookups and "#!/bin/sh" work without further setup.
  while read -r applet; do
    [[ -z "$applet" || "$applet" == busybox ]] || ln -s busybox "$rootfs/bin/$applet"
  done < <("$BUSYBOX" --list)
  # "#!/usr/bin/env ..." scripts are common enough to deserve the one extra link.
  ln -s ../../bin/busybox "$rootfs/usr/bin/env"
  printf '%s\n' 'root:x:0:0:root:/root:/bin/sh' 'nobody:x:65534:65534:nobody:/nonexistent:/bin/false' \
    >"$rootfs/etc/passwd"
  printf '%s\n' 'root:x:0:' 'nobody:x:65534:' >"$rootfs/etc/group"
  # Fixed modes: the host's umask must not leak into the layer (or its digest).
  chmod 0755 "$rootfs/bin" "$rootfs/etc" "$rootfs/usr" "$rootfs/usr/bin" "$rootfs/bin/busybox"
  chmod 0644 "$rootfs/etc/passwd" "$rootfs/etc/group"
  chmod 0700 "$rootfs/root"
  chmod 1777 "$rootfs/tmp"
  make_image "$BUSYBOX_NAME" "$rootfs" \
    '{"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],"Cmd":["sh"]}' "$out"
  rm -rf "$rootfs"
}

# build_component NAME BINARY: localhost/NAME:$COMPONENT_TAG running BINARY as /NAME.
build_component() {
  local name="$1" bin="$2" out="$IMAGES_DIR/$1.tar" rootfs lib
  [[ "$name" =~ ^[a-z0-9][a-z0-9.-]*$ ]] || die "--component $name: not an image name"
  [[ -x "$bin" ]] || die "--component $name: no executable at $bin (build it first)"
  stale "$out" "$SELF" "$bin" || return 0
  command -v objcopy >/dev/null || die "objcopy missing: apt-get install binutils"
  rootfs="$(mktemp -d "$IMAGES_DIR/.rootfs.XXXXXX")"
  mkdir -p "$rootfs/etc" "$rootfs/tmp"
  # Debug info is most of a release binary here and nothing in a container reads it.
  objcopy --strip-debug "$bin" "$rootfs/$name"
  # The dynamic loader and the libraries it resolves (glibc, libgcc_s), at the same paths.
  while read -r lib; do
    mkdir -p "$rootfs$(dirname "$lib")"
    cp -L "$lib" "$rootfs$lib"
  done < <(ldd "$bin" | grep -o '/[^ ]*')
  printf '%s\n' 'root:x:0:0:root:/:/nonexistent' 'nobody:x:65534:65534:nobody:/nonexistent:/nonexistent' \
    >"$rootfs/etc/passwd"
  printf '%s\n' 'root:x:0:' 'nobody:x:65534:' >"$rootfs/etc/group"
  chmod -R u=rwX,go=rX "$rootfs"
  chmod 0755 "$rootfs/$name"
  chmod 1777 "$rootfs/tmp"
  make_image "localhost/$name:$COMPONENT_TAG" "$rootfs" "{\"Entrypoint\":[\"/$name\"],\"WorkingDir\":\"/\"}" "$out"
  rm -rf "$rootfs"
}

mkdir -p "$IMAGES_DIR"
# Test instances run in parallel and share IMAGES_DIR: one builder at a time, the others
# wait and then find the tarballs up to date.
exec 9>"$IMAGES_DIR/.lock"
if command -v flock >/dev/null; then flock 9; fi
rm -rf "$IMAGES_DIR"/.build.* "$IMAGES_DIR"/.rootfs.* # leftovers of an interrupted run
build_pause
build_busybox
TARS=("$IMAGES_DIR/pause.tar" "$IMAGES_DIR/busybox.tar")
for c in "${COMPONENTS[@]}"; do
  [[ "$c" == *=* ]] || die "--component $c: want NAME=BINARY"
  build_component "${c%%=*}" "${c#*=}"
  TARS+=("$IMAGES_DIR/${c%%=*}.tar")
done
exec 9>&-

if [[ -n "$ADDRESS" ]]; then
  [[ -S "$ADDRESS" ]] || die "no containerd socket at $ADDRESS"
  for tar in "${TARS[@]}"; do
    # The name comes from the io.containerd.image.name annotation; --all-platforms so a
    # platform mismatch in the index can never silently skip the image.
    ctr --address "$ADDRESS" -n k8s.io images import --all-platforms "$tar" >/dev/null
  done
  # The same busybox under a versioned tag: a pod naming it gets imagePullPolicy
  # IfNotPresent by default and runs from the local image, as upstream; `:latest` defaults
  # to Always, which needs a registry.
  ctr --address "$ADDRESS" -n k8s.io images tag --force "$BUSYBOX_NAME" "$BUSYBOX_VERSIONED" >/dev/null
fi
