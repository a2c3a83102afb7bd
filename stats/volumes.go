package stats

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/csi"
	"github.com/nodelet/nodelet/volumes"
)

// VolumeLister lists what a pod has mounted and how to measure it
// (volumes.Manager).
type VolumeLister interface {
	MountedVolumes(pod *v1.Pod) []volumes.MountedVolume
}

// CSINodeClients gives a registered CSI driver's node client (csi.Registry).
type CSINodeClients interface {
	NodeClient(ctx context.Context, driver string) (csipb.NodeClient, error)
}

// VolumeStatsConfig configures the volume stats cache.
type VolumeStatsConfig struct {
	// Period is volumeStatsAggPeriod: each refresh waits a jittered period
	// (period to twice it, as upstream's calculators); 0 disables volume stats.
	Period time.Duration
	// RootDir is the kubelet root dir: du volumes on another filesystem
	// (memory-backed emptyDir, tmpfs secrets) take no node disk and are skipped.
	RootDir string
	Pods    func() []*v1.Pod
	Volumes VolumeLister
	// CSI may be nil: CSI volumes are then not measured.
	CSI CSINodeClients
	// VolumeHealth is the CSIVolumeHealth feature gate: report CSI volume
	// conditions of drivers with VOLUME_CONDITION.
	VolumeHealth bool
	Clock        clock.Clock
}

// csiCallTimeout bounds one NodeGetCapabilities or NodeGetVolumeStats call, as
// upstream's csiTimeout.
const csiCallTimeout = 2 * time.Minute

// VolumeStatsCache holds each pod's volume stats, measured in the background
// every volumeStatsAggPeriod (upstream's fs resource analyzer), so the Summary,
// eviction and the kubelet_volume_stats_* metrics read without measuring.
type VolumeStatsCache struct {
	cfg VolumeStatsConfig
	fs  fsInfo

	mu    sync.RWMutex
	byPod map[types.UID]podVolumeStats
}

type podVolumeStats struct {
	stats []statsapi.VolumeStats
	// abnormal, by volume name, for CSI volumes whose condition was asked
	// (the Summary has no field for it; the health metric reports it).
	abnormal map[string]bool
}

// measured is one volume's stats and, when its condition was asked, whether
// it is abnormal.
type measured struct {
	stats    statsapi.VolumeStats
	abnormal *bool
}

// NewVolumeStatsCache returns an empty cache; Run fills it.
func NewVolumeStatsCache(cfg VolumeStatsConfig) *VolumeStatsCache {
	return &VolumeStatsCache{cfg: cfg, fs: osFs{}, byPod: map[types.UID]podVolumeStats{}}
}

// Enabled reports whether volume stats are measured at all.
func (c *VolumeStatsCache) Enabled() bool { return c.cfg.Period > 0 }

// PodVolumeStats returns the pod's volume stats of the last refresh; false
// when the pod has not been measured.
func (c *VolumeStatsCache) PodVolumeStats(uid types.UID) ([]statsapi.VolumeStats, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	p, ok := c.byPod[uid]
	return p.stats, ok
}

// Run refreshes the cache at once, then after each jittered period, until ctx
// ends. With a period of 0 it returns at once: volume stats are off.
func (c *VolumeStatsCache) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	if !c.Enabled() {
		logger.Info("Volume stats collection disabled: volumeStatsAggPeriod is 0")
		return
	}
	for {
		c.Refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-c.cfg.Clock.After(jittered(c.cfg.Period, rand.Float64())):
		}
	}
}

// jittered is period plus up to one more period (upstream's jitter factor 1.0);
// r is in [0, 1).
func jittered(period time.Duration, r float64) time.Duration {
	return period + time.Duration(r*float64(period))
}

// Refresh measures every active pod's volumes once and replaces the cache.
func (c *VolumeStatsCache) Refresh(ctx context.Context) {
	var rootDev uint64
	if _, dev, err := c.fs.statfs(c.cfg.RootDir); err == nil {
		rootDev = dev
	}
	caps := map[string]csiStatsCaps{} // per driver, asked once per refresh
	next := map[types.UID]podVolumeStats{}
	for _, pod := range c.cfg.Pods() {
		if ctx.Err() != nil {
			return
		}
		mt := metav1.NewTime(c.cfg.Clock.Now())
		var out podVolumeStats
		for _, mv := range c.cfg.Volumes.MountedVolumes(pod) {
			m, ok := c.measure(ctx, pod, mv, rootDev, caps)
			if !ok {
				continue
			}
			vs := m.stats
			vs.Name = mv.Name
			vs.Time = mt
			if mv.Claim != "" {
				vs.PVCRef = &statsapi.PVCReference{Name: mv.Claim, Namespace: pod.Namespace}
			}
			out.stats = append(out.stats, vs)
			if m.abnormal != nil {
				if out.abnormal == nil {
					out.abnormal = map[string]bool{}
				}
				out.abnormal[mv.Name] = *m.abnormal
			}
		}
		next[pod.UID] = out
	}
	c.mu.Lock()
	c.byPod = next
	c.mu.Unlock()
}

func (c *VolumeStatsCache) measure(ctx context.Context, pod *v1.Pod, mv volumes.MountedVolume, rootDev uint64, caps map[string]csiStatsCaps) (measured, bool) {
	logger := klog.FromContext(ctx)
	switch mv.Kind {
	case volumes.MetricsDu:
		used, inodes, err := c.fs.du(mv.Path, rootDev)
		if err != nil {
			return measured{}, false // not there yet, or not on nodefs
		}
		fs, _, err := c.fs.statfs(mv.Path)
		if err != nil {
			fs = statsapi.FsStats{}
		}
		// The filesystem's capacity and free space, the directory's usage, as
		// upstream's du metrics.
		fs.UsedBytes, fs.InodesUsed = &used, &inodes
		return measured{stats: statsapi.VolumeStats{FsStats: fs}}, true
	case volumes.MetricsStatfs:
		fs, _, err := c.fs.statfs(mv.Path)
		if err != nil {
			logger.V(2).Info("Cannot measure volume", "pod", klog.KObj(pod), "volume", mv.Name, "err", err)
			return measured{}, false
		}
		return measured{stats: statsapi.VolumeStats{FsStats: fs}}, true
	case volumes.MetricsCSI:
		if c.cfg.CSI == nil {
			return measured{}, false
		}
		m, err := c.measureCSI(ctx, mv, caps)
		if err != nil {
			logger.Error(err, "Failed to calculate volume metrics", "pod", klog.KObj(pod), "podUID", pod.UID, "volumeName", mv.Name)
			return measured{}, false
		}
		if m.abnormal != nil && *m.abnormal {
			logger.V(4).Info("Volume condition abnormal", "pod", klog.KObj(pod), "volumeName", mv.Name, "message", m.message)
		}
		return m.measured, m.stats.UsedBytes != nil
	}
	return measured{}, false
}

// csiStatsCaps is what a driver's node service says it can report.
type csiStatsCaps struct {
	stats, condition bool
	err              error
}

// csiMeasured is a CSI volume's stats and its condition's message.
type csiMeasured struct {
	measured
	message string
}

func (c *VolumeStatsCache) measureCSI(ctx context.Context, mv volumes.MountedVolume, caps map[string]csiStatsCaps) (csiMeasured, error) {
	client, err := c.cfg.CSI.NodeClient(ctx, mv.CSIDriver)
	if err != nil {
		return csiMeasured{}, fmt.Errorf("getting the node client of CSI driver %s: %w", mv.CSIDriver, err)
	}
	cp, ok := caps[mv.CSIDriver]
	if !ok {
		cctx, cancel := context.WithTimeout(ctx, csiCallTimeout)
		resp, err := client.NodeGetCapabilities(cctx, &csipb.NodeGetCapabilitiesRequest{})
		cancel()
		cp = csiStatsCapsOf(resp)
		if err != nil {
			cp.err = fmt.Errorf("asking CSI driver %s for its node capabilities: %w", mv.CSIDriver, err)
		}
		caps[mv.CSIDriver] = cp
	}
	if cp.err != nil {
		return csiMeasured{}, cp.err
	}
	if !cp.stats {
		// Upstream's NotSupported: nothing to report, nothing wrong.
		return csiMeasured{}, nil
	}
	cctx, cancel := context.WithTimeout(ctx, csiCallTimeout)
	defer cancel()
	resp, err := client.NodeGetVolumeStats(cctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: mv.CSIHandle, VolumePath: mv.Path})
	if err != nil {
		return csiMeasured{}, fmt.Errorf("NodeGetVolumeStats of volume %s of CSI driver %s: %w", mv.CSIHandle, mv.CSIDriver, err)
	}
	return csiVolumeStats(resp, c.cfg.VolumeHealth && cp.condition)
}

func csiStatsCapsOf(resp *csipb.NodeGetCapabilitiesResponse) csiStatsCaps {
	n := csi.NodeCapabilitiesOf(resp)
	return csiStatsCaps{stats: n.GetVolumeStats, condition: n.VolumeCondition}
}

// csiVolumeStats turns NodeGetVolumeStats' answer into volume stats as
// upstream: the BYTES usage gives capacity, available and used bytes, the
// INODES usage the inode figures (each 0 when its entry is missing); with
// health, the volume condition (abnormal, message). No usage at all is an error.
func csiVolumeStats(resp *csipb.NodeGetVolumeStatsResponse, health bool) (csiMeasured, error) {
	if resp.GetUsage() == nil {
		return csiMeasured{}, fmt.Errorf("failed to get usage from response. usage is nil")
	}
	var capacity, available, used, inodes, inodesFree, inodesUsed uint64
	for _, u := range resp.GetUsage() {
		switch u.GetUnit() {
		case csipb.VolumeUsage_BYTES:
			capacity, available, used = nonNegative(u.GetTotal()), nonNegative(u.GetAvailable()), nonNegative(u.GetUsed())
		case csipb.VolumeUsage_INODES:
			inodes, inodesFree, inodesUsed = nonNegative(u.GetTotal()), nonNegative(u.GetAvailable()), nonNegative(u.GetUsed())
		default:
			klog.ErrorS(nil, "Unknown unit in CSI volume usage", "unit", u.GetUnit().String())
		}
	}
	vs := statsapi.VolumeStats{FsStats: statsapi.FsStats{
		CapacityBytes: &capacity, AvailableBytes: &available, UsedBytes: &used,
		Inodes: &inodes, InodesFree: &inodesFree, InodesUsed: &inodesUsed,
	}}
	out := csiMeasured{measured: measured{stats: vs}}
	if health {
		abnormal := resp.GetVolumeCondition().GetAbnormal()
		out.abnormal, out.message = &abnormal, resp.GetVolumeCondition().GetMessage()
	}
	return out, nil
}

// nonNegative keeps a buggy driver's negative figure from wrapping around.
func nonNegative(v int64) uint64 {
	if v < 0 {
		return 0
	}
	return uint64(v)
}

// The kubelet_volume_stats_* families, with upstream's names, help texts and
// labels: one series per PersistentVolumeClaim.
var (
	volumeLabels             = []string{"namespace", "persistentvolumeclaim"}
	volumeCapacityBytesDesc  = prometheus.NewDesc("kubelet_volume_stats_capacity_bytes", "Capacity in bytes of the volume", volumeLabels, nil)
	volumeAvailableBytesDesc = prometheus.NewDesc("kubelet_volume_stats_available_bytes", "Number of available bytes in the volume", volumeLabels, nil)
	volumeUsedBytesDesc      = prometheus.NewDesc("kubelet_volume_stats_used_bytes", "Number of used bytes in the volume", volumeLabels, nil)
	volumeInodesDesc         = prometheus.NewDesc("kubelet_volume_stats_inodes", "Maximum number of inodes in the volume", volumeLabels, nil)
	volumeInodesFreeDesc     = prometheus.NewDesc("kubelet_volume_stats_inodes_free", "Number of free inodes in the volume", volumeLabels, nil)
	volumeInodesUsedDesc     = prometheus.NewDesc("kubelet_volume_stats_inodes_used", "Number of used inodes in the volume", volumeLabels, nil)
	volumeHealthAbnormalDesc = prometheus.NewDesc("kubelet_volume_stats_health_status_abnormal",
		"Abnormal volume health status. The count is either 1 or 0. 1 indicates the volume is unhealthy, 0 indicates volume is healthy", volumeLabels, nil)
)

// Describe implements prometheus.Collector.
func (c *VolumeStatsCache) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{volumeCapacityBytesDesc, volumeAvailableBytesDesc, volumeUsedBytesDesc,
		volumeInodesDesc, volumeInodesFreeDesc, volumeInodesUsedDesc, volumeHealthAbnormalDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector from the cache: no measuring on a
// scrape. A claim mounted by several pods is reported once.
func (c *VolumeStatsCache) Collect(ch chan<- prometheus.Metric) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	uids := make([]types.UID, 0, len(c.byPod))
	for uid := range c.byPod {
		uids = append(uids, uid)
	}
	sort.Slice(uids, func(i, j int) bool { return uids[i] < uids[j] })
	seen := map[statsapi.PVCReference]bool{}
	for _, uid := range uids {
		p := c.byPod[uid]
		for _, vs := range p.stats {
			if vs.PVCRef == nil || seen[*vs.PVCRef] {
				continue
			}
			seen[*vs.PVCRef] = true
			gauge := func(d *prometheus.Desc, v *uint64) {
				if v != nil {
					ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(*v), vs.PVCRef.Namespace, vs.PVCRef.Name)
				}
			}
			gauge(volumeCapacityBytesDesc, vs.CapacityBytes)
			gauge(volumeAvailableBytesDesc, vs.AvailableBytes)
			gauge(volumeUsedBytesDesc, vs.UsedBytes)
			gauge(volumeInodesDesc, vs.Inodes)
			gauge(volumeInodesFreeDesc, vs.InodesFree)
			gauge(volumeInodesUsedDesc, vs.InodesUsed)
			if bad, ok := p.abnormal[vs.Name]; ok {
				abnormal := 0.0
				if bad {
					abnormal = 1
				}
				ch <- prometheus.MustNewConstMetric(volumeHealthAbnormalDesc, prometheus.GaugeValue, abnormal, vs.PVCRef.Namespace, vs.PVCRef.Name)
			}
		}
	}
}
