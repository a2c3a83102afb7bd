#!/usr/bin/env bash
# Build nodelet's Debian packages with dpkg-deb, from the tree:
#
#   _output/nodelet_<ver>_amd64.deb              /usr/bin/nodelet,
#       /lib/systemd/system/nodelet.service (+ nodelet.service.d/10-nodelet.conf),
#       /etc/default/nodelet (conffile: NODELET_EXTRA_ARGS), the sample configs
#       under /usr/share/nodelet/. Installs beside a kubelet package.
#   _output/nodelet-as-kubelet_<ver>_amd64.deb   nodelet under the kubelet's names:
#       /usr/bin/kubelet -> nodelet, /lib/systemd/system/kubelet.service and
#       kubeadm's drop-in kubelet.service.d/10-kubeadm.conf. Conflicts with,
#       replaces and provides the "kubelet" package, so dpkg never mixes the two.
#
# <ver> is the stamped version without its "v" (v1.37.2+nodelet -> 1.37.2+nodelet:
# a valid Debian version that sorts after the kubelet package's 1.37.2-1.1).
# Neither package starts or enables anything: the operator chooses the unit.
#
# Usage: hack/package-deb.sh [--binary PATH] [--out DIR]
#   --binary PATH  package this binary (default: build it with hack/build.sh)
#   --out DIR      where the .deb files go (default: _output)
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
binary="" out="$REPO/_output"
while [ $# -gt 0 ]; do
	case "$1" in
	--binary) binary="${2:?--binary needs a path}"; shift 2 ;;
	--binary=*) binary="${1#*=}"; shift ;;
	--out) out="${2:?--out needs a directory}"; shift 2 ;;
	--out=*) out="${1#*=}"; shift ;;
	*) echo "package-deb.sh: unknown argument: $1" >&2; exit 2 ;;
	esac
done
command -v dpkg-deb >/dev/null || { echo "package-deb.sh: dpkg-deb not found (Debian package dpkg)" >&2; exit 1; }

version=$(bash "$REPO/hack/build.sh" --print-version)
debver=${version#v}
if [ -z "$binary" ]; then
	binary="$REPO/_output/nodelet"
	bash "$REPO/hack/build.sh" -o "$binary"
fi
[ -x "$binary" ] || { echo "package-deb.sh: $binary is not an executable" >&2; exit 1; }
arch=amd64
mkdir -p "$out"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The units in deploy/ name /usr/local/bin/nodelet (install.sh's place); a
# package owns /usr/bin.
unit() { sed 's#/usr/local/bin/nodelet#/usr/bin/nodelet#g' "$REPO/deploy/$1"; }

# guard: maintainer scripts only talk to a running systemd (never on a machine
# without one, nor for an install into another root: DPKG_ROOT, as debhelper's
# snippets), and never start or enable a unit.
guard='[ -z "${DPKG_ROOT:-}" ] && [ -d /run/systemd/system ] && command -v systemctl >/dev/null'

# --- nodelet ---
p="$work/nodelet"
install -d -m 0755 "$p/DEBIAN" "$p/usr/bin" "$p/lib/systemd/system/nodelet.service.d" \
	"$p/etc/default" "$p/usr/share/nodelet" "$p/usr/share/doc/nodelet"
install -m 0755 "$binary" "$p/usr/bin/nodelet"
unit nodelet.service >"$p/lib/systemd/system/nodelet.service"
unit 10-nodelet.conf >"$p/lib/systemd/system/nodelet.service.d/10-nodelet.conf"
install -m 0644 "$REPO/deploy/config.yaml" "$p/usr/share/nodelet/config.yaml"
install -m 0644 "$REPO/deploy/standalone-config.yaml" "$p/usr/share/nodelet/standalone-config.yaml"
install -m 0644 "$REPO/deploy/README.md" "$p/usr/share/doc/nodelet/README.md"
cat >"$p/etc/default/nodelet" <<'CONF'
# Extra flags for nodelet.service, after KUBELET_EXTRA_ARGS (so they win).
# Prefer the KubeletConfiguration file (/var/lib/kubelet/config.yaml).
NODELET_EXTRA_ARGS=
CONF
echo /etc/default/nodelet >"$p/DEBIAN/conffiles"
cat >"$p/DEBIAN/control" <<CTRL
Package: nodelet
Version: $debver
Architecture: $arch
Maintainer: nodelet developers <nodelet@localhost>
Section: admin
Priority: optional
Recommends: containerd | containerd.io
Description: Kubernetes node agent, a reimplementation of the kubelet
 nodelet reads the kubelet's configuration, flags and kubeconfig, registers
 the Node and runs its pods through a CRI runtime. This package installs
 nodelet.service (Conflicts=kubelet.service); nodelet-as-kubelet installs it
 under the kubelet's names for kubeadm.
CTRL
cat >"$p/DEBIAN/postinst" <<SH
#!/bin/sh
set -e
if $guard; then systemctl daemon-reload || true; fi
exit 0
SH
cat >"$p/DEBIAN/prerm" <<SH
#!/bin/sh
set -e
# Stopping nodelet leaves the pods running (KillMode=process).
if [ "\$1" = remove ] && $guard; then systemctl stop nodelet.service || true; fi
exit 0
SH
cat >"$p/DEBIAN/postrm" <<SH
#!/bin/sh
set -e
if $guard; then systemctl daemon-reload || true; fi
exit 0
SH

# --- nodelet-as-kubelet ---
k="$work/nodelet-as-kubelet"
install -d -m 0755 "$k/DEBIAN" "$k/usr/bin" "$k/lib/systemd/system/kubelet.service.d"
ln -s nodelet "$k/usr/bin/kubelet"
unit kubelet.service >"$k/lib/systemd/system/kubelet.service"
unit 10-kubeadm.conf >"$k/lib/systemd/system/kubelet.service.d/10-kubeadm.conf"
cat >"$k/DEBIAN/control" <<CTRL
Package: nodelet-as-kubelet
Version: $debver
Architecture: $arch
Maintainer: nodelet developers <nodelet@localhost>
Section: admin
Priority: optional
Depends: nodelet (= $debver)
Conflicts: kubelet
Replaces: kubelet
Provides: kubelet (= ${debver%%+*})
Description: nodelet as the kubelet: kubelet.service and /usr/bin/kubelet
 Installs nodelet under the kubelet's names, so kubeadm (its preflight runs
 "kubelet --version"; it restarts kubelet.service), "journalctl -u kubelet"
 and log tooling work unchanged: /usr/bin/kubelet is nodelet, kubelet.service
 (Conflicts=nodelet.service) carries kubeadm's 10-kubeadm.conf drop-in.
CTRL
cp "$p/DEBIAN/postinst" "$p/DEBIAN/postrm" "$k/DEBIAN/"
sed 's/nodelet\.service/kubelet.service/' "$p/DEBIAN/prerm" >"$k/DEBIAN/prerm"
chmod 0755 "$p/DEBIAN/postinst" "$p/DEBIAN/prerm" "$p/DEBIAN/postrm" "$k/DEBIAN/postinst" "$k/DEBIAN/prerm" "$k/DEBIAN/postrm"
find "$p" "$k" -type d -exec chmod 0755 {} +
find "$p/lib" "$p/etc" "$p/usr/share" "$k/lib" -type f -exec chmod 0644 {} +

for pkg in nodelet nodelet-as-kubelet; do
	deb="$out/${pkg}_${debver}_${arch}.deb"
	dpkg-deb --root-owner-group -Zgzip --build "$work/$pkg" "$deb" >/dev/null
	echo "package-deb.sh: $deb"
done
