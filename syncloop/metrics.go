package syncloop

import "github.com/prometheus/client_golang/prometheus"

// metrics carries the loop's upstream-named metrics (kubelet_running_pods comes from the PLEG).
type metrics struct {
	podStart       prometheus.Histogram
	workerDuration *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		podStart: prometheus.NewHistogram(prometheus.HistogramOpts{
			Subsystem: "kubelet", Name: "pod_start_duration_seconds",
			Help:    "Duration in seconds from nodelet seeing a pod for the first time to the pod starting to run",
			Buckets: []float64{0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800, 2700, 3600},
		}),
		workerDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "kubelet", Name: "pod_worker_duration_seconds",
			Help: "Duration in seconds to sync a single pod, by worker state", Buckets: prometheus.DefBuckets,
		}, []string{"operation_type"}),
	}
	if reg != nil {
		reg.MustRegister(m.podStart, m.workerDuration)
	}
	return m
}
