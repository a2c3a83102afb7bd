package syncloop

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics carries the loop's upstream-named metrics (kubelet_running_pods comes from the PLEG).
type metrics struct {
	podStart            prometheus.Histogram
	workerDuration      *prometheus.HistogramVec
	admissionRejections *prometheus.CounterVec
	preemptions         *prometheus.CounterVec
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
		admissionRejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubelet", Name: "admission_rejections_total",
			Help: "Cumulative number pod admission rejections by the Kubelet.",
		}, []string{"reason"}),
		preemptions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubelet", Name: "preemptions",
			Help: "Cumulative number of pod preemptions by preemption resource",
		}, []string{"preemption_signal"}),
	}
	if reg != nil {
		reg.MustRegister(m.podStart, m.workerDuration, m.admissionRejections, m.preemptions)
	}
	return m
}

// countedByName: upstream counts these admission reasons by name (its
// allowlist, bounding the label's values); others count as
// OutOfExtendedResources or Other. Upstream lists the taint filter's message,
// not its name, so TaintToleration rejections count as Other there too.
func countedByName(reason string) bool {
	switch reason {
	case "AppArmor", reasonOSLabel, reasonOSField, "InvalidNodeInfo", "InitContainerRestartPolicyForbidden",
		reasonSupplemental, reasonUnexpected, "UnknownReason", "UnexpectedPredicateFailureType",
		"OutOfcpu", "OutOfmemory", "OutOfephemeral-storage", "OutOfpods", "PodLevelResourcesNotSupported",
		"PodFeatureUnsupported", unfitTaints, "Evicted", SysctlForbiddenReason, "TopologyAffinityError",
		"NodeShutdown", "VolumeAttachmentLimitExceeded":
		return true
	}
	return false
}

// admissionRejected counts a rejection under upstream's label for its reason.
func (m *metrics) admissionRejected(reason string) {
	switch {
	case countedByName(reason):
	case strings.HasPrefix(reason, "OutOf"):
		reason = "OutOfExtendedResources"
	default:
		reason = "Other"
	}
	m.admissionRejections.WithLabelValues(reason).Inc()
}
