package cgroups

import (
	"context"
	"path/filepath"
	"testing"

	occgroups "github.com/opencontainers/cgroups"
)

func TestSharesAndQuotaToMilliCPU(t *testing.T) {
	for _, milli := range []int64{2, 10, 100, 250, 1000, 1500} {
		if got := SharesToMilliCPU(int64(MilliCPUToShares(milli))); got != milli {
			t.Errorf("SharesToMilliCPU(MilliCPUToShares(%d)) = %d", milli, got)
		}
		if got := QuotaToMilliCPU(MilliCPUToQuota(milli, DefaultCFSPeriod), DefaultCFSPeriod); milli >= 10 && got != milli {
			t.Errorf("QuotaToMilliCPU(MilliCPUToQuota(%d)) = %d", milli, got)
		}
	}
	if SharesToMilliCPU(1) != 0 || QuotaToMilliCPU(-1, DefaultCFSPeriod) != 0 || QuotaToMilliCPU(100, 0) != 0 {
		t.Error("no shares, no quota or no period must give 0")
	}
}

// A resize reads the pod cgroup back, changes some settings and leaves the others.
func TestPodCgroupConfigRoundTrip(t *testing.T) {
	ctx := context.Background()
	uid := "resize-1"
	for _, v2 := range []bool{false, true} {
		root := fakeV1(t)
		if v2 {
			root = fakeV2(t)
		}
		m := newTestManager(t, root, nil)
		pod := podWith(uid, res("100m", "64Mi", "100m", "64Mi"))
		if err := m.EnsurePodCgroup(ctx, pod); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(root, "kubepods", "pod"+uid)
		if v2 {
			write(t, filepath.Join(dir, "memory.current"), "1048576\n")
		} else {
			write(t, filepath.Join(root, "memory", "kubepods", "pod"+uid, "memory.usage_in_bytes"), "1048576\n")
		}
		rc, err := m.PodCgroupConfig(pod)
		if err != nil {
			t.Fatalf("v2=%v: PodCgroupConfig: %v", v2, err)
		}
		if *rc.CPUQuota != 10000 || *rc.CPUPeriod != 100000 || *rc.Memory != 64<<20 {
			t.Errorf("v2=%v: read back quota %d period %d memory %d", v2, *rc.CPUQuota, *rc.CPUPeriod, *rc.Memory)
		}
		// v2 stores a weight: shares come back within its rounding.
		if s := int64(*rc.CPUShares); s < 95 || s > 110 {
			t.Errorf("v2=%v: shares read back = %d, want about 102", v2, s)
		}
		if u, err := m.PodMemoryUsage(pod); err != nil || u != 1<<20 {
			t.Errorf("v2=%v: PodMemoryUsage = %d, %v", v2, u, err)
		}

		mem := int64(128 << 20)
		quota, period := int64(20000), uint64(100000)
		if err := m.SetPodCgroupConfig(ctx, pod, ResourceConfig{Memory: &mem}); err != nil {
			t.Fatal(err)
		}
		if err := m.SetPodCgroupConfig(ctx, pod, ResourceConfig{CPUQuota: &quota, CPUPeriod: &period}); err != nil {
			t.Fatal(err)
		}
		after, err := m.PodCgroupConfig(pod)
		if err != nil {
			t.Fatal(err)
		}
		if *after.Memory != mem || *after.CPUQuota != quota || *after.CPUShares != *rc.CPUShares {
			t.Errorf("v2=%v: after the resize memory %d quota %d shares %d (were %d)", v2, *after.Memory, *after.CPUQuota, *after.CPUShares, *rc.CPUShares)
		}
	}
}

func TestWeightToShares(t *testing.T) {
	for _, shares := range []uint64{2, 102, 512, 1024, 2048, 100000, 262144} {
		got := weightToShares(occgroups.ConvertCPUSharesToCgroupV2Value(shares))
		if d := float64(got)/float64(shares) - 1; d < -0.1 || d > 0.1 {
			t.Errorf("shares %d -> weight -> %d", shares, got)
		}
	}
}

func TestPodCgroupConfigUnlimited(t *testing.T) {
	root := fakeV2(t)
	m := newTestManager(t, root, nil)
	pod := podWith("u", res("100m", "", "", ""))
	dir := filepath.Join(root, "kubepods", "burstable", "podu")
	write(t, filepath.Join(dir, "cpu.weight"), "4")
	write(t, filepath.Join(dir, "cpu.max"), "max 100000")
	write(t, filepath.Join(dir, "memory.max"), "max")
	rc, err := m.PodCgroupConfig(pod)
	if err != nil {
		t.Fatal(err)
	}
	if *rc.CPUQuota != -1 || *rc.Memory != Unlimited {
		t.Errorf("unlimited read back as quota %d memory %d", *rc.CPUQuota, *rc.Memory)
	}
	write(t, filepath.Join(dir, "cpu.max"), "garbage")
	if _, err := m.PodCgroupConfig(pod); err == nil {
		t.Error("a malformed cpu.max was accepted")
	}
}

// Lifting limits writes each layout's "unlimited": -1 on v1, max on v2.
func TestSetPodCgroupConfigUnlimited(t *testing.T) {
	ctx := context.Background()
	none, noPids, noQuota, period := int64(0), int64(-1), int64(-1), uint64(100000)
	unlimited := ResourceConfig{Memory: &none, PidsLimit: &noPids, CPUQuota: &noQuota, CPUPeriod: &period}
	for _, tt := range []struct {
		v2   bool
		want fileWant
	}{
		{false, fileWant{
			"memory/kubepods/podu/memory.limit_in_bytes": "-1",
			"pids/kubepods/podu/pids.max":                "max",
			"cpu/kubepods/podu/cpu.cfs_quota_us":         "-1",
			"cpu/kubepods/podu/cpu.cfs_period_us":        "100000",
		}},
		{true, fileWant{
			"kubepods/podu/memory.max": "max",
			"kubepods/podu/pids.max":   "max",
			"kubepods/podu/cpu.max":    "max 100000",
		}},
	} {
		root := fakeV1(t)
		if tt.v2 {
			root = fakeV2(t)
		}
		m := newTestManager(t, root, nil)
		pod := podWith("u", guaranteedRes)
		if err := m.EnsurePodCgroup(ctx, pod); err != nil {
			t.Fatal(err)
		}
		if err := m.SetPodCgroupConfig(ctx, pod, unlimited); err != nil {
			t.Fatalf("v2=%v: %v", tt.v2, err)
		}
		checkFiles(t, root, tt.want)
	}
}
