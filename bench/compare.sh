#!/usr/bin/env bash
# Side-by-side pod start and footprint: nodelet and, when built, the upstream kubelet,
# one after the other on the same rig in one run, with the same generated
# KubeletConfiguration and flags (the kubelet takes nodelet's command line as is).
#   bash bench/compare.sh            # needs the rig up: test/rig/up.sh
#   BENCH_PODS=50 bash bench/compare.sh
#   BENCH_RUN=TestCSIMount bash bench/compare.sh   # CSI claim pods (10), test driver of the rig
#   BENCH_RUN='TestBurst$' bash bench/compare.sh   # 110 pods at once (BENCH_PODS); floor: TestBurstCRIFloor
#   BENCH_RUN='TestBurst$' BENCH_PROFILE=/tmp/p bash bench/compare.sh  # + each agent's CPU profile of the burst: /tmp/p.<agent>.pprof (TestDensity: its heap, /tmp/p.<agent>.pprof.heap)
#   BENCH_RUN=TestDensity bash bench/compare.sh    # 250 pods running (BENCH_DENSITY_PODS): footprint, relist, /stats/summary
#   BENCH_RUN=TestEventLatency bash bench/compare.sh  # kill -> pod status, generic and evented PLEG (BENCH_KILLS)
# After both agents it runs the run's runtime floor once (TestPodStartupCRIFloor, TestBurstCRIFloor;
# BENCH_FLOOR_RUN= to skip, or another test); TestDensity and TestEventLatency have none.
# The machine's load average is printed before each agent: the figures are only as quiet as it.
# Build the upstream kubelet for it with: bash bench/build-kubelet.sh
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
export PATH=/usr/local/go/bin:$PATH
bash hack/build.sh
KUBELET=${KUBELET_BIN:-/var/cache/nodelet-rig/v1.37.2/bin/kubelet}
declare -A bins=([nodelet]="$REPO/_output/nodelet")
[ -x "$KUBELET" ] && bins[kubelet]=$KUBELET || echo "no upstream kubelet at $KUBELET: run bench/build-kubelet.sh for the comparison"
# The runtime floor of a run (the same pods straight over CRI, no agent), run once after both.
RUN=${BENCH_RUN:-TestPodStartup}
case "$RUN" in
TestPodStartup) FLOOR=${BENCH_FLOOR_RUN-TestPodStartupCRIFloor} ;;
'TestBurst$') FLOOR=${BENCH_FLOOR_RUN-TestBurstCRIFloor} ;;
TestDensity | TestEventLatency) FLOOR=${BENCH_FLOOR_RUN-} ;; # nothing to compare with below the agent
*) FLOOR=${BENCH_FLOOR_RUN-} ;;
esac
for name in nodelet kubelet; do
	[ -n "${bins[$name]:-}" ] || continue
	echo "=== $name (${bins[$name]}) load average: $(cat /proc/loadavg)"
	# TestDensity takes ~5 min an agent on 2 cores, more on a loaded machine.
	NODELET_BIN=${bins[$name]} BENCH_PROFILE=${BENCH_PROFILE:+$BENCH_PROFILE.$name.pprof} go test -tags bench -count=1 -timeout 20m -v -run "$RUN" ./bench/ |
		grep -E '^BENCH|FAIL|_test\.go:[0-9]+:' | sed "s/^BENCH /$name: /" ||
		echo "=== $name: go test failed (above); going on with the next" # the other agent's figures still count
done
if [ -n "$FLOOR" ]; then
	echo "=== runtime floor ($FLOOR) load average: $(cat /proc/loadavg)"
	NODELET_BIN=${bins[nodelet]} go test -tags bench -count=1 -timeout 20m -v -run "^$FLOOR\$" ./bench/ |
		grep -E '^BENCH|FAIL|_test\.go:[0-9]+:' | sed "s/^BENCH /floor: /"
fi
echo "=== done, load average: $(cat /proc/loadavg)"
