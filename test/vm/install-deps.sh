#!/usr/bin/env bash
# install-deps.sh: the Debian 12 packages the VM test needs on the host (the guest runs the
# host's own binaries: its / is the host's, read-only), installed by the rig's installer. The
# kernel is not installed: kernel.sh downloads and unpacks it into a cache.
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
# The rig's installer does the rest (idempotent, no service started while installing).
exec bash "$(dirname "${BASH_SOURCE[0]}")/../rig/install-deps.sh" "${PKGS[@]}"
