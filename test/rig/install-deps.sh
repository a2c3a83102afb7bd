#!/usr/bin/env bash
# install-deps.sh: installs (idempotently) the Debian 12 packages the e2e rig and the test
# command need. Runs as root. Skips `apt-get update` when everything is already installed
# (FORCE=1 always updates). Go is expected at /usr/local/go; when
# there is none, hack/install-go.sh installs go.mod's version there.
#
# No service is started by the packages: a temporary policy-rc.d refuses service starts while
# installing, so Debian's containerd does not come up on /run/containerd (the rig runs its own
# on a private socket).
set -euo pipefail

PKGS=(
	containerd                  # 1.6.20: the CRI runtime the rig runs
	runc                        # 1.1.5: containerd's OCI runtime (crun fails on this hybrid cgroup host)
	containernetworking-plugins # bridge, host-local, portmap, loopback in /usr/lib/cni
	openssl                     # the rig's PKI
	busybox-static              # the rootfs of nodelet.local/busybox
	iproute2 iptables conntrack # CNI bridge/portmap, pod networking
	socat                       # port-forward
	util-linux mount procps psmisc kmod
	systemd                     # `systemd-analyze verify` of deploy/ unit files (not run as PID 1)
	dbus dbus-daemon            # a private bus for logind/shutdown-inhibitor tests
	gcc libc6-dev               # `go test -race` needs cgo
	libseccomp-dev pkg-config   # runc 1.4 for the runc-test handler, built with seccomp (build-runc.sh)
	git ca-certificates curl    # curl: health checks in up.sh
	docker-registry             # 2.8: the rig's local registry on 127.0.0.1:5000 (image pull e2e)
	skopeo                      # pushes the rig's busybox OCI archive into that registry
	apache2-utils               # htpasswd -B: the registry's bcrypt htpasswd file
)

# Extra packages named on the command line are installed the same way (test/vm's list).
PKGS+=("$@")

log() { echo "[install-deps $(date -u +%H:%M:%S)] $*" >&2; }

if [[ $(id -u) != 0 ]]; then
	log "must run as root"
	exit 1
fi

missing=()
for p in "${PKGS[@]}"; do
	if [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]]; then
		missing+=("$p")
	fi
done

if ((${#missing[@]} == 0)) && [[ "${FORCE:-0}" != 1 ]]; then
	log "all ${#PKGS[@]} packages already installed"
else
	log "installing: ${missing[*]:-(forced update)}"
	export DEBIAN_FRONTEND=noninteractive
	created_policy=0
	if [[ ! -e /usr/sbin/policy-rc.d ]]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod +x /usr/sbin/policy-rc.d
		created_policy=1
	fi
	cleanup() { if ((created_policy)); then rm -f /usr/sbin/policy-rc.d; fi; }
	trap cleanup EXIT
	apt-get update -q
	apt-get install -y -q --no-install-recommends "${PKGS[@]}"
fi

# Debian's containerd may have been started by a previous install; it is not the rig's and
# would only compete for resources. Leave it alone if something else uses it.
for b in containerd ctr runc /usr/lib/cni/bridge /usr/lib/cni/host-local /usr/lib/cni/portmap \
	/usr/lib/cni/loopback /bin/busybox openssl ip iptables systemd-analyze dbus-daemon gcc; do
	if ! command -v "$b" >/dev/null 2>&1; then
		log "missing after install: $b"
		exit 1
	fi
done
if [[ ! -x /usr/local/go/bin/go ]] && ! command -v go >/dev/null; then
	# A fresh Debian 12: go.mod's Go from the Go module proxy (apt has none that new).
	log "Go not found: installing go.mod's into /usr/local/go"
	bash "$(dirname "${BASH_SOURCE[0]}")/../../hack/install-go.sh"
fi
log "ok: $(containerd --version | head -1); $(runc --version | head -1)"
