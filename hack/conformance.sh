#!/usr/bin/env bash
# conformance.sh: runs the upstream Kubernetes e2e [NodeConformance] specs (k8s.io/kubernetes
# v1.37.2) against nodelet, or with --kubelet against the upstream kubelet, on a rig of its own
# (test/conformance/rig.env: RIG_DIR /var/lib/nodelet-rig-conf, containerd 2, its own ports,
# bridge, pod range and cgroupRoot), so that it can run beside the default rig. As root:
#
#   sudo hack/conformance.sh                 # nodelet
#   sudo hack/conformance.sh --kubelet       # the upstream kubelet (bench/build-kubelet.sh), same config
#
# Steps: install deps -> build (cached: rig binaries, containerd 2, e2e.test, ginkgo, agnhost,
# the test images) -> rig up --fresh -> import the images -> start the node agent as the rig's
# node -> wait Ready, untaint -> ginkgo -> summary -> stop the agent and the rig (KEEP_RIG=1
# keeps them).
#
# Writes the junit and JSON reports and the node agent's log under _output/conformance/<name>/
# (name: nodelet or kubelet, or --name) and prints one last line: `N passed, N failed, N skipped`
# (skipped: specs that ran and skipped themselves; specs outside the focus are not counted).
# Exits 1 when a spec failed.
#
# Flags: --kubelet, --name NAME, --focus RE, --skip RE, --procs N (4), --timeout DUR (3h),
#   --slice: only the specs listed in test/conformance/ci-slice.txt (one full spec text a line):
#   the fixed slice that covers every area, for CI (name: <agent>-slice).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
export PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"

AGENT=nodelet
NAME=""
SLICE=0
FOCUS='\[NodeConformance\]'
SKIP='\[Serial\]|\[Disruptive\]|\[Flaky\]|\[Slow\]|\[Feature:'
PROCS=4
TIMEOUT=3h
while (($#)); do
	case $1 in
	--kubelet) AGENT=kubelet ;;
	--name) NAME=$2; shift ;;
	--focus) FOCUS=$2; shift ;;
	--skip) SKIP=$2; shift ;;
	--procs) PROCS=$2; shift ;;
	--timeout) TIMEOUT=$2; shift ;;
	--slice) SLICE=1 ;;
	*) echo "unknown flag $1 (see the head of $0)" >&2; exit 2 ;;
	esac
	shift
done
if ((SLICE)); then
	# Each line is matched as a literal: the focus is their regexp-quoted alternation.
	FOCUS=$(python3 -c 'import re, sys; print("|".join(re.escape(l.strip()) for l in open(sys.argv[1]) if l.strip() and not l.startswith("#")))' test/conformance/ci-slice.txt)
	NAME=${NAME:-$AGENT-slice}
fi
NAME=${NAME:-$AGENT}

log() { echo "[conformance $(date -u +%H:%M:%S)] $*" >&2; }
die() {
	log "ERROR: $*"
	exit 1
}
[[ $(id -u) == 0 ]] || die "must run as root"

# The conformance rig's settings; values already in the environment win.
set -a
# shellcheck source=../test/conformance/rig.env
. test/conformance/rig.env
set +a

OUT=$REPO/_output/conformance/$NAME
rm -rf "$OUT"
mkdir -p "$OUT"

log "install deps"
bash test/conformance/install-deps.sh >&2
log "build (cached)"
RIG_BIN_DIR=$(bash test/rig/build-bins.sh | tail -1)
export RIG_BIN_DIR
CONF_CACHE=$(bash test/conformance/build.sh | tail -1)
if [[ $AGENT == kubelet ]]; then
	AGENT_BIN=$(bash bench/build-kubelet.sh | tail -1)
else
	bash hack/build.sh
	AGENT_BIN=$REPO/_output/nodelet
fi

AGENT_PID=""
stop_all() {
	local rc=$?
	if [[ -n "$AGENT_PID" ]] && kill -0 "$AGENT_PID" 2>/dev/null; then
		kill -TERM "$AGENT_PID" 2>/dev/null || true
		for _ in $(seq 1 60); do kill -0 "$AGENT_PID" 2>/dev/null || break; sleep 0.5; done
		kill -KILL "$AGENT_PID" 2>/dev/null || true
	fi
	# The runtime's and control plane's logs explain a failed spec as often as the agent's
	# does; the next rig up --fresh deletes them.
	if [[ -d "${RIG_DIR:-}/logs" ]]; then cp -r "$RIG_DIR/logs" "$OUT/rig-logs" 2>/dev/null || true; fi
	if [[ "${KEEP_RIG:-0}" != 1 ]]; then
		bash test/rig/down.sh >&2 || true
	fi
	exit "$rc"
}
trap stop_all EXIT

log "rig up ($RIG_DIR, $RIG_RUNTIME)"
bash test/rig/up.sh --fresh >"$OUT/rig-up.log" 2>&1 || { tail -30 "$OUT/rig-up.log" >&2; die "rig up failed: $OUT/rig-up.log"; }
set -a
. "$RIG_DIR/rig.env"
set +a
KC=(--kubeconfig="$KUBECONFIG")

log "importing the test images"
for t in "$CONF_CACHE"/images/*.tar; do
	"$CTR" images import "$t" >/dev/null 2>&1 || die "importing $t failed"
done

# The node agent, configured as nodelet's e2e framework does (test/e2e/framework): cgroupfs,
# the rig's cgroupRoot, x509 + webhook authn, webhook authz, space-based image GC off (the
# images cannot be pulled back). Its root dir is under $RIG_DIR/nodelet/, which down.sh cleans.
DIR=$RIG_DIR/nodelet/conformance
mkdir -p "$DIR/root" "$DIR/pod-logs"
cat >"$DIR/config.yaml" <<CFG
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: $CONTAINER_RUNTIME_ENDPOINT
cgroupDriver: cgroupfs
cgroupRoot: ${CGROUP_ROOT:-/}
failSwapOn: false
failCgroupV1: false
imageGCHighThresholdPercent: 100
podLogsDir: $DIR/pod-logs
healthzBindAddress: 127.0.0.1
healthzPort: $NODELET_HEALTHZ_PORT
port: $NODELET_PORT
readOnlyPort: 0
tlsCertFile: $KUBELET_SERVING_CERT
tlsPrivateKeyFile: $KUBELET_SERVING_KEY
clusterDomain: cluster.local
authentication:
  x509:
    clientCAFile: $CA_CERT
  webhook:
    enabled: true
  anonymous:
    enabled: false
authorization:
  mode: Webhook
CFG
log "starting $AGENT as node $NODE_NAME ($AGENT_BIN)"
(
	for fd in /proc/$BASHPID/fd/*; do
		fd=${fd##*/}
		((fd > 2)) && eval "exec $fd>&-"
	done
	exec setsid "$AGENT_BIN" --config="$DIR/config.yaml" --kubeconfig="$NODE_KUBECONFIG" \
		--hostname-override="$NODE_NAME" --root-dir="$DIR/root" --v=2 </dev/null >"$OUT/$AGENT.log" 2>&1
) &
AGENT_PID=$!

deadline=$((SECONDS + 180))
until "$KUBECTL" "${KC[@]}" get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null | grep -qx True; do
	kill -0 "$AGENT_PID" 2>/dev/null || { tail -20 "$OUT/$AGENT.log" >&2; die "$AGENT exited"; }
	((SECONDS < deadline)) || die "node $NODE_NAME not Ready after 180s: $OUT/$AGENT.log"
	sleep 1
done
log "node $NODE_NAME is Ready"
# The rig runs no node lifecycle controller: the agent's registration taint stays unless taken off.
"$KUBECTL" "${KC[@]}" taint nodes "$NODE_NAME" node.kubernetes.io/not-ready- >/dev/null 2>&1 || true

log "ginkgo: focus ${FOCUS:0:200}, skip $SKIP, $PROCS procs (report: $OUT)"
start=$SECONDS
set +e
"$CONF_CACHE/bin/ginkgo" --procs="$PROCS" --timeout="$TIMEOUT" --no-color \
	--output-dir="$OUT" --json-report=report.json \
	"$CONF_CACHE/bin/e2e.test" -- \
	--kubeconfig="$KUBECONFIG" --provider=skeleton --kubectl-path="$KUBECTL" \
	--container-runtime-endpoint="$CONTAINER_RUNTIME_ENDPOINT" \
	--report-dir="$OUT" --disable-log-dump \
	--ginkgo.focus="$FOCUS" --ginkgo.skip="$SKIP" >"$OUT/ginkgo.log" 2>&1
ginkgo_rc=$?
set -e
log "ginkgo exited $ginkgo_rc after $((SECONDS - start))s (log: $OUT/ginkgo.log)"
[[ -f "$OUT/report.json" ]] || { tail -30 "$OUT/ginkgo.log" >&2; die "no report.json"; }

# Summary from ginkgo's JSON report: one line, plus the failed specs' names in failed.txt.
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
suites = json.load(open(out + "/report.json"))
passed = failed = skipped = 0
failures = []
for s in suites:
    for r in s.get("SpecReports") or []:
        if r.get("LeafNodeType") != "It":
            continue
        state = r.get("State")
        name = " ".join([t for t in r.get("ContainerHierarchyTexts") or []] + [r.get("LeafNodeText", "")])
        if state == "passed":
            passed += 1
        elif state == "skipped":
            # Specs outside the focus are reported as skipped without a failure message.
            if (r.get("Failure") or {}).get("Message"):
                skipped += 1
        elif state in ("pending",):
            pass
        else:
            failed += 1
            failures.append(name)
with open(out + "/failed.txt", "w") as f:
    for n in sorted(failures):
        f.write(n + "\n")
print(f"{passed} passed, {failed} failed, {skipped} skipped")
PY
[[ $(wc -l <"$OUT/failed.txt") == 0 ]]
