#!/bin/bash
# scenario.sh: runs inside the nodelet VM as nodelet-vm-test.service (systemd PID 1, cgroup v2,
# swap on /dev/vda), then the unit's SuccessAction/FailureAction powers the guest off.
#   failswapon  : nodelet with failSwapOn left at its default (true) must refuse to start.
#   limitedswap : nodelet (memorySwap.swapBehavior LimitedSwap) runs the pods; every
#                 container's, pod's and QoS cgroup's limit files are read back.
#   noswap      : nodelet stopped, every sandbox removed, restarted with NoSwap; read back.
# Inputs in /vm/in (written by run.sh): nodelet, rigcri, images/, manifests/, params.env,
# optionally kubeconfig + apiserver.env (pods from an API server on the host). Outputs in
# /vm/out: results.txt (machine-readable, parsed by vm_test.go), report.txt (the same, for
# people), logs/, guest-timings.txt and done (written last).
set -uo pipefail
IN=/vm/in
OUT=/vm/out
# shellcheck source=/dev/null
. "$IN/params.env"
# The cgroup driver of the scenario running (run_scenario sets it; failswapon runs with cgroupfs).
CGROUP_DRIVER=cgroupfs
ST=/var/lib/nodelet-vm
SOCK=/run/nodelet-vm/containerd.sock
RES=$OUT/results.txt
REPORT=$OUT/report.txt
mkdir -p "$OUT/logs" "$ST" /run/nodelet-vm
: >"$RES"

up() { cut -d' ' -f1 /proc/uptime; }
mark() { echo "$1 $(up)" >>"$OUT/guest-timings.txt"; }
res() { echo "$*" >>"$RES"; }
say() { echo "$*" | tee -a "$REPORT"; }
fail() {
	say "SCENARIO FAILED: $*"
	res "error $*"
	exit 1
}
ctr() { command ctr -a "$SOCK" -n k8s.io "$@"; }
finish() {
	local rc=$?
	journalctl -b --no-pager -o short-monotonic >"$OUT/logs/journal.txt" 2>&1
	for u in vm-containerd nodelet-limitedswap nodelet-noswap nodelet-systemd; do
		journalctl -b --no-pager -o short-monotonic -u "$u" >"$OUT/logs/$u.log" 2>&1
	done
	mark end
	echo "$rc" >"$OUT/done"
}
trap finish EXIT
mark scenario_start
say "guest: $(uname -r), PID 1 $(cat /proc/1/comm), $(stat -fc %T /sys/fs/cgroup) at /sys/fs/cgroup, controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
say "guest: systemd $(systemctl --version | head -1 | cut -d' ' -f2), scenarios: $SCENARIOS, uptime $(up)s"

# ------------------------------------------------------------------ swap
mkswap /dev/vda >/dev/null || fail "mkswap /dev/vda"
swapon /dev/vda || fail "swapon /dev/vda"
mem_total=$(awk '/^MemTotal:/ {print $2 * 1024}' /proc/meminfo)
swap_total=$(awk '/^SwapTotal:/ {print $2 * 1024}' /proc/meminfo)
res "meminfo MemTotal $mem_total"
res "meminfo SwapTotal $swap_total"
say "/proc/meminfo: $(grep -E '^(MemTotal|SwapTotal):' /proc/meminfo | tr -s ' ' | paste -sd' ')"
say "/proc/swaps:"
sed 's/^/  /' /proc/swaps | tee -a "$REPORT"

# nodelet_config FILE SWAPBEHAVIOR [FAILSWAPON]: the standalone config of deploy/ with the VM's
# paths; failSwapOn is left out (default true) when FAILSWAPON is "default".
nodelet_config() {
	{
		cat <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
cgroupDriver: $CGROUP_DRIVER
failCgroupV1: false
containerRuntimeEndpoint: unix://$SOCK
staticPodPath: $ST/manifests
fileCheckFrequency: 5s
syncFrequency: 10s
podLogsDir: $ST/pod-logs
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
YAML
		if [[ -n "${API:-}" ]]; then
			echo "registerNode: true"
		else
			echo "registerNode: false"
		fi
		if [[ "${3:-}" != default ]]; then echo "failSwapOn: false"; fi
		if [[ -n "$2" ]]; then printf 'memorySwap:\n  swapBehavior: %s\n' "$2"; fi
	} >"$1"
}
API=
if [[ -f "$IN/kubeconfig" ]]; then API=1; fi
nodelet_args=(--root-dir="$ST/kubelet" --hostname-override=nodelet-vm)
if [[ -n "$API" ]]; then
	nodelet_args+=(--kubeconfig="$IN/kubeconfig")
	# qemu user networking: the apiserver is 10.0.2.100:6443 (a guestfwd to the host's loopback).
	modprobe virtio_net || fail "modprobe virtio_net"
	ip link set eth0 up && ip addr add 10.0.2.15/24 dev eth0 && ip route add default via 10.0.2.2 ||
		fail "configuring eth0"
	res "mode api"
	say "pods: static ($(ls "$IN"/manifests | paste -sd' ')) and from the API server ($(ls "$IN"/api-pods 2>/dev/null | paste -sd' '))"
else
	res "mode standalone"
	say "pods: all static ($(ls "$IN"/manifests | paste -sd' '))"
fi

# ------------------------------------------------------------------ failSwapOn
if [[ " $SCENARIOS " == *" failswapon "* ]]; then
	mark failswapon_start
	nodelet_config "$ST/failswapon.yaml" "" default
	timeout 120 "$IN/nodelet" --config="$ST/failswapon.yaml" "${nodelet_args[@]}" >"$OUT/logs/failswapon.log" 2>&1
	rc=$?
	res "failswapon exit $rc"
	msg=$(grep -m1 'is not supported, please disable swap' "$OUT/logs/failswapon.log")
	res "failswapon message $msg"
	say "failswapon: nodelet with failSwapOn unset (true) and swap on exited $rc:"
	say "  $msg"
	mark failswapon_end
fi

# ------------------------------------------------------------------ containerd
# start_containerd DRIVER: (re)starts containerd with SystemdCgroup for DRIVER and the images.
# Switching drivers needs a restart (containerd reads SystemdCgroup at start); the sandboxes of
# the previous scenario are gone by then, and the images stay in containerd's root.
CONTAINERD_DRIVER=
start_containerd() {
	local driver=$1 systemd_cgroup=false
	[[ "$CONTAINERD_DRIVER" == "$driver" ]] && return 0
	mark "containerd_${driver}_start"
	if [[ -n "$CONTAINERD_DRIVER" ]]; then
		systemctl stop vm-containerd || fail "stopping containerd"
	fi
	if [[ "$driver" == systemd ]]; then systemd_cgroup=true; fi
	mkdir -p "$ST/containerd"
	cat >"$ST/containerd/config.toml" <<TOML
version = 2
root = "$ST/containerd/root"
state = "/run/nodelet-vm/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "nodelet.local/pause:latest"
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = $systemd_cgroup
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$ST/containerd/net.d"
TOML
	mkdir -p "$ST/containerd/net.d"
	# As Debian's containerd.service: Delegate=yes, KillMode=process.
	systemd-run --quiet --unit=vm-containerd -p Delegate=yes -p KillMode=process -p MemoryAccounting=yes \
		/usr/bin/containerd --config "$ST/containerd/config.toml" || fail "systemd-run containerd"
	for _ in $(seq 1 120); do ctr version >/dev/null 2>&1 && break; sleep 0.5; done
	ctr version >/dev/null 2>&1 || fail "containerd did not come up"
	if [[ -z "$CONTAINERD_DRIVER" ]]; then
		for img in busybox pause; do
			ctr images import "$IN/images/$img.tar" >/dev/null || fail "importing $img"
		done
	fi
	CONTAINERD_DRIVER=$driver
	mark "containerd_${driver}_ready"
	say "containerd $(containerd --version | cut -d' ' -f3) up with the images, SystemdCgroup = $systemd_cgroup, at $(up)s"
}

# read_files KIND NAME DIR FILE...: one result line per file (`read`: no fork, TCG is slow).
read_files() {
	local kind=$1 name=$2 dir=$3 f v
	shift 3
	for f in "$@"; do
		v="<missing>"
		[[ -r "$dir/$f" ]] && read -r v <"$dir/$f"
		res "cg $SC $kind $name $f $v"
		printf '    %-16s %s\n' "$f" "$v" >>"$REPORT"
	done
}

# containers: one line per CRI container (not sandbox) from the runtime's OCI bundles:
# pod name, container name, cgroupsPath, the memory.swap.max nodelet asked for over CRI.
containers() {
	local f
	for f in /run/nodelet-vm/containerd/io.containerd.runtime.v2.task/k8s.io/*/config.json; do
		[[ -f "$f" ]] && printf '%s\n' "$f"
	done | xargs -r jq -r 'select(.annotations["io.kubernetes.cri.container-type"] == "container")
		| [.annotations["io.kubernetes.cri.sandbox-name"], .annotations["io.kubernetes.cri.container-name"],
		   .linux.cgroupsPath, (.linux.resources.unified["memory.swap.max"] // "<unset>")] | @tsv'
}

# cgroup_dir CGROUPSPATH: the container's cgroup dir for either driver.
cgroup_dir() {
	if [[ "$CGROUP_DRIVER" == systemd ]]; then
		# slice:prefix:name -> the scope under the slice tree.
		echo "/sys/fs/cgroup$(systemctl show -p ControlGroup --value "$(cut -d: -f2 <<<"$1")-$(cut -d: -f3 <<<"$1").scope")"
	else
		echo "/sys/fs/cgroup$1"
	fi
}

# running: how many containers have a process in their cgroup.
running() {
	local n=0 pod cname cgpath swap procs
	while IFS=$'\t' read -r pod cname cgpath swap; do
		procs=
		read -r procs <"$(cgroup_dir "$cgpath")/cgroup.procs" 2>/dev/null
		[[ -n "$procs" ]] && n=$((n + 1))
	done < <(containers)
	echo "$n"
}

# swap_fill CGDIR: a process put into the container's cgroup writes 136 MiB to a tmpfs, past the
# container's 128 MiB memory.max. With its swap limit (~16.7 MiB, LimitedSwap) the kernel must
# swap the excess out instead of OOM-killing (upstream's "use more memory than memory limits");
# with memory.swap.max 0 (NoSwap) nothing may be swapped and the cgroup OOM-kills.
swap_fill() {
	local cg=$1 rc before after cur fill=/run/nodelet-vm/fill
	mkdir -p "$fill"
	mountpoint -q "$fill" || mount -t tmpfs -o size=256m tmpfs "$fill" || fail "mounting $fill"
	before=$(awk '$1 == "oom_kill" {print $2}' "$cg/memory.events")
	bash -c 'echo $$ >"$1/cgroup.procs" && exec dd if=/dev/zero of="$2/data" bs=1M count=136 status=none' _ "$cg" "$fill"
	rc=$?
	read -r cur <"$cg/memory.swap.current"
	after=$(awk '$1 == "oom_kill" {print $2}' "$cg/memory.events")
	res "swapfill $SC exit $rc swapcurrent $cur oomkill $((after - before))"
	say "swap fill: 136 MiB into ${cg#/sys/fs/cgroup}: dd exit $rc, memory.swap.current $cur, new OOM kills $((after - before))"
	rm -f "$fill/data"
}

# run_scenario NAME SWAPBEHAVIOR DRIVER [last]: nodelet with the pods and cgroupDriver DRIVER;
# waits for every container; reads back.
run_scenario() {
	SC=$1
	local behavior=$2 unit=nodelet-$1 want n qos pod cname cgpath swap cgdir poddir kubepods
	CGROUP_DRIVER=$3
	kubepods=kubepods
	if [[ "$CGROUP_DRIVER" == systemd ]]; then kubepods=kubepods.slice; fi
	start_containerd "$CGROUP_DRIVER"
	mark "${SC}_start"
	say ""
	say "===== scenario $SC (memorySwap.swapBehavior: $behavior, cgroupDriver: $CGROUP_DRIVER) at $(up)s"
	rm -rf "$ST/manifests"
	mkdir -p "$ST/manifests"
	cp "$IN"/manifests/*.yaml "$ST/manifests/"
	want=$(cat "$IN/expected-containers")
	nodelet_config "$ST/$SC.yaml" "$behavior"
	systemd-run --quiet --unit="$unit" -p MemoryAccounting=yes -p KillMode=process \
		"$IN/nodelet" --config="$ST/$SC.yaml" "${nodelet_args[@]}" --v=2 || fail "systemd-run $unit"
	n=0
	for _ in $(seq 1 150); do
		n=$(running)
		((n >= want)) && break
		systemctl is-active -q "$unit" || break
		sleep 2
	done
	systemctl is-active -q "$unit" || fail "$unit exited: $(journalctl -u "$unit" --no-pager | tail -5)"
	((n >= want)) || fail "only $n of $want containers running after 300s"
	mark "${SC}_running"
	say "all $want containers running at $(up)s"
	say "cgroup tree (find /sys/fs/cgroup/$kubepods -maxdepth 3 -type d):"
	find "/sys/fs/cgroup/$kubepods" -maxdepth 3 -type d | sort | while read -r d; do
		res "tree $SC ${d#/sys/fs/cgroup}"
		echo "  ${d#/sys/fs/cgroup}" >>"$REPORT"
	done
	say "kubepods and QoS cgroups:"
	local qos_cgroups=(kubepods kubepods/burstable kubepods/besteffort)
	if [[ "$CGROUP_DRIVER" == systemd ]]; then
		qos_cgroups=(kubepods.slice kubepods.slice/kubepods-burstable.slice kubepods.slice/kubepods-besteffort.slice)
	fi
	for qos in "${qos_cgroups[@]}"; do
		echo "  /$qos" >>"$REPORT"
		read_files qos "$qos" "/sys/fs/cgroup/$qos" memory.max memory.swap.max cpu.weight cpu.max pids.max
	done
	while IFS=$'\t' read -r pod cname cgpath swap; do
		cgdir=$(cgroup_dir "$cgpath")
		poddir=$(dirname "$cgdir")
		res "container $SC $pod/$cname ${cgdir#/sys/fs/cgroup}"
		res "cri $SC $pod/$cname unified.memory.swap.max $swap"
		echo "" >>"$REPORT"
		echo "  pod $pod: ${poddir#/sys/fs/cgroup}" >>"$REPORT"
		read_files pod "$pod" "$poddir" memory.max memory.swap.max cpu.weight cpu.max pids.max
		echo "  container $pod/$cname: ${cgdir#/sys/fs/cgroup} (CRI Unified memory.swap.max: $swap)" >>"$REPORT"
		read_files container "$pod/$cname" "$cgdir" memory.max memory.swap.max cpu.weight cpu.max pids.max
	done < <(containers | sort)
	# The kubelet API's Summary (anonymous, AlwaysAllow in this config): swap stats per node and pod.
	curl -sk --max-time 20 https://127.0.0.1:10250/stats/summary >"$OUT/summary-$SC.json" ||
		say "fetching /stats/summary failed"
	# Last, as under NoSwap it ends in an OOM kill of the container.
	while IFS=$'\t' read -r pod cname cgpath swap; do
		if [[ "$pod" == burstable-swap ]]; then swap_fill "$(cgroup_dir "$cgpath")"; fi
	done < <(containers)
	mark "${SC}_read"
	if [[ "${4:-}" == last ]]; then
		mark "${SC}_end"
		say "scenario $SC done at $(up)s (pods left running: the guest powers off)"
		return 0
	fi
	systemctl stop "$unit"
	journalctl --no-pager -u "$unit" >"$OUT/logs/$unit.log" 2>&1
	"$IN/rigcri" -endpoint "unix://$SOCK" cleanup >>"$OUT/logs/cleanup.log" 2>&1 || fail "removing the sandboxes"
	mark "${SC}_end"
	say "scenario $SC done at $(up)s"
}

last=$(wc -w <<<"$SCENARIOS")
i=0
for sc in $SCENARIOS; do
	i=$((i + 1))
	pos=
	((i == last)) && pos=last
	case $sc in
	failswapon) ;;
	limitedswap) run_scenario limitedswap LimitedSwap cgroupfs "$pos" ;;
	noswap) run_scenario noswap NoSwap cgroupfs "$pos" ;;
	systemd) run_scenario systemd LimitedSwap systemd "$pos" ;;
	mismatch)
		# containerd with SystemdCgroup = true, nodelet left at cgroupDriver cgroupfs: nodelet
		# must refuse to start and name both drivers.
		start_containerd systemd
		mark mismatch_start
		CGROUP_DRIVER=cgroupfs
		nodelet_config "$ST/mismatch.yaml" NoSwap
		timeout 120 "$IN/nodelet" --config="$ST/mismatch.yaml" "${nodelet_args[@]}" >"$OUT/logs/mismatch.log" 2>&1
		rc=$?
		res "mismatch exit $rc"
		msg=$(grep -m1 'cgroup driver mismatch' "$OUT/logs/mismatch.log")
		res "mismatch message $msg"
		say "mismatch: nodelet (cgroupfs) against containerd (SystemdCgroup = true) exited $rc:"
		say "  $msg"
		mark mismatch_end
		;;
	realsystemd)
		# The cgroups package's opt-in test of the systemd driver against this real systemd.
		mark realsystemd_start
		NODELET_REAL_SYSTEMD=1 "$IN/cgroups.test" -test.run '^TestRealSystemd$' -test.v >"$OUT/logs/realsystemd.log" 2>&1
		res "realsystemd exit $?"
		say "realsystemd: $(grep -E '^(--- |ok|FAIL|PASS)' "$OUT/logs/realsystemd.log" | paste -sd' ')"
		mark realsystemd_end
		;;
	*) fail "unknown scenario $sc" ;;
	esac
done
say ""
say "all scenarios done at $(up)s"
res "ok"
