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

	"github.com/nodelet/nodelet/internal/testsupport/statstest"
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
		CgroupRoot: nd.CgroupRoot, Unified: true, PodsCgroup: "/kubepods.slice", PodCgroup: statstest.PodCgroupPath, SandboxImage: statstest.PauseImage}
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
	want := wantPodCgroups(nd)
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

// wantPodCgroups is what statstest's fake cgroup v2 files of nd's first pod read as.
func wantPodCgroups(nd *statstest.Node) PodCgroups {
	podDir := statstest.PodCgroupPath(nd.Pods[0])
	ctrDir := podDir + "/cri-containerd-" + statstest.ContainerID(0) + ".scope"
	sda := []DeviceIO{{Device: "/dev/sda", ReadBytes: 8192, WriteBytes: 16384}}
	return PodCgroups{
		Pod:       statsapi.PodReference{Name: "pod-0", Namespace: "ns", UID: string(nd.Pods[0].UID)},
		StartTime: time.Unix(1700000000, 0),
		Cgroup: CgroupStats{Path: podDir, CPUUsageNanos: ptrTo[uint64](3e9),
			Memory:   &CgroupMemoryStats{Usage: 20971520, WorkingSet: 20971520 - 4194304, RSS: 12582912, Cache: 6291456},
			OOMKills: ptrTo[uint64](2), IO: sda,
			// 2 in the container, 1 (the sandbox's) beside it.
			Processes: ptrTo[uint64](3)},
		Network: []statsapi.InterfaceStats{{Name: "eth0", RxBytes: ptrTo[uint64](1000), RxErrors: ptrTo[uint64](0), TxBytes: ptrTo[uint64](2000), TxErrors: ptrTo[uint64](0)}},
		// The pause container's cgroup, beside the container's.
		Sandbox: &ContainerCgroup{ID: statstest.SandboxID(0), Image: statstest.PauseImage, StartTime: time.Unix(1700000000, 0),
			Cgroup: CgroupStats{Path: podDir + "/cri-containerd-" + statstest.SandboxID(0) + ".scope",
				Memory: &CgroupMemoryStats{Usage: 4096, WorkingSet: 4096}, Processes: ptrTo[uint64](1)}},
		Containers: []ContainerCgroup{{ID: statstest.ContainerID(0), Name: "app", Image: "registry.example/app:1", StartTime: time.Unix(1700000001, 0),
			Cgroup: CgroupStats{Path: ctrDir, CPUUsageNanos: ptrTo[uint64](1.5e9),
				CFS:      &CFSStats{Periods: 10, ThrottledPeriods: 4, ThrottledNanos: 250e6},
				Memory:   &CgroupMemoryStats{Usage: 10485760, WorkingSet: 10485760 - 2097152, RSS: 6291456, Cache: 3145728, Swap: ptrTo[uint64](4096)},
				OOMKills: ptrTo[uint64](1), IO: []DeviceIO{{Device: "/dev/sda", ReadBytes: 4096, WriteBytes: 8192}}, Processes: ptrTo[uint64](2)},
			RootfsBytes: ptrTo[uint64](65536)}},
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

// writeV1Tree writes the cgroup v1 hierarchies (cpu,cpuacct with its cpu and
// cpuacct symlinks, memory, pids, blkio) of nd's first pod under root: the
// pod, its container "app" and its sandbox.
func writeV1Tree(t *testing.T, root string, nd *statstest.Node) {
	t.Helper()
	podDir := statstest.PodCgroupPath(nd.Pods[0])
	ctrDir := podDir + "/cri-containerd-" + statstest.ContainerID(0) + ".scope"
	sbDir := podDir + "/cri-containerd-" + statstest.SandboxID(0) + ".scope"
	cpu := "cpu,cpuacct"
	statstest.WriteCgroup(t, root, cpu+podDir, statstest.Cgroup{"cpuacct.usage": "3000000000\n", "cpu.cfs_quota_us": "-1\n",
		"cpu.stat": "nr_periods 0\nnr_throttled 0\nthrottled_time 0\n", "cgroup.procs": ""})
	statstest.WriteCgroup(t, root, cpu+ctrDir, statstest.Cgroup{"cpuacct.usage": "1500000000\n", "cpu.cfs_quota_us": "50000\n",
		"cpu.stat": "nr_periods 10\nnr_throttled 4\nthrottled_time 250000000\n", "cgroup.procs": "100\n101\n"})
	statstest.WriteCgroup(t, root, cpu+sbDir, statstest.Cgroup{"cpuacct.usage": "1000\n", "cgroup.procs": "10000\n"})
	for _, l := range []string{"cpu", "cpuacct"} {
		if err := os.Symlink(cpu, filepath.Join(root, l)); err != nil {
			t.Fatal(err)
		}
	}
	// The pod's memory.stat has use_hierarchy off (its own rss/cache), the
	// container's on (the totals); both subtract total_inactive_file.
	statstest.WriteCgroup(t, root, "memory"+podDir, statstest.Cgroup{"memory.usage_in_bytes": "20971520\n", "memory.use_hierarchy": "0\n",
		"memory.stat":        "cache 6291456\nrss 12582912\ninactive_file 1\ntotal_cache 99\ntotal_rss 99\ntotal_inactive_file 4194304\n",
		"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
		"cgroup.procs":       ""})
	statstest.WriteCgroup(t, root, "memory"+ctrDir, statstest.Cgroup{"memory.usage_in_bytes": "10485760\n", "memory.use_hierarchy": "1\n",
		"memory.stat":        "cache 1\nrss 1\ninactive_file 1\ntotal_cache 3145728\ntotal_rss 6291456\ntotal_swap 4096\ntotal_inactive_file 2097152\n",
		"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n", "cgroup.procs": "100\n101\n"})
	statstest.WriteCgroup(t, root, "memory"+sbDir, statstest.Cgroup{"memory.usage_in_bytes": "4096\n", "cgroup.procs": "10000\n"})
	statstest.WriteCgroup(t, root, "pids"+podDir, statstest.Cgroup{"pids.current": "3\n"})
	// The pod's CFQ file is empty (no scheduler accounting): the throttling
	// layer's counts; the container's CFQ file has entries and wins.
	statstest.WriteCgroup(t, root, "blkio"+podDir, statstest.Cgroup{"blkio.io_service_bytes_recursive": "Total 0\n",
		"blkio.throttle.io_service_bytes_recursive": "8:0 Read 8192\n8:0 Write 16384\n8:0 Sync 0\n8:0 Async 0\n8:0 Total 24576\n8:16 Read 1\n8:16 Write 0\nTotal 24577\n"})
	statstest.WriteCgroup(t, root, "blkio"+ctrDir, statstest.Cgroup{"blkio.io_service_bytes_recursive": "8:0 Read 4096\n8:0 Write 8192\n8:0 Total 12288\nTotal 12288\n",
		"blkio.throttle.io_service_bytes_recursive": "8:0 Read 7\n8:0 Write 7\n"})
}

// TestPodCgroupsV1Values: on cgroup v1 the same values as on v2 come from
// each controller's hierarchy as cAdvisor reads them: cpuacct.usage, cpu.stat
// throttling only under a cfs quota, memory.usage_in_bytes with total_rss,
// total_cache and total_swap under use_hierarchy (rss and cache without), the
// working set minus total_inactive_file, memory.oom_control oom_kill, blkio
// bytes and cgroup.procs.
func TestPodCgroupsV1Values(t *testing.T) {
	p, nd := fakeNodeProvider(t, 1)
	root := filepath.Join(t.TempDir(), "cgroup")
	writeV1Tree(t, root, nd)
	p.cfg.CgroupRoot, p.cfg.Unified = root, false
	snap, err := p.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Cgroups) != 1 {
		t.Fatalf("cgroups = %+v, want one pod", snap.Cgroups)
	}
	// The same values as v2's files, but for an extra device in the pod's blkio and the
	// sandbox's CPU (v2's fake sandbox has no cpu.stat).
	want := wantPodCgroups(nd)
	want.Cgroup.IO = append(want.Cgroup.IO, DeviceIO{Device: "8:16", ReadBytes: 1})
	want.Sandbox.Cgroup.CPUUsageNanos = ptrTo[uint64](1000)
	if diff := cmp.Diff(want, snap.Cgroups[0], cmpopts.IgnoreFields(ContainerCgroup{}, "RootfsDevice")); diff != "" {
		t.Errorf("pod cgroups on v1 (-want +got):\n%s", diff)
	}
}

// TestPodCgroupsV1WithoutMemoryHierarchy: without a memory hierarchy the pod's
// children are listed in pids'; a cgroup with neither cpuacct.usage nor
// memory.usage_in_bytes is not measured, and without any of the three
// hierarchies there is no reading at all.
func TestPodCgroupsV1WithoutMemoryHierarchy(t *testing.T) {
	p, nd := fakeNodeProvider(t, 1)
	root := filepath.Join(t.TempDir(), "cgroup")
	writeV1Tree(t, root, nd)
	if err := os.RemoveAll(filepath.Join(root, "memory")); err != nil {
		t.Fatal(err)
	}
	podDir := statstest.PodCgroupPath(nd.Pods[0])
	statstest.WriteCgroup(t, root, "pids"+podDir+"/cri-containerd-"+statstest.ContainerID(0)+".scope", statstest.Cgroup{"cgroup.procs": "100\n"})
	p.cfg.CgroupRoot, p.cfg.Unified = root, false
	snap, err := p.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Cgroups) != 1 || len(snap.Cgroups[0].Containers) != 1 {
		t.Fatalf("cgroups = %+v, want one pod with its container", snap.Cgroups)
	}
	c := snap.Cgroups[0].Containers[0].Cgroup
	if c.Memory != nil || deref(c.CPUUsageNanos) != 1.5e9 || deref(c.Processes) != 1 {
		t.Errorf("container without a memory hierarchy: memory %+v, CPU %d ns, %d processes; want no memory, 1.5e9, 1", c.Memory, deref(c.CPUUsageNanos), deref(c.Processes))
	}

	empty := t.TempDir()
	p.cfg.CgroupRoot = empty
	snap, err = p.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if snap.Cgroups != nil {
		t.Errorf("cgroups without v1 hierarchies = %+v, want none", snap.Cgroups)
	}
}

// TestSandboxImage: the pause container's image is the one the runtime's
// verbose sandbox status names ("info"'s "image", as containerd's), asked once
// per sandbox and forgotten with it; without it, Config.SandboxImage.
func TestSandboxImage(t *testing.T) {
	p, nd := fakeNodeProvider(t, 2)
	nd.Runtime.SandboxInfo = map[string]map[string]string{
		statstest.SandboxID(0): {"info": `{"pid":1,"image":"registry.example/pause:own"}`},
		statstest.SandboxID(1): {"info": `{"pid":1}`},
	}
	images := func() map[string]string {
		t.Helper()
		snap, err := p.Snapshot(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, pc := range snap.Cgroups {
			if pc.Sandbox == nil {
				t.Fatalf("pod %s has no sandbox cgroup reading", pc.Pod.Name)
			}
			out[pc.Pod.Name] = pc.Sandbox.Image
		}
		return out
	}
	want := map[string]string{"pod-0": "registry.example/pause:own", "pod-1": statstest.PauseImage}
	for range 2 {
		if diff := cmp.Diff(want, images()); diff != "" {
			t.Errorf("sandbox images (-want +got):\n%s", diff)
		}
	}
	if nd.Runtime.StatusCalls != 2 {
		t.Errorf("PodSandboxStatus called %d times in two measurements of two sandboxes, want 2 (once each)", nd.Runtime.StatusCalls)
	}
	nd.Runtime.Sandboxes = nd.Runtime.Sandboxes[:1]
	images()
	if _, kept := p.sandboxImages[statstest.SandboxID(1)]; kept || len(p.sandboxImages) != 1 {
		t.Errorf("sandbox images after pod-1's sandbox went: %v, want only pod-0's", p.sandboxImages)
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
