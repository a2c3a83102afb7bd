#!/usr/bin/env bash
# run.sh: boots the nodelet VM once and runs the guest scenarios (test/vm/guest/scenario.sh):
#   kernel.sh (Debian's kernel, cached) -> mkinitramfs.sh -> build nodelet, rigcri and the
#   busybox/pause OCI images -> a raw swap disk -> qemu (TCG) -> results in $VM_DIR/out.
# Exits 0 when the guest reported "done" (the scenarios' own verdicts are in out/results.txt,
# checked by vm_test.go), non-zero when it never did (qemu killed after VM_TIMEOUT seconds).
# Runs as root. Env:
#   VM_DIR (/var/lib/nodelet-vm): work dir, shared writable with the guest (in/, out/)
#   VM_CACHE (/var/cache/nodelet-rig/vm): kernel cache
#   VM_ACCEL (tcg): tcg or kvm (KVM does not work on the CI machine: see README.md)
#   VM_CPU (max for tcg, host for kvm): qemu's -cpu
#   VM_MEM_MB (2048), VM_SWAP_MB (512), VM_SMP (2), VM_TIMEOUT (480)
#   VM_SCENARIOS ("failswapon realsystemd limitedswap noswap mismatch systemd"): which guest
#     scenarios run, in order: failSwapOn refusal; the cgroups package's TestRealSystemd;
#     LimitedSwap and NoSwap with cgroupDriver cgroupfs; cgroupfs against a systemd containerd
#     refused; LimitedSwap with cgroupDriver systemd (containerd SystemdCgroup = true)
#   VM_API (auto): 1 = run etcd + kube-apiserver on the host's loopback (from RIG_BIN_DIR, or the
#     rig's cache) and give the guest the pods of guest/api-pods through it; 0 = standalone only
#     (every pod static). auto = 1 when the binaries are there.
#   VM_API_PORT (26443), VM_ETCD_PORT (23990)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
export PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"
VM_DIR=${VM_DIR:-/var/lib/nodelet-vm}
VM_CACHE=${VM_CACHE:-/var/cache/nodelet-rig/vm}
VM_ACCEL=${VM_ACCEL:-tcg}
VM_MEM_MB=${VM_MEM_MB:-2048}
VM_SWAP_MB=${VM_SWAP_MB:-512}
VM_SMP=${VM_SMP:-2}
VM_TIMEOUT=${VM_TIMEOUT:-480}
VM_SCENARIOS=${VM_SCENARIOS:-failswapon realsystemd limitedswap noswap mismatch systemd}

T0=$(date +%s.%N)
# SIGTERM/SIGINT (go test's timeout): exit through the EXIT trap, which stops the apiserver.
trap 'exit 143' TERM INT
log() { echo "[vm $(date -u +%H:%M:%S)] $*" >&2; }
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}'; }
[[ $(id -u) == 0 ]] || { log "must run as root"; exit 1; }
for b in qemu-system-x86_64 cpio busybox depmod apt-get dpkg-deb containerd runc jq mkswap; do
	command -v "$b" >/dev/null || { log "missing $b: run test/vm/install-deps.sh"; exit 1; }
done

mkdir -p "$VM_DIR" "$VM_CACHE"
# Only what this script made: in/, out/, the swap disk, the initramfs.
rm -rf "${VM_DIR:?}/in" "$VM_DIR/out"
mkdir -p "$VM_DIR/in/images" "$VM_DIR/out"
TIMINGS=$VM_DIR/out/host-timings.txt

t=$(date +%s.%N)
KDIR=$(bash "$HERE/kernel.sh" | tail -1)
KVER=$(cat "$KDIR/kver")
echo "kernel_extract $(since "$t")" >>"$TIMINGS"

t=$(date +%s.%N)
bash "$HERE/mkinitramfs.sh" "$KDIR" "$VM_DIR/initramfs.gz"
echo "initramfs_build $(since "$t")" >>"$TIMINGS"

t=$(date +%s.%N)
log "building nodelet, rigcri, pause, mkimage"
(cd "$REPO" && bash hack/build.sh -o "$VM_DIR/in/nodelet" &&
	go build -o "$VM_DIR/in/rigcri" ./test/rig/rigcri &&
	go test -c -o "$VM_DIR/in/cgroups.test" ./cgroups &&
	CGO_ENABLED=0 go build -ldflags "-s -w" -o "$VM_DIR/in/pause" ./test/rig/pause &&
	go build -o "$VM_DIR/mkimage" ./test/rig/mkimage)
"$VM_DIR/mkimage" -kind busybox -bin /bin/busybox -name nodelet.local/busybox:latest -o "$VM_DIR/in/images/busybox.tar"
"$VM_DIR/mkimage" -kind pause -bin "$VM_DIR/in/pause" -name nodelet.local/pause:latest -o "$VM_DIR/in/images/pause.tar"
cp "$HERE/guest/scenario.sh" "$VM_DIR/in/scenario.sh"
cp -r "$HERE/guest/manifests" "$VM_DIR/in/manifests"
cp -r "$HERE/guest/api-pods" "$VM_DIR/in/api-pods"
# API pods: through a kube-apiserver on the host when there is one, else static pods too (which
# nodelet, as the kubelet, treats as critical: they never get swap).
VM_API=${VM_API:-auto}
if [[ "$VM_API" != 0 ]]; then
	if [[ -z "${RIG_BIN_DIR:-}" ]]; then
		RIG_BIN_DIR=$(dirname "$(ls -d /var/cache/nodelet-rig/v*/bin/kube-apiserver 2>/dev/null | sort -V | tail -1)")
	fi
	if [[ -x "$RIG_BIN_DIR/kube-apiserver" && -x "$RIG_BIN_DIR/etcd" && -x "$RIG_BIN_DIR/kubectl" ]]; then
		VM_API=1
	elif [[ "$VM_API" == 1 ]]; then
		log "VM_API=1 but no kube-apiserver/etcd/kubectl in RIG_BIN_DIR=${RIG_BIN_DIR:-} (run test/rig/build-bins.sh)"
		exit 1
	else
		log "no kube-apiserver binaries (RIG_BIN_DIR=${RIG_BIN_DIR:-}): standalone only, every pod static"
		VM_API=0
	fi
fi
n_static=$(ls "$HERE"/guest/manifests/*.yaml | wc -l)
n_api=$(ls "$HERE"/guest/api-pods/*.yaml | wc -l)
echo $((n_static + n_api)) >"$VM_DIR/in/expected-containers"
if [[ "$VM_API" == 0 ]]; then
	cp "$HERE"/guest/api-pods/*.yaml "$VM_DIR/in/manifests/"
fi
cat >"$VM_DIR/in/params.env" <<ENV
SCENARIOS="$VM_SCENARIOS"
ENV
echo "host_build $(since "$t")" >>"$TIMINGS"

# Swap: a raw disk (a swap file on the guest's tmpfs or 9p would not do); mkswap in the guest.
rm -f "$VM_DIR/swap.img"
truncate -s "${VM_SWAP_MB}M" "$VM_DIR/swap.img"

cleanup() { if [[ "$VM_API" == 1 ]]; then VM_DIR=$VM_DIR bash "$HERE/apiserver.sh" stop || true; fi; }
trap cleanup EXIT
nic=(-nic none)
if [[ "$VM_API" == 1 ]]; then
	t=$(date +%s.%N)
	VM_DIR=$VM_DIR RIG_BIN_DIR=$RIG_BIN_DIR bash "$HERE/apiserver.sh" start
	VM_API_PORT=$(cat "$VM_DIR/api/port")
	cp "$VM_DIR/api/guest.kubeconfig" "$VM_DIR/in/kubeconfig"
	# The guest reaches the apiserver on 10.0.2.100:6443 only: user networking with restrict=on
	# (no route out), one guestfwd to the host's loopback.
	nic=(-nic "user,model=virtio-net-pci,restrict=on,guestfwd=tcp:10.0.2.100:6443-cmd:socat - TCP:127.0.0.1:$VM_API_PORT")
	echo "apiserver_start $(since "$t")" >>"$TIMINGS"
fi

case $VM_ACCEL in
tcg) accel=(-accel tcg,thread=multi -cpu "${VM_CPU:-max}") ;;
kvm) accel=(-accel kvm -cpu "${VM_CPU:-host}") ;;
*) log "VM_ACCEL must be tcg or kvm"; exit 1 ;;
esac
console=$VM_DIR/out/console.log
cmdline="console=ttyS0 panic=-1 loglevel=4 systemd.unified_cgroup_hierarchy=1 cgroup_no_v1=all systemd.unit=nodelet-vm.target systemd.show_status=1"
log "booting $KVER ($VM_ACCEL, ${VM_SMP} cpus, ${VM_MEM_MB} MiB, swap ${VM_SWAP_MB} MiB); console: $console"
t=$(date +%s.%N)
# The guest's clock runs slow under TCG: stamp its progress marks with the host's wall clock
# (seconds since qemu started) as they appear.
(
	seen=0
	while sleep 1; do
		[[ -f "$VM_DIR/out/guest-timings.txt" ]] || continue
		mapfile -t lines <"$VM_DIR/out/guest-timings.txt"
		for ((i = seen; i < ${#lines[@]}; i++)); do
			echo "${lines[i]%% *} $(since "$t")" >>"$VM_DIR/out/wall-timings.txt"
		done
		seen=${#lines[@]}
	done
) &
watcher=$!
set +e
timeout --kill-after=10 "$VM_TIMEOUT" qemu-system-x86_64 \
	-nodefaults -no-user-config -no-reboot -display none \
	"${accel[@]}" -smp "$VM_SMP" -m "$VM_MEM_MB" \
	-kernel "$KDIR/boot/vmlinuz-$KVER" -initrd "$VM_DIR/initramfs.gz" -append "$cmdline" \
	-chardev file,id=con,path="$console" -serial chardev:con \
	-virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
	-virtfs local,path="$VM_DIR",mount_tag=vmshare,security_model=none,multidevs=remap \
	-drive file="$VM_DIR/swap.img",if=virtio,format=raw \
	"${nic[@]}"
rc=$?
set -e
sleep 1.5
kill "$watcher" 2>/dev/null || true
echo "qemu_total $(since "$t")" >>"$TIMINGS"
echo "host_total $(since "$T0")" >>"$TIMINGS"
if ((rc == 124 || rc == 137)); then
	log "qemu killed after ${VM_TIMEOUT}s (guest did not power off); console tail:"
	tail -n 40 "$console" >&2 || true
	exit 1
fi
if [[ ! -f "$VM_DIR/out/done" ]]; then
	log "qemu exited ($rc) but the guest never reported done; console tail:"
	tail -n 40 "$console" >&2 || true
	exit 1
fi
log "guest done in $(since "$t")s (qemu exit $rc); results: $VM_DIR/out/results.txt"
