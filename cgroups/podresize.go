package cgroups

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// SharesToMilliCPU is the cpu request cpu.shares stand for (0 below the
// minimum), rounded up as upstream, so a request survives the round trip.
func SharesToMilliCPU(shares int64) int64 {
	if shares < MinShares {
		return 0
	}
	return int64(math.Ceil(float64(shares*milliCPUToCPU) / float64(sharesPerCPU)))
}

// QuotaToMilliCPU is the cpu limit a CFS quota per period stands for; 0 for
// no quota (-1) or no period.
func QuotaToMilliCPU(quota, period int64) int64 {
	if quota <= 0 || period <= 0 {
		return 0
	}
	return quota * milliCPUToCPU / period
}

// weightToShares inverts the shares→cpu.weight conversion nodelet and runc
// write with (opencontainers/cgroups' quadratic fit of log2(shares)); the
// weight's rounding makes it exact only to a few percent, enough to order a
// resize. (Upstream inverts the older linear mapping.)
func weightToShares(weight uint64) uint64 {
	switch {
	case weight == 0:
		return 0
	case weight <= 1:
		return MinShares
	case weight >= 10000:
		return MaxShares
	}
	e := math.Log10(float64(weight))
	l := (-125 + math.Sqrt(125*125+4*612*(e+7.0/34.0))) / 2
	return uint64(math.Round(math.Pow(2, l)))
}

// Unlimited is how PodCgroupConfig reports a memory limit of "max" (v2) and
// how it leaves CPUQuota: -1.
const Unlimited = math.MaxInt64

// PodCgroupConfig reads the pod cgroup's cpu shares, CFS quota and period, and
// memory limit back from the cgroupfs (what a resize changes). A quota of
// "max"/-1 is -1; a memory limit of "max" is Unlimited.
func (m *Manager) PodCgroupConfig(pod *v1.Pod) (ResourceConfig, error) {
	fsPath := m.FsPath(PodCgroupName(m.opts.CgroupRoot, pod))
	var rc ResourceConfig
	if m.opts.Mode == ModeV2 {
		dir := filepath.Join(m.opts.Root, fsPath)
		weight, err := readInt(dir, "cpu.weight")
		if err != nil {
			return rc, err
		}
		shares := weightToShares(uint64(weight))
		rc.CPUShares = &shares
		max, err := readString(dir, "cpu.max")
		if err != nil {
			return rc, err
		}
		f := strings.Fields(max)
		if len(f) != 2 {
			return rc, fmt.Errorf("reading %s: unexpected content %q", filepath.Join(dir, "cpu.max"), max)
		}
		quota := int64(-1)
		if f[0] != "max" {
			if quota, err = strconv.ParseInt(f[0], 10, 64); err != nil {
				return rc, fmt.Errorf("reading %s: %w", filepath.Join(dir, "cpu.max"), err)
			}
		}
		period, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return rc, fmt.Errorf("reading %s: %w", filepath.Join(dir, "cpu.max"), err)
		}
		rc.CPUQuota, rc.CPUPeriod = &quota, &period
		mem, err := readInt(dir, "memory.max")
		if err != nil {
			return rc, err
		}
		rc.Memory = &mem
		return rc, nil
	}
	cpu := filepath.Join(m.opts.Root, "cpu", fsPath)
	shares, err := readInt(cpu, "cpu.shares")
	if err != nil {
		return rc, err
	}
	quota, err := readInt(cpu, "cpu.cfs_quota_us")
	if err != nil {
		return rc, err
	}
	period, err := readInt(cpu, "cpu.cfs_period_us")
	if err != nil {
		return rc, err
	}
	mem, err := readInt(filepath.Join(m.opts.Root, "memory", fsPath), "memory.limit_in_bytes")
	if err != nil {
		return rc, err
	}
	us, up := uint64(shares), uint64(period)
	rc.CPUShares, rc.CPUQuota, rc.CPUPeriod, rc.Memory = &us, &quota, &up, &mem
	return rc, nil
}

// PodMemoryUsage is the pod cgroup's memory usage in bytes (memory.current on
// v2, memory.usage_in_bytes on v1), which a memory limit decrease is checked against.
func (m *Manager) PodMemoryUsage(pod *v1.Pod) (int64, error) {
	fsPath := m.FsPath(PodCgroupName(m.opts.CgroupRoot, pod))
	if m.opts.Mode == ModeV2 {
		return readInt(filepath.Join(m.opts.Root, fsPath), "memory.current")
	}
	return readInt(filepath.Join(m.opts.Root, "memory", fsPath), "memory.usage_in_bytes")
}

// SetPodCgroupConfig writes the settings rc holds (nil ones are left alone) on
// the pod's existing cgroup: a resize.
func (m *Manager) SetPodCgroupConfig(ctx context.Context, pod *v1.Pod, rc ResourceConfig) error {
	return m.update(ctx, PodCgroupName(m.opts.CgroupRoot, pod), rc)
}

func readString(dir, file string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return "", fmt.Errorf("reading cgroup file: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// readInt reads one number ("max" is Unlimited).
func readInt(dir, file string) (int64, error) {
	s, err := readString(dir, file)
	if err != nil {
		return 0, err
	}
	if s == "max" {
		return Unlimited, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", filepath.Join(dir, file), err)
	}
	return v, nil
}
