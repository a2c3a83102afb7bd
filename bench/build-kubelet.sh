#!/usr/bin/env bash
# Builds the upstream kubelet v1.37.2 (for bench/compare.sh only) in a scratch copy of the
# rig's own k8s module, so nodelet's go.mod never sees k8s.io/kubernetes.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${KUBELET_BIN:-/var/cache/nodelet-rig/v1.37.2/bin/kubelet}
export PATH=/usr/local/go/bin:$PATH
[ -x "$OUT" ] && { echo "$OUT"; exit 0; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$REPO/test/rig/k8sbins/." "$work/"
cd "$work"
go get k8s.io/kubernetes/cmd/kubelet@v1.37.2
mkdir -p "$(dirname "$OUT")"
CGO_ENABLED=0 go build -ldflags "-X k8s.io/component-base/version.gitVersion=v1.37.2 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37 -X k8s.io/component-base/version.gitTreeState=clean" -o "$OUT" k8s.io/kubernetes/cmd/kubelet
echo "$OUT"
