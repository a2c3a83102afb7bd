#!/usr/bin/env bash
# mkinitramfs.sh KERNEL_DIR OUT: builds the nodelet VM's initramfs (gzip'd newc cpio) from
# busybox-static, the modules the guest needs before its root is mounted (virtio-pci,
# virtio-blk, 9p over virtio, overlay; with their dependencies in modules.dep order, taken from
# KERNEL_DIR as unpacked by kernel.sh), test/vm/guest/init and the systemd units of the test.
# Env: MASK: extra units to mask in the guest (added to the built-in list).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KDIR=$1
OUT=$2
KVER=$(cat "$KDIR/kver")
MODDIR=$KDIR/lib/modules/$KVER
log() { echo "[mkinitramfs $(date -u +%H:%M:%S)] $*" >&2; }

# modules.dep is not in the package (depmod runs at install time): make it.
if [[ ! -f "$MODDIR/modules.dep" ]]; then
	depmod -b "$KDIR" "$KVER"
fi

# want MODULE: MODULE's dependencies first (modules.dep lists them deepest last), then itself.
declare -A seen=()
order=()
want() {
	local name=$1 line path deps d i
	line=$(grep -E "(^|/)$name\.ko(\.[a-z]+)?:" "$MODDIR/modules.dep" | head -1)
	if [[ -z "$line" ]]; then
		if grep -qE "(^|/)$name\.ko" "$MODDIR/modules.builtin"; then return 0; fi
		log "module $name: not found"
		return 1
	fi
	path=${line%%:*}
	read -r -a deps <<<"${line#*:}"
	for ((i = ${#deps[@]} - 1; i >= 0; i--)); do
		d=$(basename "${deps[i]}")
		want "${d%%.ko*}"
	done
	if [[ -z "${seen[$path]:-}" ]]; then
		seen[$path]=1
		order+=("$path")
	fi
}
for m in virtio_pci virtio_blk 9pnet_virtio 9p overlay; do want "$m"; done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp"/{bin,etc,modules,units,proc,sys,dev}
cp /bin/busybox "$tmp/bin/busybox"
names=()
for p in "${order[@]}"; do
	n=$(basename "$p")
	n=${n%%.ko*}
	case "$p" in
	*.ko) cp "$MODDIR/$p" "$tmp/modules/$n.ko" ;;
	*.ko.xz) xz -dc "$MODDIR/$p" >"$tmp/modules/$n.ko" ;;
	*.ko.zst) zstd -qdc "$MODDIR/$p" >"$tmp/modules/$n.ko" ;;
	*) log "unknown module format: $p"; exit 1 ;;
	esac
	names+=("$n")
done
log "modules (load order): ${names[*]}"
# Units of the host that must not start in the guest (wanted by sysinit.target on the host, or
# useless without hardware/network); the test target pulls in basic.target only.
mask="systemd-pstore.service systemd-timesyncd.service systemd-random-seed.service
 systemd-update-utmp.service systemd-journal-flush.service e2scrub_reap.service
 systemd-firstboot.service systemd-machine-id-commit.service ${MASK:-}"
cat >"$tmp/etc/vm.env" <<ENV
KVER=$KVER
MODDIR=$MODDIR
MODULES="${names[*]}"
MASK="$(echo $mask)"
ENV
cp "$HERE/guest/init" "$tmp/init"
chmod +x "$tmp/init"
cp "$HERE"/guest/units/* "$tmp/units/"
(cd "$tmp" && find . | LC_ALL=C sort | cpio -o -H newc --quiet | gzip -1) >"$OUT.tmp"
mv "$OUT.tmp" "$OUT"
log "wrote $OUT ($(du -h "$OUT" | cut -f1))"
