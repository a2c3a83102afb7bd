#!/usr/bin/env bash
# Check the systemd unit and its drop-in offline: install into a temporary
# prefix with install.sh, then run "systemd-analyze verify" on the unit as
# systemd would load it (drop-in included). Needs systemd-analyze (Debian
# package "systemd"), not a running systemd. Exits non-zero on any problem.
# Also prints "systemd-analyze security --offline=yes" (informational).
#
# Usage: deploy/verify.sh [--binary PATH]   (default: a placeholder binary)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
binary=""
while [ $# -gt 0 ]; do
	case "$1" in
	--binary) binary="${2:?--binary needs a path}"; shift 2 ;;
	--binary=*) binary="${1#*=}"; shift ;;
	*) echo "verify.sh: unknown argument: $1" >&2; exit 2 ;;
	esac
done

if ! command -v systemd-analyze >/dev/null 2>&1; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "verify.sh: installing systemd (for systemd-analyze)"
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends systemd >/dev/null ||
			{ apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends systemd >/dev/null; }
	fi
	command -v systemd-analyze >/dev/null 2>&1 || { echo "verify.sh: systemd-analyze not found" >&2; exit 1; }
fi

root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT

if [ -z "$binary" ]; then
	# verify only needs ExecStart= to name an executable file.
	binary="$root/nodelet.placeholder"
	printf '#!/bin/sh\nexit 0\n' >"$binary"
	chmod 0755 "$binary"
fi
"$here/install.sh" --binary "$binary" --prefix "$root/fs" >/dev/null

unit_dir="$root/fs/etc/systemd/system"
for f in nodelet.service nodelet.service.d/10-nodelet.conf; do
	cmp -s "$here/${f#nodelet.service.d/}" "$unit_dir/$f" || { echo "verify.sh: $f not installed" >&2; exit 1; }
done
[ -f "$root/fs/var/lib/kubelet/config.yaml" ] || { echo "verify.sh: sample config not installed" >&2; exit 1; }
# A second install must keep the operator's config file.
echo "# operator's own" >>"$root/fs/var/lib/kubelet/config.yaml"
"$here/install.sh" --binary "$binary" --prefix "$root/fs" >/dev/null
grep -q "operator's own" "$root/fs/var/lib/kubelet/config.yaml" || { echo "verify.sh: install.sh overwrote an existing config" >&2; exit 1; }

# No ExecStart= may start nodelet without --config: flags-only mode keeps the
# kubelet's legacy defaults (anonymous requests, AlwaysAllow, on 0.0.0.0).
for f in nodelet.service nodelet.service.d/10-nodelet.conf; do
	bare="$(grep -E '^ExecStart=.+' "$unit_dir/$f" | grep -v -e '--config=' -e '\$NODELET_CONFIG_ARGS' || true)"
	[ -z "$bare" ] || { echo "verify.sh: $f starts nodelet without --config (flags-only mode): $bare" >&2; exit 1; }
done
grep -q '^Environment="NODELET_CONFIG_ARGS=--config=' "$unit_dir/nodelet.service.d/10-nodelet.conf" ||
	{ echo "verify.sh: 10-nodelet.conf does not set NODELET_CONFIG_ARGS=--config=..." >&2; exit 1; }
# The operator's KUBELET_EXTRA_ARGS (kubeadm's packages put it in /etc/default/kubelet
# or /etc/sysconfig/kubelet) must reach nodelet, before nodelet's own overrides.
for f in /etc/default/kubelet /etc/sysconfig/kubelet /etc/default/nodelet; do
	grep -qx "EnvironmentFile=-$f" "$unit_dir/nodelet.service.d/10-nodelet.conf" ||
		{ echo "verify.sh: 10-nodelet.conf does not read $f" >&2; exit 1; }
done
grep -q '^ExecStart=.*\$KUBELET_EXTRA_ARGS \$NODELET_EXTRA_ARGS$' "$unit_dir/nodelet.service.d/10-nodelet.conf" ||
	{ echo "verify.sh: 10-nodelet.conf does not pass \$KUBELET_EXTRA_ARGS then \$NODELET_EXTRA_ARGS" >&2; exit 1; }

# --root makes systemd-analyze resolve the unit, its drop-in directory and
# ExecStart=/usr/local/bin/nodelet inside the temporary install. The units
# of the default dependencies (sysinit.target, ...) come from this host's
# systemd package; containerd.service need not exist, as systemd tolerates
# missing Wants=/After= units.
mkdir -p "$root/fs/usr/lib/systemd"
cp -a /usr/lib/systemd/system "$root/fs/usr/lib/systemd/"
out="$root/verify.out"
# verify_unit WHAT: systemd-analyze verify nodelet.service as installed now,
# failing on any complaint about nodelet (not about this host's other units).
verify_unit() {
	local status=0 problems
	SYSTEMD_LOG_LEVEL=notice systemd-analyze verify --root="$root/fs" --man=no nodelet.service >"$out" 2>&1 || status=$?
	problems="$(grep -v -e '^$' "$out" | grep -i 'nodelet' || true)"
	if [ "$status" -ne 0 ] || [ -n "$problems" ]; then
		echo "verify.sh: systemd-analyze verify failed for $1 (exit $status):" >&2
		cat "$out" >&2
		exit 1
	fi
	echo "verify.sh: systemd-analyze verify: $1 OK"
}
verify_unit "nodelet.service (with 10-nodelet.conf)"
# The unit alone (no drop-in) must load too, with its own --config ExecStart.
mv "$unit_dir/nodelet.service.d" "$root/dropin.off"
verify_unit "nodelet.service alone"
mv "$root/dropin.off" "$unit_dir/nodelet.service.d"

echo "verify.sh: systemd-analyze security --offline=yes (informational):"
systemd-analyze security --offline=yes --root="$root/fs" nodelet.service 2>&1 | tail -n 25 || true

# Show the effective ExecStart after the drop-in, for the log.
systemd-analyze cat-config --root="$root/fs" systemd/system/nodelet.service 2>/dev/null | grep '^ExecStart=' || true
