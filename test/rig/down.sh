#!/usr/bin/env bash
# down.sh: stops everything test/rig/up.sh started, tolerant of partial state:
#   1. nodelet processes an e2e run left behind (root dir under $RIG_DIR/nodelet),
#   2. every CRI pod sandbox (so CNI tears their networks down), then any remaining
#      containerd tasks/containers in the k8s.io namespace,
#   3. containerd (1.6 or 2.x) and the shims it started, kube-scheduler,
#      kube-controller-manager, kube-apiserver, etcd,
#   4. mounts left under the containerd root/state and the nodelet root dirs, the CNI bridge.
# Data (etcd, images, PKI) is kept; `up.sh --fresh` wipes it. Always exits 0 unless a
# process refuses to die.
set -uo pipefail

RIG_DIR=${RIG_DIR:-/var/lib/nodelet-rig}
RUN=$RIG_DIR/run
BIN=$RIG_DIR/bin
SOCK=$RUN/containerd.sock
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

log() { echo "[down $(date -u +%H:%M:%S)] $*" >&2; }

if [[ ! -d "$RIG_DIR" ]]; then
	log "no $RIG_DIR: nothing to do"
	exit 0
fi

# pids_matching STRING: pids whose command line contains STRING (never this shell).
pids_matching() {
	local p
	for p in /proc/[0-9]*; do
		p=${p#/proc/}
		[[ "$p" == "$$" || "$p" == "$BASHPID" ]] && continue
		if tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -qF -- "$1"; then
			echo "$p"
		fi
	done
}

# stop_pids TIMEOUT PID...: SIGTERM, wait, then SIGKILL.
stop_pids() {
	local timeout=$1 p deadline left
	shift
	(($# == 0)) && return 0
	kill -TERM "$@" 2>/dev/null
	deadline=$((SECONDS + timeout))
	while :; do
		left=()
		for p in "$@"; do [[ -d /proc/$p ]] && left+=("$p"); done
		((${#left[@]} == 0)) && return 0
		if ((SECONDS >= deadline)); then
			log "SIGKILL ${left[*]}"
			kill -KILL "${left[@]}" 2>/dev/null
			sleep 0.5
			return 0
		fi
		sleep 0.2
	done
}

# stop_named NAME: the process in $RUN/NAME.pid, if it is still the rig's.
stop_named() {
	local pidf=$RUN/$1.pid pid
	[[ -f "$pidf" ]] || return 0
	pid=$(cat "$pidf")
	if [[ -n "$pid" && -d /proc/$pid ]] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF "$RIG_DIR"; then
		log "stopping $1 (pid $pid)"
		stop_pids 20 "$pid"
	fi
	rm -f "$pidf"
}

# 1. node agents left by e2e runs.
mapfile -t agents < <(pids_matching "--root-dir=$RIG_DIR/nodelet/")
if ((${#agents[@]})); then
	log "stopping node agents: ${agents[*]}"
	stop_pids 15 "${agents[@]}"
fi

# 2. pods, while containerd still answers. The rig's own ctr (2.x's with RIG_RUNTIME=containerd2).
CTR_BIN=ctr
cdbin=$(sed -n 's/^CONTAINERD_BIN_DIR=//p' "$RIG_DIR/rig.env" 2>/dev/null)
if [[ -n "$cdbin" && -x "$cdbin/ctr" ]]; then CTR_BIN=$cdbin/ctr; fi
ctr() { command "$CTR_BIN" "$@"; } # command: CTR_BIN "ctr" must not call this function
if [[ -S "$SOCK" ]] && ctr -a "$SOCK" version >/dev/null 2>&1; then
	if [[ -x "$BIN/rigcri" ]]; then
		ctrflag=()
		[[ -x "$BIN/ctr" ]] && ctrflag=(-ctr "$BIN/ctr")
		timeout 120 "$BIN/rigcri" -endpoint "unix://$SOCK" "${ctrflag[@]}" -timeout 110s cleanup >&2 ||
			log "CRI cleanup failed; removing tasks with ctr"
	fi
	for t in $(ctr -a "$SOCK" -n k8s.io tasks ls -q 2>/dev/null); do
		ctr -a "$SOCK" -n k8s.io tasks kill -s SIGKILL "$t" >/dev/null 2>&1
	done
	sleep 0.5
	for t in $(ctr -a "$SOCK" -n k8s.io tasks ls -q 2>/dev/null); do
		ctr -a "$SOCK" -n k8s.io tasks delete -f "$t" >/dev/null 2>&1
	done
	for c in $(ctr -a "$SOCK" -n k8s.io containers ls -q 2>/dev/null); do
		ctr -a "$SOCK" -n k8s.io containers delete "$c" >/dev/null 2>&1
	done
fi

# 3. containerd, then the shims it started (they outlive it by design), then the control plane.
stop_named containerd
mapfile -t shims < <(pids_matching "-address $SOCK")
if ((${#shims[@]})); then
	log "stopping containerd shims: ${shims[*]}"
	stop_pids 10 "${shims[@]}"
fi
stop_named registry
stop_named kube-scheduler
stop_named kube-controller-manager
stop_named kube-apiserver
stop_named etcd

# 4. mounts (deepest first) under the rig's dirs: overlay rootfs, shm, sandbox/volume tmpfs.
mapfile -t mounts < <(awk -v r="$RIG_DIR/" 'index($5, r) == 1 {print $5}' /proc/self/mountinfo | sort -r)
for m in "${mounts[@]}"; do
	umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
done
bridge=$(sed -n 's/^CNI_BRIDGE=//p' "$RIG_DIR/rig.env" 2>/dev/null)
bridge=${bridge:-nodelet0}
if ip link show "$bridge" >/dev/null 2>&1; then
	ip link delete "$bridge" 2>/dev/null || true
fi
# IP allocations are meaningless without the containers.
rm -rf "$RIG_DIR/cni/ipam"
rm -f "$SOCK" "$SOCK.ttrpc" "$RUN/containerd-debug.sock"
log "rig is down"
exit 0
