package agent

import (
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/cgroups"
	"github.com/nodelet/nodelet/node"
	"github.com/nodelet/nodelet/server"
	"github.com/nodelet/nodelet/stats"
)

// cadvisorMachine is what /metrics/cadvisor's machine_* series report.
func cadvisorMachine(mi node.MachineInfo) *server.MachineInfo {
	return &server.MachineInfo{NumCores: mi.NumCores, MemoryCapacity: mi.MemoryCapacity,
		MachineID: mi.MachineID, SystemUUID: mi.SystemUUID, BootID: mi.BootID}
}

// newStatsProvider measures the node and its pods for eviction and /stats/summary.
// Pod volumes are measured in the background by vols (volumeStatsAggPeriod); sandboxImage is
// the pause image the runtime runs (the image label of the sandboxes' cAdvisor series).
func newStatsProvider(kc *kubeletconfigv1beta1.KubeletConfiguration, nodeName, rootDir, sandboxImage string, cg *podCgroupSetup, sys systemContainerCgroups,
	rt stats.Runtime, activePods func() []*v1.Pod, vols *stats.VolumeStatsCache, clk clock.PassiveClock) *stats.Provider {
	cfg := stats.Config{
		NodeName:     nodeName,
		RootDir:      rootDir,
		PodLogsDir:   kc.PodLogsDir,
		CgroupRoot:   cgroupfsRoot,
		Unified:      cg.resources.CgroupV2,
		VolumeStats:  vols,
		SandboxImage: sandboxImage,
	}
	cfg.KubeletCgroup, cfg.RuntimeCgroup, cfg.MiscCgroup = sys.kubelet, sys.runtime, sys.misc
	if cg.mgr != nil {
		// Paths in the cgroup filesystem for the driver: nested slices with systemd.
		cfg.PodsCgroup = cg.mgr.FsPath(cgroups.KubepodsCgroupName(cg.root))
		cfg.PodCgroup = func(pod *v1.Pod) string { return cg.mgr.FsPath(cgroups.PodCgroupName(cg.root, pod)) }
	}
	return stats.New(cfg, rt, activePods, clk)
}

// systemContainerCgroups are the cgroups of the summary's kubelet, runtime and
// misc system containers.
type systemContainerCgroups struct{ kubelet, runtime, misc string }

// summarySystemContainers names them as upstream: kubeletCgroups, else the cgroup
// nodelet runs in (procSelfCgroup is /proc/self/cgroup: the v2 line, else the v1
// memory hierarchy's); --runtime-cgroups; systemCgroups.
func summarySystemContainers(kubeletCgroups, runtimeCgroups, systemCgroups, procSelfCgroup string, mode cgroups.Mode) systemContainerCgroups {
	s := systemContainerCgroups{kubelet: kubeletCgroups, runtime: runtimeCgroups, misc: systemCgroups}
	if s.kubelet != "" {
		return s
	}
	if mode.Unified() {
		s.kubelet = cgroups.SelfCgroupV2(procSelfCgroup)
		return s
	}
	for _, l := range strings.Split(procSelfCgroup, "\n") {
		// hierarchy-id:controllers:path
		parts := strings.SplitN(strings.TrimSpace(l), ":", 3)
		if len(parts) == 3 && slices.Contains(strings.Split(parts[1], ","), "memory") {
			s.kubelet = parts[2]
		}
	}
	return s
}
