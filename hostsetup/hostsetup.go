package hostsetup

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/cgroups"
	"github.com/nodelet/nodelet/config"
)

// Paths are the host files Prepare reads and writes; tests point ProcSys at a
// temp dir so that a test never changes the machine's kernel.
type Paths struct {
	ProcSys  string // /proc/sys: the kernel tunables of protectKernelDefaults
	Cgroupfs string // /sys/fs/cgroup
}

// Prepare checks the host and sets up nodelet's process as upstream does at
// start, in its order: swap (failSwapOn), the cgroup version (failCgroupV1),
// the kernel tunables (protectKernelDefaults), then nodelet's OOM score and
// open-file limit, which only warn. It returns the host's cgroup mode.
func Prepare(ctx context.Context, s config.HostSettings, paths Paths) (cgroups.Mode, error) {
	swaps, _ := os.ReadFile("/proc/swaps") // missing means no swap
	if err := cgroups.CheckSwap(string(swaps), s.FailSwapOn); err != nil {
		return 0, fmt.Errorf("%w (set failSwapOn: false in the config file to allow it)", err)
	}
	mode, err := cgroups.DetectMode(paths.Cgroupfs)
	if err != nil {
		return 0, fmt.Errorf("detecting the cgroup version under %s: %w", paths.Cgroupfs, err)
	}
	if err := CheckCgroupVersion(mode, s.FailCgroupV1); err != nil {
		return 0, err
	}
	if err := SetUpKernelTunables(ctx, paths.ProcSys, s.ProtectKernelDefaults); err != nil {
		return 0, err
	}
	ApplyOOMScoreAdj(ctx, s.OOMScoreAdj)
	ApplyMaxOpenFiles(ctx, s.MaxOpenFiles, ProcessNoFile{})
	return mode, nil
}

// CheckCgroupVersion refuses cgroup v1 hosts when failCgroupV1 is set, as upstream.
// A hybrid host (v1 controllers plus an empty unified mount) counts as v1.
func CheckCgroupVersion(mode cgroups.Mode, failCgroupV1 bool) error {
	if mode.Unified() || !failCgroupV1 {
		return nil
	}
	return fmt.Errorf("nodelet is configured to not run on a host using cgroup v1 (failCgroupV1: true), and this host's cgroups are %s; cgroup v1 support is in maintenance mode upstream: move the host to cgroup v2, or set failCgroupV1: false in the config file", mode)
}

// ApplyOOMScoreAdj protects nodelet from the OOM killer. Some hosts refuse
// negative values (no CAP_SYS_RESOURCE); that is a warning, not a failure.
func ApplyOOMScoreAdj(ctx context.Context, adj int32) {
	if err := os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(int(adj))), 0o644); err != nil {
		klog.FromContext(ctx).Info("Warning: could not set nodelet's oom_score_adj; continuing", "oomScoreAdj", adj, "err", err)
	}
}
