package cgroups

import (
	"context"
	"fmt"
	"math"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/testsupport/cgroupfstest"
	"github.com/nodelet/nodelet/internal/testsupport/dbustest"
)

// fakeUnits is a hand-written SystemdUnits: it keeps unit properties and, like systemd,
// creates a started slice's directories (every v1 hierarchy but cpuset, or the v2 root)
// and removes them when the slice stops.
type fakeUnits struct {
	root string

	mu     sync.Mutex
	units  map[string]map[string]any
	calls  []string // "<method> <unit>"
	result string   // job result; "" is done
}

func newFakeUnits(root string) *fakeUnits {
	return &fakeUnits{root: root, units: map[string]map[string]any{}}
}

func (f *fakeUnits) dirs(unit string) []string {
	p := dbustest.SlicePath(unit)
	if _, err := os.Stat(filepath.Join(f.root, "cgroup.controllers")); err == nil {
		return []string{filepath.Join(f.root, p)}
	}
	entries, _ := os.ReadDir(f.root)
	var out []string
	for _, e := range entries {
		if e.IsDir() && e.Name() != "cpuset" {
			out = append(out, filepath.Join(f.root, e.Name(), p))
		}
	}
	return out
}

func (f *fakeUnits) jobResult() string {
	if f.result != "" {
		return f.result
	}
	return "done"
}

func (f *fakeUnits) StartTransientUnitContext(_ context.Context, name, mode string, props []sddbus.Property, ch chan<- string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "start "+name)
	if mode != "replace" {
		return 0, fmt.Errorf("unexpected job mode %q", mode)
	}
	if _, ok := f.units[name]; ok {
		return 0, dbus.Error{Name: dbusErrUnitExists, Body: []any{"Unit " + name + " already exists."}}
	}
	if r := f.jobResult(); r != "done" {
		ch <- r
		return 1, nil
	}
	u := map[string]any{}
	for _, p := range props {
		u[p.Name] = p.Value.Value()
	}
	f.units[name] = u
	for _, d := range f.dirs(name) {
		if err := cgroupfstest.MkdirAll(d); err != nil {
			return 0, err
		}
	}
	ch <- "done"
	return 1, nil
}

func (f *fakeUnits) StopUnitContext(_ context.Context, name, mode string, ch chan<- string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "stop "+name)
	if _, ok := f.units[name]; !ok {
		return 0, dbus.Error{Name: dbusErrNoSuchUnit, Body: []any{"Unit " + name + " not loaded."}}
	}
	delete(f.units, name)
	for _, d := range f.dirs(name) {
		if err := os.RemoveAll(d); err != nil {
			return 0, err
		}
	}
	ch <- "done"
	return 2, nil
}

func (f *fakeUnits) SetUnitPropertiesContext(_ context.Context, name string, runtime bool, props ...sddbus.Property) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "set "+name)
	u, ok := f.units[name]
	if !ok {
		return dbus.Error{Name: dbusErrNoSuchUnit, Body: []any{"Unit " + name + " not loaded."}}
	}
	if !runtime {
		return fmt.Errorf("SetUnitProperties(%s) persistent; nodelet's slices are runtime-only", name)
	}
	for _, p := range props {
		u[p.Name] = p.Value.Value()
	}
	return nil
}

// props renders a unit's properties (those in keys) as "k=v" sorted; "<no unit>" if absent.
func (f *fakeUnits) props(unit string, keys ...string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	u, ok := f.units[unit]
	if !ok {
		return "<no unit>"
	}
	var out []string
	for _, k := range keys {
		if v, ok := u[k]; ok {
			out = append(out, fmt.Sprintf("%s=%v", k, v))
		}
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

func (f *fakeUnits) callLog() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

var resourceKeys = []string{"CPUShares", "CPUWeight", "CPUQuotaPerSecUSec", "CPUQuotaPeriodUSec", "MemoryLimit", "MemoryMax", "TasksMax"}

// systemdQOSTree is a fake v1 (or v2) tree with the QoS slices made through the fake
// unit API, enforcing allocatable on kubepods.
func systemdQOSTree(t *testing.T, v2 bool) (string, *fakeUnits, *Manager) {
	t.Helper()
	root := fakeV1(t)
	if v2 {
		root = fakeV2(t)
	}
	units := newFakeUnits(root)
	m := newSystemdTestManager(t, root, units, []string{"pods"})
	if err := m.EnsureQOSCgroups(context.Background(), capacity, allocatable); err != nil {
		t.Fatal(err)
	}
	return root, units, m
}

func newSystemdTestManager(t *testing.T, root string, units SystemdUnits, enforce []string) *Manager {
	t.Helper()
	mode, err := DetectModeWith(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewManager(ManagerOptions{Root: root, Mode: mode, Driver: DriverSystemd, Systemd: units,
		EnforceNodeAllocatable: enforce, PodPidsLimit: 1024, CPUCFSQuota: true})
	if err != nil {
		t.Fatal(err)
	}
	m.removeDir = cgroupfsRmdir
	m.mkdirAll = cgroupfstest.MkdirAll
	return m
}

func TestSystemdNamesAndPaths(t *testing.T) {
	uid := "1234-abcd-5678"
	tests := []struct {
		name                     string
		root                     CgroupName
		pod                      *v1.Pod
		wantUnit, wantPath, qosU string
	}{
		{"guaranteed", nil, podWith(uid, guaranteedRes), "kubepods-pod1234_abcd_5678.slice",
			"/kubepods.slice/kubepods-pod1234_abcd_5678.slice", "kubepods.slice"},
		{"burstable", nil, podWith(uid, burstableRes), "kubepods-burstable-pod1234_abcd_5678.slice",
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd_5678.slice", "kubepods-burstable.slice"},
		{"besteffort", nil, podWith(uid, bestEffortRes), "kubepods-besteffort-pod1234_abcd_5678.slice",
			"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1234_abcd_5678.slice", "kubepods-besteffort.slice"},
		{"cgroupRoot slice", ParseCgroupRoot("node_a.slice", DriverSystemd), podWith(uid, burstableRes), "node_a-kubepods-burstable-pod1234_abcd_5678.slice",
			"/node_a.slice/node_a-kubepods.slice/node_a-kubepods-burstable.slice/node_a-kubepods-burstable-pod1234_abcd_5678.slice", "node_a-kubepods-burstable.slice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := PodCgroupName(tt.root, tt.pod)
			if got := SliceName(name); got != tt.wantUnit {
				t.Errorf("SliceName = %q, want %q", got, tt.wantUnit)
			}
			if got := FsPath(name, DriverSystemd); got != tt.wantPath {
				t.Errorf("FsPath(systemd) = %q, want %q", got, tt.wantPath)
			}
			if got := FsPath(name, DriverCgroupfs); got != name.Cgroupfs() {
				t.Errorf("FsPath(cgroupfs) = %q, want %q", got, name.Cgroupfs())
			}
			if got := dbustest.SlicePath(tt.wantUnit); "/"+got != tt.wantPath {
				t.Errorf("systemd would put %s at /%s, nodelet looks at %s", tt.wantUnit, got, tt.wantPath)
			}
			parent := CgroupParentForSandbox(tt.root, tt.pod, DriverSystemd)
			// containerd with SystemdCgroup = true: runc cgroupsPath from the parent's
			// last element, which must be the pod's slice unit.
			if got := path.Base(parent) + ":cri-containerd:abc"; got != tt.wantUnit+":cri-containerd:abc" {
				t.Errorf("containerd's cgroupsPath from cgroup_parent %q = %q, want the pod slice %s", parent, got, tt.wantUnit)
			}
			qos := QOSCgroupName(tt.root, QOSClass(tt.pod))
			if got := SliceName(qos); got != tt.qosU {
				t.Errorf("QoS SliceName = %q, want %q", got, tt.qosU)
			}
			if got, ok := podUIDFromSlice(qos, tt.wantUnit); !ok || got != types.UID(uid) {
				t.Errorf("podUIDFromSlice(%s) = %q, %v; want %s", tt.wantUnit, got, ok, uid)
			}
		})
	}
	if got := SliceName(nil); got != "-.slice" {
		t.Errorf("SliceName(root) = %q", got)
	}
	if got := FsPath(nil, DriverSystemd); got != "/" {
		t.Errorf("FsPath(root, systemd) = %q", got)
	}
	kubepods := KubepodsCgroupName(nil)
	for _, dir := range []string{"kubepods-burstable.slice", "kubepods-besteffort.slice", "kubepods-pod.slice", "kubepods-podx", "other-pod1.slice", "kubepods-pod1-2.slice"} {
		if uid, ok := podUIDFromSlice(kubepods, dir); ok {
			t.Errorf("podUIDFromSlice(kubepods, %q) = %q, want no pod", dir, uid)
		}
	}
}

func TestSystemdQuotaPerSec(t *testing.T) {
	for _, tt := range []struct {
		quota  int64
		period uint64
		want   uint64
	}{
		{100000, 100000, 1000000},
		{150000, 100000, 1500000},
		{1000, 100000, 10000},  // 1% stays 1%
		{1500, 100000, 20000},  // 1.5% rounds up to 2%
		{25000, 50000, 500000}, // another period
		{-1, 100000, math.MaxUint64},
	} {
		if got := quotaPerSecUSec(tt.quota, tt.period); got != tt.want {
			t.Errorf("quotaPerSecUSec(%d, %d) = %d, want %d", tt.quota, tt.period, got, tt.want)
		}
	}
}

func TestSystemdEnsureQOSCgroups(t *testing.T) {
	tests := []struct {
		name  string
		v2    bool
		units map[string]string // unit -> resource properties
		files fileWant
	}{
		{"v1", false, map[string]string{
			"kubepods.slice":            "CPUShares=1536 MemoryLimit=21474836480 TasksMax=4000000",
			"kubepods-burstable.slice":  "",
			"kubepods-besteffort.slice": "CPUShares=2",
		}, fileWant{
			"memory/kubepods.slice/memory.limit_in_bytes":                 "21474836480",
			"cpu/kubepods.slice/cpu.shares":                               "1536",
			"pids/kubepods.slice/pids.max":                                "4000000",
			"cpu/kubepods.slice/kubepods-besteffort.slice/cpu.shares":     "2",
			"cpu/kubepods.slice/kubepods-burstable.slice/cpu.shares":      "<none>",
			"cpuset/kubepods.slice/cpuset.cpus":                           "0-1",
			"cpuset/kubepods.slice/kubepods-burstable.slice/cpuset.mems":  "0",
			"memory/kubepods/memory.limit_in_bytes":                       "<none>",
			"cpuset/kubepods.slice/kubepods-besteffort.slice/cpuset.cpus": "0-1",
		}},
		{"v2", true, map[string]string{
			"kubepods.slice":            "CPUWeight=138 MemoryMax=21474836480 TasksMax=4000000",
			"kubepods-burstable.slice":  "",
			"kubepods-besteffort.slice": "CPUWeight=1",
		}, fileWant{
			"cgroup.subtree_control":                              "+cpuset +cpu +io +memory +hugetlb +pids",
			"kubepods.slice/cgroup.subtree_control":               "+cpuset +cpu +io +memory +hugetlb +pids",
			"kubepods.slice/memory.max":                           "21474836480",
			"kubepods.slice/cpu.weight":                           "138",
			"kubepods.slice/pids.max":                             "4000000",
			"kubepods.slice/kubepods-besteffort.slice/cpu.weight": "1",
			"kubepods.slice/kubepods-burstable.slice/cpu.weight":  "<none>",
			"kubepods/memory.max":                                 "<none>",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root, units, m := systemdQOSTree(t, tt.v2)
			ctx := context.Background()
			for unit, want := range tt.units {
				if got := units.props(unit, resourceKeys...); got != want {
					t.Errorf("%s resources = %q, want %q", unit, got, want)
				}
				if got := units.props(unit, "CPUAccounting", "MemoryAccounting", "TasksAccounting", "DefaultDependencies"); got != "CPUAccounting=true DefaultDependencies=false MemoryAccounting=true TasksAccounting=true" {
					t.Errorf("%s = %q, want accounting on and no default dependencies", unit, got)
				}
			}
			if got := units.props("kubepods-burstable.slice", "Wants"); got != "Wants=[kubepods.slice]" {
				t.Errorf("burstable Wants = %q, want its parent slice", got)
			}
			checkFiles(t, root, tt.files)

			// A restart finds the slices there: their properties are set again.
			if err := m.EnsureQOSCgroups(ctx, capacity, allocatable); err != nil {
				t.Fatalf("second EnsureQOSCgroups: %v", err)
			}
			calls := units.callLog()
			if want := "start kubepods.slice,set kubepods.slice"; !strings.Contains(strings.Join(calls, ","), want) {
				t.Errorf("calls = %v, want an existing slice updated (%s)", calls, want)
			}
		})
	}
}

func TestSystemdPodCgroupLifecycle(t *testing.T) {
	uid := "11111111-2222"
	esc := "11111111_2222"
	guaranteed := podWith(uid, guaranteedRes, guaranteedRes) // 1 cpu, 2Gi in total
	burstableAll := podWith(uid, res("250m", "256Mi", "500m", "512Mi"), res("250m", "256Mi", "1", "1Gi"))
	besteffort := podWith(uid, bestEffortRes)
	tests := []struct {
		name  string
		v2    bool
		pod   *v1.Pod
		unit  string
		props string
		files fileWant
	}{
		{"v1 guaranteed", false, guaranteed, "kubepods-pod" + esc + ".slice",
			"CPUQuotaPerSecUSec=1000000 CPUShares=1024 MemoryLimit=2147483648 TasksMax=1024", fileWant{
				"cpu/kubepods.slice/kubepods-pod" + esc + ".slice/cpu.shares":               "1024",
				"cpu/kubepods.slice/kubepods-pod" + esc + ".slice/cpu.cfs_quota_us":         "100000",
				"cpu/kubepods.slice/kubepods-pod" + esc + ".slice/cpu.cfs_period_us":        "100000",
				"memory/kubepods.slice/kubepods-pod" + esc + ".slice/memory.limit_in_bytes": "2147483648",
				"pids/kubepods.slice/kubepods-pod" + esc + ".slice/pids.max":                "1024",
			}},
		{"v1 burstable", false, burstableAll, "kubepods-burstable-pod" + esc + ".slice",
			"CPUQuotaPerSecUSec=1500000 CPUShares=512 MemoryLimit=1610612736 TasksMax=1024", fileWant{
				"cpu/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + esc + ".slice/cpu.shares":       "512",
				"cpuset/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + esc + ".slice/cpuset.cpus":   "0-1",
				"cpu/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + esc + ".slice/cpu.cfs_quota_us": "150000",
			}},
		{"v1 besteffort", false, besteffort, "kubepods-besteffort-pod" + esc + ".slice",
			"CPUShares=2 TasksMax=1024", fileWant{
				"cpu/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + esc + ".slice/cpu.shares":               "2",
				"memory/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + esc + ".slice/memory.limit_in_bytes": "<none>",
			}},
		{"v2 guaranteed", true, guaranteed, "kubepods-pod" + esc + ".slice",
			"CPUQuotaPerSecUSec=1000000 CPUWeight=100 MemoryMax=2147483648 TasksMax=1024", fileWant{
				"kubepods.slice/kubepods-pod" + esc + ".slice/cpu.weight": "100",
				"kubepods.slice/kubepods-pod" + esc + ".slice/cpu.max":    "100000 100000",
				"kubepods.slice/kubepods-pod" + esc + ".slice/memory.max": "2147483648",
				"kubepods.slice/kubepods-pod" + esc + ".slice/pids.max":   "1024",
			}},
		{"v2 burstable", true, burstableAll, "kubepods-burstable-pod" + esc + ".slice",
			"CPUQuotaPerSecUSec=1500000 CPUWeight=59 MemoryMax=1610612736 TasksMax=1024", fileWant{
				"kubepods.slice/kubepods-burstable.slice/cgroup.subtree_control":                             "+cpuset +cpu +io +memory +hugetlb +pids",
				"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + esc + ".slice/cpu.max":    "150000 100000",
				"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + esc + ".slice/memory.max": "1610612736",
			}},
		{"v2 besteffort", true, besteffort, "kubepods-besteffort-pod" + esc + ".slice",
			"CPUWeight=1 TasksMax=1024", fileWant{
				"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + esc + ".slice/cpu.weight": "1",
				"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + esc + ".slice/memory.max": "<none>",
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root, units, m := systemdQOSTree(t, tt.v2)
			ctx := context.Background()
			if m.PodCgroupExists(tt.pod) {
				t.Fatal("pod cgroup exists before EnsurePodCgroup")
			}
			if err := m.EnsurePodCgroup(ctx, tt.pod); err != nil {
				t.Fatal(err)
			}
			if got := units.props(tt.unit, resourceKeys...); got != tt.props {
				t.Errorf("%s resources = %q, want %q", tt.unit, got, tt.props)
			}
			checkFiles(t, root, tt.files)
			if !m.PodCgroupExists(tt.pod) {
				t.Fatal("PodCgroupExists = false after EnsurePodCgroup")
			}
			got, err := m.ListPodCgroups()
			if err != nil {
				t.Fatal(err)
			}
			want := PodCgroupName(nil, tt.pod)
			if len(got) != 1 || got[types.UID(uid)].Cgroupfs() != want.Cgroupfs() {
				t.Fatalf("ListPodCgroups = %v, want {%s: %s}", got, uid, want)
			}

			// A container's process in a scope below the pod slice: stopping the
			// slice would kill it, so removal is refused without asking systemd.
			scope := filepath.Join(m.primaryPath(want), "cri-containerd-abc.scope")
			write(t, filepath.Join(scope, "cgroup.procs"), "4242\n")
			if err := m.RemoveCgroup(ctx, got[types.UID(uid)]); err == nil || !strings.Contains(err.Error(), "4242") {
				t.Fatalf("RemoveCgroup with a process below = %v, want an error naming 4242", err)
			}
			for _, c := range units.callLog() {
				if strings.HasPrefix(c, "stop ") {
					t.Fatalf("asked systemd to %s while a process was in it", c)
				}
			}
			if err := os.RemoveAll(scope); err != nil {
				t.Fatal(err)
			}

			if err := m.RemoveCgroup(ctx, got[types.UID(uid)]); err != nil {
				t.Fatal(err)
			}
			if units.props(tt.unit) != "<no unit>" {
				t.Errorf("%s still loaded after removal", tt.unit)
			}
			if m.PodCgroupExists(tt.pod) {
				t.Error("pod cgroup exists after removal")
			}
			for _, p := range m.paths(want) {
				if isDir(p) {
					t.Errorf("%s left behind (systemd leaves cpuset to its creator on v1)", p)
				}
			}
			if !isDir(m.primaryPath(QOSCgroupName(nil, QOSClass(tt.pod)))) {
				t.Error("removal took the QoS cgroup along")
			}
			if err := m.RemovePodCgroup(ctx, tt.pod); err != nil {
				t.Errorf("removing a removed pod cgroup (systemd: no such unit): %v", err)
			}
		})
	}
}

func TestSystemdUpdateQOSAndPeriod(t *testing.T) {
	root := fakeV2(t)
	units := newFakeUnits(root)
	m := newSystemdTestManager(t, root, units, []string{"pods"})
	m.opts.CPUCFSQuotaPeriod = 50 * time.Millisecond
	ctx := context.Background()
	if err := m.EnsureQOSCgroups(ctx, capacity, allocatable); err != nil {
		t.Fatal(err)
	}
	pods := []*v1.Pod{podWith("a", res("250m", "", "", "")), podWith("b", res("500m", "1Gi", "1", "2Gi")), podWith("c", guaranteedRes)}
	if err := m.UpdateQOSCgroups(ctx, pods); err != nil {
		t.Fatal(err)
	}
	if got := units.props("kubepods-burstable.slice", "CPUWeight"); got != "CPUWeight=80" {
		t.Errorf("burstable slice = %q, want CPUWeight=80 (768 shares)", got)
	}
	checkFiles(t, root, fileWant{"kubepods.slice/kubepods-burstable.slice/cpu.weight": "80"})

	if err := m.EnsurePodCgroup(ctx, pods[2]); err != nil {
		t.Fatal(err)
	}
	if got := units.props("kubepods-podc.slice", "CPUQuotaPerSecUSec", "CPUQuotaPeriodUSec"); got != "CPUQuotaPerSecUSec=500000 CPUQuotaPeriodUSec=50000" {
		t.Errorf("pod slice quota = %q, want 0.5 cpu with a 50ms period", got)
	}
	checkFiles(t, root, fileWant{"kubepods.slice/kubepods-podc.slice/cpu.max": "25000 50000"})
}

func TestSystemdJobFailure(t *testing.T) {
	root := fakeV1(t)
	units := newFakeUnits(root)
	m := newSystemdTestManager(t, root, units, nil)
	units.result = "failed"
	err := m.EnsureQOSCgroups(context.Background(), capacity, allocatable)
	if err == nil || !strings.Contains(err.Error(), "kubepods.slice") || !strings.Contains(err.Error(), `"failed"`) {
		t.Fatalf("EnsureQOSCgroups with a failing job = %v, want an error naming the unit and result", err)
	}
	if _, err := NewManager(ManagerOptions{Root: root, Mode: ModeHybrid, Driver: DriverSystemd}); err == nil {
		t.Error("NewManager(systemd) without a systemd connection: want error")
	}
}

// The systemd driver against go-systemd's real client on a private dbus-daemon with the
// fake systemd1 serving it.
func TestSystemdDriverOverDBus(t *testing.T) {
	for _, v2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "v1", true: "v2"}[v2], func(t *testing.T) {
			bus := dbustest.NewBus(t)
			root := fakeV1(t)
			if v2 {
				root = fakeV2(t)
			}
			sd, err := dbustest.StartSystemd(bus.Addr, dbustest.SystemdOptions{CgroupRoot: root})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = sd.Close() })
			conn, err := sddbus.NewConnection(func() (*dbus.Conn, error) { return dbustest.Connect(bus.Addr) })
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(conn.Close)
			m := newSystemdTestManager(t, root, conn, []string{"pods"})
			ctx := context.Background()
			if err := m.EnsureQOSCgroups(ctx, capacity, allocatable); err != nil {
				t.Fatal(err)
			}
			pod := podWith("aaaa-bbbb", burstableRes)
			if err := m.EnsurePodCgroup(ctx, pod); err != nil {
				t.Fatal(err)
			}
			unit := "kubepods-burstable-podaaaa_bbbb.slice"
			u, ok := sd.Unit(unit)
			if !ok || !u.Active {
				t.Fatalf("%s not started", unit)
			}
			wantShares := "CPUShares"
			wantMem := "MemoryLimit"
			if v2 {
				wantShares, wantMem = "CPUWeight", "MemoryMax"
			}
			if _, ok := u.Props[wantShares]; !ok {
				t.Errorf("%s has no %s: %v", unit, wantShares, u.Props)
			}
			if got := u.Props[wantMem].Value(); got != uint64(1<<30) {
				t.Errorf("%s %s = %v, want 1Gi", unit, wantMem, got)
			}
			if got := u.Props["Wants"].Value(); fmt.Sprint(got) != "[kubepods-burstable.slice]" {
				t.Errorf("%s Wants = %v", unit, got)
			}
			file := "memory/kubepods.slice/kubepods-burstable.slice/" + unit + "/memory.limit_in_bytes"
			if v2 {
				file = "kubepods.slice/kubepods-burstable.slice/" + unit + "/memory.max"
			}
			checkFiles(t, root, fileWant{file: "1073741824"})

			// nodelet restarted: the slices exist, so their properties are set.
			if err := m.EnsurePodCgroup(ctx, pod); err != nil {
				t.Fatal(err)
			}
			got, err := m.ListPodCgroups()
			if err != nil || len(got) != 1 || got["aaaa-bbbb"] == nil {
				t.Fatalf("ListPodCgroups = %v, %v", got, err)
			}
			if err := m.RemoveCgroup(ctx, got["aaaa-bbbb"]); err != nil {
				t.Fatal(err)
			}
			if _, ok := sd.Unit(unit); ok || m.PodCgroupExists(pod) {
				t.Errorf("after removal: unit loaded %v, cgroup exists %v", ok, m.PodCgroupExists(pod))
			}
			var calls []string
			for _, c := range sd.UnitCalls() {
				if c.Unit == unit {
					calls = append(calls, c.Method+":"+c.Err)
				}
			}
			want := "StartTransientUnit:,StartTransientUnit:" + dbustest.ErrUnitExists + ",SetUnitProperties:,StopUnit:"
			if strings.Join(calls, ",") != want {
				t.Errorf("calls for %s = %v, want %s", unit, calls, want)
			}

			sd.FailNextJob("kubepods-podcccc.slice", "failed")
			if err := m.EnsurePodCgroup(ctx, podWith("cccc", guaranteedRes)); err == nil || !strings.Contains(err.Error(), `"failed"`) {
				t.Errorf("EnsurePodCgroup with a failed job = %v, want an error", err)
			}
		})
	}
}

// kubeReservedCgroup/systemReservedCgroup are cgroupfs paths for either driver: under
// systemd "/system.slice" is system.slice's own directory, not a slice named after it.
func TestSystemdEnforceReservedCgroup(t *testing.T) {
	root := fakeV1(t)
	m := newSystemdTestManager(t, root, newFakeUnits(root), nil)
	for _, h := range []string{"cpu", "memory", "pids"} {
		if err := os.MkdirAll(filepath.Join(root, h, "system.slice"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	reserved := v1.ResourceList{v1.ResourceMemory: capacity[v1.ResourceMemory]}
	if err := m.EnforceReservedCgroup(context.Background(), "/system.slice", reserved, false); err != nil {
		t.Fatal(err)
	}
	checkFiles(t, root, fileWant{"memory/system.slice/memory.limit_in_bytes": "25769803776", "memory/system.slice.slice/memory.limit_in_bytes": "<none>"})
}
