package agent

import (
	v1 "k8s.io/api/core/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/cgroups"
	"github.com/nodelet/nodelet/stats"
)

// newStatsProvider measures the node and its pods for eviction and /stats/summary.
func newStatsProvider(kc *kubeletconfigv1beta1.KubeletConfiguration, nodeName, rootDir string, cg *podCgroupSetup,
	rt stats.Runtime, activePods func() []*v1.Pod, clk clock.PassiveClock) *stats.Provider {
	cfg := stats.Config{
		NodeName:   nodeName,
		RootDir:    rootDir,
		PodLogsDir: kc.PodLogsDir,
		CgroupRoot: cgroupfsRoot,
		Unified:    cg.resources.CgroupV2,
	}
	if cg.mgr != nil {
		// Paths in the cgroup filesystem for the driver: nested slices with systemd.
		cfg.PodsCgroup = cg.mgr.FsPath(cgroups.KubepodsCgroupName(cg.root))
		cfg.PodCgroup = func(pod *v1.Pod) string { return cg.mgr.FsPath(cgroups.PodCgroupName(cg.root, pod)) }
	}
	return stats.New(cfg, rt, activePods, clk)
}
