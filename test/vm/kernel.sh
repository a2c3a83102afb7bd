#!/usr/bin/env bash
# kernel.sh: fetches Debian's current amd64 kernel package (the one linux-image-amd64 depends
# on) with `apt-get download` and unpacks it with `dpkg-deb -x` into a cache dir keyed by its
# version, without installing anything on the host. Prints the cache dir on the last line:
#   <dir>/boot/vmlinuz-<kver>, <dir>/lib/modules/<kver>/..., <dir>/kver (the version string).
# Env: VM_CACHE (/var/cache/nodelet-rig/vm), KERNEL_PKG (default: what linux-image-amd64 needs).
set -euo pipefail
VM_CACHE=${VM_CACHE:-/var/cache/nodelet-rig/vm}
log() { echo "[kernel $(date -u +%H:%M:%S)] $*" >&2; }

pkg=${KERNEL_PKG:-}
if [[ -z "$pkg" ]]; then
	pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
	if [[ -z "$pkg" ]]; then
		apt-get update -q >&2
		pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
	fi
fi
[[ -n "$pkg" ]] || { log "cannot find the package behind linux-image-amd64"; exit 1; }
kver=${pkg#linux-image-}
debver=$(apt-cache policy "$pkg" | awk '/Candidate:/ {print $2}')
dir=$VM_CACHE/kernel-$kver-$debver
if [[ -f "$dir/.done" ]]; then
	log "cached: $dir"
	echo "$dir"
	exit 0
fi
log "downloading $pkg ($debver)"
mkdir -p "$VM_CACHE"
tmp=$(mktemp -d "$VM_CACHE/dl.XXXXXX")
chmod 755 "$tmp" # apt-get download drops privileges to _apt when it can write there
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download "$pkg=$debver" >&2) || {
	apt-get update -q >&2
	(cd "$tmp" && apt-get download "$pkg=$debver" >&2)
}
rm -rf "$dir"
mkdir -p "$dir"
dpkg-deb -x "$tmp"/*.deb "$dir"
echo "$kver" >"$dir/kver"
depmod -b "$dir" "$kver" # the package has no modules.dep (made at install time)
[[ -f "$dir/boot/vmlinuz-$kver" ]] || { log "no vmlinuz-$kver in the package"; exit 1; }
cfg=$dir/boot/config-$kver
for opt in VIRTIO_PCI VIRTIO_BLK NET_9P NET_9P_VIRTIO 9P_FS OVERLAY_FS NETFS_SUPPORT CGROUPS MEMCG SWAP; do
	log "CONFIG_$opt=$(sed -n "s/^CONFIG_$opt=//p" "$cfg")"
done
touch "$dir/.done"
log "unpacked into $dir"
echo "$dir"
