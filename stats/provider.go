package stats

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/cri"
)

// Runtime is the part of the CRI runtime and image services stats reads.
type Runtime interface {
	ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error)
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
	ListContainerStats(ctx context.Context, filter *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error)
	ListPodSandboxStats(ctx context.Context, filter *runtimeapi.PodSandboxStatsFilter) ([]*runtimeapi.PodSandboxStats, error)
	ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error)
}

// Config says where things are on this node.
type Config struct {
	NodeName string
	// RootDir is the kubelet root dir: its filesystem is nodefs, pod volumes live under it.
	RootDir string
	// PodLogsDir holds /var/log/pods/<ns>_<name>_<uid>/<container>/<n>.log.
	PodLogsDir string
	// ProcRoot is procfs ("/proc" if empty); SysRoot is sysfs ("/sys" if empty).
	ProcRoot string
	SysRoot  string
	// CgroupRoot is where cgroupfs is mounted ("/sys/fs/cgroup" if empty); Unified says
	// it is cgroup v2.
	CgroupRoot string
	Unified    bool
	// PodsCgroup is the pods cgroup's path in the cgroup filesystem ("/kubepods", or
	// "/kubepods.slice" with the systemd driver), "" when there is none (cgroupsPerQOS
	// false).
	PodsCgroup string
	// KubeletCgroup, RuntimeCgroup and MiscCgroup are the paths of nodelet's own
	// cgroup, runtimeCgroups and systemCgroups: the "kubelet", "runtime" and "misc"
	// system containers of the summary, each left out when "", as upstream.
	KubeletCgroup, RuntimeCgroup, MiscCgroup string
	// PodCgroup returns a pod's path in the cgroup filesystem, or "" when unknown.
	PodCgroup func(pod *v1.Pod) string
	// SandboxImage is the runtime's pause image: the image label of the
	// sandboxes' /metrics/cadvisor series when the runtime does not say a
	// sandbox's own in its verbose status ("" when it did not say either).
	SandboxImage string
	// VolumeStats, if set, holds the pods' volume stats measured in the
	// background (volumeStatsAggPeriod); without it each Snapshot walks the
	// pods' volume directories.
	VolumeStats *VolumeStatsCache
}

// Snapshot is one measurement: the Summary and the disk layout facts the Summary
// cannot express (whether images have a filesystem of their own).
type Snapshot struct {
	Summary *statsapi.Summary
	// Time is when the measurement started: the samples' timestamp.
	Time time.Time
	// Cgroups are the cgroup readings of the pods nodelet knows and of
	// their running containers (for /metrics/cadvisor) (v2, or v1's controllers).
	Cgroups []PodCgroups
	// DedicatedImageFs: the runtime's image filesystem is not nodefs.
	DedicatedImageFs bool
	// SplitContainerFs: container writable layers are on a third filesystem.
	SplitContainerFs bool
}

// Provider measures on demand. It keeps the previous CPU samples so it can report
// usage rates (usageNanoCores) as well as cumulative counters.
type Provider struct {
	cfg   Config
	rt    Runtime
	pods  func() []*v1.Pod
	clock clock.PassiveClock
	fs    fsInfo

	// noSandboxStats: the runtime answered ListPodSandboxStats with
	// Unimplemented, or failed it maxSandboxStatsFailures times in a row, so it
	// is not asked again; sandboxStatsFailures counts those failures.
	noSandboxStats       atomic.Bool
	sandboxStatsFailures atomic.Int32

	mu      sync.Mutex
	lastCPU map[string]cpuSample // by container ID, sandboxKey(sandbox ID), and "" for the node
	// sandboxImages are the sandboxes' images by sandbox ID, asked once each
	// (a sandbox's image does not change); forgotten when the sandbox is gone.
	sandboxImages map[string]string
}

type cpuSample struct {
	at    time.Time
	total uint64 // cumulative core-nanoseconds
}

// New returns a Provider. pods returns the pods the node runs (to name pods that have
// no sandbox yet and to find their cgroups); it may be nil.
func New(cfg Config, rt Runtime, pods func() []*v1.Pod, clk clock.PassiveClock) *Provider {
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	if cfg.SysRoot == "" {
		cfg.SysRoot = "/sys"
	}
	if cfg.CgroupRoot == "" {
		cfg.CgroupRoot = "/sys/fs/cgroup"
	}
	return &Provider{cfg: cfg, rt: rt, pods: pods, clock: clk, fs: osFs{}, lastCPU: map[string]cpuSample{}}
}

// Summary returns the node and pod stats (the /stats/summary document).
func (p *Provider) Summary(ctx context.Context) (*statsapi.Summary, error) {
	s, err := p.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	return s.Summary, nil
}

// Snapshot measures everything once. Missing parts (a cgroup file that does not
// exist, a runtime that cannot report stats) leave fields nil rather than failing:
// consumers treat nil as "not measured".
func (p *Provider) Snapshot(ctx context.Context) (*Snapshot, error) {
	now := p.clock.Now()
	mt := metav1.NewTime(now)
	nodeFs, rootDev, err := p.fs.statfs(p.cfg.RootDir)
	if err != nil {
		return nil, fmt.Errorf("measuring nodefs (the filesystem of %s): %w", p.cfg.RootDir, err)
	}
	nodeFs.Time = mt
	procStat, procStatOK := p.procStat()
	ns := statsapi.NodeStats{
		NodeName:  p.cfg.NodeName,
		StartTime: metav1.NewTime(p.bootTime(procStat, procStatOK, now)),
		Fs:        &nodeFs,
		Memory:    p.nodeMemory(mt),
		CPU:       p.nodeCPU(procStat, procStatOK, now),
		Rlimit:    p.rlimit(mt),
		Swap:      p.nodeSwap(mt),
	}
	if p.cfg.PodsCgroup != "" {
		ns.SystemContainers = append(ns.SystemContainers, statsapi.ContainerStats{
			Name:      statsapi.SystemContainerPods,
			StartTime: ns.StartTime,
			Memory:    p.cgroupMemory(p.cfg.PodsCgroup, mt),
		})
	}
	for _, sc := range []struct{ name, cgroup string }{
		{statsapi.SystemContainerKubelet, p.cfg.KubeletCgroup},
		{statsapi.SystemContainerRuntime, p.cfg.RuntimeCgroup},
		{statsapi.SystemContainerMisc, p.cfg.MiscCgroup},
	} {
		if sc.cgroup == "" {
			continue
		}
		ns.SystemContainers = append(ns.SystemContainers, statsapi.ContainerStats{
			Name: sc.name, StartTime: ns.StartTime, Memory: p.cgroupMemory(sc.cgroup, mt),
		})
	}
	snap := &Snapshot{Summary: &statsapi.Summary{Node: ns}, Time: now}

	imageFs, containerFs, dedicated, split, containerDev := p.runtimeFs(ctx, rootDev, mt)
	snap.Summary.Node.Runtime = &statsapi.RuntimeStats{ImageFs: imageFs, ContainerFs: containerFs}
	snap.DedicatedImageFs, snap.SplitContainerFs = dedicated, split
	if containerDev == 0 {
		containerDev = rootDev
	}

	pods, cgs, err := p.podStats(ctx, now, podFs{node: &nodeFs, container: containerFs, rootDev: rootDev, containerDev: containerDev})
	if err != nil {
		return nil, err
	}
	snap.Summary.Pods, snap.Cgroups = pods, cgs
	return snap, nil
}

// runtimeFs measures the runtime's image (and container) filesystems. Upstream reports
// imageFs even when it is nodefs; the flags say whether it is separate.
// containerDev is the device of the containers' writable layers (0: unknown).
func (p *Provider) runtimeFs(ctx context.Context, rootDev uint64, mt metav1.Time) (imageFs, containerFs *statsapi.FsStats, dedicated, split bool, containerDev uint64) {
	info, err := p.rt.ImageFsInfo(ctx)
	if err != nil {
		klog.V(2).InfoS("The runtime does not report its image filesystem; treating nodefs as imagefs", "err", err)
		return nil, nil, false, false, 0
	}
	fsFor := func(us []*runtimeapi.FilesystemUsage) (*statsapi.FsStats, uint64, bool) {
		if len(us) == 0 || us[0].GetFsId().GetMountpoint() == "" {
			return nil, 0, false
		}
		u := us[0]
		st, dev, err := p.fs.statfs(u.GetFsId().GetMountpoint())
		if err != nil {
			klog.V(2).InfoS("Cannot statfs the runtime's filesystem", "path", u.GetFsId().GetMountpoint(), "err", err)
			return nil, 0, false
		}
		st.Time = mt
		// Used is what the runtime's images/layers take, not the whole filesystem's use.
		if u.GetUsedBytes() != nil {
			st.UsedBytes = ptrTo(u.GetUsedBytes().GetValue())
		}
		if u.GetInodesUsed() != nil {
			st.InodesUsed = ptrTo(u.GetInodesUsed().GetValue())
		}
		return &st, dev, true
	}
	imageFs, imageDev, ok := fsFor(info.GetImageFilesystems())
	if !ok {
		return nil, nil, false, false, 0
	}
	dedicated = imageDev != rootDev
	containerFs, containerDev = imageFs, imageDev
	if cfs, cdev, ok := fsFor(info.GetContainerFilesystems()); ok {
		containerFs, containerDev = cfs, cdev
		split = dedicated && cdev != imageDev
	}
	return imageFs, containerFs, dedicated, split, containerDev
}

// podStats lists the pods' containers and their usage, and reads the cgroups
// of those nodelet knows (cgroup v2 or v1).
// podAcc accumulates one pod's stats from its sandboxes and containers.
type podAcc struct {
	stats     statsapi.PodStats
	sandboxID string
	created   int64
	ready     bool
	// cgroups are the running containers by ID, for reading their cgroups.
	cgroups map[string]ContainerCgroup
}

// podFs are the filesystems the pods' usage is on: nodefs (logs, volumes,
// /etc/hosts) and the containers' writable layers' (nil: the runtime did not
// say), with their devices.
type podFs struct {
	node, container       *statsapi.FsStats
	rootDev, containerDev uint64
}

func (p *Provider) podStats(ctx context.Context, now time.Time, fs podFs) ([]statsapi.PodStats, []PodCgroups, error) {
	rootDev, containerDev := fs.rootDev, fs.containerDev
	sandboxes, err := p.rt.ListPodSandbox(ctx, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("listing pod sandboxes for stats: %w", err)
	}
	containers, err := p.rt.ListContainers(ctx, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("listing containers for stats: %w", err)
	}
	byID, bySandbox, err := p.runtimeStats(ctx)
	if err != nil {
		return nil, nil, err
	}
	var cgr *cgroupReader
	if p.cfg.PodCgroup != nil {
		if cgr, err = newCgroupReader(p.cfg.CgroupRoot, p.cfg.ProcRoot, p.cfg.SysRoot, p.cfg.Unified); err != nil {
			klog.ErrorS(err, "Reading pod cgroups for stats")
		} else {
			defer cgr.Close()
		}
	}
	rootfsDevice := ""
	if cgr != nil && containerDev != 0 {
		rootfsDevice = cgr.deviceName(fmt.Sprintf("%d:%d", unix.Major(containerDev), unix.Minor(containerDev)))
	}
	known := map[types.UID]*v1.Pod{}
	if p.pods != nil {
		for _, pod := range p.pods() {
			known[pod.UID] = pod
		}
	}
	mt := metav1.NewTime(now)

	acc := map[types.UID]*podAcc{}
	var order []types.UID
	for _, sb := range sandboxes {
		uid := types.UID(sb.GetMetadata().GetUid())
		a := acc[uid]
		ready := sb.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY
		// A pod may have an old dead sandbox and a ready one: the ready, newest one names it.
		if a != nil && (a.ready && !ready || a.ready == ready && a.created >= sb.GetCreatedAt()) {
			continue
		}
		if a == nil {
			a = &podAcc{}
			acc[uid] = a
			order = append(order, uid)
		}
		a.created, a.ready, a.sandboxID = sb.GetCreatedAt(), ready, sb.GetId()
		a.stats.PodRef = statsapi.PodReference{Name: sb.GetMetadata().GetName(), Namespace: sb.GetMetadata().GetNamespace(), UID: string(uid)}
		a.stats.StartTime = metav1.NewTime(time.Unix(0, sb.GetCreatedAt()))
	}

	seenCPU := map[string]bool{}
	for _, c := range containers {
		// Only running containers count, as upstream: dead ones use no memory or CPU and
		// their writable layers are container GC's business.
		if c.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		uid := types.UID(c.GetLabels()[cri.LabelPodUID])
		a := acc[uid]
		if a == nil {
			continue
		}
		name := c.GetMetadata().GetName()
		cs := statsapi.ContainerStats{Name: name, StartTime: metav1.NewTime(time.Unix(0, c.GetCreatedAt()))}
		var cc *ContainerCgroup
		if cgr != nil {
			if a.cgroups == nil {
				a.cgroups = map[string]ContainerCgroup{}
			}
			cc = &ContainerCgroup{ID: c.GetId(), Name: name, StartTime: cs.StartTime.Time,
				Image: imageOf(known[uid], name, c.GetImage().GetUserSpecifiedImage(), c.GetImage().GetImage())}
		}
		if s := byID[c.GetId()]; s != nil {
			cs.Memory = criMemory(s.GetMemory(), mt)
			cs.CPU = p.criCPU(c.GetId(), s.GetCpu(), now)
			cs.Swap = criSwap(s.GetSwap(), mt)
			seenCPU[c.GetId()] = true
			if wl := s.GetWritableLayer(); wl != nil {
				// The size and free space are the writable layers' filesystem's, as upstream.
				cs.Rootfs = sizedAs(statsapi.FsStats{Time: mt}, fs.container)
				if wl.GetUsedBytes() != nil {
					cs.Rootfs.UsedBytes = ptrTo(wl.GetUsedBytes().GetValue())
				}
				if wl.GetInodesUsed() != nil {
					cs.Rootfs.InodesUsed = ptrTo(wl.GetInodesUsed().GetValue())
				}
				if cc != nil && cs.Rootfs.UsedBytes != nil {
					cc.RootfsBytes, cc.RootfsDevice = cs.Rootfs.UsedBytes, rootfsDevice
				}
			}
		}
		if cc != nil {
			a.cgroups[c.GetId()] = *cc
		}
		logDir := filepath.Join(p.cfg.PodLogsDir, fmt.Sprintf("%s_%s_%s", a.stats.PodRef.Namespace, a.stats.PodRef.Name, uid), name)
		if used, inodes, err := p.fs.du(logDir, 0); err == nil {
			// Upstream gives the logs nodefs's size and free space.
			cs.Logs = sizedAs(statsapi.FsStats{Time: mt, UsedBytes: &used, InodesUsed: &inodes}, fs.node)
		}
		a.stats.Containers = append(a.stats.Containers, cs)
	}

	out := make([]statsapi.PodStats, 0, len(order))
	var cgs []PodCgroups
	for _, uid := range order {
		a := acc[uid]
		ps := a.stats
		if !a.ready && len(ps.Containers) == 0 {
			continue // a dead pod uses nothing
		}
		if p.cfg.VolumeStats != nil {
			ps.VolumeStats, _ = p.cfg.VolumeStats.PodVolumeStats(uid)
		} else {
			ps.VolumeStats = p.volumeStats(uid, rootDev, mt)
		}
		ps.Memory = sumMemory(ps.Containers, mt)
		ps.CPU = sumCPU(ps.Containers, mt)
		ps.EphemeralStorage = sizedAs(*ephemeral(ps, known[uid], p.etcHostsStats(uid, mt), mt), fs.node)
		// The runtime's pod stats measure the pod cgroup, which also counts the
		// sandbox and tmpfs pages; without them nodelet reads the pod cgroup itself.
		fromRuntime := false
		if sbs := bySandbox[a.sandboxID].GetLinux(); sbs != nil {
			fromRuntime = p.applySandboxStats(&ps, a.sandboxID, sbs, now)
			if sbs.GetCpu() != nil {
				seenCPU[sandboxKey(a.sandboxID)] = true
			}
		}
		if pod := known[uid]; pod != nil && p.cfg.PodCgroup != nil {
			if dir := p.cfg.PodCgroup(pod); dir != "" {
				if !fromRuntime {
					if m := p.cgroupMemory(dir, mt); m != nil {
						ps.Memory = m
					}
				}
				ps.Swap = p.cgroupSwap(dir, mt)
				if ps.ProcessStats == nil {
					if n, ok := p.cgroupPIDs(dir); ok {
						ps.ProcessStats = &statsapi.ProcessStats{ProcessCount: &n}
					}
				}
				if cgr != nil {
					in := podCgroupInput{ref: ps.PodRef, start: ps.StartTime.Time, dir: dir, sandboxID: a.sandboxID,
						hostNet: pod.Spec.HostNetwork, network: ps.Network, containers: a.cgroups}
					if pc, ok := cgr.podCgroups(in); ok {
						if pc.Sandbox != nil {
							pc.Sandbox.Image = p.sandboxImage(ctx, a.sandboxID)
						}
						cgs = append(cgs, pc)
					}
				}
			}
		}
		out = append(out, ps)
	}
	p.forgetCPU(seenCPU)
	p.forgetSandboxImages(acc)
	return out, cgs, nil
}

// sandboxStatuser is the CRI call that names a sandbox's image.
type sandboxStatuser interface {
	PodSandboxStatus(ctx context.Context, podSandboxID string, verbose bool) (*runtimeapi.PodSandboxStatusResponse, error)
}

// sandboxImage is the image the sandbox's (pause) container runs, as cAdvisor
// labels it: the container's image from the runtime's verbose sandbox status
// (containerd's "info" has it; its runtime status does not, since 2.0), else
// Config.SandboxImage. Asked once per sandbox.
func (p *Provider) sandboxImage(ctx context.Context, id string) string {
	p.mu.Lock()
	img, ok := p.sandboxImages[id]
	p.mu.Unlock()
	if ok {
		return img
	}
	st, isStatuser := p.rt.(sandboxStatuser)
	if !isStatuser {
		return p.cfg.SandboxImage
	}
	resp, err := st.PodSandboxStatus(ctx, id, true)
	if err != nil {
		klog.FromContext(ctx).V(4).Info("Cannot read the sandbox's image", "sandboxID", id, "err", err)
		return p.cfg.SandboxImage // asked again next time
	}
	img = sandboxImageFromInfo(resp.GetInfo(), p.cfg.SandboxImage)
	p.mu.Lock()
	if p.sandboxImages == nil {
		p.sandboxImages = map[string]string{}
	}
	p.sandboxImages[id] = img
	p.mu.Unlock()
	return img
}

// sandboxImageFromInfo reads "image" from the verbose status's "info" JSON,
// fallback when it is missing.
func sandboxImageFromInfo(info map[string]string, fallback string) string {
	var v struct {
		Image string `json:"image"`
	}
	if raw, ok := info["info"]; ok && json.Unmarshal([]byte(raw), &v) == nil && v.Image != "" {
		return v.Image
	}
	return fallback
}

// forgetSandboxImages drops the images of sandboxes the runtime no longer lists.
func (p *Provider) forgetSandboxImages(listed map[types.UID]*podAcc) {
	ids := make(map[string]bool, len(listed))
	for _, a := range listed {
		ids[a.sandboxID] = true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for id := range p.sandboxImages {
		if !ids[id] {
			delete(p.sandboxImages, id)
		}
	}
}

// maxSandboxStatsFailures is how many ListPodSandboxStats failures in a row
// make the provider stop asking: containerd fails the whole call when one
// sandbox cannot be measured (its cgroup cannot be loaded, say), and a call
// that always fails would double every measurement's cost.
const maxSandboxStatsFailures = 3

// runtimeStats gets every pod's and container's usage in one call:
// ListPodSandboxStats where the runtime has it (pod CPU, memory, network and
// process count, with its containers' stats), else ListContainerStats. A
// runtime answering Unimplemented is not asked for pod stats again; another
// error falls back for this measurement (for good after
// maxSandboxStatsFailures in a row).
func (p *Provider) runtimeStats(ctx context.Context) (map[string]*runtimeapi.ContainerStats, map[string]*runtimeapi.PodSandboxStats, error) {
	if !p.noSandboxStats.Load() {
		list, err := p.rt.ListPodSandboxStats(ctx, nil)
		switch {
		case err == nil:
			p.sandboxStatsFailures.Store(0)
			byID := map[string]*runtimeapi.ContainerStats{}
			bySandbox := make(map[string]*runtimeapi.PodSandboxStats, len(list))
			for _, s := range list {
				bySandbox[s.GetAttributes().GetId()] = s
				for _, c := range s.GetLinux().GetContainers() {
					byID[c.GetAttributes().GetId()] = c
				}
			}
			return byID, bySandbox, nil
		case cri.IsUnimplemented(err):
			p.noSandboxStats.Store(true)
			klog.InfoS("The runtime does not implement ListPodSandboxStats; measuring pods by ListContainerStats and their cgroups")
		case ctx.Err() != nil:
			return nil, nil, fmt.Errorf("listing pod sandbox stats: %w", err)
		case p.sandboxStatsFailures.Add(1) >= maxSandboxStatsFailures:
			p.noSandboxStats.Store(true)
			klog.InfoS("ListPodSandboxStats keeps failing; measuring pods by ListContainerStats and their cgroups from now on", "failures", maxSandboxStatsFailures, "err", err)
		default:
			klog.V(2).InfoS("ListPodSandboxStats failed; using ListContainerStats for this measurement", "err", err)
		}
	}
	cstats, err := p.rt.ListContainerStats(ctx, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("listing container stats: %w", err)
	}
	byID := make(map[string]*runtimeapi.ContainerStats, len(cstats))
	for _, s := range cstats {
		byID[s.GetAttributes().GetId()] = s
	}
	return byID, nil, nil
}

// sandboxKey keys a pod sandbox's CPU samples apart from its containers'.
func sandboxKey(sandboxID string) string { return "sandbox/" + sandboxID }

// applySandboxStats sets the pod's CPU, network, process count and (when the
// runtime measured its working set) memory from the runtime's pod sandbox
// stats, and reports whether memory came from them.
func (p *Provider) applySandboxStats(ps *statsapi.PodStats, sandboxID string, s *runtimeapi.LinuxPodSandboxStats, now time.Time) bool {
	mt := metav1.NewTime(now)
	if cpu := p.criCPU(sandboxKey(sandboxID), s.GetCpu(), now); cpu != nil {
		ps.CPU = cpu
	}
	if n := criNetwork(s.GetNetwork(), mt); n != nil {
		ps.Network = n
	}
	if pc := s.GetProcess().GetProcessCount(); pc != nil {
		ps.ProcessStats = &statsapi.ProcessStats{ProcessCount: ptrTo(pc.GetValue())}
	}
	if m := criMemory(s.GetMemory(), mt); m != nil && m.WorkingSetBytes != nil {
		ps.Memory = m
		return true
	}
	return false
}

// criNetwork maps the runtime's pod network usage: the default interface's
// counters, and every interface's.
func criNetwork(n *runtimeapi.NetworkUsage, mt metav1.Time) *statsapi.NetworkStats {
	if n == nil || (n.GetDefaultInterface() == nil && len(n.GetInterfaces()) == 0) {
		return nil
	}
	iface := func(i *runtimeapi.NetworkInterfaceUsage) statsapi.InterfaceStats {
		out := statsapi.InterfaceStats{Name: i.GetName()}
		if v := i.GetRxBytes(); v != nil {
			out.RxBytes = ptrTo(v.GetValue())
		}
		if v := i.GetRxErrors(); v != nil {
			out.RxErrors = ptrTo(v.GetValue())
		}
		if v := i.GetTxBytes(); v != nil {
			out.TxBytes = ptrTo(v.GetValue())
		}
		if v := i.GetTxErrors(); v != nil {
			out.TxErrors = ptrTo(v.GetValue())
		}
		return out
	}
	out := &statsapi.NetworkStats{Time: mt}
	if d := n.GetDefaultInterface(); d != nil {
		out.InterfaceStats = iface(d)
	}
	for _, i := range n.GetInterfaces() {
		out.Interfaces = append(out.Interfaces, iface(i))
	}
	return out
}

// volumeStats measures the pod's volume directories on nodefs. Volumes on another
// filesystem (memory-backed emptyDir, tmpfs secrets) take no node disk and are skipped.
func (p *Provider) volumeStats(uid types.UID, rootDev uint64, mt metav1.Time) []statsapi.VolumeStats {
	base := filepath.Join(p.cfg.RootDir, "pods", string(uid), "volumes")
	plugins, err := p.fs.readDir(base)
	if err != nil {
		return nil
	}
	var out []statsapi.VolumeStats
	for _, plugin := range plugins {
		vols, err := p.fs.readDir(filepath.Join(base, plugin))
		if err != nil {
			continue
		}
		for _, name := range vols {
			dir := filepath.Join(base, plugin, name)
			used, inodes, err := p.fs.du(dir, rootDev)
			if err != nil {
				continue
			}
			out = append(out, statsapi.VolumeStats{Name: name, FsStats: statsapi.FsStats{Time: mt, UsedBytes: &used, InodesUsed: &inodes}})
		}
	}
	return out
}

// etcHostsStats measures the pod's managed /etc/hosts, which upstream counts as
// the pod's ephemeral storage; nil when the pod has none.
func (p *Provider) etcHostsStats(uid types.UID, mt metav1.Time) *statsapi.FsStats {
	used, inodes, err := p.fs.du(filepath.Join(p.cfg.RootDir, "pods", string(uid), "etc-hosts"), 0)
	if err != nil {
		return nil
	}
	return &statsapi.FsStats{Time: mt, UsedBytes: &used, InodesUsed: &inodes}
}

// ephemeral is the pod's local ephemeral storage usage as upstream counts it (and
// evicts on): the containers' writable layers and logs, the volumes that are local
// ephemeral storage and the managed /etc/hosts. Only volumes the pod's spec names as
// local ephemeral count; without the spec (a pod nodelet does not know) none do.
func ephemeral(ps statsapi.PodStats, pod *v1.Pod, etcHosts *statsapi.FsStats, mt metav1.Time) *statsapi.FsStats {
	var used, inodes uint64
	add := func(fs *statsapi.FsStats) {
		if fs != nil {
			used += deref(fs.UsedBytes)
			inodes += deref(fs.InodesUsed)
		}
	}
	for _, c := range ps.Containers {
		add(c.Rootfs)
		add(c.Logs)
	}
	if pod != nil {
		local := map[string]bool{}
		for _, v := range pod.Spec.Volumes {
			local[v.Name] = isLocalEphemeralVolume(v)
		}
		for _, v := range ps.VolumeStats {
			if local[v.Name] {
				add(&v.FsStats)
			}
		}
	}
	add(etcHosts)
	return &statsapi.FsStats{Time: mt, UsedBytes: &used, InodesUsed: &inodes}
}

// sizedAs returns usage with the size and free space (bytes and inodes) of
// the filesystem it is on; of nil (not measured) leaves them unset.
func sizedAs(usage statsapi.FsStats, of *statsapi.FsStats) *statsapi.FsStats {
	if of != nil {
		// Copies: each summary entry owns its numbers.
		usage.CapacityBytes, usage.AvailableBytes = clonePtr(of.CapacityBytes), clonePtr(of.AvailableBytes)
		usage.Inodes, usage.InodesFree = clonePtr(of.Inodes), clonePtr(of.InodesFree)
	}
	return &usage
}

func clonePtr(v *uint64) *uint64 {
	if v == nil {
		return nil
	}
	return ptrTo(*v)
}

// isLocalEphemeralVolume reports whether a volume takes node disk for the pod's
// lifetime, as upstream decides it: disk-backed emptyDirs, configMaps and gitRepos.
// Memory- and hugepage-backed emptyDirs are memory; secrets, projected and downward
// API volumes are tmpfs; persistent volumes are not the pod's ephemeral storage.
func isLocalEphemeralVolume(v v1.Volume) bool {
	return v.GitRepo != nil || v.ConfigMap != nil ||
		(v.EmptyDir != nil && v.EmptyDir.Medium == v1.StorageMediumDefault)
}

// criSwap maps the runtime's swap usage (containerd 2.x fills it; 1.6 does not).
func criSwap(s *runtimeapi.SwapUsage, mt metav1.Time) *statsapi.SwapStats {
	if s == nil || (s.GetSwapUsageBytes() == nil && s.GetSwapAvailableBytes() == nil) {
		return nil
	}
	out := &statsapi.SwapStats{Time: mt}
	if v := s.GetSwapUsageBytes(); v != nil {
		out.SwapUsageBytes = ptrTo(v.GetValue())
	}
	if v := s.GetSwapAvailableBytes(); v != nil {
		out.SwapAvailableBytes = ptrTo(v.GetValue())
	}
	return out
}

func criMemory(m *runtimeapi.MemoryUsage, mt metav1.Time) *statsapi.MemoryStats {
	if m == nil {
		return nil
	}
	out := &statsapi.MemoryStats{Time: mt}
	if m.GetWorkingSetBytes() != nil {
		out.WorkingSetBytes = ptrTo(m.GetWorkingSetBytes().GetValue())
	}
	if m.GetUsageBytes() != nil {
		out.UsageBytes = ptrTo(m.GetUsageBytes().GetValue())
	}
	if m.GetRssBytes() != nil {
		out.RSSBytes = ptrTo(m.GetRssBytes().GetValue())
	}
	if m.GetAvailableBytes() != nil {
		out.AvailableBytes = ptrTo(m.GetAvailableBytes().GetValue())
	}
	return out
}

// criCPU reports the cumulative usage and, from the previous sample, the rate.
func (p *Provider) criCPU(id string, c *runtimeapi.CpuUsage, now time.Time) *statsapi.CPUStats {
	if c == nil || c.GetUsageCoreNanoSeconds() == nil {
		return nil
	}
	total := c.GetUsageCoreNanoSeconds().GetValue()
	out := &statsapi.CPUStats{Time: metav1.NewTime(now), UsageCoreNanoSeconds: &total}
	if c.GetUsageNanoCores() != nil {
		out.UsageNanoCores = ptrTo(c.GetUsageNanoCores().GetValue())
	} else {
		out.UsageNanoCores = p.rate(id, total, now)
	}
	return out
}

func (p *Provider) rate(key string, total uint64, now time.Time) *uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	prev, ok := p.lastCPU[key]
	p.lastCPU[key] = cpuSample{at: now, total: total}
	dt := now.Sub(prev.at)
	if !ok || dt <= 0 || total < prev.total {
		return nil
	}
	r := uint64(float64(total-prev.total) / dt.Seconds())
	return &r
}

// forgetCPU drops samples of containers that are gone, so the map does not grow.
func (p *Provider) forgetCPU(seen map[string]bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id := range p.lastCPU {
		if id != "" && !seen[id] {
			delete(p.lastCPU, id)
		}
	}
}

func sumMemory(cs []statsapi.ContainerStats, mt metav1.Time) *statsapi.MemoryStats {
	var ws, usage uint64
	any := false
	for _, c := range cs {
		if c.Memory != nil && c.Memory.WorkingSetBytes != nil {
			ws += *c.Memory.WorkingSetBytes
			usage += deref(c.Memory.UsageBytes)
			any = true
		}
	}
	if !any {
		return nil
	}
	return &statsapi.MemoryStats{Time: mt, WorkingSetBytes: &ws, UsageBytes: &usage}
}

func sumCPU(cs []statsapi.ContainerStats, mt metav1.Time) *statsapi.CPUStats {
	var total, rate uint64
	any, anyRate := false, false
	for _, c := range cs {
		if c.CPU != nil && c.CPU.UsageCoreNanoSeconds != nil {
			total += *c.CPU.UsageCoreNanoSeconds
			any = true
			if c.CPU.UsageNanoCores != nil {
				rate += *c.CPU.UsageNanoCores
				anyRate = true
			}
		}
	}
	if !any {
		return nil
	}
	out := &statsapi.CPUStats{Time: mt, UsageCoreNanoSeconds: &total}
	if anyRate {
		out.UsageNanoCores = &rate
	}
	return out
}

func ptrTo[T any](v T) *T { return &v }

func deref(p *uint64) uint64 {
	if p == nil {
		return 0
	}
	return *p
}
