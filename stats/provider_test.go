package stats

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/cri"
)

type fakeRuntime struct {
	sandboxes  []*runtimeapi.PodSandbox
	containers []*runtimeapi.Container
	stats      []*runtimeapi.ContainerStats
	imageFs    *runtimeapi.ImageFsInfoResponse
	// sandboxStats answers ListPodSandboxStats; nil: Unimplemented, as a
	// runtime without it. sandboxStatsErr, if set, is answered instead.
	sandboxStats    []*runtimeapi.PodSandboxStats
	sandboxStatsErr error
	calls           map[string]int
}

func (f *fakeRuntime) call(m string) {
	if f.calls == nil {
		f.calls = map[string]int{}
	}
	f.calls[m]++
}

func (f *fakeRuntime) ListPodSandboxStats(context.Context, *runtimeapi.PodSandboxStatsFilter) ([]*runtimeapi.PodSandboxStats, error) {
	f.call("ListPodSandboxStats")
	if f.sandboxStatsErr != nil {
		return nil, f.sandboxStatsErr
	}
	if f.sandboxStats == nil {
		return nil, fmt.Errorf("listing pod sandbox stats: %w", status.Error(codes.Unimplemented, "not implemented"))
	}
	return f.sandboxStats, nil
}

func (f *fakeRuntime) ListPodSandbox(context.Context, *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	return f.sandboxes, nil
}
func (f *fakeRuntime) ListContainers(context.Context, *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	return f.containers, nil
}
func (f *fakeRuntime) ListContainerStats(context.Context, *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error) {
	f.call("ListContainerStats")
	return f.stats, nil
}
func (f *fakeRuntime) ImageFsInfo(context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	return f.imageFs, nil
}

// devFs is the real filesystem with the device of some paths overridden, to model
// an image filesystem of its own.
type devFs struct {
	osFs
	devs map[string]uint64
}

func (d devFs) statfs(path string) (statsapi.FsStats, uint64, error) {
	st, dev, err := d.osFs.statfs(path)
	if o, ok := d.devs[path]; ok {
		dev = o
	}
	return st, dev, err
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func u64(v uint64) *runtimeapi.UInt64Value { return &runtimeapi.UInt64Value{Value: v} }

func TestNodeMemory(t *testing.T) {
	const meminfo = "MemTotal:        1000 kB\nMemFree:          200 kB\nInactive(file):   100 kB\n"
	tests := []struct {
		name           string
		unified        bool
		cgroupUsage    string // v1 root memory.usage_in_bytes; "" = absent
		cgroupInactive string
		wantWS         uint64
		wantAvail      uint64
	}{
		{name: "v1 root cgroup: usage minus total_inactive_file", cgroupUsage: "700000", cgroupInactive: "200000", wantWS: 500000, wantAvail: 1024000 - 500000},
		{name: "v1 inactive above usage clamps to 0", cgroupUsage: "100", cgroupInactive: "200", wantWS: 0, wantAvail: 1024000},
		{name: "v2: from meminfo", unified: true, wantWS: (1000 - 200 - 100) * 1024, wantAvail: 300 * 1024},
		{name: "v1 without the memory cgroup falls back to meminfo", wantWS: 700 * 1024, wantAvail: 300 * 1024},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			proc, cg := filepath.Join(dir, "proc"), filepath.Join(dir, "cgroup")
			write(t, filepath.Join(proc, "meminfo"), meminfo)
			if tt.cgroupUsage != "" {
				write(t, filepath.Join(cg, "memory/memory.usage_in_bytes"), tt.cgroupUsage+"\n")
				write(t, filepath.Join(cg, "memory/memory.stat"), "cache 5\ntotal_inactive_file "+tt.cgroupInactive+"\ntotal_rss 42\n")
			}
			p := New(Config{ProcRoot: proc, CgroupRoot: cg, Unified: tt.unified}, nil, nil, clocktesting.NewFakeClock(time.Now()))
			m := p.nodeMemory(metav1.Now())
			if m == nil {
				t.Fatal("no memory stats")
			}
			if *m.WorkingSetBytes != tt.wantWS || *m.AvailableBytes != tt.wantAvail {
				t.Errorf("workingSet=%d available=%d, want %d %d", *m.WorkingSetBytes, *m.AvailableBytes, tt.wantWS, tt.wantAvail)
			}
		})
	}
}

func TestRlimitTakesTheSmallerLimit(t *testing.T) {
	proc := filepath.Join(t.TempDir(), "proc")
	write(t, filepath.Join(proc, "sys/kernel/pid_max"), "4194304\n")
	write(t, filepath.Join(proc, "sys/kernel/threads-max"), "1000\n")
	write(t, filepath.Join(proc, "loadavg"), "0.10 0.20 0.30 2/345 6789\n")
	p := New(Config{ProcRoot: proc}, nil, nil, clocktesting.NewFakeClock(time.Now()))
	r := p.rlimit(metav1.Now())
	if r == nil || *r.MaxPID != 1000 || r.NumOfRunningProcesses == nil || *r.NumOfRunningProcesses != 345 {
		t.Fatalf("rlimit = %+v, want max 1000, running 345", r)
	}
}

func TestSnapshotPodsAndFilesystems(t *testing.T) {
	dir := t.TempDir()
	root, logs, imgDir := filepath.Join(dir, "root"), filepath.Join(dir, "logs"), filepath.Join(dir, "images")
	proc, cg := filepath.Join(dir, "proc"), filepath.Join(dir, "cgroup")
	write(t, filepath.Join(proc, "meminfo"), "MemTotal: 1000 kB\nMemFree: 500 kB\n")
	// Pod a: a ready sandbox (and an older dead one), a running and an exited container,
	// an emptyDir with a 64 KiB file and a pod cgroup; pod b: only a dead sandbox.
	write(t, filepath.Join(root, "pods/uid-a/volumes/kubernetes.io~empty-dir/scratch/data"), string(make([]byte, 64<<10)))
	write(t, filepath.Join(logs, "ns_a_uid-a/app/0.log"), "hello\n")
	write(t, filepath.Join(cg, "memory/kubepods/burstable/poduid-a/memory.usage_in_bytes"), "9000\n")
	write(t, filepath.Join(cg, "memory/kubepods/burstable/poduid-a/memory.stat"), "total_inactive_file 1000\n")
	write(t, filepath.Join(cg, "pids/kubepods/burstable/poduid-a/pids.current"), "7\n")
	write(t, filepath.Join(cg, "memory/kubepods/memory.usage_in_bytes"), "50000\n")
	write(t, filepath.Join(cg, "memory/kubepods/memory.stat"), "total_inactive_file 10000\n")
	if err := os.MkdirAll(imgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	md := func(name, uid string) *runtimeapi.PodSandboxMetadata {
		return &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "ns", Uid: uid}
	}
	start := time.Unix(1000, 0)
	rt := &fakeRuntime{
		sandboxes: []*runtimeapi.PodSandbox{
			{Id: "old-a", Metadata: md("a", "uid-a"), State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY, CreatedAt: start.UnixNano()},
			{Id: "sb-a", Metadata: md("a", "uid-a"), State: runtimeapi.PodSandboxState_SANDBOX_READY, CreatedAt: start.Add(time.Second).UnixNano()},
			{Id: "sb-b", Metadata: md("b", "uid-b"), State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY, CreatedAt: start.UnixNano()},
		},
		containers: []*runtimeapi.Container{
			{Id: "c1", PodSandboxId: "sb-a", Metadata: &runtimeapi.ContainerMetadata{Name: "app"}, State: runtimeapi.ContainerState_CONTAINER_RUNNING, Labels: map[string]string{cri.LabelPodUID: "uid-a"}},
			{Id: "c0", PodSandboxId: "sb-a", Metadata: &runtimeapi.ContainerMetadata{Name: "app"}, State: runtimeapi.ContainerState_CONTAINER_EXITED, Labels: map[string]string{cri.LabelPodUID: "uid-a"}},
		},
		stats: []*runtimeapi.ContainerStats{{
			Attributes:    &runtimeapi.ContainerAttributes{Id: "c1"},
			Cpu:           &runtimeapi.CpuUsage{UsageCoreNanoSeconds: u64(1e9)},
			Memory:        &runtimeapi.MemoryUsage{WorkingSetBytes: u64(4000), UsageBytes: u64(5000)},
			WritableLayer: &runtimeapi.FilesystemUsage{UsedBytes: u64(12345), InodesUsed: u64(3)},
		}},
		imageFs: &runtimeapi.ImageFsInfoResponse{ImageFilesystems: []*runtimeapi.FilesystemUsage{{
			FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: imgDir}, UsedBytes: u64(777),
		}}},
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: types.UID("uid-a")},
		Spec: v1.PodSpec{Volumes: []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}}}
	clk := clocktesting.NewFakeClock(time.Unix(2000, 0))

	for _, dedicated := range []bool{false, true} {
		p := New(Config{
			RootDir: root, PodLogsDir: logs, ProcRoot: proc, CgroupRoot: cg, PodsCgroup: "/kubepods",
			PodCgroup: func(*v1.Pod) string { return "/kubepods/burstable/poduid-a" },
		}, rt, func() []*v1.Pod { return []*v1.Pod{pod} }, clk)
		if dedicated {
			p.fs = devFs{devs: map[string]uint64{imgDir: 4242}}
		}
		snap, err := p.Snapshot(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if snap.DedicatedImageFs != dedicated {
			t.Errorf("DedicatedImageFs = %v, want %v", snap.DedicatedImageFs, dedicated)
		}
		s := snap.Summary
		if s.Node.Fs == nil || s.Node.Fs.CapacityBytes == nil || *s.Node.Fs.CapacityBytes == 0 {
			t.Errorf("node fs not measured: %+v", s.Node.Fs)
		}
		if s.Node.Runtime == nil || s.Node.Runtime.ImageFs == nil || *s.Node.Runtime.ImageFs.UsedBytes != 777 {
			t.Errorf("imagefs = %+v, want used 777 from the runtime", s.Node.Runtime)
		}
		if len(s.Node.SystemContainers) != 1 || *s.Node.SystemContainers[0].Memory.WorkingSetBytes != 40000 {
			t.Errorf("pods system container = %+v, want working set 40000", s.Node.SystemContainers)
		}
		if len(s.Pods) != 1 {
			t.Fatalf("pods = %d, want 1 (the dead-only pod b is left out)", len(s.Pods))
		}
		ps := s.Pods[0]
		if ps.PodRef.UID != "uid-a" || !ps.StartTime.Equal(ptrTo(metav1.NewTime(start.Add(time.Second)))) {
			t.Errorf("pod ref/start = %+v %v, want uid-a started with the ready sandbox", ps.PodRef, ps.StartTime)
		}
		if len(ps.Containers) != 1 || ps.Containers[0].Name != "app" || *ps.Containers[0].Rootfs.UsedBytes != 12345 {
			t.Errorf("containers = %+v, want the running app with rootfs 12345", ps.Containers)
		}
		if ps.Containers[0].Logs == nil || *ps.Containers[0].Logs.UsedBytes == 0 {
			t.Errorf("container logs not measured: %+v", ps.Containers[0].Logs)
		}
		if *ps.Memory.WorkingSetBytes != 8000 {
			t.Errorf("pod working set = %d, want 8000 from the pod cgroup", *ps.Memory.WorkingSetBytes)
		}
		if ps.ProcessStats == nil || *ps.ProcessStats.ProcessCount != 7 {
			t.Errorf("process stats = %+v, want 7", ps.ProcessStats)
		}
		if len(ps.VolumeStats) != 1 || ps.VolumeStats[0].Name != "scratch" || *ps.VolumeStats[0].UsedBytes < 64<<10 {
			t.Errorf("volume stats = %+v, want scratch >= 64KiB", ps.VolumeStats)
		}
		if ps.EphemeralStorage == nil || *ps.EphemeralStorage.UsedBytes < 64<<10+12345 {
			t.Errorf("ephemeral storage = %+v, want rootfs+logs+volumes", ps.EphemeralStorage)
		}
	}
}

func TestCPURateFromTwoSamples(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(100, 0))
	p := New(Config{}, nil, nil, clk)
	if r := p.criCPU("c", &runtimeapi.CpuUsage{UsageCoreNanoSeconds: u64(1e9)}, clk.Now()); r.UsageNanoCores != nil {
		t.Fatalf("first sample has a rate %d", *r.UsageNanoCores)
	}
	clk.Step(2 * time.Second)
	r := p.criCPU("c", &runtimeapi.CpuUsage{UsageCoreNanoSeconds: u64(2e9)}, clk.Now())
	if r.UsageNanoCores == nil || *r.UsageNanoCores != 5e8 {
		t.Fatalf("rate = %v, want 5e8 nanocores (1s of CPU over 2s)", r.UsageNanoCores)
	}
	p.forgetCPU(map[string]bool{})
	if len(p.lastCPU) != 0 {
		t.Errorf("samples of gone containers kept: %v", p.lastCPU)
	}
}

func TestSwapStats(t *testing.T) {
	mt := metav1.NewTime(time.Unix(2000, 0))
	tests := []struct {
		name      string
		meminfo   string
		unified   bool
		files     map[string]string // under the cgroup root
		wantNode  *[2]uint64        // used, available; nil: no node swap
		wantPod   *[2]uint64        // used, available (0 with availNil)
		availNil  bool
		wantNoPod bool
	}{
		{
			name:     "v2 with swap and a limited pod",
			meminfo:  "MemTotal: 1000 kB\nSwapTotal: 512 kB\nSwapFree: 500 kB\n",
			unified:  true,
			files:    map[string]string{"pod/memory.swap.current": "4096\n", "pod/memory.swap.max": "17485824\n"},
			wantNode: &[2]uint64{12 * 1024, 500 * 1024},
			wantPod:  &[2]uint64{4096, 17485824 - 4096},
		},
		{
			name:     "v2 pod without a swap limit",
			meminfo:  "MemTotal: 1000 kB\nSwapTotal: 512 kB\nSwapFree: 512 kB\n",
			unified:  true,
			files:    map[string]string{"pod/memory.swap.current": "0\n", "pod/memory.swap.max": "max\n"},
			wantNode: &[2]uint64{0, 512 * 1024},
			wantPod:  &[2]uint64{0, 0},
			availNil: true,
		},
		{
			name:      "v1: node swap only",
			meminfo:   "MemTotal: 1000 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n",
			files:     map[string]string{"pod/memory.swap.current": "1\n"},
			wantNode:  &[2]uint64{0, 0},
			wantNoPod: true,
		},
		{
			name:      "no swap lines, no swap files",
			meminfo:   "MemTotal: 1000 kB\n",
			unified:   true,
			wantNoPod: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			proc, cg := filepath.Join(dir, "proc"), filepath.Join(dir, "cgroup")
			write(t, filepath.Join(proc, "meminfo"), tt.meminfo)
			for f, v := range tt.files {
				write(t, filepath.Join(cg, f), v)
			}
			p := New(Config{ProcRoot: proc, CgroupRoot: cg, Unified: tt.unified}, nil, nil, clocktesting.NewFakeClock(mt.Time))
			check := func(what string, got *statsapi.SwapStats, want *[2]uint64, availNil bool) {
				t.Helper()
				if want == nil {
					if got != nil {
						t.Errorf("%s swap = %+v, want none", what, got)
					}
					return
				}
				if got == nil || got.SwapUsageBytes == nil || *got.SwapUsageBytes != want[0] {
					t.Fatalf("%s swap = %+v, want used %d", what, got, want[0])
				}
				switch {
				case availNil && got.SwapAvailableBytes != nil:
					t.Errorf("%s swap available = %d, want none (no limit)", what, *got.SwapAvailableBytes)
				case !availNil && (got.SwapAvailableBytes == nil || *got.SwapAvailableBytes != want[1]):
					t.Errorf("%s swap available = %v, want %d", what, got.SwapAvailableBytes, want[1])
				}
			}
			check("node", p.nodeSwap(mt), tt.wantNode, false)
			if tt.wantNoPod {
				check("pod", p.cgroupSwap("/pod", mt), nil, false)
			} else {
				check("pod", p.cgroupSwap("/pod", mt), tt.wantPod, tt.availNil)
			}
		})
	}
	// Containers: what the runtime reports, when it reports anything.
	if got := criSwap(nil, mt); got != nil {
		t.Errorf("criSwap(nil) = %+v, want nil", got)
	}
	if got := criSwap(&runtimeapi.SwapUsage{}, mt); got != nil {
		t.Errorf("criSwap(empty) = %+v, want nil", got)
	}
	got := criSwap(&runtimeapi.SwapUsage{SwapUsageBytes: u64(10), SwapAvailableBytes: u64(20)}, mt)
	if got == nil || *got.SwapUsageBytes != 10 || *got.SwapAvailableBytes != 20 {
		t.Errorf("criSwap = %+v, want used 10 available 20", got)
	}
}

// mapFs is a filesystem of fixed sizes: du answers from sizes, readDir from
// dirs, statfs from mounts (a 1 GiB filesystem, device 1, for other paths).
type mapFs struct {
	sizes  map[string]uint64
	dirs   map[string][]string
	mounts map[string]mountedFs
}

type mountedFs struct {
	fs  statsapi.FsStats
	dev uint64
}

func (m mapFs) statfs(path string) (statsapi.FsStats, uint64, error) {
	if mf, ok := m.mounts[path]; ok {
		return mf.fs, mf.dev, nil
	}
	return statsapi.FsStats{CapacityBytes: ptrTo[uint64](1 << 30), AvailableBytes: ptrTo[uint64](1 << 29)}, 1, nil
}

func (m mapFs) du(dir string, _ uint64) (uint64, uint64, error) {
	if b, ok := m.sizes[dir]; ok {
		return b, 1, nil
	}
	return 0, 0, os.ErrNotExist
}

func (m mapFs) readDir(dir string) ([]string, error) { return m.dirs[dir], nil }

// The pod's ephemeral-storage figure (what the pod-level ephemeral-storage limit is
// enforced on) counts what upstream counts: writable layers, logs, disk-backed
// emptyDirs, configMaps and /etc/hosts; not memory-backed emptyDirs, secrets or
// persistent volumes, even when their directories are on nodefs.
func TestEphemeralStorageCountsLocalEphemeralVolumes(t *testing.T) {
	const root, logs = "/root", "/logs"
	vols := root + "/pods/uid-a/volumes/"
	mfs := mapFs{
		sizes: map[string]uint64{
			vols + "kubernetes.io~empty-dir/scratch": 1000,
			vols + "kubernetes.io~empty-dir/shm":     20000, // medium Memory, here on nodefs
			vols + "kubernetes.io~configmap/cfg":     300,
			vols + "kubernetes.io~secret/creds":      40000, // on disk without tmpfs
			vols + "kubernetes.io~csi/data":          500000,
			root + "/pods/uid-a/etc-hosts":           7,
			logs + "/ns_a_uid-a/app":                 50,
		},
		dirs: map[string][]string{
			root + "/pods/uid-a/volumes":     {"kubernetes.io~empty-dir", "kubernetes.io~configmap", "kubernetes.io~secret", "kubernetes.io~csi"},
			vols + "kubernetes.io~empty-dir": {"scratch", "shm"},
			vols + "kubernetes.io~configmap": {"cfg"},
			vols + "kubernetes.io~secret":    {"creds"},
			vols + "kubernetes.io~csi":       {"data"},
		},
	}
	vol := func(name string, src v1.VolumeSource) v1.Volume { return v1.Volume{Name: name, VolumeSource: src} }
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: "uid-a"}, Spec: v1.PodSpec{Volumes: []v1.Volume{
		vol("scratch", v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}),
		vol("shm", v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}),
		vol("cfg", v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{}}),
		vol("creds", v1.VolumeSource{Secret: &v1.SecretVolumeSource{}}),
		vol("data", v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}),
	}}}
	rt := &fakeRuntime{
		sandboxes: []*runtimeapi.PodSandbox{{Id: "sb", Metadata: &runtimeapi.PodSandboxMetadata{Name: "a", Namespace: "ns", Uid: "uid-a"}, State: runtimeapi.PodSandboxState_SANDBOX_READY}},
		containers: []*runtimeapi.Container{{Id: "c", PodSandboxId: "sb", Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
			State: runtimeapi.ContainerState_CONTAINER_RUNNING, Labels: map[string]string{cri.LabelPodUID: "uid-a"}}},
		stats: []*runtimeapi.ContainerStats{{Attributes: &runtimeapi.ContainerAttributes{Id: "c"},
			WritableLayer: &runtimeapi.FilesystemUsage{UsedBytes: u64(4000)}}},
		imageFs: &runtimeapi.ImageFsInfoResponse{},
	}
	tests := []struct {
		name  string
		known []*v1.Pod
		want  uint64
	}{
		{name: "spec known", known: []*v1.Pod{pod}, want: 4000 + 50 + 1000 + 300 + 7},
		{name: "spec unknown: no volume counts", want: 4000 + 50 + 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := New(Config{RootDir: root, PodLogsDir: logs, ProcRoot: t.TempDir()}, rt, func() []*v1.Pod { return tt.known }, clocktesting.NewFakeClock(time.Unix(2000, 0)))
			p.fs = mfs
			snap, err := p.Snapshot(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(snap.Summary.Pods) != 1 {
				t.Fatalf("pods = %+v", snap.Summary.Pods)
			}
			ps := snap.Summary.Pods[0]
			if got := *ps.EphemeralStorage.UsedBytes; got != tt.want {
				t.Errorf("ephemeral-storage used = %d, want %d", got, tt.want)
			}
			// Every volume on nodefs is still reported by name: the emptyDir sizeLimit
			// check reads its volume's figure from here.
			if len(ps.VolumeStats) != 5 {
				t.Errorf("volume stats = %d entries, want all 5", len(ps.VolumeStats))
			}
		})
	}
}

// TestEphemeralStorageSizes: as upstream, a container's rootfs has the size
// and free space (bytes and inodes) of the writable layers' filesystem, its
// logs and the pod's ephemeral storage those of nodefs.
func TestEphemeralStorageSizes(t *testing.T) {
	const root, logs, layers = "/root", "/logs", "/var/lib/containerd"
	fsOf := func(capacity, avail, inodes, free uint64) statsapi.FsStats {
		return statsapi.FsStats{CapacityBytes: &capacity, AvailableBytes: &avail, UsedBytes: ptrTo(capacity - avail),
			Inodes: &inodes, InodesFree: &free, InodesUsed: ptrTo(inodes - free)}
	}
	mfs := mapFs{
		sizes: map[string]uint64{logs + "/ns_a_uid-a/app": 50},
		mounts: map[string]mountedFs{
			root:   {fs: fsOf(100<<30, 60<<30, 1000, 600), dev: 1},
			layers: {fs: fsOf(500<<30, 200<<30, 5000, 2000), dev: 2},
		},
	}
	rt := &fakeRuntime{
		sandboxes: []*runtimeapi.PodSandbox{{Id: "sb", Metadata: &runtimeapi.PodSandboxMetadata{Name: "a", Namespace: "ns", Uid: "uid-a"}, State: runtimeapi.PodSandboxState_SANDBOX_READY}},
		containers: []*runtimeapi.Container{{Id: "c", PodSandboxId: "sb", Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
			State: runtimeapi.ContainerState_CONTAINER_RUNNING, Labels: map[string]string{cri.LabelPodUID: "uid-a"}}},
		stats: []*runtimeapi.ContainerStats{{Attributes: &runtimeapi.ContainerAttributes{Id: "c"},
			WritableLayer: &runtimeapi.FilesystemUsage{UsedBytes: u64(4000), InodesUsed: u64(3)}}},
		imageFs: &runtimeapi.ImageFsInfoResponse{ImageFilesystems: []*runtimeapi.FilesystemUsage{
			{FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: layers}, UsedBytes: u64(7 << 30), InodesUsed: u64(900)}}},
	}
	p := New(Config{RootDir: root, PodLogsDir: logs, ProcRoot: t.TempDir()}, rt, nil, clocktesting.NewFakeClock(time.Unix(2000, 0)))
	p.fs = mfs
	snap, err := p.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Summary.Pods) != 1 || len(snap.Summary.Pods[0].Containers) != 1 {
		t.Fatalf("pods = %+v", snap.Summary.Pods)
	}
	ps := snap.Summary.Pods[0]
	c := ps.Containers[0]
	type sizes struct{ capacity, avail, inodes, free, used, inodesUsed uint64 }
	sizesOf := func(fs *statsapi.FsStats) sizes {
		if fs == nil {
			return sizes{}
		}
		return sizes{deref(fs.CapacityBytes), deref(fs.AvailableBytes), deref(fs.Inodes), deref(fs.InodesFree), deref(fs.UsedBytes), deref(fs.InodesUsed)}
	}
	for _, tc := range []struct {
		what string
		got  *statsapi.FsStats
		want sizes
	}{
		{"container rootfs (the layers' filesystem)", c.Rootfs, sizes{500 << 30, 200 << 30, 5000, 2000, 4000, 3}},
		{"container logs (nodefs)", c.Logs, sizes{100 << 30, 60 << 30, 1000, 600, 50, 1}},
		{"pod ephemeral storage (nodefs)", ps.EphemeralStorage, sizes{100 << 30, 60 << 30, 1000, 600, 4000 + 50, 3 + 1}},
	} {
		if got := sizesOf(tc.got); got != tc.want {
			t.Errorf("%s: capacity, available, inodes, inodes free, used, inodes used = %v, want %v", tc.what, got, tc.want)
		}
	}
	// The node's own figures are untouched by the copies.
	if got := *snap.Summary.Node.Fs.UsedBytes; got != 40<<30 {
		t.Errorf("nodefs used = %d, want %d", got, uint64(40<<30))
	}
}

// onePod is a node running pod a (sandbox sb-a, running container c1) with a
// pod cgroup saying working set 8000 and 7 processes.
func onePod(t *testing.T) (Config, *fakeRuntime, *v1.Pod) {
	t.Helper()
	dir := t.TempDir()
	cfg := Config{
		RootDir: filepath.Join(dir, "root"), PodLogsDir: filepath.Join(dir, "logs"),
		ProcRoot: filepath.Join(dir, "proc"), CgroupRoot: filepath.Join(dir, "cgroup"),
		PodCgroup: func(*v1.Pod) string { return "/kubepods/poduid-a" },
	}
	write(t, filepath.Join(cfg.ProcRoot, "meminfo"), "MemTotal: 1000 kB\nMemFree: 500 kB\n")
	write(t, filepath.Join(cfg.RootDir, "pods/uid-a/etc-hosts"), "127.0.0.1 localhost\n")
	write(t, filepath.Join(cfg.CgroupRoot, "memory/kubepods/poduid-a/memory.usage_in_bytes"), "9000\n")
	write(t, filepath.Join(cfg.CgroupRoot, "memory/kubepods/poduid-a/memory.stat"), "total_inactive_file 1000\n")
	write(t, filepath.Join(cfg.CgroupRoot, "pids/kubepods/poduid-a/pids.current"), "7\n")
	rt := &fakeRuntime{
		sandboxes: []*runtimeapi.PodSandbox{{Id: "sb-a", Metadata: &runtimeapi.PodSandboxMetadata{Name: "a", Namespace: "ns", Uid: "uid-a"},
			State: runtimeapi.PodSandboxState_SANDBOX_READY}},
		containers: []*runtimeapi.Container{{Id: "c1", PodSandboxId: "sb-a", Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
			State: runtimeapi.ContainerState_CONTAINER_RUNNING, Labels: map[string]string{cri.LabelPodUID: "uid-a"}}},
		stats: []*runtimeapi.ContainerStats{{Attributes: &runtimeapi.ContainerAttributes{Id: "c1"},
			Memory: &runtimeapi.MemoryUsage{WorkingSetBytes: u64(4000)}}},
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: "uid-a"}}
	return cfg, rt, pod
}

func TestSnapshotFromPodSandboxStats(t *testing.T) {
	cfg, rt, pod := onePod(t)
	sandboxStats := func(cpu uint64) []*runtimeapi.PodSandboxStats {
		return []*runtimeapi.PodSandboxStats{{
			Attributes: &runtimeapi.PodSandboxAttributes{Id: "sb-a"},
			Linux: &runtimeapi.LinuxPodSandboxStats{
				Cpu:    &runtimeapi.CpuUsage{UsageCoreNanoSeconds: u64(cpu)},
				Memory: &runtimeapi.MemoryUsage{WorkingSetBytes: u64(6000), UsageBytes: u64(6500)},
				Network: &runtimeapi.NetworkUsage{DefaultInterface: &runtimeapi.NetworkInterfaceUsage{Name: "eth0", RxBytes: u64(100), TxBytes: u64(200)},
					Interfaces: []*runtimeapi.NetworkInterfaceUsage{{Name: "eth0", RxBytes: u64(100), TxBytes: u64(200)}}},
				Process: &runtimeapi.ProcessUsage{ProcessCount: u64(3)},
				Containers: []*runtimeapi.ContainerStats{{Attributes: &runtimeapi.ContainerAttributes{Id: "c1"},
					Memory:        &runtimeapi.MemoryUsage{WorkingSetBytes: u64(5000)},
					WritableLayer: &runtimeapi.FilesystemUsage{UsedBytes: u64(12345)}}},
			},
		}}
	}
	rt.sandboxStats = sandboxStats(3e9)
	clk := clocktesting.NewFakeClock(time.Unix(2000, 0))
	p := New(cfg, rt, func() []*v1.Pod { return []*v1.Pod{pod} }, clk)
	s, err := p.Summary(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Pods) != 1 || len(s.Pods[0].Containers) != 1 {
		t.Fatalf("pods = %+v, want pod a with its container", s.Pods)
	}
	ps := s.Pods[0]
	if c := ps.Containers[0]; *c.Memory.WorkingSetBytes != 5000 || c.Rootfs == nil || *c.Rootfs.UsedBytes != 12345 {
		t.Errorf("container = %+v, want the sandbox stats' (working set 5000, rootfs 12345)", c)
	}
	if *ps.Memory.WorkingSetBytes != 6000 || *ps.CPU.UsageCoreNanoSeconds != 3e9 || *ps.ProcessStats.ProcessCount != 3 {
		t.Errorf("pod memory %d cpu %d processes %d, want the runtime's 6000, 3e9, 3 (not the cgroup's 8000 and 7)",
			*ps.Memory.WorkingSetBytes, *ps.CPU.UsageCoreNanoSeconds, *ps.ProcessStats.ProcessCount)
	}
	if ps.Network == nil || ps.Network.Name != "eth0" || *ps.Network.RxBytes != 100 || len(ps.Network.Interfaces) != 1 || *ps.Network.Interfaces[0].TxBytes != 200 {
		t.Errorf("network = %+v, want eth0 rx 100 tx 200", ps.Network)
	}
	if ps.CPU.UsageNanoCores != nil {
		t.Errorf("first sample has a pod CPU rate %d", *ps.CPU.UsageNanoCores)
	}
	clk.Step(2 * time.Second)
	rt.sandboxStats = sandboxStats(5e9)
	if s, err = p.Summary(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := s.Pods[0].CPU.UsageNanoCores; r == nil || *r != 1e9 {
		t.Errorf("pod CPU rate = %v, want 1e9 (2s of CPU over 2s)", r)
	}
	if rt.calls["ListContainerStats"] != 0 || rt.calls["ListPodSandboxStats"] != 2 {
		t.Errorf("calls %v, want ListPodSandboxStats only", rt.calls)
	}
}

func TestSandboxStatsFallback(t *testing.T) {
	tests := []struct {
		name string
		err  error
		// wantSandboxCalls is how many of 5 measurements ask ListPodSandboxStats.
		wantSandboxCalls int
	}{
		{"Unimplemented: asked once", nil, 1},
		{"failing: asked until it failed 3 times in a row", errors.New("sandbox sb-x: cgroup not found"), maxSandboxStatsFailures},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, rt, pod := onePod(t)
			rt.sandboxStatsErr = tt.err
			p := New(cfg, rt, func() []*v1.Pod { return []*v1.Pod{pod} }, clocktesting.NewFakeClock(time.Unix(2000, 0)))
			for range 5 {
				s, err := p.Summary(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				ps := s.Pods[0]
				if *ps.Containers[0].Memory.WorkingSetBytes != 4000 || *ps.Memory.WorkingSetBytes != 8000 || *ps.ProcessStats.ProcessCount != 7 {
					t.Fatalf("pod = %+v, want the container's stats from ListContainerStats and the pod's from its cgroup", ps)
				}
			}
			if rt.calls["ListPodSandboxStats"] != tt.wantSandboxCalls || rt.calls["ListContainerStats"] != 5 {
				t.Errorf("calls %v, want ListPodSandboxStats %d times, ListContainerStats 5", rt.calls, tt.wantSandboxCalls)
			}
		})
	}
}
