package pleg

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// plegMetrics are the upstream kubelet_pleg_* series.
type plegMetrics struct {
	duration prometheus.Histogram
	interval prometheus.Histogram
	discard  prometheus.Counter
	lastSeen prometheus.Gauge
	// runningPods counts pods with a ready sandbox; runningContainers counts
	// containers by CRI state (created, running, exited, unknown).
	runningPods       prometheus.Gauge
	runningContainers *prometheus.GaugeVec
}

func newPLEGMetrics(reg prometheus.Registerer) (*plegMetrics, error) {
	m := &plegMetrics{
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Subsystem: "kubelet", Name: "pleg_relist_duration_seconds",
			Help:    "Duration in seconds for relisting pods in PLEG.",
			Buckets: prometheus.DefBuckets,
		}),
		interval: prometheus.NewHistogram(prometheus.HistogramOpts{
			Subsystem: "kubelet", Name: "pleg_relist_interval_seconds",
			Help:    "Interval in seconds between relisting in PLEG.",
			Buckets: prometheus.DefBuckets,
		}),
		discard: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "kubelet", Name: "pleg_discard_events",
			Help: "The number of discard events in PLEG.",
		}),
		lastSeen: prometheus.NewGauge(prometheus.GaugeOpts{
			Subsystem: "kubelet", Name: "pleg_last_seen_seconds",
			Help: "Timestamp in seconds when PLEG was last seen active (set by the health check).",
		}),
		runningPods: prometheus.NewGauge(prometheus.GaugeOpts{
			Subsystem: "kubelet", Name: "running_pods",
			Help: "Number of pods that have a running pod sandbox.",
		}),
		runningContainers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: "kubelet", Name: "running_containers",
			Help: "Number of containers currently running.",
		}, []string{"container_state"}),
	}
	for _, c := range []prometheus.Collector{m.duration, m.interval, m.discard, m.lastSeen, m.runningPods, m.runningContainers} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// setRunning updates the pod and container gauges from one relist listing.
func (m *plegMetrics) setRunning(pods map[types.UID]*podSnapshot) {
	byState := map[string]int{"created": 0, "running": 0, "exited": 0, "unknown": 0}
	running := 0
	for _, p := range pods {
		for _, s := range p.sandboxes {
			if s.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY {
				running++
				break
			}
		}
		for _, c := range p.containers {
			switch c.GetState() {
			case runtimeapi.ContainerState_CONTAINER_CREATED:
				byState["created"]++
			case runtimeapi.ContainerState_CONTAINER_RUNNING:
				byState["running"]++
			case runtimeapi.ContainerState_CONTAINER_EXITED:
				byState["exited"]++
			default:
				byState["unknown"]++
			}
		}
	}
	m.runningPods.Set(float64(running))
	for state, n := range byState {
		m.runningContainers.WithLabelValues(state).Set(float64(n))
	}
}

// eventedMetrics are upstream's kubelet_evented_pleg_* series.
type eventedMetrics struct {
	connErr     prometheus.Counter
	connSuccess prometheus.Counter
	latency     prometheus.Histogram
}

func newEventedMetrics(reg prometheus.Registerer) (*eventedMetrics, error) {
	m := &eventedMetrics{
		connErr: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "kubelet", Name: "evented_pleg_connection_error_count",
			Help: "The number of errors encountered during the establishment of streaming connection with the CRI runtime.",
		}),
		connSuccess: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "kubelet", Name: "evented_pleg_connection_success_count",
			Help: "The number of times a streaming client was obtained to receive CRI Events.",
		}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Subsystem: "kubelet", Name: "evented_pleg_connection_latency_seconds",
			Help:    "The latency of streaming connection with the CRI runtime, measured in seconds.",
			Buckets: prometheus.DefBuckets,
		}),
	}
	for _, c := range []prometheus.Collector{m.connErr, m.connSuccess, m.latency} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
