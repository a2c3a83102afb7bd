//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

func readCgroup(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	return strings.TrimSpace(string(b))
}

// TestQoSCgroupsAndLimits runs one pod of each QoS class and reads their cgroups and
// limits back from the cgroupfs (this host is cgroup v1/hybrid: memory and cpu
// controllers under /sys/fs/cgroup/<controller>).
func TestQoSCgroupsAndLimits(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	startNode(t, f, framework.NodeletOptions{})
	q := resource.MustParse
	mk := func(name string, res v1.ResourceRequirements) *v1.Pod {
		p := f.BusyboxPod(ns, name, "sleep", "3600")
		p.Spec.Containers[0].Resources = res
		p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](1)
		return p
	}
	pods := map[string]*v1.Pod{
		"guaranteed": mk("guaranteed", v1.ResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceCPU: q("250m"), v1.ResourceMemory: q("64Mi")},
			Limits:   v1.ResourceList{v1.ResourceCPU: q("250m"), v1.ResourceMemory: q("64Mi")}}),
		"burstable": mk("burstable", v1.ResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceCPU: q("100m"), v1.ResourceMemory: q("32Mi")},
			Limits:   v1.ResourceList{v1.ResourceCPU: q("500m"), v1.ResourceMemory: q("128Mi")}}),
		"besteffort": mk("besteffort", v1.ResourceRequirements{}),
	}
	for _, p := range pods {
		f.CreatePod(ctx, p)
	}
	got := map[string]*v1.Pod{}
	for name := range pods {
		got[name] = f.WaitForPodReady(ctx, ns, name, 2*time.Minute)
	}
	// The QoS tree sits under the rig's cgroupRoot (CGROUP_ROOT, "" on the default rig).
	mem, cpu := filepath.Join("/sys/fs/cgroup/memory", f.Env.CgroupRoot), filepath.Join("/sys/fs/cgroup/cpu", f.Env.CgroupRoot)
	podDir := map[string]string{
		"guaranteed": filepath.Join("kubepods", "pod"+string(got["guaranteed"].UID)),
		"burstable":  filepath.Join("kubepods", "burstable", "pod"+string(got["burstable"].UID)),
		"besteffort": filepath.Join("kubepods", "besteffort", "pod"+string(got["besteffort"].UID)),
	}
	for name, dir := range podDir {
		t.Logf("%s: %s memory.limit_in_bytes=%s cpu.shares=%s cpu.cfs_quota_us=%s", name, dir,
			readCgroup(t, filepath.Join(mem, dir, "memory.limit_in_bytes")), readCgroup(t, filepath.Join(cpu, dir, "cpu.shares")),
			readCgroup(t, filepath.Join(cpu, dir, "cpu.cfs_quota_us")))
	}
	if v := readCgroup(t, filepath.Join(mem, podDir["guaranteed"], "memory.limit_in_bytes")); v != "67108864" {
		t.Errorf("guaranteed pod memory limit = %s, want 64Mi", v)
	}
	if v := readCgroup(t, filepath.Join(cpu, podDir["guaranteed"], "cpu.shares")); v != "256" {
		t.Errorf("guaranteed pod cpu.shares = %s, want 256 (250m)", v)
	}
	if v := readCgroup(t, filepath.Join(cpu, podDir["guaranteed"], "cpu.cfs_quota_us")); v != "25000" {
		t.Errorf("guaranteed pod cpu quota = %s, want 25000 (250m of a 100ms period)", v)
	}
	if v := readCgroup(t, filepath.Join(mem, podDir["burstable"], "memory.limit_in_bytes")); v != "134217728" {
		t.Errorf("burstable pod memory limit = %s, want 128Mi", v)
	}
	if v := readCgroup(t, filepath.Join(cpu, podDir["burstable"], "cpu.shares")); v != "102" {
		t.Errorf("burstable pod cpu.shares = %s, want 102 (100m)", v)
	}
	if v := readCgroup(t, filepath.Join(cpu, podDir["besteffort"], "cpu.shares")); v != "2" {
		t.Errorf("besteffort pod cpu.shares = %s, want 2", v)
	}
	if v := readCgroup(t, filepath.Join(cpu, "kubepods", "besteffort", "cpu.shares")); v != "2" {
		t.Errorf("besteffort QoS cgroup cpu.shares = %s, want 2", v)
	}
	// The burstable QoS cgroup weighs what its pods asked for: one Burstable pod of 100m.
	if v := readCgroup(t, filepath.Join(cpu, "kubepods", "burstable", "cpu.shares")); v != "102" {
		t.Errorf("burstable QoS cgroup cpu.shares = %s, want 102 (the Burstable pods' 100m)", v)
	}
	// The container cgroups sit inside the pod cgroups, with the container limits.
	for name, dir := range podDir {
		cs, err := f.CRI.PodContainers(ctx, string(got[name].UID))
		if err != nil || len(cs) != 1 {
			t.Fatalf("containers of %s: %v %v", name, cs, err)
		}
		cdir := filepath.Join(mem, dir, cs[0].Id)
		if _, err := os.Stat(cdir); err != nil {
			t.Errorf("%s: container cgroup %s missing: %v", name, cdir, err)
		}
	}
	// Deleting the pods removes their cgroups.
	for name := range pods {
		f.DeletePod(ctx, ns, name, nil)
	}
	for name := range pods {
		f.WaitForPodGone(ctx, ns, name, time.Minute)
	}
	err := framework.WaitFor(ctx, 30*time.Second, "pod cgroups to be removed", func(context.Context) (bool, error) {
		for _, dir := range podDir {
			if _, err := os.Stat(filepath.Join(mem, dir)); err == nil {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestSystemReservedCgroupIsEnforced lists system-reserved in enforceNodeAllocatable with
// an existing systemReservedCgroup: nodelet limits it to systemReserved (memory, cpu
// shares). With the cgroup missing, nodelet refuses to start and says which cgroup.
func TestSystemReservedCgroupIsEnforced(t *testing.T) {
	f := framework.New(t)
	// Inside the rig's cgroupRoot, so that a second rig's run of this test has its own.
	name := filepath.Join(f.Env.CgroupRoot, "nodelet-e2e-system.slice")
	dirs := []string{filepath.Join("/sys/fs/cgroup/memory", name), filepath.Join("/sys/fs/cgroup/cpu", name), filepath.Join("/sys/fs/cgroup/pids", name)}
	reserved := func(c *kubeletconfigv1beta1.KubeletConfiguration) {
		c.SystemReservedCgroup = filepath.Join("/", name)
		c.SystemReserved = map[string]string{"cpu": "500m", "memory": "256Mi"}
		c.EnforceNodeAllocatable = []string{"pods", "system-reserved"}
	}

	// Missing cgroup: a clear start-up error.
	for _, d := range dirs {
		_ = os.Remove(d)
	}
	n := f.StartNodelet(framework.NodeletOptions{Config: reserved})
	if err := n.WaitExit(time.Minute); err == nil {
		t.Fatal("nodelet started although systemReservedCgroup does not exist")
	}
	if logs := n.Logs(); !strings.Contains(logs, "system-reserved") || !strings.Contains(logs, name) || !strings.Contains(logs, "does not exist") {
		t.Errorf("the start-up error does not name the setting and the missing cgroup:\n%s", n.Logs())
	}

	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, d := range dirs {
			_ = os.Remove(d)
		}
	})
	startNode(t, f, framework.NodeletOptions{Config: reserved})
	if got := readCgroup(t, filepath.Join(dirs[0], "memory.limit_in_bytes")); got != "268435456" {
		t.Errorf("%s memory.limit_in_bytes = %s, want 268435456 (256Mi)", name, got)
	}
	if got := readCgroup(t, filepath.Join(dirs[1], "cpu.shares")); got != "512" {
		t.Errorf("%s cpu.shares = %s, want 512 (500m)", name, got)
	}
	t.Logf("%s: memory.limit_in_bytes %s, cpu.shares %s", name,
		readCgroup(t, filepath.Join(dirs[0], "memory.limit_in_bytes")), readCgroup(t, filepath.Join(dirs[1], "cpu.shares")))
}
