package stats

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/stats/statstest"
)

func fakeNodeProvider(t *testing.T, n int) (*Provider, *statstest.Node) {
	t.Helper()
	dir := t.TempDir()
	nd := statstest.NewNode(t, dir, n)
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := Config{RootDir: root, PodLogsDir: filepath.Join(dir, "logs"), ProcRoot: nd.ProcRoot, SysRoot: nd.SysRoot,
		CgroupRoot: nd.CgroupRoot, Unified: true, PodsCgroup: "/kubepods.slice", PodCgroup: statstest.PodCgroupPath}
	pods := nd.Pods
	return New(cfg, nd.Runtime, func() []*v1.Pod { return pods }, clocktesting.NewFakeClock(time.Unix(2000, 0))), nd
}

// TestPodCgroupsValues: a known cgroup v2 tree gives exactly cAdvisor's
// values (working set = usage - inactive_file, RSS = anon, cache = file).
func TestPodCgroupsValues(t *testing.T) {
	p, nd := fakeNodeProvider(t, 1)
	snap, err := p.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Cgroups) != 1 {
		t.Fatalf("cgroups = %+v, want one pod", snap.Cgroups)
	}
	pc := snap.Cgroups[0]
	podDir := statstest.PodCgroupPath(nd.Pods[0])
	ctrDir := podDir + "/cri-containerd-" + statstest.ContainerID(0) + ".scope"
	sda := []DeviceIO{{Device: "/dev/sda", ReadBytes: 8192, WriteBytes: 16384}}
	want := PodCgroups{
		Pod:       statsapi.PodReference{Name: "pod-0", Namespace: "ns", UID: string(nd.Pods[0].UID)},
		StartTime: time.Unix(1700000000, 0),
		Cgroup: CgroupStats{Path: podDir, CPUUsageNanos: ptrTo[uint64](3e9),
			Memory:   &CgroupMemoryStats{Usage: 20971520, WorkingSet: 20971520 - 4194304, RSS: 12582912, Cache: 6291456},
			OOMKills: ptrTo[uint64](2), IO: sda,
			// 2 in the container, 1 (the sandbox's) beside it.
			Processes: ptrTo[uint64](3)},
		Network: []statsapi.InterfaceStats{{Name: "eth0", RxBytes: ptrTo[uint64](1000), RxErrors: ptrTo[uint64](0), TxBytes: ptrTo[uint64](2000), TxErrors: ptrTo[uint64](0)}},
		Containers: []ContainerCgroup{{ID: statstest.ContainerID(0), Name: "app", Image: "registry.example/app:1", StartTime: time.Unix(1700000001, 0),
			Cgroup: CgroupStats{Path: ctrDir, CPUUsageNanos: ptrTo[uint64](1.5e9),
				CFS:      &CFSStats{Periods: 10, ThrottledPeriods: 4, ThrottledNanos: 250e6},
				Memory:   &CgroupMemoryStats{Usage: 10485760, WorkingSet: 10485760 - 2097152, RSS: 6291456, Cache: 3145728, Swap: ptrTo[uint64](4096)},
				OOMKills: ptrTo[uint64](1), IO: []DeviceIO{{Device: "/dev/sda", ReadBytes: 4096, WriteBytes: 8192}}, Processes: ptrTo[uint64](2)},
			RootfsBytes: ptrTo[uint64](65536)}},
	}
	if diff := cmp.Diff(want, pc, cmpopts.IgnoreFields(ContainerCgroup{}, "RootfsDevice")); diff != "" {
		t.Errorf("pod cgroups (-want +got):\n%s", diff)
	}
	if pc.Containers[0].RootfsDevice == "" {
		t.Errorf("the writable layer has no device")
	}
	if !snap.Time.Equal(time.Unix(2000, 0)) {
		t.Errorf("snapshot time = %v, want the clock's", snap.Time)
	}
}

// TestPodCgroupsNetwork: the runtime's measurement of the sandbox's network
// wins over /proc; a pod on the host's network has none (the node's
// interfaces are not the pod's).
func TestPodCgroupsNetwork(t *testing.T) {
	p, nd := fakeNodeProvider(t, 2)
	nd.Pods[1].Spec.HostNetwork = true
	nd.Runtime.SandboxStats = []*runtimeapi.PodSandboxStats{{
		Attributes: &runtimeapi.PodSandboxAttributes{Id: statstest.SandboxID(0)},
		Linux: &runtimeapi.LinuxPodSandboxStats{Network: &runtimeapi.NetworkUsage{
			Interfaces: []*runtimeapi.NetworkInterfaceUsage{{Name: "eth0", RxBytes: &runtimeapi.UInt64Value{Value: 7}, TxBytes: &runtimeapi.UInt64Value{Value: 8}}}}},
	}}
	snap, err := p.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Cgroups) != 2 {
		t.Fatalf("cgroups = %+v, want two pods", snap.Cgroups)
	}
	if n := snap.Cgroups[0].Network; len(n) != 1 || *n[0].RxBytes != 7 || *n[0].TxBytes != 8 {
		t.Errorf("pod 0 network = %+v, want the runtime's eth0 7/8", n)
	}
	if n := snap.Cgroups[1].Network; n != nil {
		t.Errorf("host-network pod network = %+v, want none", n)
	}
}

func TestPodCgroupsOnlyOnCgroupV2(t *testing.T) {
	p, _ := fakeNodeProvider(t, 1)
	p.cfg.Unified = false
	snap, err := p.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if snap.Cgroups != nil {
		t.Errorf("cgroups on v1 = %+v, want none", snap.Cgroups)
	}
}

func TestContainerCgroupID(t *testing.T) {
	for in, want := range map[string]string{
		"cri-containerd-abc.scope": "abc", "crio-abc.scope": "abc", "docker-abc.scope": "abc", "abc": "abc",
	} {
		if got := containerCgroupID(in); got != want {
			t.Errorf("containerCgroupID(%q) = %q, want %q", in, got, want)
		}
	}
}

// BenchmarkSnapshot110Pods is one background measurement of 110 pods with and
// without the cgroup readings /metrics/cadvisor serves: their difference is
// what the cgroup reads add to every housekeeping period.
func BenchmarkSnapshot110Pods(b *testing.B) {
	for _, unified := range []bool{false, true} {
		b.Run(map[bool]string{false: "without-cgroups", true: "with-cgroups"}[unified], func(b *testing.B) {
			dir := b.TempDir()
			nd := statstest.NewNode(b, dir, 110)
			cfg := Config{RootDir: dir, PodLogsDir: filepath.Join(dir, "logs"), ProcRoot: nd.ProcRoot, SysRoot: nd.SysRoot,
				CgroupRoot: nd.CgroupRoot, Unified: unified, PodsCgroup: "/kubepods.slice", PodCgroup: statstest.PodCgroupPath}
			pods := nd.Pods
			p := New(cfg, nd.Runtime, func() []*v1.Pod { return pods }, clocktesting.NewFakeClock(time.Unix(2000, 0)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.Snapshot(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestPodCgroupsFollowNoSymlinks: a container's cgroup directory (named for
// a runtime ID) or file that is a symlink is not read through.
func TestPodCgroupsFollowNoSymlinks(t *testing.T) {
	p, nd := fakeNodeProvider(t, 1)
	podDir := filepath.Join(nd.CgroupRoot, statstest.PodCgroupPath(nd.Pods[0]))
	ctrDir := filepath.Join(podDir, "cri-containerd-"+statstest.ContainerID(0)+".scope")
	outside := t.TempDir()
	statstest.WriteCgroup(t, outside, "/", statstest.ContainerCgroup)
	if err := os.RemoveAll(ctrDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, ctrDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(podDir, "memory.current")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "memory.current"), filepath.Join(podDir, "memory.current")); err != nil {
		t.Fatal(err)
	}
	snap, err := p.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Cgroups) != 1 {
		t.Fatalf("cgroups = %+v, want the pod (its cpu.stat is real)", snap.Cgroups)
	}
	if pc := snap.Cgroups[0]; len(pc.Containers) != 0 || pc.Cgroup.Memory != nil {
		t.Errorf("read through symlinks: containers %+v, pod memory %+v", pc.Containers, pc.Cgroup.Memory)
	}
}
