#!/usr/bin/env bash
# Check the systemd units and their drop-ins offline: install into a temporary
# prefix with install.sh, then run "systemd-analyze verify" on the unit as
# systemd would load it (drop-in included). Then build the Debian packages
# (hack/package-deb.sh), check their contents and metadata with dpkg-deb,
# install both into a temporary root with "dpkg --root" and verify
# nodelet.service and the kubelet-named kubelet.service (with kubeadm's
# 10-kubeadm.conf) as packaged. Needs systemd-analyze (Debian package
# "systemd") and dpkg, not a running systemd. Exits non-zero on any problem.
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
# systemd-analyze verify nodelet.service as installed now, failing on any
# complaint about nodelet or kubelet (not about this host's other units).
# verify_unit WHAT [UNIT [ROOT]]: the same for UNIT (default nodelet.service)
# installed under ROOT (default the install.sh prefix).
verify_unit() {
	local status=0 problems unit="${2:-nodelet.service}" vroot="${3:-$root/fs}"
	SYSTEMD_LOG_LEVEL=notice systemd-analyze verify --root="$vroot" --man=no "$unit" >"$out" 2>&1 || status=$?
	problems="$(grep -v -e '^$' "$out" | grep -i -e 'nodelet' -e 'kubelet' || true)"
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

# The lines that make either unit safe as a node agent: one agent at a time,
# READY=1 and the watchdog honoured, pods never killed by a restart.
# assert_lines FILE LINE...: every LINE is in FILE exactly.
assert_lines() {
	local f="$1" l
	shift
	for l in "$@"; do
		grep -qxF "$l" "$f" || { echo "verify.sh: $(basename "$f") lacks the line: $l" >&2; exit 1; }
	done
}
assert_lines "$here/nodelet.service" Conflicts=kubelet.service Type=notify KillMode=process WatchdogSec=60s
assert_lines "$here/kubelet.service" Conflicts=nodelet.service Type=notify KillMode=process WatchdogSec=60s
# kubeadm's drop-in, as its packages ship it.
assert_lines "$here/10-kubeadm.conf" EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env EnvironmentFile=-/etc/default/kubelet \
	'ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS'
bare="$(grep -E '^ExecStart=.+' "$here/kubelet.service" | grep -v -e '--config=' || true)"
[ -z "$bare" ] || { echo "verify.sh: kubelet.service starts nodelet without --config: $bare" >&2; exit 1; }

# The Debian packages, built from the tree around the same binary.
command -v dpkg-deb >/dev/null || { echo "verify.sh: dpkg-deb not found" >&2; exit 1; }
"$here/../hack/package-deb.sh" --binary "$binary" --out "$root/debs" >/dev/null
ver="$("$here/../hack/build.sh" --print-version)"
ver="${ver#v}"
deb="$root/debs/nodelet_${ver}_amd64.deb"
kdeb="$root/debs/nodelet-as-kubelet_${ver}_amd64.deb"
# want_contents DEB PATH...: dpkg-deb -c lists every PATH.
want_contents() {
	local d="$1" p list
	shift
	list="$(dpkg-deb -c "$d" | awk '{print $6}')"
	for p in "$@"; do
		grep -qxF "./$p" <<<"$list" || { echo "verify.sh: $(basename "$d") lacks $p" >&2; exit 1; }
	done
}
want_contents "$deb" usr/bin/nodelet lib/systemd/system/nodelet.service \
	lib/systemd/system/nodelet.service.d/10-nodelet.conf etc/default/nodelet usr/share/nodelet/config.yaml
want_contents "$kdeb" usr/bin/kubelet lib/systemd/system/kubelet.service lib/systemd/system/kubelet.service.d/10-kubeadm.conf
[ "$(dpkg-deb -f "$deb" Version)" = "$ver" ] || { echo "verify.sh: nodelet package version is not $ver" >&2; exit 1; }
[ "$(dpkg-deb -f "$kdeb" Conflicts)" = kubelet ] || { echo "verify.sh: nodelet-as-kubelet does not conflict with kubelet" >&2; exit 1; }
dpkg-deb -I "$deb" conffiles | grep -qx /etc/default/nodelet || { echo "verify.sh: /etc/default/nodelet is not a conffile" >&2; exit 1; }

# Install both into an empty dpkg root. The maintainer scripts run (on this
# host, with DPKG_ROOT set) and must neither fail nor touch this host's
# systemd: they act only without DPKG_ROOT and with a running systemd.
droot="$root/dpkg"
mkdir -p "$droot/var/lib/dpkg/updates" "$droot/var/lib/dpkg/info"
touch "$droot/var/lib/dpkg/status"
dpkg --root="$droot" --force-not-root --force-script-chrootless --log=/dev/null -i "$deb" "$kdeb" >"$out" 2>&1 ||
	{ echo "verify.sh: dpkg --root -i failed:" >&2; cat "$out" >&2; exit 1; }
for pkg in nodelet nodelet-as-kubelet; do
	[ "$(dpkg-query --admindir="$droot/var/lib/dpkg" -W -f='${db:Status-Abbrev}' "$pkg")" = "ii " ] ||
		{ echo "verify.sh: $pkg is not installed in the temporary root" >&2; exit 1; }
done
[ "$(readlink "$droot/usr/bin/kubelet")" = nodelet ] || { echo "verify.sh: /usr/bin/kubelet does not point at nodelet" >&2; exit 1; }
cmp -s "$binary" "$droot/usr/bin/nodelet" || { echo "verify.sh: the package's /usr/bin/nodelet is not the binary" >&2; exit 1; }
# kubeadm's preflight runs "kubelet --version" from PATH (a real binary only).
if [ "$binary" != "$root/nodelet.placeholder" ]; then
	got="$("$droot/usr/bin/kubelet" --version)"
	[ "$got" = "Kubernetes v$ver" ] || { echo "verify.sh: kubelet --version printed '$got', want 'Kubernetes v$ver'" >&2; exit 1; }
fi
mkdir -p "$droot/usr/lib/systemd"
cp -a /usr/lib/systemd/system "$droot/usr/lib/systemd/"
verify_unit "packaged nodelet.service (with 10-nodelet.conf)" nodelet.service "$droot"
verify_unit "packaged kubelet.service (with 10-kubeadm.conf)" kubelet.service "$droot"
echo "verify.sh: packages $(basename "$deb") and $(basename "$kdeb") OK"
