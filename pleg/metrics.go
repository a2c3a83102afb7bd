package pleg

import "github.com/prometheus/client_golang/prometheus"

// plegMetrics are the upstream kubelet_pleg_* series.
type plegMetrics struct {
	duration prometheus.Histogram
	interval prometheus.Histogram
	discard  prometheus.Counter
	lastSeen prometheus.Gauge
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
	}
	for _, c := range []prometheus.Collector{m.duration, m.interval, m.discard, m.lastSeen} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
