#!/usr/bin/env bash
# install-deps.sh: the Debian 12 packages the VM test needs on the host (the guest runs the
# host's own binaries: its / is the host's, read-only). Idempotent; skips apt when all are
# installed. The kernel is not installed: kernel.sh downloads and unpacks it into a cache.
set -euo pipefail
PKGS=(
	qemu-system-x86     # 7.2: qemu-system-x86_64 (TCG; KVM does not boot on the CI machine)
	cpio busybox-static # the initramfs
	kmod                # depmod for the unpacked kernel's modules; modprobe in the guest
	util-linux          # mkswap/swapon in the guest
	systemd dbus        # PID 1 of the guest and its dbus.socket
	containerd runc     # the guest's runtime (1.6.20, runc 1.1.5)
	jq                  # the guest reads containerd's OCI bundles
	iproute2 socat      # guest network to the host's kube-apiserver (qemu guestfwd runs socat)
	openssl             # the VM apiserver's PKI
)
log() { echo "[vm install-deps $(date -u +%H:%M:%S)] $*" >&2; }
[[ $(id -u) == 0 ]] || { log "must run as root"; exit 1; }
missing=()
for p in "${PKGS[@]}"; do
	if [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]]; then
		missing+=("$p")
	fi
done
if ((${#missing[@]} == 0)); then
	log "all ${#PKGS[@]} packages already installed"
	exit 0
fi
log "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# No service may start on the host while installing (containerd would).
created_policy=0
if [[ ! -e /usr/sbin/policy-rc.d ]]; then
	printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
	chmod +x /usr/sbin/policy-rc.d
	created_policy=1
fi
trap 'if ((created_policy)); then rm -f /usr/sbin/policy-rc.d; fi' EXIT
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
