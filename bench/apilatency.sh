#!/usr/bin/env bash
# Latency of `kubectl exec -- true` and `kubectl logs` through the API server against a pod
# on the node agent (median, p90, min of API_LATENCY_RUNS runs, 20 by default), next to a
# `kubectl get pod` baseline that shows what the kubectl process itself costs. Runs the e2e
# test TestKubeletAPILatency under the rig lock, for nodelet and, when built, the upstream kubelet.
#   bash bench/apilatency.sh          # needs the rig up: test/rig/up.sh
#   API_LATENCY_RUNS=50 bash bench/apilatency.sh
#   NODELET_BIN=/path/to/nodelet bash bench/apilatency.sh   # a prebuilt binary instead of _output/nodelet
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
export PATH=/usr/local/go/bin:$PATH
NODELET=${NODELET_BIN:-}
if [[ -z "$NODELET" ]]; then
	bash hack/build.sh
	NODELET=$REPO/_output/nodelet
fi
KUBELET=${KUBELET_BIN:-/var/cache/nodelet-rig/v1.37.2/bin/kubelet}
declare -A bins=([nodelet]="$NODELET")
[ -x "$KUBELET" ] && bins[kubelet]=$KUBELET || echo "no upstream kubelet at $KUBELET: run bench/build-kubelet.sh for the comparison"
for name in nodelet kubelet; do
	[ -n "${bins[$name]:-}" ] || continue
	echo "=== $name (${bins[$name]})"
	flock /run/nodelet-rig.lock env NODELET_RIG_ENV=${NODELET_RIG_ENV:-/var/lib/nodelet-rig/rig.env} \
		NODELET_BIN="${bins[$name]}" API_LATENCY_RUNS="${API_LATENCY_RUNS:-20}" \
		go test -tags e2e -count=1 -v -run 'TestKubeletAPILatency$' ./test/e2e/ |
		grep -E 'API latency|FAIL' | sed -E "s/^ *server_test.go:[0-9]+: /$name: /"
done
