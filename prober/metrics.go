package prober

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are upstream's prober_* series (served on /metrics/probes upstream).
type metrics struct {
	total    *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// Option configures a Manager.
type Option func(*Manager)

// WithMetrics registers prober_probe_total and prober_probe_duration_seconds on reg.
func WithMetrics(reg prometheus.Registerer) Option {
	return func(m *Manager) {
		if reg == nil {
			return
		}
		pm := &metrics{
			total: prometheus.NewCounterVec(prometheus.CounterOpts{
				Subsystem: "prober", Name: "probe_total",
				Help: "Cumulative number of a liveness, readiness or startup probe for a container by result.",
			}, []string{"probe_type", "result", "container", "pod", "namespace", "pod_uid"}),
			duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
				Subsystem: "prober", Name: "probe_duration_seconds",
				Help:    "Duration in seconds for a probe response.",
				Buckets: prometheus.DefBuckets,
			}, []string{"probe_type", "container", "pod", "namespace"}),
		}
		// A second manager on the same registry (tests) keeps working without metrics.
		if reg.Register(pm.total) != nil || reg.Register(pm.duration) != nil {
			return
		}
		m.metrics = pm
	}
}

// resultLabel is upstream's wording of a result in prober_probe_total.
func resultLabel(r Result) string {
	switch r {
	case Success:
		return "successful"
	case Failure:
		return "failed"
	default:
		return "unknown"
	}
}

func (w *worker) observe(res Result, took time.Duration) {
	pm := w.m.metrics
	if pm == nil {
		return
	}
	t := w.key.probe.String()
	pm.total.WithLabelValues(t, resultLabel(res), w.container.Name, w.pod.Name, w.pod.Namespace, string(w.pod.UID)).Inc()
	if res != Unknown {
		pm.duration.WithLabelValues(t, w.container.Name, w.pod.Name, w.pod.Namespace).Observe(took.Seconds())
	}
}

// forgetMetrics drops the worker's series once it stops, so deleted pods do not linger.
func (w *worker) forgetMetrics() {
	pm := w.m.metrics
	if pm == nil {
		return
	}
	t := w.key.probe.String()
	for _, r := range []Result{Success, Failure, Unknown} {
		pm.total.DeleteLabelValues(t, resultLabel(r), w.container.Name, w.pod.Name, w.pod.Namespace, string(w.pod.UID))
	}
	pm.duration.DeleteLabelValues(t, w.container.Name, w.pod.Name, w.pod.Namespace)
}
