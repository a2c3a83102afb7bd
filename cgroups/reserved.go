package cgroups

import (
	"context"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// EnforceReservedCgroup limits an existing cgroup (kubeReservedCgroup or
// systemReservedCgroup, a cgroupfs path such as "/system.slice") to the reserved
// resources, for enforceNodeAllocatable "kube-reserved"/"system-reserved" (memory,
// cpu shares, pids) and their "-compressible" forms (compressibleOnly: cpu only).
// The cgroup must exist: nodelet does not create it, as the kubelet does not.
func (m *Manager) EnforceReservedCgroup(ctx context.Context, cgroupPath string, reserved v1.ResourceList, compressibleOnly bool) error {
	// The setting is a path in the cgroup filesystem for either driver (e.g.
	// "/system.slice"), so it is used as it is, never re-rendered as a slice name.
	name := ParseCgroupRoot(cgroupPath, DriverCgroupfs)
	if len(name) == 0 {
		return fmt.Errorf("enforcing reserved resources: cgroup %q must not be the root", cgroupPath)
	}
	fsPath := name.Cgroupfs()
	if !isDir(m.primaryDir(fsPath)) {
		return fmt.Errorf("enforcing reserved resources: cgroup %q does not exist", cgroupPath)
	}
	rc := NodeResourceConfig(reserved)
	if compressibleOnly {
		rc.Memory, rc.PidsLimit = nil, nil
	}
	if err := m.setPath(fsPath, rc); err != nil {
		return fmt.Errorf("enforcing reserved resources on %s: %w", cgroupPath, err)
	}
	klog.FromContext(ctx).Info("Enforced reserved resources", "cgroup", cgroupPath, "compressibleOnly", compressibleOnly)
	return nil
}

// SelfCgroupV2 returns the cgroup2 path from /proc/self/cgroup content (the "0::"
// line), "/" when there is none.
func SelfCgroupV2(procSelfCgroup string) string {
	for _, l := range strings.Split(procSelfCgroup, "\n") {
		if p, ok := strings.CutPrefix(strings.TrimSpace(l), "0::"); ok && p != "" {
			return p
		}
	}
	return "/"
}
