package server

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// The /metrics/resource families, with upstream's names and help texts.
var (
	nodeCPUDesc = prometheus.NewDesc("node_cpu_usage_seconds_total",
		"Cumulative cpu time consumed by the node in core-seconds", nil, nil)
	nodeMemoryDesc = prometheus.NewDesc("node_memory_working_set_bytes",
		"Current working set of the node in bytes", nil, nil)
	nodeSwapDesc = prometheus.NewDesc("node_swap_usage_bytes",
		"Current swap usage of the node in bytes. Reported only on non-windows systems", nil, nil)
	containerCPUDesc = prometheus.NewDesc("container_cpu_usage_seconds_total",
		"Cumulative cpu time consumed by the container in core-seconds", []string{"container", "pod", "namespace"}, nil)
	containerMemoryDesc = prometheus.NewDesc("container_memory_working_set_bytes",
		"Current working set of the container in bytes", []string{"container", "pod", "namespace"}, nil)
	containerSwapDesc = prometheus.NewDesc("container_swap_usage_bytes",
		"Current amount of the container swap usage in bytes. Reported only on non-windows systems", []string{"container", "pod", "namespace"}, nil)
	containerSwapLimitDesc = prometheus.NewDesc("container_swap_limit_bytes",
		"Current amount of the container swap limit in bytes. Reported only on non-windows systems", []string{"container", "pod", "namespace"}, nil)
	containerStartDesc = prometheus.NewDesc("container_start_time_seconds",
		"Start time of the container since unix epoch in seconds", []string{"container", "pod", "namespace"}, nil)
	podCPUDesc = prometheus.NewDesc("pod_cpu_usage_seconds_total",
		"Cumulative cpu time consumed by the pod in core-seconds", []string{"pod", "namespace"}, nil)
	podMemoryDesc = prometheus.NewDesc("pod_memory_working_set_bytes",
		"Current working set of the pod in bytes", []string{"pod", "namespace"}, nil)
	podSwapDesc = prometheus.NewDesc("pod_swap_usage_bytes",
		"Current amount of the pod swap usage in bytes. Reported only on non-windows systems", []string{"pod", "namespace"}, nil)
	// scrape_error is upstream's name deprecated in 1.29 for resource_scrape_error: an
	// alpha metric, so hidden from 1.30 on; served only with ShowHiddenMetrics.
	scrapeErrorDesc = prometheus.NewDesc("scrape_error",
		"(Deprecated since 1.29.0) 1 if there was an error while getting container metrics, 0 otherwise", nil, nil)
	resourceScrapeErrorDesc = prometheus.NewDesc("resource_scrape_error",
		"1 if there was an error while getting container metrics, 0 otherwise", nil, nil)
)

// resourceCollector turns one Summary into the resource metrics. It lives for one
// scrape, so the summary is taken with that request's context.
type resourceCollector struct {
	ctx      context.Context
	provider SummaryProvider
	// showHidden also serves scrape_error.
	showHidden bool
}

func (c *resourceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{nodeCPUDesc, nodeMemoryDesc, nodeSwapDesc, containerCPUDesc, containerMemoryDesc,
		containerSwapDesc, containerSwapLimitDesc, containerStartDesc, podCPUDesc, podMemoryDesc, podSwapDesc, resourceScrapeErrorDesc} {
		ch <- d
	}
	if c.showHidden {
		ch <- scrapeErrorDesc
	}
}

func (c *resourceCollector) Collect(ch chan<- prometheus.Metric) {
	var failed float64
	defer func() {
		if c.showHidden {
			ch <- prometheus.MustNewConstMetric(scrapeErrorDesc, prometheus.GaugeValue, failed)
		}
		ch <- prometheus.MustNewConstMetric(resourceScrapeErrorDesc, prometheus.GaugeValue, failed)
	}()
	sum, err := c.provider.Summary(c.ctx)
	if err != nil {
		failed = 1
		klog.FromContext(c.ctx).Error(err, "Getting the stats summary for resource metrics")
		return
	}
	emit := func(d *prometheus.Desc, t prometheus.ValueType, at time.Time, v float64, labels ...string) {
		m := prometheus.MustNewConstMetric(d, t, v, labels...)
		if !at.IsZero() {
			m = prometheus.NewMetricWithTimestamp(at, m)
		}
		ch <- m
	}
	n := sum.Node
	if n.CPU != nil && n.CPU.UsageCoreNanoSeconds != nil {
		emit(nodeCPUDesc, prometheus.CounterValue, n.CPU.Time.Time, float64(*n.CPU.UsageCoreNanoSeconds)/float64(time.Second))
	}
	if n.Memory != nil && n.Memory.WorkingSetBytes != nil {
		emit(nodeMemoryDesc, prometheus.GaugeValue, n.Memory.Time.Time, float64(*n.Memory.WorkingSetBytes))
	}
	if n.Swap != nil && n.Swap.SwapUsageBytes != nil {
		emit(nodeSwapDesc, prometheus.GaugeValue, n.Swap.Time.Time, float64(*n.Swap.SwapUsageBytes))
	}
	for _, p := range sum.Pods {
		ns, name := p.PodRef.Namespace, p.PodRef.Name
		for _, ct := range p.Containers {
			if !ct.StartTime.IsZero() {
				emit(containerStartDesc, prometheus.GaugeValue, ct.StartTime.Time, float64(ct.StartTime.UnixNano())/float64(time.Second), ct.Name, name, ns)
			}
			if ct.CPU != nil && ct.CPU.UsageCoreNanoSeconds != nil {
				emit(containerCPUDesc, prometheus.CounterValue, ct.CPU.Time.Time, float64(*ct.CPU.UsageCoreNanoSeconds)/float64(time.Second), ct.Name, name, ns)
			}
			if ct.Memory != nil && ct.Memory.WorkingSetBytes != nil {
				emit(containerMemoryDesc, prometheus.GaugeValue, ct.Memory.Time.Time, float64(*ct.Memory.WorkingSetBytes), ct.Name, name, ns)
			}
			if ct.Swap != nil && ct.Swap.SwapUsageBytes != nil {
				emit(containerSwapDesc, prometheus.GaugeValue, ct.Swap.Time.Time, float64(*ct.Swap.SwapUsageBytes), ct.Name, name, ns)
			}
			if ct.Swap != nil && ct.Swap.SwapAvailableBytes != nil {
				// Upstream's limit is what is used plus what is still available.
				limit := float64(*ct.Swap.SwapAvailableBytes) + float64(ptr.Deref(ct.Swap.SwapUsageBytes, 0))
				emit(containerSwapLimitDesc, prometheus.GaugeValue, ct.Swap.Time.Time, limit, ct.Name, name, ns)
			}
		}
		if p.CPU != nil && p.CPU.UsageCoreNanoSeconds != nil {
			emit(podCPUDesc, prometheus.CounterValue, p.CPU.Time.Time, float64(*p.CPU.UsageCoreNanoSeconds)/float64(time.Second), name, ns)
		}
		if p.Memory != nil && p.Memory.WorkingSetBytes != nil {
			emit(podMemoryDesc, prometheus.GaugeValue, p.Memory.Time.Time, float64(*p.Memory.WorkingSetBytes), name, ns)
		}
		if p.Swap != nil && p.Swap.SwapUsageBytes != nil {
			emit(podSwapDesc, prometheus.GaugeValue, p.Swap.Time.Time, float64(*p.Swap.SwapUsageBytes), name, ns)
		}
	}
}

func (s *Server) resourceMetrics(w http.ResponseWriter, r *http.Request) {
	if s.deps.Summary == nil {
		http.Error(w, noStatsMessage, http.StatusServiceUnavailable)
		return
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(&resourceCollector{ctx: r.Context(), provider: s.deps.Summary, showHidden: s.cfg.ShowHiddenMetrics}); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(w, r)
}
