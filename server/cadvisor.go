package server

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/stats"
)

// CadvisorSource is the last background measurement with the pods' cgroup
// readings (stats.Cache): /metrics/cadvisor reads it instead of walking the
// cgroups on each scrape.
type CadvisorSource interface {
	Snapshot(ctx context.Context) (*stats.Snapshot, error)
}

// MachineInfo is what the machine_* series report, and their labels.
type MachineInfo struct {
	NumCores       int
	MemoryCapacity uint64
	MachineID      string
	SystemUUID     string
	BootID         string
}

// cadvisorLabels are the labels the kubelet gives every container series
// (its containerPrometheusLabelsFunc): pod-level series have container, image
// and name empty; id is the cgroup path and name the container ID.
var cadvisorLabels = []string{"container", "id", "image", "name", "namespace", "pod"}

func cadvisorDesc(name, help string, extra ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, append(append([]string(nil), cadvisorLabels...), extra...), nil)
}

// The /metrics/cadvisor families, with cAdvisor's names, help texts and types.
var (
	cadvisorCPUUsage                 = cadvisorDesc("container_cpu_usage_seconds_total", "Cumulative cpu time consumed in seconds.", "cpu")
	cadvisorCFSPeriods               = cadvisorDesc("container_cpu_cfs_periods_total", "Number of elapsed enforcement period intervals.")
	cadvisorCFSThrottled             = cadvisorDesc("container_cpu_cfs_throttled_periods_total", "Number of throttled period intervals.")
	cadvisorCFSThrottledSecs         = cadvisorDesc("container_cpu_cfs_throttled_seconds_total", "Total time duration the container has been throttled.")
	cadvisorMemCache                 = cadvisorDesc("container_memory_cache", "Number of bytes of page cache memory.")
	cadvisorMemRSS                   = cadvisorDesc("container_memory_rss", "Size of RSS in bytes.")
	cadvisorMemSwap                  = cadvisorDesc("container_memory_swap", "Container swap usage in bytes.")
	cadvisorMemUsage                 = cadvisorDesc("container_memory_usage_bytes", "Current memory usage in bytes, including all memory regardless of when it was accessed")
	cadvisorMemWorkingSet            = cadvisorDesc("container_memory_working_set_bytes", "Current working set in bytes.")
	cadvisorOOMEvents                = cadvisorDesc("container_oom_events_total", "Count of out of memory events observed for the container")
	cadvisorFsUsage                  = cadvisorDesc("container_fs_usage_bytes", "Number of bytes that are consumed by the container on this filesystem.", "device")
	cadvisorFsReads                  = cadvisorDesc("container_fs_reads_bytes_total", "Cumulative count of bytes read", "device")
	cadvisorFsWrites                 = cadvisorDesc("container_fs_writes_bytes_total", "Cumulative count of bytes written", "device")
	cadvisorNetRx                    = cadvisorDesc("container_network_receive_bytes_total", "Cumulative count of bytes received", "interface")
	cadvisorNetTx                    = cadvisorDesc("container_network_transmit_bytes_total", "Cumulative count of bytes transmitted", "interface")
	cadvisorProcesses                = cadvisorDesc("container_processes", "Number of processes running inside the container.")
	cadvisorLastSeen                 = cadvisorDesc("container_last_seen", "Last time a container was seen by the exporter")
	cadvisorStartTime                = cadvisorDesc("container_start_time_seconds", "Start time of the container since unix epoch in seconds.")
	cadvisorScrapeError              = prometheus.NewDesc("container_scrape_error", "1 if there was an error while getting container metrics, 0 otherwise", nil, nil)
	cadvisorMachineLabels            = []string{"boot_id", "machine_id", "system_uuid"}
	cadvisorMachineCores             = prometheus.NewDesc("machine_cpu_cores", "Number of logical CPU cores.", cadvisorMachineLabels, nil)
	cadvisorMachineMemory            = prometheus.NewDesc("machine_memory_bytes", "Amount of memory installed on the machine.", cadvisorMachineLabels, nil)
	cadvisorDescs                    = []*prometheus.Desc{cadvisorCPUUsage, cadvisorCFSPeriods, cadvisorCFSThrottled, cadvisorCFSThrottledSecs, cadvisorMemCache, cadvisorMemRSS, cadvisorMemSwap, cadvisorMemUsage, cadvisorMemWorkingSet, cadvisorOOMEvents, cadvisorFsUsage, cadvisorFsReads, cadvisorFsWrites, cadvisorNetRx, cadvisorNetTx, cadvisorProcesses, cadvisorLastSeen, cadvisorStartTime, cadvisorScrapeError, cadvisorMachineCores, cadvisorMachineMemory}
	nanosPerSecond           float64 = float64(time.Second)
)

// cadvisorCollector turns one stats snapshot into the cAdvisor series. It
// lives for one scrape, so the snapshot is taken with that request's context.
type cadvisorCollector struct {
	ctx     context.Context
	source  CadvisorSource
	machine *MachineInfo
	now     time.Time
}

func (c *cadvisorCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range cadvisorDescs {
		ch <- d
	}
}

func (c *cadvisorCollector) Collect(ch chan<- prometheus.Metric) {
	if m := c.machine; m != nil {
		// As cAdvisor, the machine series carry the time they were read
		// (here: the scrape's; the facts do not change while nodelet runs).
		lv := []string{m.BootID, m.MachineID, m.SystemUUID}
		ch <- prometheus.NewMetricWithTimestamp(c.now, prometheus.MustNewConstMetric(cadvisorMachineCores, prometheus.GaugeValue, float64(m.NumCores), lv...))
		ch <- prometheus.NewMetricWithTimestamp(c.now, prometheus.MustNewConstMetric(cadvisorMachineMemory, prometheus.GaugeValue, float64(m.MemoryCapacity), lv...))
	}
	snap, err := c.source.Snapshot(c.ctx)
	if err != nil {
		klog.FromContext(c.ctx).Error(err, "Getting the stats snapshot for cAdvisor metrics")
		ch <- prometheus.MustNewConstMetric(cadvisorScrapeError, prometheus.GaugeValue, 1)
		return
	}
	ch <- prometheus.MustNewConstMetric(cadvisorScrapeError, prometheus.GaugeValue, 0)
	for i := range snap.Cgroups {
		pc := &snap.Cgroups[i]
		ns, pod := pc.Pod.Namespace, pc.Pod.Name
		// The pod's cgroup: container, image and name empty.
		labels := []string{"", pc.Cgroup.Path, "", "", ns, pod}
		c.series(ch, snap.Time, pc.StartTime, &pc.Cgroup, labels)
		// The pause container, as cAdvisor's containerd handler reports it:
		// container empty (it has no container name label), its image, name
		// its ID; only it has the network series (cAdvisor leaves them out of
		// the containers sharing its namespace and the raw pod cgroup has
		// none). Without its cgroup the network goes on the pod's series.
		netLabels := labels
		if sb := pc.Sandbox; sb != nil {
			netLabels = []string{"", sb.Cgroup.Path, sb.Image, sb.ID, ns, pod}
			c.series(ch, snap.Time, sb.StartTime, &sb.Cgroup, netLabels)
		}
		for _, ifc := range pc.Network {
			if ifc.RxBytes != nil {
				c.emit(ch, snap.Time, cadvisorNetRx, prometheus.CounterValue, float64(*ifc.RxBytes), netLabels, ifc.Name)
			}
			if ifc.TxBytes != nil {
				c.emit(ch, snap.Time, cadvisorNetTx, prometheus.CounterValue, float64(*ifc.TxBytes), netLabels, ifc.Name)
			}
		}
		for j := range pc.Containers {
			ct := &pc.Containers[j]
			labels := []string{ct.Name, ct.Cgroup.Path, ct.Image, ct.ID, ns, pod}
			c.series(ch, snap.Time, ct.StartTime, &ct.Cgroup, labels)
			if ct.RootfsBytes != nil && ct.RootfsDevice != "" {
				c.emit(ch, snap.Time, cadvisorFsUsage, prometheus.GaugeValue, float64(*ct.RootfsBytes), labels, ct.RootfsDevice)
			}
		}
	}
}

// series emits one cgroup's series. Samples carry the measurement's time in
// milliseconds, as cAdvisor's do; container_start_time_seconds has none.
func (c *cadvisorCollector) series(ch chan<- prometheus.Metric, at, start time.Time, s *stats.CgroupStats, labels []string) {
	// cAdvisor leaves out a zero CPU counter (cpu="total": per-CPU usage is off in the kubelet).
	if s.CPUUsageNanos != nil && *s.CPUUsageNanos > 0 {
		c.emit(ch, at, cadvisorCPUUsage, prometheus.CounterValue, float64(*s.CPUUsageNanos)/nanosPerSecond, labels, "total")
	}
	if f := s.CFS; f != nil {
		c.emit(ch, at, cadvisorCFSPeriods, prometheus.CounterValue, float64(f.Periods), labels)
		c.emit(ch, at, cadvisorCFSThrottled, prometheus.CounterValue, float64(f.ThrottledPeriods), labels)
		c.emit(ch, at, cadvisorCFSThrottledSecs, prometheus.CounterValue, float64(f.ThrottledNanos)/nanosPerSecond, labels)
	}
	if m := s.Memory; m != nil {
		c.emit(ch, at, cadvisorMemCache, prometheus.GaugeValue, float64(m.Cache), labels)
		c.emit(ch, at, cadvisorMemRSS, prometheus.GaugeValue, float64(m.RSS), labels)
		if m.Swap != nil {
			c.emit(ch, at, cadvisorMemSwap, prometheus.GaugeValue, float64(*m.Swap), labels)
		}
		c.emit(ch, at, cadvisorMemUsage, prometheus.GaugeValue, float64(m.Usage), labels)
		c.emit(ch, at, cadvisorMemWorkingSet, prometheus.GaugeValue, float64(m.WorkingSet), labels)
	}
	if s.OOMKills != nil {
		c.emit(ch, at, cadvisorOOMEvents, prometheus.CounterValue, float64(*s.OOMKills), labels)
	}
	for _, d := range s.IO {
		c.emit(ch, at, cadvisorFsReads, prometheus.CounterValue, float64(d.ReadBytes), labels, d.Device)
		c.emit(ch, at, cadvisorFsWrites, prometheus.CounterValue, float64(d.WriteBytes), labels, d.Device)
	}
	if s.Processes != nil {
		c.emit(ch, at, cadvisorProcesses, prometheus.GaugeValue, float64(*s.Processes), labels)
	}
	// container_last_seen is the scrape's time, as cAdvisor's.
	c.emit(ch, c.now, cadvisorLastSeen, prometheus.GaugeValue, float64(c.now.Unix()), labels)
	if !start.IsZero() {
		ch <- prometheus.MustNewConstMetric(cadvisorStartTime, prometheus.GaugeValue, float64(start.Unix()), labels...)
	}
}

func (c *cadvisorCollector) emit(ch chan<- prometheus.Metric, at time.Time, d *prometheus.Desc, t prometheus.ValueType, v float64, labels []string, extra ...string) {
	lv := labels
	if len(extra) > 0 {
		lv = append(append(make([]string, 0, len(labels)+len(extra)), labels...), extra...)
	}
	ch <- prometheus.NewMetricWithTimestamp(at, prometheus.MustNewConstMetric(d, t, v, lv...))
}

func (s *Server) cadvisorMetrics(w http.ResponseWriter, r *http.Request) {
	if s.deps.Cadvisor == nil {
		http.Error(w, noStatsMessage, http.StatusServiceUnavailable)
		return
	}
	// Not pedantic, unlike /metrics/resource: its per-series consistency checks
	// were 15% of a 110-pod scrape, and the families are fixed (checked
	// against the golden list in the tests).
	reg := prometheus.NewRegistry()
	if err := reg.Register(&cadvisorCollector{ctx: r.Context(), source: s.deps.Cadvisor, machine: s.deps.Machine, now: s.deps.Clock.Now()}); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(w, r)
}
