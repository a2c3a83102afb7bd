// Package resourcemetrics is the topology, CPU and memory managers'
// kubelet_* families, with upstream's names, types, labels and buckets
// (pkg/kubelet/metrics at v1.37). A nil *Metrics records nothing, so the
// managers run unmetered in tests that do not look.
package resourcemetrics

import (
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Label values of container_aligned_compute_resources_count and
// container_aligned_compute_resources_failure_count, as upstream.
const (
	ScopeContainer = "container"
	ScopePod       = "pod"

	BoundaryPhysicalCPU = "physical_cpu"
	BoundaryNUMANode    = "numa_node"
	BoundaryUncoreCache = "uncore_cache"
)

// Metrics are the families; New registers them.
type Metrics struct {
	admissionRequests prometheus.Counter
	admissionErrors   prometheus.Counter
	admissionDuration prometheus.Histogram

	cpuPinningRequests prometheus.Counter
	cpuPinningErrors   prometheus.Counter
	sharedPool         prometheus.Gauge
	exclusiveCPUs      prometheus.Gauge
	perNUMA            *prometheus.GaugeVec

	aligned       *prometheus.CounterVec
	alignFailures *prometheus.CounterVec

	memoryPinningRequests prometheus.Counter
	memoryPinningErrors   prometheus.Counter
}

// New registers the families on reg. Upstream registers them whatever the
// policies; so does nodelet (a gauge of policy none stays 0).
func New(reg prometheus.Registerer) (*Metrics, error) {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Subsystem: "kubelet", Name: name, Help: help})
	}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Subsystem: "kubelet", Name: name, Help: help})
	}
	m := &Metrics{
		admissionRequests: counter("topology_manager_admission_requests_total", "The number of admission requests where resources have to be aligned."),
		admissionErrors:   counter("topology_manager_admission_errors_total", "The number of admission request failures where resources could not be aligned."),
		admissionDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Subsystem: "kubelet", Name: "topology_manager_admission_duration_ms",
			Help:    "Duration in milliseconds to serve a pod admission request.",
			Buckets: prometheus.ExponentialBuckets(.05, 2, 15),
		}),
		cpuPinningRequests: counter("cpu_manager_pinning_requests_total", "The number of cpu core allocations which required pinning."),
		cpuPinningErrors:   counter("cpu_manager_pinning_errors_total", "The number of cpu core allocations which required pinning failed."),
		sharedPool:         gauge("cpu_manager_shared_pool_size_millicores", "The size of the shared CPU pool for non-guaranteed QoS pods, in millicores."),
		exclusiveCPUs:      gauge("cpu_manager_exclusive_cpu_allocation_count", "The total number of CPUs exclusively allocated to containers running on this node"),
		perNUMA: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: "kubelet", Name: "cpu_manager_allocation_per_numa", Help: "Number of CPUs allocated per NUMA node",
		}, []string{"numa_node"}),
		aligned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubelet", Name: "container_aligned_compute_resources_count",
			Help: "Cumulative number of aligned compute resources allocated to containers by alignment type.",
		}, []string{"scope", "boundary"}),
		alignFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubelet", Name: "container_aligned_compute_resources_failure_count",
			Help: "Cumulative number of failures to allocate aligned compute resources to containers by alignment type.",
		}, []string{"scope", "boundary"}),
		memoryPinningRequests: counter("memory_manager_pinning_requests_total", "The number of memory pages allocations which required pinning."),
		memoryPinningErrors:   counter("memory_manager_pinning_errors_total", "The number of memory pages allocations which required pinning that failed."),
	}
	for _, c := range []prometheus.Collector{
		m.admissionRequests, m.admissionErrors, m.admissionDuration,
		m.cpuPinningRequests, m.cpuPinningErrors, m.sharedPool, m.exclusiveCPUs, m.perNUMA,
		m.aligned, m.alignFailures, m.memoryPinningRequests, m.memoryPinningErrors,
	} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering the resource managers' metrics: %w", err)
		}
	}
	return m, nil
}

// Admission counts one topology manager admission and how long it took.
func (m *Metrics) Admission(d time.Duration) {
	if m == nil {
		return
	}
	m.admissionRequests.Inc()
	m.admissionDuration.Observe(float64(d) / float64(time.Millisecond))
}

// AdmissionError counts an admission the topology manager refused or whose
// allocation failed.
func (m *Metrics) AdmissionError() {
	if m != nil {
		m.admissionErrors.Inc()
	}
}

// InitAlignment makes the aligned and failure series of scope/boundary
// exist at 0, as upstream does at start.
func (m *Metrics) InitAlignment(scope, boundary string, failures bool) {
	if m == nil {
		return
	}
	m.aligned.WithLabelValues(scope, boundary).Add(0)
	if failures {
		m.alignFailures.WithLabelValues(scope, boundary).Add(0)
	}
}

// Aligned counts an allocation that was aligned on boundary; AlignFailed
// one that could not be.
func (m *Metrics) Aligned(scope, boundary string) {
	if m != nil {
		m.aligned.WithLabelValues(scope, boundary).Inc()
	}
}

func (m *Metrics) AlignFailed(scope, boundary string) {
	if m != nil {
		m.alignFailures.WithLabelValues(scope, boundary).Inc()
	}
}

// CPUPinning counts a container that needed exclusive CPUs, and whether
// the allocation failed.
func (m *Metrics) CPUPinning(failed bool) {
	if m == nil {
		return
	}
	m.cpuPinningRequests.Inc()
	if failed {
		m.cpuPinningErrors.Inc()
	}
}

// CPUPool sets the shared pool size, the exclusively allocated CPUs and
// their count per NUMA node (every node of the machine, 0 included).
func (m *Metrics) CPUPool(sharedCPUs, exclusiveCPUs int, perNUMA map[int]int) {
	if m == nil {
		return
	}
	m.sharedPool.Set(float64(sharedCPUs * 1000))
	m.exclusiveCPUs.Set(float64(exclusiveCPUs))
	for node, n := range perNUMA {
		m.perNUMA.WithLabelValues(strconv.Itoa(node)).Set(float64(n))
	}
}

// MemoryPinning counts a container that needed NUMA memory, and whether
// the allocation failed.
func (m *Metrics) MemoryPinning(failed bool) {
	if m == nil {
		return
	}
	m.memoryPinningRequests.Inc()
	if failed {
		m.memoryPinningErrors.Inc()
	}
}
