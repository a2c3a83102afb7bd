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
	// In-place resize (upstream's names, labels and buckets).
	requestedResizes *prometheus.CounterVec
	resizeDuration   *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer, inProgress func() int) *metrics {
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
		requestedResizes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubelet", Name: "container_requested_resizes_total",
			Help: "Number of requested resizes, counted at the container level. Different resources on the same container are counted separately. The 'requirement' label refers to 'memory' or 'limits'; the 'operation' label can be one of 'add', 'remove', 'increase' or 'decrease'.",
		}, []string{"resource", "requirement", "operation"}),
		resizeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "kubelet", Name: "pod_resize_duration_milliseconds",
			Help:    "Duration in milliseconds to actuate a pod resize",
			Buckets: []float64{10, 50, 100, 500, 1000, 2000, 5000, 10000, 20000, 30000, 60000, 120000, 300000, 600000},
		}, []string{"success"}),
	}
	if reg != nil {
		inProgressResizes := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Subsystem: "kubelet", Name: "pod_in_progress_resizes", Help: "Number of in-progress resizes for pods.",
		}, func() float64 { return float64(inProgress()) })
		reg.MustRegister(m.podStart, m.workerDuration, m.admissionRejections, m.preemptions, m.requestedResizes, m.resizeDuration, inProgressResizes)
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
