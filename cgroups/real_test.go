package cgroups

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// TestRealCgroupfs drives the manager against the host's /sys/fs/cgroup under a
// cgroup root of its own, then removes everything. Opt-in (root, and it changes
// the host): NODELET_REAL_CGROUPS=1.
func TestRealCgroupfs(t *testing.T) {
	if os.Getenv("NODELET_REAL_CGROUPS") != "1" {
		t.Skip("set NODELET_REAL_CGROUPS=1 to run against the host's cgroupfs")
	}
	mode, err := DetectMode(DefaultRoot)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("host cgroup mode: %v", mode)
	rootName := CgroupName{"nodelet-test-" + strconv.Itoa(os.Getpid())}
	m, err := NewManager(ManagerOptions{Mode: mode, CgroupRoot: rootName, EnforceNodeAllocatable: []string{"pods"}, PodPidsLimit: 100, CPUCFSQuota: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pods := []*v1.Pod{podWith("g-1", guaranteedRes), podWith("b-1", burstableRes), podWith("e-1", bestEffortRes)}
	t.Cleanup(func() {
		for _, p := range pods {
			_ = m.RemovePodCgroup(ctx, p)
		}
		for _, n := range []CgroupName{QOSCgroupName(rootName, v1.PodQOSBurstable), QOSCgroupName(rootName, v1.PodQOSBestEffort), KubepodsCgroupName(rootName), rootName} {
			_ = m.RemoveCgroup(ctx, n)
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
	files := map[string]string{}
	if mode.Unified() {
		files["kubepods/memory.max"] = "4294967296"
		files["kubepods/pod"+"g-1/memory.max"] = "1073741824"
		files["kubepods/pod"+"g-1/cpu.max"] = "50000 100000"
		files["kubepods/pod"+"g-1/pids.max"] = "100"
		files["kubepods/burstable/podb-1/memory.max"] = "1073741824"
		files["kubepods/besteffort/pode-1/cpu.weight"] = "1"
	} else {
		files["memory/kubepods/memory.limit_in_bytes"] = "4294967296"
		files["memory/kubepods/podg-1/memory.limit_in_bytes"] = "1073741824"
		files["cpu/kubepods/podg-1/cpu.cfs_quota_us"] = "50000"
		files["pids/kubepods/podg-1/pids.max"] = "100"
		files["memory/kubepods/burstable/podb-1/memory.limit_in_bytes"] = "1073741824"
		files["cpu/kubepods/besteffort/pode-1/cpu.shares"] = "2"
		if cpus, err := os.ReadFile(filepath.Join(DefaultRoot, "cpuset", "cpuset.cpus")); err == nil {
			files["cpuset/kubepods/burstable/podb-1/cpuset.cpus"] = strings.TrimSpace(string(cpus))
		}
	}
	for rel, want := range files {
		parts := strings.SplitN(rel, "/", 2)
		p := filepath.Join(DefaultRoot, parts[0], rootName.Cgroupfs(), parts[1])
		if mode.Unified() {
			p = filepath.Join(DefaultRoot, rootName.Cgroupfs(), rel)
		}
		got, err := os.ReadFile(p)
		if err != nil {
			t.Errorf("reading %s: %v", p, err)
			continue
		}
		t.Logf("%s = %s", p, strings.TrimSpace(string(got)))
		if strings.TrimSpace(string(got)) != want {
			t.Errorf("%s = %q, want %q", p, strings.TrimSpace(string(got)), want)
		}
	}

	// A process in the pod cgroup blocks removal until it is gone.
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	procs := filepath.Join(m.primaryPath(PodCgroupName(rootName, pods[1])), "cgroup.procs")
	if err := os.WriteFile(procs, []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		_ = cmd.Process.Kill()
		t.Fatal(err)
	}
	if err := m.RemovePodCgroup(ctx, pods[1]); err == nil {
		t.Error("RemovePodCgroup with a process inside: want error")
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	// The runtime's container cgroups below a pod's, in every hierarchy (on a hybrid
	// host name=systemd and unified too), go with it, deepest first.
	hierarchies, err := Hierarchies(DefaultRoot, mode)
	if err != nil {
		t.Fatal(err)
	}
	podFs := PodCgroupName(rootName, pods[0]).Cgroupfs()
	for _, h := range hierarchies {
		if err := os.MkdirAll(filepath.Join(h, podFs, "ctr", "nested"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range pods {
		if err := m.RemovePodCgroup(ctx, p); err != nil {
			t.Errorf("RemovePodCgroup(%s): %v", p.UID, err)
		}
		if m.PodCgroupExists(p) {
			t.Errorf("%s still exists", p.UID)
		}
	}
	for _, h := range hierarchies {
		if p := filepath.Join(h, podFs); isDir(p) {
			t.Errorf("%s left behind", p)
		}
	}
}
