package podutil

import (
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	resourcehelper "k8s.io/component-helpers/resource"
)

// PodRequests returns the resources the scheduler would count for pod: the larger
// of the sum of app containers (plus sidecars) and the largest init container,
// pod-level requests (PodLevelResources) in place of that for the resources they
// name, plus overhead.
func PodRequests(pod *v1.Pod) v1.ResourceList {
	sum := v1.ResourceList{}
	add := func(list v1.ResourceList, into v1.ResourceList) {
		for k, q := range list {
			cur := into[k]
			cur.Add(q)
			into[k] = cur
		}
	}
	for _, c := range pod.Spec.Containers {
		add(RequestsOf(&c.Resources), sum)
	}
	sidecars := v1.ResourceList{}
	for _, c := range pod.Spec.InitContainers {
		if IsRestartableInitContainer(&c) {
			add(RequestsOf(&c.Resources), sidecars)
			add(RequestsOf(&c.Resources), sum)
			continue
		}
		// A regular init container runs alongside the sidecars started before it.
		need := v1.ResourceList{}
		add(sidecars, need)
		add(RequestsOf(&c.Resources), need)
		for k, q := range need {
			if cur := sum[k]; q.Cmp(cur) > 0 {
				sum[k] = q
			}
		}
	}
	if pod.Spec.Resources != nil {
		for k, q := range RequestsOf(pod.Spec.Resources) {
			if resourcehelper.IsSupportedPodLevelResource(k) {
				sum[k] = q
			}
		}
	}
	add(pod.Spec.Overhead, sum)
	return sum
}

// RequestsOf returns the requests of a container (or of a pod's pod-level
// resources), defaulted from limits as the API does.
func RequestsOf(r *v1.ResourceRequirements) v1.ResourceList {
	out := v1.ResourceList{}
	for k, q := range r.Limits {
		out[k] = q.DeepCopy()
	}
	for k, q := range r.Requests {
		out[k] = q.DeepCopy()
	}
	return out
}

// isNativeResourceName: unprefixed, or in the kubernetes.io/ namespace.
func isNativeResourceName(name v1.ResourceName) bool {
	return !strings.Contains(string(name), "/") || strings.Contains(string(name), v1.ResourceDefaultNamespacePrefix)
}

// IsExtendedResourceName: a resource outside kubernetes.io/ that a quota could name
// (upstream's v1helper.IsExtendedResourceName): what device plugins may advertise.
func IsExtendedResourceName(name v1.ResourceName) bool {
	if isNativeResourceName(name) || strings.HasPrefix(string(name), v1.DefaultResourceRequestsPrefix) {
		return false
	}
	return len(validation.IsQualifiedName(v1.DefaultResourceRequestsPrefix+string(name))) == 0
}
