package cri

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// clientMetrics are the upstream kubelet_runtime_operations_* series.
type clientMetrics struct {
	total    *prometheus.CounterVec
	errors   *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newClientMetrics(reg prometheus.Registerer) (*clientMetrics, error) {
	m := &clientMetrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubelet",
			Name:      "runtime_operations_total",
			Help:      "Cumulative number of runtime operations by operation type.",
		}, []string{"operation_type"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubelet",
			Name:      "runtime_operations_errors_total",
			Help:      "Cumulative number of runtime operation errors by operation type.",
		}, []string{"operation_type"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "kubelet",
			Name:      "runtime_operations_duration_seconds",
			Help:      "Duration in seconds of runtime operations. Broken down by operation type.",
			Buckets:   prometheus.ExponentialBuckets(.005, 2.5, 14),
		}, []string{"operation_type"}),
	}
	for _, c := range []prometheus.Collector{m.total, m.errors, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// observe is nil-safe so the client need not check whether metrics are on.
func (m *clientMetrics) observe(op string, d time.Duration, err error) {
	if m == nil {
		return
	}
	m.total.WithLabelValues(op).Inc()
	if d > 0 {
		m.duration.WithLabelValues(op).Observe(d.Seconds())
	}
	if err != nil {
		m.errors.WithLabelValues(op).Inc()
	}
}
