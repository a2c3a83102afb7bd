#!/usr/bin/env bash
# Install nodelet as a systemd service, in the kubelet's places:
#   binary      /usr/local/bin/nodelet
#   unit        /etc/systemd/system/nodelet.service
#   drop-in     /etc/systemd/system/nodelet.service.d/10-nodelet.conf
#   config      /var/lib/kubelet/config.yaml   (only if absent: never
#               overwrites an operator's file)
#   manifests   /etc/kubernetes/manifests      (created, left empty)
#
# Usage: deploy/install.sh [--binary PATH] [--prefix DIR]
#   --binary PATH  binary to install (default: _output/nodelet)
#   --prefix DIR   install below DIR instead of / (test installs; no
#                  systemctl call is made then)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
binary="_output/nodelet"
prefix=""

usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
	case "$1" in
	--binary) binary="${2:?--binary needs a path}"; shift 2 ;;
	--binary=*) binary="${1#*=}"; shift ;;
	--prefix) prefix="${2:?--prefix needs a directory}"; shift 2 ;;
	--prefix=*) prefix="${1#*=}"; shift ;;
	-h|--help) usage; exit 0 ;;
	*) echo "install.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
	esac
done
# A prefix of "/" is the real root; strip the slash so paths do not double.
prefix="${prefix%/}"

# The default is relative to the repository root, wherever this is run from.
if [ ! -f "$binary" ] && [ "$binary" = "_output/nodelet" ] && [ -f "$here/../_output/nodelet" ]; then
	binary="$here/../_output/nodelet"
fi
if [ ! -f "$binary" ]; then
	echo "install.sh: binary $binary not found (build it first, or pass --binary)" >&2
	exit 1
fi

install -d -m 0755 "$prefix/usr/local/bin" \
	"$prefix/etc/systemd/system/nodelet.service.d" \
	"$prefix/etc/kubernetes/manifests"
install -d -m 0700 "$prefix/var/lib/kubelet"
install -m 0755 "$binary" "$prefix/usr/local/bin/nodelet"
install -m 0644 "$here/nodelet.service" "$prefix/etc/systemd/system/nodelet.service"
install -m 0644 "$here/10-nodelet.conf" "$prefix/etc/systemd/system/nodelet.service.d/10-nodelet.conf"

config="$prefix/var/lib/kubelet/config.yaml"
if [ -e "$config" ]; then
	echo "install.sh: keeping existing $config"
else
	install -m 0644 "$here/config.yaml" "$config"
	echo "install.sh: installed sample config $config"
fi

# Only talk to systemd when it runs this machine and this is a real install.
if [ -z "$prefix" ] && [ "$(cat /proc/1/comm 2>/dev/null)" = "systemd" ]; then
	systemctl daemon-reload
	echo "install.sh: systemd reloaded; start with: systemctl enable --now nodelet"
else
	echo "install.sh: not reloading systemd (test prefix or systemd is not PID 1)"
fi
echo "install.sh: installed nodelet under ${prefix:-/}"
