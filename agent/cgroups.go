package agent

import (
	"context"
	"fmt"
	"os"
	"strings"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/cgroups"
	"github.com/nodelet/nodelet/node"
)

const cgroupfsRoot = "/sys/fs/cgroup"

// runtimeConfiger is the CRI call that reports the runtime's cgroup driver.
type runtimeConfiger interface {
	RuntimeConfig(ctx context.Context) (*runtimeapi.RuntimeConfigResponse, error)
}

// podCgroupSetup is what the cgroup layer gives the rest of nodelet.
type podCgroupSetup struct {
	mgr       *cgroups.Manager // nil when cgroupsPerQOS is off
	root      cgroups.CgroupName
	driver    cgroups.Driver
	resources cgroups.ResourceOptions
}

// setUpCgroups detects the cgroup version, checks the driver against the runtime's,
// and creates the QoS hierarchy (kubepods, burstable, besteffort) when cgroupsPerQOS.
func setUpCgroups(ctx context.Context, kc *kubeletconfigv1beta1.KubeletConfiguration, rt runtimeConfiger, capacity v1.ResourceList, swapCapacity int64) (*podCgroupSetup, error) {
	logger := klog.FromContext(ctx)
	mode, err := cgroups.DetectMode(cgroupfsRoot)
	if err != nil {
		return nil, fmt.Errorf("detecting the cgroup version under %s: %w", cgroupfsRoot, err)
	}
	logger.Info("Detected cgroup hierarchy", "mode", mode.String())
	driver := cgroups.Driver(kc.CgroupDriver)
	if driver == "" {
		driver = cgroups.DriverCgroupfs
	}
	if resp, err := rt.RuntimeConfig(ctx); err == nil {
		if err := cgroups.CheckDriver(string(driver), cgroups.DriverFromCRI(resp.GetLinux().GetCgroupDriver())); err != nil {
			return nil, err
		}
	} else {
		logger.V(2).Info("The runtime does not report its cgroup driver; trusting cgroupDriver", "cgroupDriver", driver, "err", err)
	}
	selfCgroup := ""
	if data, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		selfCgroup = cgroups.SelfCgroupV2(string(data))
	}
	s := &podCgroupSetup{
		root:   cgroups.ParseCgroupRoot(kc.CgroupRoot, driver),
		driver: driver,
		resources: cgroups.ResourceOptions{
			CPUCFSQuota:             ptr.Deref(kc.CPUCFSQuota, true),
			Period:                  kc.CPUCFSQuotaPeriod.Duration,
			SwapBehavior:            kc.MemorySwap.SwapBehavior,
			CgroupV2:                mode.Unified(),
			NodeSwapCapacity:        swapCapacity,
			SwapControllerAvailable: cgroups.SwapControllerAvailable(cgroupfsRoot, mode, selfCgroup),
			SingleProcessOOMKill:    ptr.Deref(kc.SingleProcessOOMKill, !mode.Unified()),
		},
	}
	if kc.MemorySwap.SwapBehavior == "LimitedSwap" && !mode.Unified() {
		logger.Info("Warning: memorySwap.swapBehavior LimitedSwap needs cgroup v2; pods get no swap on this cgroup v1 host")
	}
	if kc.CgroupsPerQOS != nil && !*kc.CgroupsPerQOS {
		logger.Info("cgroupsPerQOS is false: no QoS or pod cgroups; the runtime places containers itself")
		return s, nil
	}
	if driver != cgroups.DriverCgroupfs {
		return nil, fmt.Errorf("cgroupDriver %q: nodelet manages QoS and pod cgroups only with the cgroupfs driver so far; set cgroupDriver: cgroupfs (and SystemdCgroup = false in containerd), or cgroupsPerQOS: false", driver)
	}
	mgr, err := cgroups.NewManager(cgroups.ManagerOptions{
		Root: cgroupfsRoot, Mode: mode, CgroupRoot: s.root, EnforceNodeAllocatable: kc.EnforceNodeAllocatable,
		PodPidsLimit: ptr.Deref(kc.PodPidsLimit, -1), CPUCFSQuota: s.resources.CPUCFSQuota, CPUCFSQuotaPeriod: kc.CPUCFSQuotaPeriod.Duration,
	})
	if err != nil {
		return nil, fmt.Errorf("setting up the cgroup manager: %w", err)
	}
	allocatable, err := node.ReservedAllocatable(capacity, kc.KubeReserved, kc.SystemReserved)
	if err != nil {
		return nil, fmt.Errorf("computing what the kubepods cgroup may use: %w", err)
	}
	if err := mgr.EnsureQOSCgroups(ctx, capacity, allocatable); err != nil {
		return nil, fmt.Errorf("creating the QoS cgroups under %s: %w", s.root.Cgroupfs(), err)
	}
	s.mgr = mgr
	logger.Info("QoS cgroups ready", "kubepods", cgroups.KubepodsCgroupName(s.root).Cgroupfs())
	if err := enforceReserved(ctx, kc, mgr); err != nil {
		return nil, err
	}
	return s, nil
}

// enforceReserved limits kubeReservedCgroup / systemReservedCgroup to kubeReserved /
// systemReserved when enforceNodeAllocatable lists them (the "-compressible" forms:
// CPU only). As upstream, the cgroups must exist and a failure stops the start.
func enforceReserved(ctx context.Context, kc *kubeletconfigv1beta1.KubeletConfiguration, mgr *cgroups.Manager) error {
	for _, key := range kc.EnforceNodeAllocatable {
		var field, cgroup string
		var reserved map[string]string
		switch strings.TrimSuffix(key, "-compressible") {
		case "system-reserved":
			field, cgroup, reserved = "systemReserved", kc.SystemReservedCgroup, kc.SystemReserved
		case "kube-reserved":
			field, cgroup, reserved = "kubeReserved", kc.KubeReservedCgroup, kc.KubeReserved
		default:
			continue
		}
		rl, err := node.ParseReserved(field, reserved)
		if err != nil {
			return err
		}
		if err := mgr.EnforceReservedCgroup(ctx, cgroup, rl, strings.HasSuffix(key, "-compressible")); err != nil {
			return fmt.Errorf("enforceNodeAllocatable %q: %w (create the cgroup %s first, e.g. with the service manager, or drop %q from enforceNodeAllocatable)", key, err, cgroup, key)
		}
	}
	return nil
}

// cgroupParent is the sandbox's cgroup parent, or "" without QoS cgroups.
func (s *podCgroupSetup) cgroupParent(pod *v1.Pod) string {
	if s == nil || s.mgr == nil {
		return ""
	}
	return cgroups.CgroupParentForSandbox(s.root, pod, s.driver)
}
