package cgroups

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// TestRealSystemd drives the systemd driver against the host's systemd (PID 1) and
// /sys/fs/cgroup under a cgroup root slice of its own, then stops every slice it made.
// Opt-in (root on a systemd host, and it changes the host): NODELET_REAL_SYSTEMD=1.
func TestRealSystemd(t *testing.T) {
	if os.Getenv("NODELET_REAL_SYSTEMD") != "1" {
		t.Skip("set NODELET_REAL_SYSTEMD=1 as root on a host whose init is systemd to run against the real systemd")
	}
	ctx := context.Background()
	conn, err := sddbus.NewWithContext(ctx)
	if err != nil {
		t.Fatalf("connecting to systemd: %v", err)
	}
	defer conn.Close()
	mode, err := DetectMode(DefaultRoot)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("host cgroup mode: %v", mode)
	rootName := ParseCgroupRoot("nodelettest"+strconv.Itoa(os.Getpid())+".slice", DriverSystemd)
	m, err := NewManager(ManagerOptions{Mode: mode, Driver: DriverSystemd, Systemd: conn, CgroupRoot: rootName,
		EnforceNodeAllocatable: []string{"pods"}, PodPidsLimit: 100, CPUCFSQuota: true})
	if err != nil {
		t.Fatal(err)
	}
	pods := []*v1.Pod{podWith("g-1", guaranteedRes), podWith("b-1", burstableRes), podWith("e-1", bestEffortRes)}
	t.Cleanup(func() {
		for _, p := range pods {
			_ = m.RemovePodCgroup(ctx, p)
		}
		// Children first: stopping a parent slice would stop them anyway.
		for _, n := range []CgroupName{QOSCgroupName(rootName, v1.PodQOSBurstable), QOSCgroupName(rootName, v1.PodQOSBestEffort), KubepodsCgroupName(rootName), rootName} {
			if err := m.RemoveCgroup(ctx, n); err != nil {
				t.Logf("cleanup: %v", err)
			}
		}
	})
	alloc := v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"), v1.ResourceMemory: resource.MustParse("4Gi"), ResourcePIDs: resource.MustParse("10000")}
	if err := m.EnsureQOSCgroups(ctx, alloc, alloc); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if err := m.EnsurePodCgroup(ctx, p); err != nil {
			t.Fatalf("%s: %v", p.UID, err)
		}
	}
	// Twice: the second run finds the slices and updates them.
	if err := m.EnsurePodCgroup(ctx, pods[0]); err != nil {
		t.Fatalf("EnsurePodCgroup on an existing slice: %v", err)
	}

	kubepods := m.FsPath(KubepodsCgroupName(rootName))
	guaranteed := m.FsPath(PodCgroupName(rootName, pods[0]))
	files := map[string]string{}
	memProp := "MemoryLimit"
	if mode.Unified() {
		memProp = "MemoryMax"
		files[filepath.Join(kubepods, "memory.max")] = "4294967296"
		files[filepath.Join(guaranteed, "memory.max")] = "1073741824"
		files[filepath.Join(guaranteed, "cpu.max")] = "50000 100000"
		files[filepath.Join(guaranteed, "pids.max")] = "100"
	} else {
		files[filepath.Join("memory", kubepods, "memory.limit_in_bytes")] = "4294967296"
		files[filepath.Join("memory", guaranteed, "memory.limit_in_bytes")] = "1073741824"
		files[filepath.Join("cpu", guaranteed, "cpu.cfs_quota_us")] = "50000"
		files[filepath.Join("pids", guaranteed, "pids.max")] = "100"
	}
	for rel, want := range files {
		p := filepath.Join(DefaultRoot, rel)
		got, err := os.ReadFile(p)
		if err != nil {
			t.Errorf("reading %s: %v", p, err)
			continue
		}
		if strings.TrimSpace(string(got)) != want {
			t.Errorf("%s = %q, want %q", p, strings.TrimSpace(string(got)), want)
		}
	}
	unit := SliceName(PodCgroupName(rootName, pods[0]))
	props, err := conn.GetUnitTypePropertiesContext(ctx, unit, "Slice")
	if err != nil {
		t.Fatalf("reading %s's properties: %v", unit, err)
	}
	if got := props[memProp]; got != uint64(1<<30) {
		t.Errorf("%s %s = %v, want 1Gi", unit, memProp, got)
	}
	t.Logf("%s: %s=%v TasksMax=%v CPUQuotaPerSecUSec=%v", unit, memProp, props[memProp], props["TasksMax"], props["CPUQuotaPerSecUSec"])

	// A process in a scope-like child of the burstable pod's slice blocks removal.
	child := filepath.Join(m.primaryPath(PodCgroupName(rootName, pods[1])), "nodelettest.scope")
	if err := os.Mkdir(child, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(child)
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(child, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		_ = cmd.Process.Kill()
		t.Fatal(err)
	}
	if err := m.RemovePodCgroup(ctx, pods[1]); err == nil {
		t.Error("RemovePodCgroup with a process below the slice: want error")
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if err := os.Remove(child); err != nil {
		t.Fatal(err)
	}

	got, err := m.ListPodCgroups()
	if err != nil || len(got) != len(pods) {
		t.Fatalf("ListPodCgroups = %v, %v; want the %d pods", got, err, len(pods))
	}
	for _, p := range pods {
		if err := m.RemoveCgroup(ctx, got[p.UID]); err != nil {
			t.Errorf("RemoveCgroup(%s): %v", p.UID, err)
		}
		if m.PodCgroupExists(p) {
			t.Errorf("%s still exists", p.UID)
		}
	}
}
