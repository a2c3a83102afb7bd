package cgroups

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	occgroups "github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func mkTree(t *testing.T, dirs []string, files []string) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range files {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("cpu memory pids\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestDetectMode(t *testing.T) {
	v1Dirs := []string{"cpu", "cpuacct", "memory", "pids", "systemd"}
	tests := []struct {
		name    string
		dirs    []string
		files   []string
		statfs  func(root string) StatfsFunc
		want    Mode
		wantErr bool
	}{
		{name: "v1", dirs: v1Dirs, want: ModeV1},
		{name: "v1 with a unified dir that is not cgroup2", dirs: append(v1Dirs, "unified"), want: ModeV1},
		{name: "hybrid", dirs: append(v1Dirs, "unified"), files: []string{"unified/cgroup.controllers"}, want: ModeHybrid},
		{name: "v2 by cgroup.controllers", dirs: []string{"system.slice"}, files: []string{"cgroup.controllers"}, want: ModeV2},
		{name: "v2 by statfs magic", dirs: []string{"system.slice"},
			statfs: func(root string) StatfsFunc {
				return func(p string) (int64, error) {
					if p == root {
						return unix.CGROUP2_SUPER_MAGIC, nil
					}
					return unix.TMPFS_MAGIC, nil
				}
			}, want: ModeV2},
		{name: "hybrid by statfs magic on unified", dirs: append(v1Dirs, "unified"),
			statfs: func(root string) StatfsFunc {
				return func(p string) (int64, error) {
					if p == filepath.Join(root, "unified") {
						return unix.CGROUP2_SUPER_MAGIC, nil
					}
					return unix.TMPFS_MAGIC, nil
				}
			}, want: ModeHybrid},
		{name: "empty dir", wantErr: true},
		{name: "unrelated dirs", dirs: []string{"foo", "bar"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := mkTree(t, tt.dirs, tt.files)
			var sf StatfsFunc
			if tt.statfs != nil {
				sf = tt.statfs(root)
			}
			got, err := DetectModeWith(root, sf)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("mode = %v, want %v", got, tt.want)
			}
		})
	}
	if _, err := DetectModeWith(filepath.Join(t.TempDir(), "missing"), nil); err == nil {
		t.Error("missing root: want error")
	}
}

func TestSwapControllerAvailable(t *testing.T) {
	root := mkTree(t, nil, []string{"memory/memory.memsw.limit_in_bytes", "user.slice/memory.swap.max"})
	for _, tt := range []struct {
		root, self string
		mode       Mode
		want       bool
	}{
		{root, "", ModeV1, true},
		{root, "", ModeHybrid, true},
		{root, "/user.slice", ModeV2, true},
		{root, "/", ModeV2, false},
		{t.TempDir(), "", ModeV1, false},
	} {
		if got := SwapControllerAvailable(tt.root, tt.mode, tt.self); got != tt.want {
			t.Errorf("SwapControllerAvailable(%s, %v, %q) = %v, want %v", tt.root, tt.mode, tt.self, got, tt.want)
		}
	}
}

func TestCgroupNames(t *testing.T) {
	uid := "1234-abcd-5678"
	tests := []struct {
		name         string
		root         CgroupName
		pod          *v1.Pod
		wantQOS      v1.PodQOSClass
		wantCgroupfs string
		wantSystemd  string
	}{
		{"guaranteed", nil, podWith(uid, guaranteedRes), v1.PodQOSGuaranteed,
			"/kubepods/pod1234-abcd-5678", "/kubepods.slice/kubepods-pod1234_abcd_5678.slice"},
		{"burstable", nil, podWith(uid, burstableRes), v1.PodQOSBurstable,
			"/kubepods/burstable/pod1234-abcd-5678", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd_5678.slice"},
		{"besteffort", nil, podWith(uid, bestEffortRes), v1.PodQOSBestEffort,
			"/kubepods/besteffort/pod1234-abcd-5678", "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1234_abcd_5678.slice"},
		{"cgroupRoot", CgroupName{"nodelet"}, podWith(uid, burstableRes), v1.PodQOSBurstable,
			"/nodelet/kubepods/burstable/pod1234-abcd-5678", "/nodelet.slice/nodelet-kubepods.slice/nodelet-kubepods-burstable.slice/nodelet-kubepods-burstable-pod1234_abcd_5678.slice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := QOSClass(tt.pod); got != tt.wantQOS {
				t.Fatalf("QOSClass = %s, want %s", got, tt.wantQOS)
			}
			if got := CgroupParentForSandbox(tt.root, tt.pod, DriverCgroupfs); got != tt.wantCgroupfs {
				t.Errorf("cgroupfs = %q, want %q", got, tt.wantCgroupfs)
			}
			if got := CgroupParentForSandbox(tt.root, tt.pod, DriverSystemd); got != tt.wantSystemd {
				t.Errorf("systemd = %q, want %q", got, tt.wantSystemd)
			}
		})
	}
	qos := []struct {
		qos           v1.PodQOSClass
		cgfs, systemd string
	}{
		{v1.PodQOSGuaranteed, "/kubepods", "kubepods.slice"},
		{v1.PodQOSBurstable, "/kubepods/burstable", "kubepods.slice/kubepods-burstable.slice"},
		{v1.PodQOSBestEffort, "/kubepods/besteffort", "kubepods.slice/kubepods-besteffort.slice"},
	}
	for _, q := range qos {
		n := QOSCgroupName(nil, q.qos)
		if n.Cgroupfs() != q.cgfs || n.Systemd() != q.systemd {
			t.Errorf("QOSCgroupName(%s) = %q / %q, want %q / %q", q.qos, n.Cgroupfs(), n.Systemd(), q.cgfs, q.systemd)
		}
	}
	if got := (CgroupName{}).Systemd(); got != "/" {
		t.Errorf("root systemd name = %q", got)
	}
	if got := (CgroupName{}).Cgroupfs(); got != "/" {
		t.Errorf("root cgroupfs name = %q", got)
	}
}

func TestParseCgroupRoot(t *testing.T) {
	tests := []struct {
		in     string
		driver Driver
		want   string
	}{
		{"", DriverCgroupfs, "/"},
		{"/", DriverCgroupfs, "/"},
		{"/a/b/", DriverCgroupfs, "/a/b"},
		{"/", DriverSystemd, "/"},
		{"a-b.slice", DriverSystemd, "/a/b"},
		{"a.slice/a-b.slice", DriverSystemd, "/a/b"},
		{"my_node.slice", DriverSystemd, "/my-node"},
	}
	for _, tt := range tests {
		if got := ParseCgroupRoot(tt.in, tt.driver).Cgroupfs(); got != tt.want {
			t.Errorf("ParseCgroupRoot(%q, %s) = %q, want %q", tt.in, tt.driver, got, tt.want)
		}
	}
}

func TestQOSClass(t *testing.T) {
	always := v1.ContainerRestartPolicyAlways
	tests := []struct {
		name string
		pod  *v1.Pod
		want v1.PodQOSClass
	}{
		{"no resources", podWith("u", bestEffortRes), v1.PodQOSBestEffort},
		{"only ephemeral-storage", podWith("u", v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceEphemeralStorage: resource.MustParse("1Gi")}}), v1.PodQOSBestEffort},
		{"zero requests", podWith("u", res("0", "0", "", "")), v1.PodQOSBestEffort},
		{"equal requests and limits", podWith("u", guaranteedRes, guaranteedRes), v1.PodQOSGuaranteed},
		{"one container burstable", podWith("u", guaranteedRes, burstableRes), v1.PodQOSBurstable},
		{"memory limit only", podWith("u", res("", "", "", "1Gi")), v1.PodQOSBurstable},
		{"limits only, not defaulted", podWith("u", res("", "", "1", "1Gi")), v1.PodQOSBurstable},
		{"cpu only", podWith("u", res("1", "", "1", "")), v1.PodQOSBurstable},
		{"init container burstable", func() *v1.Pod {
			p := podWith("u", guaranteedRes)
			p.Spec.InitContainers = []v1.Container{{Name: "i", Resources: res("100m", "", "", ""), RestartPolicy: &always}}
			return p
		}(), v1.PodQOSBurstable},
		{"pod-level guaranteed, containers without resources", func() *v1.Pod {
			p := podWith("u", bestEffortRes)
			r := res("1", "1Gi", "1", "1Gi")
			p.Spec.Resources = &r
			return p
		}(), v1.PodQOSGuaranteed},
		{"pod-level memory limit only", func() *v1.Pod {
			p := podWith("u", guaranteedRes)
			r := res("", "", "", "1Gi")
			p.Spec.Resources = &r
			return p
		}(), v1.PodQOSBurstable},
		{"status wins", func() *v1.Pod {
			p := podWith("u", bestEffortRes)
			p.Status.QOSClass = v1.PodQOSGuaranteed
			return p
		}(), v1.PodQOSGuaranteed},
	}
	for _, tt := range tests {
		if got := QOSClass(tt.pod); got != tt.want {
			t.Errorf("%s: QOSClass = %s, want %s", tt.name, got, tt.want)
		}
	}
}

func TestCheckDriver(t *testing.T) {
	tests := []struct {
		configured, runtime string
		wantErr             []string
	}{
		{"cgroupfs", "cgroupfs", nil},
		{"systemd", "systemd", nil},
		{"cgroupfs", "", nil},
		{"cgroupfs", "systemd", []string{`"cgroupfs"`, `"systemd"`, "cgroupDriver: systemd", "SystemdCgroup = false"}},
		{"systemd", "cgroupfs", []string{`"systemd"`, `"cgroupfs"`, "cgroupDriver: cgroupfs", "SystemdCgroup = true"}},
		{"cgroup", "cgroupfs", []string{`"cgroup"`, "not supported"}},
	}
	for _, tt := range tests {
		err := CheckDriver(tt.configured, tt.runtime)
		if tt.wantErr == nil {
			if err != nil {
				t.Errorf("CheckDriver(%q, %q) = %v, want nil", tt.configured, tt.runtime, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("CheckDriver(%q, %q) = nil, want error", tt.configured, tt.runtime)
			continue
		}
		for _, s := range tt.wantErr {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("CheckDriver(%q, %q) = %q, missing %q", tt.configured, tt.runtime, err, s)
			}
		}
	}
	if DriverFromCRI(runtimeapi.CgroupDriver_SYSTEMD) != "systemd" || DriverFromCRI(runtimeapi.CgroupDriver_CGROUPFS) != "cgroupfs" {
		t.Error("DriverFromCRI mapping wrong")
	}
}

func TestMilliCPUConversions(t *testing.T) {
	for _, tt := range []struct {
		milli int64
		want  uint64
	}{{0, 2}, {1, 2}, {2, 2}, {100, 102}, {1000, 1024}, {500000, MaxShares}} {
		if got := MilliCPUToShares(tt.milli); got != tt.want {
			t.Errorf("MilliCPUToShares(%d) = %d, want %d", tt.milli, got, tt.want)
		}
	}
	for _, tt := range []struct{ milli, period, want int64 }{{0, 100000, 0}, {1, 100000, 1000}, {500, 100000, 50000}, {2000, 50000, 100000}} {
		if got := MilliCPUToQuota(tt.milli, tt.period); got != tt.want {
			t.Errorf("MilliCPUToQuota(%d, %d) = %d, want %d", tt.milli, tt.period, got, tt.want)
		}
	}
}

func TestCheckSwap(t *testing.T) {
	const header = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
	on := header + "/swapfile                               file\t\t1048572\t\t0\t\t-2\n"
	tests := []struct {
		name    string
		content string
		fail    bool
		wantErr bool
	}{
		{"no swap", header, true, false},
		{"no file", "", true, false},
		{"swap on", on, true, true},
		{"swap on allowed", on, false, false},
	}
	for _, tt := range tests {
		err := CheckSwap(tt.content, tt.fail)
		if (err != nil) != tt.wantErr {
			t.Errorf("%s: err = %v, wantErr %v", tt.name, err, tt.wantErr)
		}
		if err != nil {
			for _, s := range []string{"running with swap on is not supported", "--fail-swap-on flag to false", "/proc/swaps contained:", "/swapfile"} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("%s: message %q lacks %q", tt.name, err, s)
				}
			}
		}
	}
}

func TestSelfCgroupV2(t *testing.T) {
	for in, want := range map[string]string{
		"0::/user.slice/session-1.scope\n":                             "/user.slice/session-1.scope",
		"12:memory:/foo\n1:name=systemd:/init.scope\n0::/init.scope\n": "/init.scope",
		"12:memory:/foo\n": "/",
		"":                 "/",
	} {
		if got := SelfCgroupV2(in); got != want {
			t.Errorf("SelfCgroupV2(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLibResources(t *testing.T) {
	u := func(v uint64) *uint64 { return &v }
	i := func(v int64) *int64 { return &v }
	base := occgroups.Resources{SkipDevices: true, SkipFreezeOnSet: true}
	with := func(f func(r *occgroups.Resources)) occgroups.Resources {
		r := base
		f(&r)
		return r
	}
	tests := []struct {
		name string
		rc   ResourceConfig
		v2   bool
		want occgroups.Resources
	}{
		{"nothing set leaves everything alone", ResourceConfig{}, false, base},
		{"v1 shares", ResourceConfig{CPUShares: u(1536)}, false, with(func(r *occgroups.Resources) { r.CpuShares = 1536 })},
		{"v2 shares become runc's weight", ResourceConfig{CPUShares: u(1536)}, true, with(func(r *occgroups.Resources) { r.CpuWeight = 138 })},
		{"v2 minimum shares", ResourceConfig{CPUShares: u(2)}, true, with(func(r *occgroups.Resources) { r.CpuWeight = 1 })},
		{"quota with period", ResourceConfig{CPUQuota: i(150000), CPUPeriod: u(100000)}, false,
			with(func(r *occgroups.Resources) { r.CpuQuota, r.CpuPeriod = 150000, 100000 })},
		{"no quota is -1", ResourceConfig{CPUQuota: i(-1), CPUPeriod: u(50000)}, true,
			with(func(r *occgroups.Resources) { r.CpuQuota, r.CpuPeriod = -1, 50000 })},
		{"quota without period is not written", ResourceConfig{CPUQuota: i(1000)}, false, base},
		{"memory", ResourceConfig{Memory: i(1 << 30)}, false, with(func(r *occgroups.Resources) { r.Memory = 1 << 30 })},
		{"unlimited memory is -1", ResourceConfig{Memory: i(0)}, true, with(func(r *occgroups.Resources) { r.Memory = -1 })},
		{"pids", ResourceConfig{PidsLimit: i(1024)}, false, with(func(r *occgroups.Resources) { r.PidsLimit = i(1024) })},
		{"unlimited pids is -1", ResourceConfig{PidsLimit: i(0)}, true, with(func(r *occgroups.Resources) { r.PidsLimit = i(-1) })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := libResources(tt.rc, tt.v2)
			if !reflect.DeepEqual(*got, tt.want) {
				t.Errorf("libResources = %+v, want %+v", *got, tt.want)
			}
		})
	}
}
