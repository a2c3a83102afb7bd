package agent

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/cgroups"
	"github.com/nodelet/nodelet/config"
	"github.com/nodelet/nodelet/internal/periodic"
	"github.com/nodelet/nodelet/node"
)

const cgroupfsRoot = "/sys/fs/cgroup"

// runtimeConfiger is the CRI calls that report the runtime's cgroup driver.
type runtimeConfiger interface {
	RuntimeConfig(ctx context.Context) (*runtimeapi.RuntimeConfigResponse, error)
	Status(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error)
}

// systemdConn is the connection to systemd the systemd cgroup driver uses
// (go-systemd's *dbus.Conn).
type systemdConn interface {
	cgroups.SystemdUnits
	SystemStateContext(ctx context.Context) (*sddbus.Property, error)
	Close()
}

// dialSystemd connects to systemd's D-Bus API: the system bus (DBUS_SYSTEM_BUS_ADDRESS
// if set), or as root systemd's private socket.
func dialSystemd(ctx context.Context) (systemdConn, error) {
	conn, err := sddbus.NewWithContext(ctx)
	if err != nil {
		return nil, err
	}
	return conn, nil
}

// systemdAnswerTimeout bounds the start-up question to systemd, so a stuck bus fails
// the start instead of hanging it.
const systemdAnswerTimeout = 10 * time.Second

// openSystemd connects through dial and makes sure systemd itself answers (a bus can
// be up without systemd on it); it returns systemd's SystemState. The error says what
// the systemd driver needs.
func openSystemd(ctx context.Context, dial func(context.Context) (systemdConn, error)) (systemdConn, string, error) {
	const need = "cgroupDriver systemd needs systemd as the init system with its D-Bus API reachable " +
		"(the system bus, or /run/systemd/private as root); on a host without systemd set cgroupDriver: cgroupfs " +
		"(and SystemdCgroup = false in containerd's runc options)"
	conn, err := dial(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("connecting to systemd: %w; %s", err, need)
	}
	askCtx, cancel := context.WithTimeout(ctx, systemdAnswerTimeout)
	defer cancel()
	state, err := conn.SystemStateContext(askCtx)
	if err != nil {
		conn.Close()
		return nil, "", fmt.Errorf("asking systemd for its state: %w; %s", err, need)
	}
	return conn, strings.Trim(state.Value.String(), `"`), nil
}

// podCgroupSetup is what the cgroup layer gives the rest of nodelet.
type podCgroupSetup struct {
	mgr       *cgroups.Manager // nil when cgroupsPerQOS is off
	root      cgroups.CgroupName
	driver    cgroups.Driver
	resources cgroups.ResourceOptions
	systemd   systemdConn // with the systemd driver
}

// Close drops the connection to systemd, if any.
func (s *podCgroupSetup) Close() {
	if s != nil && s.systemd != nil {
		s.systemd.Close()
	}
}

// runtimeCgroupDriver asks the runtime for its cgroup driver: CRI RuntimeConfig
// (containerd 2.0+, CRI-O), else the CRI config containerd 1.x shows in its verbose
// status. "" when neither tells.
func runtimeCgroupDriver(ctx context.Context, rt runtimeConfiger) (driver, source string) {
	logger := klog.FromContext(ctx)
	resp, err := rt.RuntimeConfig(ctx)
	if err == nil {
		// The enum's zero value is SYSTEMD: an answer without a linux section says nothing.
		if resp.GetLinux() != nil {
			if d := cgroups.DriverFromCRI(resp.GetLinux().GetCgroupDriver()); d != "" {
				return d, "RuntimeConfig"
			}
		}
	} else {
		logger.V(4).Info("The runtime does not answer RuntimeConfig", "err", err)
	}
	status, err := rt.Status(ctx, true)
	if err != nil {
		logger.V(4).Info("Cannot read the runtime's verbose status", "err", err)
		return "", ""
	}
	if d := cgroups.DriverFromRuntimeInfo(status.GetInfo()); d != "" {
		return d, "verbose Status config (containerd.runtimes[defaultRuntimeName].options.SystemdCgroup)"
	}
	return "", ""
}

// setUpCgroups detects the cgroup version, checks the driver against the runtime's,
// and creates the QoS hierarchy (kubepods, burstable, besteffort) when cgroupsPerQOS;
// with the systemd driver it connects to systemd through dial first.
func setUpCgroups(ctx context.Context, kc *kubeletconfigv1beta1.KubeletConfiguration, cs config.CgroupSettings, mode cgroups.Mode, rt runtimeConfiger, capacity v1.ResourceList, swapCapacity int64,
	dial func(context.Context) (systemdConn, error)) (*podCgroupSetup, error) {
	logger := klog.FromContext(ctx)
	driver := cgroups.Driver(cs.Driver)
	logger.Info("Detected cgroup hierarchy", "mode", mode.String(), "cgroupDriver", driver)
	reported, source := runtimeCgroupDriver(ctx, rt)
	if err := cgroups.CheckDriver(string(driver), reported); err != nil {
		return nil, err
	}
	if reported == "" {
		logger.V(2).Info("The runtime does not report its cgroup driver; trusting cgroupDriver", "cgroupDriver", driver)
	} else {
		logger.V(2).Info("The runtime's cgroup driver matches", "cgroupDriver", driver, "source", source)
	}
	if err := checkCgroupRoot(kc.CgroupRoot, driver); err != nil {
		return nil, err
	}
	selfCgroup := ""
	if data, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		selfCgroup = cgroups.SelfCgroupV2(string(data))
	}
	s := &podCgroupSetup{
		root:   cgroups.ParseCgroupRoot(kc.CgroupRoot, driver),
		driver: driver,
		resources: cgroups.ResourceOptions{
			CPUCFSQuota:             cs.CPUCFSQuota,
			Period:                  cs.CPUCFSQuotaPeriod,
			SwapBehavior:            kc.MemorySwap.SwapBehavior,
			CgroupV2:                mode.Unified(),
			NodeSwapCapacity:        swapCapacity,
			SwapControllerAvailable: cgroups.SwapControllerAvailable(cgroupfsRoot, mode, selfCgroup),
			SingleProcessOOMKill:    cs.SingleProcessOOMKill(mode.Unified()),
		},
	}
	if kc.MemorySwap.SwapBehavior == "LimitedSwap" && !mode.Unified() {
		logger.Info("Warning: memorySwap.swapBehavior LimitedSwap needs cgroup v2; pods get no swap on this cgroup v1 host")
	}
	if !cs.CgroupsPerQOS {
		logger.Info("cgroupsPerQOS is false: no QoS or pod cgroups; the runtime places containers itself")
		return s, nil
	}
	opts := cgroups.ManagerOptions{
		Driver: driver, Root: cgroupfsRoot, Mode: mode, CgroupRoot: s.root, EnforceNodeAllocatable: kc.EnforceNodeAllocatable,
		PodPidsLimit: cs.PodPidsLimit, CPUCFSQuota: s.resources.CPUCFSQuota, CPUCFSQuotaPeriod: cs.CPUCFSQuotaPeriod,
	}
	if driver == cgroups.DriverSystemd {
		conn, state, err := openSystemd(ctx, dial)
		if err != nil {
			return nil, err
		}
		logger.Info("Connected to systemd for the systemd cgroup driver", "systemState", state)
		s.systemd, opts.Systemd = conn, conn
	}
	mgr, err := cgroups.NewManager(opts)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("setting up the cgroup manager: %w", err)
	}
	allocatable, err := node.ReservedAllocatable(capacity, kc.KubeReserved, kc.SystemReserved)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("computing what the kubepods cgroup may use: %w", err)
	}
	if err := mgr.EnsureQOSCgroups(ctx, capacity, allocatable); err != nil {
		s.Close()
		return nil, fmt.Errorf("creating the QoS cgroups under %s: %w", mgr.FsPath(s.root), err)
	}
	s.mgr = mgr
	logger.Info("QoS cgroups ready", "kubepods", mgr.FsPath(cgroups.KubepodsCgroupName(s.root)), "cgroupDriver", driver)
	if err := enforceReserved(ctx, kc, mgr); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// checkCgroupRoot: with systemd, cgroupRoot must be the root or a slice, as upstream
// requires (the QoS slices are named after it).
func checkCgroupRoot(cgroupRoot string, driver cgroups.Driver) error {
	if driver != cgroups.DriverSystemd {
		return nil
	}
	r := strings.TrimSuffix(cgroupRoot, "/")
	if r == "" || strings.HasSuffix(r, ".slice") {
		return nil
	}
	return fmt.Errorf("cgroupRoot %q: with cgroupDriver systemd it must be \"/\" or a systemd slice such as \"kubelet.slice\"", cgroupRoot)
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

// qosUpdateInterval is how often the QoS cgroups' cpu shares follow the active pods,
// as upstream's periodic QoS update.
const qosUpdateInterval = time.Minute

// qosCgroups keeps the burstable QoS cgroup's cpu shares at the sum of the Burstable
// pods' cpu requests (besteffort at the minimum), so Burstable pods as a whole weigh
// what they asked for against Guaranteed ones.
type qosCgroups struct {
	mgr        *cgroups.Manager
	activePods func() []*v1.Pod
}

// EnsurePodCgroup updates the QoS cgroups before a pod's cgroup is first made, as
// upstream does, so a new Burstable pod's share is there when it starts.
func (q *qosCgroups) EnsurePodCgroup(ctx context.Context, pod *v1.Pod) error {
	if !q.mgr.PodCgroupExists(pod) {
		q.update(ctx, pod)
	}
	return q.mgr.EnsurePodCgroup(ctx, pod)
}

// update sets the QoS cgroups from the active pods plus extra (a pod about to start
// that may not be counted as active yet). A failure is logged: the next update retries.
func (q *qosCgroups) update(ctx context.Context, extra ...*v1.Pod) {
	pods := q.activePods()
	for _, e := range extra {
		if !slices.ContainsFunc(pods, func(p *v1.Pod) bool { return p.UID == e.UID }) {
			pods = append(pods, e)
		}
	}
	if err := q.mgr.UpdateQOSCgroups(ctx, pods); err != nil {
		klog.FromContext(ctx).Error(err, "Failed to update the QoS cgroups")
	}
}

// run updates the QoS cgroups every qosUpdateInterval until ctx ends.
func (q *qosCgroups) run(ctx context.Context, clk clock.WithTicker) {
	periodic.Every(ctx, clk, qosUpdateInterval, func(ctx context.Context) { q.update(ctx) })
}
