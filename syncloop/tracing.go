package syncloop

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// InstrumentationScope is the tracer name of the pod sync spans: upstream's
// kubelet package, so that trace queries written for the kubelet match.
const InstrumentationScope = "k8s.io/kubernetes/pkg/kubelet"

// spanName is upstream's span for the kubelet function that an operation
// stands for: SyncPod, SyncTerminatingPod (stop the containers) and
// SyncTerminatedPod (tear the volumes down). The removal of the pod's
// containers and sandboxes is upstream's housekeeping and garbage
// collection, which have no span: "" (its CRI calls are root spans).
func spanName(op opKind) string {
	switch op {
	case opSync:
		return "syncPod"
	case opKill:
		return "syncTerminatingPod"
	case opTearDown:
		return "syncTerminatedPod"
	}
	return ""
}

// podSpanAttributes are upstream's attributes of the pod spans. Upstream's
// syncPod also has k8s.pod.update_type (create/update/sync/kill), which the
// loop's merged updates do not keep.
func podSpanAttributes(pod *v1.Pod) []attribute.KeyValue {
	return []attribute.KeyValue{
		semconv.K8SPodUID(string(pod.UID)),
		attribute.String("k8s.pod", klog.KObj(pod).String()),
		semconv.K8SPodName(pod.Name),
		semconv.K8SNamespaceName(pod.Namespace),
	}
}

// endSpan records err on span (as upstream's syncPod does) and ends it.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
