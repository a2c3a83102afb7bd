#!/usr/bin/env bash
# nodelet quickstart: on a fresh Debian 12 machine (as root) install containerd + runc
# from Debian (and go.mod's Go from the Go module proxy when /usr/local/go lacks it), build two local images (no registry is needed: busybox from Debian's
# busybox-static, and a tiny pause image), start a containerd of its own, build nodelet
# and run it in the foreground in standalone mode with the demo static pod from
# deploy/manifests/demo.yaml. Stop it with Ctrl-C: the pod keeps running, and the next
# start adopts it. Its log is under /var/log/pods/default_nodelet-demo-<node>_<uid>/hello/.
#
# Why Debian's containerd 1.6: it installs in seconds from apt, speaks CRI v1, and is what
# the test rig uses. (containerd 2.x builds from the Go module when evented PLEG needs it.)
# This script runs its own containerd on /run/nodelet-quickstart/containerd.sock so it
# never touches a containerd the machine already runs.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
QS=${QS_DIR:-/var/lib/nodelet-quickstart}
RUN=/run/nodelet-quickstart
SOCK=$RUN/containerd.sock
MANIFESTS=/etc/nodelet/manifests
export PATH=/usr/local/go/bin:$PATH

log() { printf '\n=== %s\n' "$*"; }

[ "$(id -u)" = 0 ] || { echo "quickstart: run as root (it installs packages and runs containers)" >&2; exit 1; }

log "installing containerd, runc and busybox-static from Debian"
need=()
for p in containerd runc busybox-static containernetworking-plugins; do
	dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi

# Debian 12's apt has no Go this new: go.mod's version from the Go module proxy. (An
# older Go already on PATH fetches go.mod's toolchain itself, GOTOOLCHAIN=auto.)
if ! command -v go >/dev/null; then
	log "installing Go (go.mod's version) into /usr/local/go"
	bash "$REPO/hack/install-go.sh"
fi

log "building nodelet and the image tools"
mkdir -p "$QS/bin" "$QS/images" "$RUN" "$MANIFESTS"
(cd "$REPO" && bash hack/build.sh &&
	CGO_ENABLED=0 go build -ldflags "-s -w" -o "$QS/bin/pause" ./test/rig/pause &&
	go build -o "$QS/bin/mkimage" ./test/rig/mkimage)
"$QS/bin/mkimage" -kind busybox -bin /bin/busybox -name nodelet.local/busybox:latest -o "$QS/images/busybox.tar"
"$QS/bin/mkimage" -kind pause -bin "$QS/bin/pause" -name nodelet.local/pause:latest -o "$QS/images/pause.tar"

if ! [ -S "$SOCK" ] || ! ctr -a "$SOCK" version >/dev/null 2>&1; then
	log "starting containerd on $SOCK"
	cat >"$QS/containerd.toml" <<TOML
version = 2
root = "$QS/containerd"
state = "$RUN/state"
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "nodelet.local/pause:latest"
  # Hosts without CAP_SYS_RESOURCE (containers, some VMs) cannot lower oom_score_adj.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$QS/net.d"
TOML
	mkdir -p "$QS/net.d"
	nohup containerd --config "$QS/containerd.toml" >"$QS/containerd.log" 2>&1 &
	for _ in $(seq 1 50); do ctr -a "$SOCK" version >/dev/null 2>&1 && break; sleep 0.2; done
	ctr -a "$SOCK" version >/dev/null || { echo "containerd did not start; see $QS/containerd.log" >&2; exit 1; }
fi
for img in busybox pause; do
	ctr -a "$SOCK" -n k8s.io images import "$QS/images/$img.tar" >/dev/null
done

log "installing the demo static pod into $MANIFESTS"
cp "$REPO/deploy/manifests/demo.yaml" "$MANIFESTS/demo.yaml"

log "running nodelet in standalone mode (Ctrl-C stops nodelet; the pod keeps running)"
echo "Pod logs: ls /var/log/pods/ ; tail -f /var/log/pods/default_nodelet-demo-*/hello/0.log"
exec "$REPO/_output/nodelet" --config="$REPO/deploy/standalone-config.yaml" \
	--container-runtime-endpoint="unix://$SOCK" --pod-manifest-path="$MANIFESTS" --v=2 "$@"
