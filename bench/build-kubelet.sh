#!/usr/bin/env bash
# Prints the path of the upstream kubelet v1.37.2 (for bench/compare.sh and the conformance
# comparison). test/rig/build-bins.sh builds it with the control plane, in the rig's own k8s
# module, so nodelet's go.mod never sees k8s.io/kubernetes.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
if [[ -n "${KUBELET_BIN:-}" ]]; then
	[[ -x "$KUBELET_BIN" ]] || { echo "KUBELET_BIN=$KUBELET_BIN is not an executable" >&2; exit 1; }
	echo "$KUBELET_BIN"
	exit 0
fi
bin_dir=$(bash "$REPO/test/rig/build-bins.sh" | tail -1)
echo "$bin_dir/kubelet"
