package cgroups

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/testsupport/cgroupfstest"
)

// fakeV1 builds a hybrid-shaped tree: v1 hierarchies plus an empty cgroup2 at unified.
func fakeV1(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"cpu", "cpuacct", "cpuset", "memory", "pids", "devices", "freezer", "unified"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(root, "cpuset", "cpuset.cpus"), "0-1\n")
	write(t, filepath.Join(root, "cpuset", "cpuset.mems"), "0\n")
	write(t, filepath.Join(root, "unified", "cgroup.controllers"), "")
	return root
}

func fakeV2(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	write(t, filepath.Join(root, "cgroup.controllers"), "cpuset cpu io memory hugetlb pids rdma misc\n")
	return root
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// read returns a file's content, or "<none>" when it does not exist.
func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if os.IsNotExist(err) {
		return "<none>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func newTestManager(t *testing.T, root string, enforce []string) *Manager {
	t.Helper()
	mode, err := DetectModeWith(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewManager(ManagerOptions{Root: root, Mode: mode, EnforceNodeAllocatable: enforce, PodPidsLimit: 1024, CPUCFSQuota: true})
	if err != nil {
		t.Fatal(err)
	}
	m.removeDir = cgroupfsRmdir
	m.mkdirAll = cgroupfstest.MkdirAll
	return m
}

// cgroupfsRmdir removes a directory of a fake cgroup tree as rmdir does on cgroupfs:
// the interface files (regular files in a fake tree) go with it, but a cgroup with a
// child cgroup is refused with EBUSY.
func cgroupfsRmdir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			return &os.PathError{Op: "rmdir", Path: dir, Err: syscall.EBUSY}
		}
	}
	return os.RemoveAll(dir)
}

var (
	capacity = v1.ResourceList{
		v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("24Gi"), ResourcePIDs: resource.MustParse("4194304"),
	}
	allocatable = v1.ResourceList{
		v1.ResourceCPU: resource.MustParse("1500m"), v1.ResourceMemory: resource.MustParse("20Gi"), ResourcePIDs: resource.MustParse("4000000"),
	}
)

type fileWant map[string]string // path relative to root -> content ("<none>" = absent)

func checkFiles(t *testing.T, root string, want fileWant) {
	t.Helper()
	for p, w := range want {
		if got := read(t, filepath.Join(root, p)); got != w {
			t.Errorf("%s = %q, want %q", p, got, w)
		}
	}
}

func TestEnsureQOSCgroups(t *testing.T) {
	tests := []struct {
		name    string
		v2      bool
		enforce []string
		want    fileWant
	}{
		{"v1 enforced", false, []string{"pods"}, fileWant{
			"memory/kubepods/memory.limit_in_bytes": "21474836480",
			"cpu/kubepods/cpu.shares":               "1536",
			"pids/kubepods/pids.max":                "4000000",
			"cpu/kubepods/besteffort/cpu.shares":    "2",
			"cpu/kubepods/burstable/cpu.shares":     "<none>",
			"cpuset/kubepods/cpuset.cpus":           "0-1",
			"cpuset/kubepods/burstable/cpuset.mems": "0",
		}},
		{"v1 not enforced uses capacity", false, []string{"system-reserved"}, fileWant{
			"memory/kubepods/memory.limit_in_bytes": "25769803776",
			"cpu/kubepods/cpu.shares":               "2048",
			"pids/kubepods/pids.max":                "4194304",
		}},
		{"v2 enforced", true, []string{"pods"}, fileWant{
			"cgroup.subtree_control":                    "+cpuset +cpu +io +memory +hugetlb +pids",
			"kubepods/cgroup.subtree_control":           "+cpuset +cpu +io +memory +hugetlb +pids",
			"kubepods/memory.max":                       "21474836480",
			"kubepods/cpu.weight":                       "138",
			"kubepods/pids.max":                         "4000000",
			"kubepods/besteffort/cpu.weight":            "1",
			"kubepods/burstable/cpu.weight":             "<none>",
			"kubepods/burstable/cgroup.subtree_control": "<none>",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := fakeV1(t)
			if tt.v2 {
				root = fakeV2(t)
			}
			m := newTestManager(t, root, tt.enforce)
			if err := m.EnsureQOSCgroups(context.Background(), capacity, allocatable); err != nil {
				t.Fatal(err)
			}
			checkFiles(t, root, tt.want)
			dirs := []string{"kubepods/burstable", "kubepods/besteffort"}
			for _, d := range dirs {
				hier := []string{""}
				if !tt.v2 {
					hier = []string{"cpu", "cpuacct", "cpuset", "memory", "pids", "devices", "freezer"}
				}
				for _, h := range hier {
					if !isDir(filepath.Join(root, h, d)) {
						t.Errorf("%s missing in %q", d, h)
					}
				}
			}
			if !tt.v2 && isDir(filepath.Join(root, "unified", "kubepods")) {
				t.Error("hybrid: created a cgroup in the unified hierarchy")
			}
			// Idempotent.
			if err := m.EnsureQOSCgroups(context.Background(), capacity, allocatable); err != nil {
				t.Fatalf("second EnsureQOSCgroups: %v", err)
			}
		})
	}
}

func TestEnsurePodCgroup(t *testing.T) {
	uid := "11111111-2222"
	guaranteed := podWith(uid, guaranteedRes, guaranteedRes) // 1 cpu, 2Gi in total
	burstableAll := podWith(uid, res("250m", "256Mi", "500m", "512Mi"), res("250m", "256Mi", "1", "1Gi"))
	burstablePartial := podWith(uid, res("250m", "256Mi", "500m", "512Mi"), res("100m", "", "", ""))
	besteffort := podWith(uid, bestEffortRes)
	tests := []struct {
		name string
		v2   bool
		pod  *v1.Pod
		want fileWant
	}{
		{"v1 guaranteed", false, guaranteed, fileWant{
			"cpu/kubepods/pod" + uid + "/cpu.shares":               "1024",
			"cpu/kubepods/pod" + uid + "/cpu.cfs_quota_us":         "100000",
			"cpu/kubepods/pod" + uid + "/cpu.cfs_period_us":        "100000",
			"memory/kubepods/pod" + uid + "/memory.limit_in_bytes": "2147483648",
			"pids/kubepods/pod" + uid + "/pids.max":                "1024",
		}},
		{"v1 burstable all limits", false, burstableAll, fileWant{
			"cpu/kubepods/burstable/pod" + uid + "/cpu.shares":               "512",
			"cpu/kubepods/burstable/pod" + uid + "/cpu.cfs_quota_us":         "150000",
			"memory/kubepods/burstable/pod" + uid + "/memory.limit_in_bytes": "1610612736",
			"pids/kubepods/burstable/pod" + uid + "/pids.max":                "1024",
		}},
		{"v1 burstable missing limits", false, burstablePartial, fileWant{
			"cpu/kubepods/burstable/pod" + uid + "/cpu.shares":               "358",
			"cpu/kubepods/burstable/pod" + uid + "/cpu.cfs_quota_us":         "<none>",
			"memory/kubepods/burstable/pod" + uid + "/memory.limit_in_bytes": "<none>",
		}},
		{"v1 besteffort", false, besteffort, fileWant{
			"cpu/kubepods/besteffort/pod" + uid + "/cpu.shares":               "2",
			"cpu/kubepods/besteffort/pod" + uid + "/cpu.cfs_quota_us":         "<none>",
			"memory/kubepods/besteffort/pod" + uid + "/memory.limit_in_bytes": "<none>",
			"pids/kubepods/besteffort/pod" + uid + "/pids.max":                "1024",
			"cpuset/kubepods/besteffort/pod" + uid + "/cpuset.cpus":           "0-1",
		}},
		{"v2 guaranteed", true, guaranteed, fileWant{
			"kubepods/pod" + uid + "/cpu.weight": "100",
			"kubepods/pod" + uid + "/cpu.max":    "100000 100000",
			"kubepods/pod" + uid + "/memory.max": "2147483648",
			"kubepods/pod" + uid + "/pids.max":   "1024",
		}},
		{"v2 burstable all limits", true, burstableAll, fileWant{
			"kubepods/burstable/cgroup.subtree_control":    "+cpuset +cpu +io +memory +hugetlb +pids",
			"kubepods/burstable/pod" + uid + "/cpu.weight": "59",
			"kubepods/burstable/pod" + uid + "/cpu.max":    "150000 100000",
			"kubepods/burstable/pod" + uid + "/memory.max": "1610612736",
			"kubepods/burstable/pod" + uid + "/pids.max":   "1024",
		}},
		{"v2 burstable missing limits", true, burstablePartial, fileWant{
			"kubepods/burstable/pod" + uid + "/cpu.max":    "<none>",
			"kubepods/burstable/pod" + uid + "/memory.max": "<none>",
		}},
		{"v2 besteffort", true, besteffort, fileWant{
			"kubepods/besteffort/pod" + uid + "/cpu.weight": "1",
			"kubepods/besteffort/pod" + uid + "/memory.max": "<none>",
			"kubepods/besteffort/pod" + uid + "/pids.max":   "1024",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := fakeV1(t)
			if tt.v2 {
				root = fakeV2(t)
			}
			m := newTestManager(t, root, []string{"pods"})
			ctx := context.Background()
			if err := m.EnsureQOSCgroups(ctx, capacity, allocatable); err != nil {
				t.Fatal(err)
			}
			if m.PodCgroupExists(tt.pod) {
				t.Fatal("pod cgroup exists before EnsurePodCgroup")
			}
			if err := m.EnsurePodCgroup(ctx, tt.pod); err != nil {
				t.Fatal(err)
			}
			checkFiles(t, root, tt.want)
			if !m.PodCgroupExists(tt.pod) {
				t.Fatal("PodCgroupExists = false after EnsurePodCgroup")
			}
			got, err := m.ListPodCgroups()
			if err != nil {
				t.Fatal(err)
			}
			wantName := PodCgroupName(nil, tt.pod).Cgroupfs()
			if len(got) != 1 || got[types.UID(uid)].Cgroupfs() != wantName {
				t.Errorf("ListPodCgroups = %v, want {%s: %s}", got, uid, wantName)
			}

			if err := m.RemovePodCgroup(ctx, tt.pod); err != nil {
				t.Fatal(err)
			}
			if m.PodCgroupExists(tt.pod) {
				t.Error("pod cgroup still exists after RemovePodCgroup")
			}
			for _, p := range m.paths(PodCgroupName(nil, tt.pod)) {
				if isDir(p) {
					t.Errorf("%s left behind", p)
				}
			}
			if !isDir(m.primaryPath(QOSCgroupName(nil, QOSClass(tt.pod)))) {
				t.Error("RemovePodCgroup removed the QoS cgroup")
			}
			if err := m.RemovePodCgroup(ctx, tt.pod); err != nil {
				t.Errorf("removing a removed pod cgroup: %v", err)
			}
		})
	}
}

func TestEnsurePodCgroupQuotaDisabled(t *testing.T) {
	for _, v2 := range []bool{false, true} {
		root := fakeV1(t)
		file := "cpu/kubepods/podu/cpu.cfs_quota_us"
		want := "-1"
		if v2 {
			root, file, want = fakeV2(t), "kubepods/podu/cpu.max", "max 100000"
		}
		m := newTestManager(t, root, nil)
		m.opts.CPUCFSQuota = false
		m.opts.PodPidsLimit = -1
		pod := podWith("u", guaranteedRes)
		if err := m.EnsurePodCgroup(context.Background(), pod); err != nil {
			t.Fatal(err)
		}
		checkFiles(t, root, fileWant{file: want})
		pids := "pids/kubepods/podu/pids.max"
		if v2 {
			pids = "kubepods/podu/pids.max"
		}
		checkFiles(t, root, fileWant{pids: "<none>"})
	}
}

func TestRemovePodCgroupRefusesWithProcesses(t *testing.T) {
	root := fakeV2(t)
	m := newTestManager(t, root, nil)
	pod := podWith("u", burstableRes)
	ctx := context.Background()
	if err := m.EnsurePodCgroup(ctx, pod); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(root, "kubepods/burstable/podu/cgroup.procs"), "4242\n")
	err := m.RemovePodCgroup(ctx, pod)
	if err == nil || !strings.Contains(err.Error(), "4242") {
		t.Fatalf("RemovePodCgroup = %v, want error naming pid 4242", err)
	}
	if !m.PodCgroupExists(pod) {
		t.Error("cgroup removed despite processes")
	}
}

func TestUpdateQOSCgroups(t *testing.T) {
	for _, v2 := range []bool{false, true} {
		root, file, want := fakeV1(t), "cpu/kubepods/burstable/cpu.shares", "768"
		if v2 {
			root, file, want = fakeV2(t), "kubepods/burstable/cpu.weight", "80"
		}
		m := newTestManager(t, root, []string{"pods"})
		ctx := context.Background()
		if err := m.EnsureQOSCgroups(ctx, capacity, allocatable); err != nil {
			t.Fatal(err)
		}
		pods := []*v1.Pod{
			podWith("a", res("250m", "", "", "")),
			podWith("b", res("500m", "1Gi", "1", "2Gi")),
			podWith("c", guaranteedRes),
			podWith("d", bestEffortRes),
		}
		if err := m.UpdateQOSCgroups(ctx, pods); err != nil {
			t.Fatal(err)
		}
		checkFiles(t, root, fileWant{file: want})
	}
}

func TestNewManagerRejectsUnknownMode(t *testing.T) {
	if _, err := NewManager(ManagerOptions{Root: t.TempDir()}); err == nil {
		t.Error("NewManager with ModeUnknown: want error")
	}
}

func TestPodResourceConfig(t *testing.T) {
	always := v1.ContainerRestartPolicyAlways
	u := func(v uint64) *uint64 { return &v }
	i := func(v int64) *int64 { return &v }
	tests := []struct {
		name  string
		pod   *v1.Pod
		quota bool
		want  ResourceConfig
	}{
		{"guaranteed", podWith("u", guaranteedRes), true, ResourceConfig{CPUShares: u(512), CPUQuota: i(50000), CPUPeriod: u(100000), Memory: i(gi)}},
		{"guaranteed quota off", podWith("u", guaranteedRes), false, ResourceConfig{CPUShares: u(512), CPUQuota: i(-1), CPUPeriod: u(100000), Memory: i(gi)}},
		{"besteffort", podWith("u", bestEffortRes), true, ResourceConfig{CPUShares: u(2)}},
		{"burstable memory limit only", podWith("u", res("", "", "", "1Gi")), true, ResourceConfig{CPUShares: u(2), Memory: i(gi)}},
		{"init container larger than apps", func() *v1.Pod {
			p := podWith("u", res("100m", "", "", ""))
			p.Spec.InitContainers = []v1.Container{{Name: "i", Resources: res("2", "", "", "")}}
			return p
		}(), true, ResourceConfig{CPUShares: u(2048)}},
		{"sidecar adds to apps", func() *v1.Pod {
			p := podWith("u", res("100m", "", "", ""))
			p.Spec.InitContainers = []v1.Container{{Name: "s", RestartPolicy: &always, Resources: res("400m", "", "", "")}}
			return p
		}(), true, ResourceConfig{CPUShares: u(512)}},
		{"init container without limit leaves memory unlimited", func() *v1.Pod {
			p := podWith("u", res("100m", "", "", "1Gi"))
			p.Spec.InitContainers = []v1.Container{{Name: "i", Resources: res("100m", "", "", "")}}
			return p
		}(), true, ResourceConfig{CPUShares: u(102)}},
		{"overhead not added to an absent limit", func() *v1.Pod {
			p := podWith("u", res("100m", "", "", ""))
			p.Spec.Overhead = v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("1Gi")}
			return p
		}(), true, ResourceConfig{CPUShares: u(204)}},
		{"pod-level limits replace containers'", func() *v1.Pod {
			p := podWith("u", res("100m", "", "", ""), bestEffortRes)
			r := res("1", "", "2", "3Gi")
			p.Spec.Resources = &r
			return p
		}(), true, ResourceConfig{CPUShares: u(1024), CPUQuota: i(200000), CPUPeriod: u(100000), Memory: i(3 * gi)}},
		{"overhead counts", func() *v1.Pod {
			p := podWith("u", guaranteedRes)
			p.Spec.Overhead = v1.ResourceList{v1.ResourceCPU: resource.MustParse("500m"), v1.ResourceMemory: resource.MustParse("1Gi")}
			return p
		}(), true, ResourceConfig{CPUShares: u(1024), CPUQuota: i(100000), CPUPeriod: u(100000), Memory: i(2 * gi)}},
	}
	str := func(rc ResourceConfig) string {
		u := func(v *uint64) string {
			if v == nil {
				return "nil"
			}
			return strconv.FormatUint(*v, 10)
		}
		i := func(v *int64) string {
			if v == nil {
				return "nil"
			}
			return strconv.FormatInt(*v, 10)
		}
		return "shares=" + u(rc.CPUShares) + " quota=" + i(rc.CPUQuota) + " period=" + u(rc.CPUPeriod) + " mem=" + i(rc.Memory) + " pids=" + i(rc.PidsLimit)
	}
	for _, tt := range tests {
		got := PodResourceConfig(tt.pod, tt.quota, 100000, 0)
		if str(got) != str(tt.want) {
			t.Errorf("%s: %s, want %s", tt.name, str(got), str(tt.want))
		}
	}
}

func TestEnforceReservedCgroup(t *testing.T) {
	reserved := v1.ResourceList{v1.ResourceCPU: resource.MustParse("500m"), v1.ResourceMemory: resource.MustParse("1Gi"), ResourcePIDs: resource.MustParse("1000")}
	tests := []struct {
		name         string
		v2           bool
		compressible bool
		want         fileWant
	}{
		{"v1 full", false, false, fileWant{"cpu/system.slice/cpu.shares": "512", "memory/system.slice/memory.limit_in_bytes": "1073741824", "pids/system.slice/pids.max": "1000"}},
		{"v1 compressible", false, true, fileWant{"cpu/system.slice/cpu.shares": "512", "memory/system.slice/memory.limit_in_bytes": "<none>", "pids/system.slice/pids.max": "<none>"}},
		{"v2 full", true, false, fileWant{"system.slice/cpu.weight": "59", "system.slice/memory.max": "1073741824", "system.slice/pids.max": "1000"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := fakeV1(t)
			if tt.v2 {
				root = fakeV2(t)
			}
			m := newTestManager(t, root, nil)
			ctx := context.Background()
			if err := m.EnforceReservedCgroup(ctx, "/system.slice", reserved, tt.compressible); err == nil {
				t.Fatal("missing cgroup: want error")
			}
			for _, d := range m.paths(CgroupName{"system.slice"}) {
				if err := cgroupfstest.MkdirAll(d); err != nil {
					t.Fatal(err)
				}
			}
			if err := m.EnforceReservedCgroup(ctx, "/system.slice", reserved, tt.compressible); err != nil {
				t.Fatal(err)
			}
			checkFiles(t, root, tt.want)
		})
	}
}

// fakeHybrid is fakeV1 with the named name=systemd hierarchy beside the controllers,
// as on this project's hybrid hosts.
func fakeHybrid(t *testing.T) string {
	t.Helper()
	root := fakeV1(t)
	if err := os.Mkdir(filepath.Join(root, "systemd"), 0o755); err != nil {
		t.Fatal(err)
	}
	// net_cls,net_prio as one hierarchy reached through links too, as many
	// distributions mount it.
	if err := os.Mkdir(filepath.Join(root, "net_cls,net_prio"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"net_cls", "net_prio"} {
		if err := os.Symlink("net_cls,net_prio", filepath.Join(root, l)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// hybridHierarchies are fakeHybrid's hierarchies (links excluded).
var hybridHierarchies = []string{"cpu", "cpuacct", "cpuset", "devices", "freezer", "memory", "net_cls,net_prio", "pids", "systemd", "unified"}

// TestRemovePodCgroupEveryHierarchyHybrid: runc makes each container's cgroup below
// the pod's in every hierarchy, name=systemd and the unified cgroup2 too, which
// nodelet never writes to. Removing the pod cgroup must take it (and the containers'
// cgroups below it, deepest first, as rmdir wants) out of all of them.
func TestRemovePodCgroupEveryHierarchyHybrid(t *testing.T) {
	root := fakeHybrid(t)
	m := newTestManager(t, root, []string{"pods"})
	ctx := context.Background()
	if err := m.EnsureQOSCgroups(ctx, capacity, allocatable); err != nil {
		t.Fatal(err)
	}
	pod := podWith("u1", burstableRes)
	if err := m.EnsurePodCgroup(ctx, pod); err != nil {
		t.Fatal(err)
	}
	podPath := "kubepods/burstable/podu1"
	for _, h := range hybridHierarchies {
		// The sandbox's and a container's cgroups, one with a nested cgroup.
		write(t, filepath.Join(root, h, podPath, "sandbox1", "cgroup.procs"), "")
		write(t, filepath.Join(root, h, podPath, "ctr1", "cgroup.procs"), "")
		write(t, filepath.Join(root, h, podPath, "ctr1", "nested", "cgroup.procs"), "")
	}
	if err := m.RemovePodCgroup(ctx, pod); err != nil {
		t.Fatalf("RemovePodCgroup: %v", err)
	}
	for _, h := range hybridHierarchies {
		if p := filepath.Join(root, h, podPath); isDir(p) {
			t.Errorf("%s left behind", p)
		}
		if p := filepath.Join(root, h, "kubepods/burstable"); !isDir(p) {
			t.Errorf("%s (the QoS cgroup) removed along", p)
		}
	}
	for _, l := range []string{"net_cls", "net_prio"} {
		if fi, err := os.Lstat(filepath.Join(root, l)); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("link %s touched: %v", l, err)
		}
	}
	if got, err := m.ListPodCgroups(); err != nil || len(got) != 0 {
		t.Errorf("ListPodCgroups after removal = %v, %v; want none", got, err)
	}
}

// TestListPodCgroupsFindsLeftoverInAnyHierarchy: a pod cgroup left in a single
// hierarchy (the named or unified ones, where the runtime made it) is listed, so
// the orphan cleanup removes it, and removing it leaves nothing.
func TestListPodCgroupsFindsLeftoverInAnyHierarchy(t *testing.T) {
	for _, h := range []string{"systemd", "unified", "memory", "net_cls,net_prio"} {
		for _, driver := range []Driver{DriverCgroupfs, DriverSystemd} {
			t.Run(h+" "+string(driver), func(t *testing.T) {
				root := fakeHybrid(t)
				var m *Manager
				podCg := "kubepods/besteffort/podu-2"
				if driver == DriverSystemd {
					m = newSystemdTestManager(t, root, newFakeUnits(root), nil)
					podCg = "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podu_2.slice"
				} else {
					m = newTestManager(t, root, nil)
				}
				write(t, filepath.Join(root, h, podCg, "ctr", "cgroup.procs"), "")
				got, err := m.ListPodCgroups()
				if err != nil {
					t.Fatal(err)
				}
				want := CgroupName{"kubepods", "besteffort", "podu-2"}
				if len(got) != 1 || got["u-2"].Cgroupfs() != want.Cgroupfs() {
					t.Fatalf("ListPodCgroups = %v, want {u-2: %v}", got, want)
				}
				if err := m.RemoveCgroup(context.Background(), got["u-2"]); err != nil {
					t.Fatalf("RemoveCgroup: %v", err)
				}
				if p := filepath.Join(root, h, podCg); isDir(p) {
					t.Errorf("%s left behind", p)
				}
				if got, err := m.ListPodCgroups(); err != nil || len(got) != 0 {
					t.Errorf("ListPodCgroups after removal = %v, %v; want none", got, err)
				}
			})
		}
	}
}

// TestRemovePodCgroupRefusesWithProcessBelow: a process in a container's cgroup
// below the pod's, in a hierarchy nodelet does not write to, keeps the whole pod
// cgroup: nothing is removed anywhere and the error names the process and where it is.
func TestRemovePodCgroupRefusesWithProcessBelow(t *testing.T) {
	root := fakeHybrid(t)
	m := newTestManager(t, root, nil)
	ctx := context.Background()
	pod := podWith("u3", burstableRes)
	if err := m.EnsurePodCgroup(ctx, pod); err != nil {
		t.Fatal(err)
	}
	podPath := "kubepods/burstable/podu3"
	for _, h := range hybridHierarchies {
		write(t, filepath.Join(root, h, podPath, "ctr", "cgroup.procs"), "")
	}
	busy := filepath.Join(root, "unified", podPath, "ctr")
	write(t, filepath.Join(busy, "cgroup.procs"), "4242\n")
	err := m.RemovePodCgroup(ctx, pod)
	if err == nil || !strings.Contains(err.Error(), "4242") || !strings.Contains(err.Error(), busy) {
		t.Fatalf("RemovePodCgroup = %v, want an error naming pid 4242 in %s", err, busy)
	}
	for _, h := range hybridHierarchies {
		if p := filepath.Join(root, h, podPath, "ctr"); !isDir(p) {
			t.Errorf("%s removed although a process was in the pod cgroup", p)
		}
	}
	// Once the process is gone the same call removes everything.
	write(t, filepath.Join(busy, "cgroup.procs"), "")
	if err := m.RemovePodCgroup(ctx, pod); err != nil {
		t.Fatalf("RemovePodCgroup after the process left: %v", err)
	}
	for _, h := range hybridHierarchies {
		if p := filepath.Join(root, h, podPath); isDir(p) {
			t.Errorf("%s left behind", p)
		}
	}
}
