package cgroups

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/internal/podutil"
)

const (
	// MinShares and MaxShares bound cpu.shares (v1 kernel limits).
	MinShares = 2
	MaxShares = 262144

	sharesPerCPU  = 1024
	milliCPUToCPU = 1000
	// MinQuotaPeriod is the smallest CFS quota the kernel takes, in microseconds.
	MinQuotaPeriod = 1000
	// DefaultCFSPeriod is the kernel's default cpu.cfs_period_us (100ms).
	DefaultCFSPeriod = 100000
)

// QOSClass is the pod's QoS class as the API defines it: the status value when the
// API server has set one, otherwise computed from the cpu and memory requests and
// limits of the init and app containers.
func QOSClass(pod *v1.Pod) v1.PodQOSClass {
	if pod.Status.QOSClass != "" {
		return pod.Status.QOSClass
	}
	return ComputeQOSClass(pod)
}

// ComputeQOSClass computes the class from the spec alone: BestEffort without any
// cpu/memory request or limit; Guaranteed when every container limits both cpu and
// memory and the summed requests equal the summed limits for each; else Burstable.
func ComputeQOSClass(pod *v1.Pod) v1.PodQOSClass {
	requests := v1.ResourceList{}
	limits := v1.ResourceList{}
	guaranteed := true
	add := func(l v1.ResourceList, name v1.ResourceName, q resource.Quantity) {
		sum := l[name]
		sum.Add(q)
		l[name] = sum
	}
	if podLevelResourcesSet(pod) {
		// Pod-level resources (PodLevelResources) decide the class on their own.
		for name, q := range pod.Spec.Resources.Requests {
			if qosResource(name) && q.Sign() > 0 {
				requests[name] = q.DeepCopy()
			}
		}
		for name, q := range pod.Spec.Resources.Limits {
			if qosResource(name) && q.Sign() > 0 {
				limits[name] = q.DeepCopy()
			}
		}
		if limits.Cpu().IsZero() || limits.Memory().IsZero() {
			guaranteed = false
		}
	}
	all := append(append([]v1.Container{}, pod.Spec.Containers...), pod.Spec.InitContainers...)
	if podLevelResourcesSet(pod) {
		all = nil
	}
	for _, c := range all {
		for name, q := range c.Resources.Requests {
			if qosResource(name) && q.Sign() > 0 {
				add(requests, name, q)
			}
		}
		found := map[v1.ResourceName]bool{}
		for name, q := range c.Resources.Limits {
			if qosResource(name) && q.Sign() > 0 {
				found[name] = true
				add(limits, name, q)
			}
		}
		if !found[v1.ResourceCPU] || !found[v1.ResourceMemory] {
			guaranteed = false
		}
	}
	if len(requests) == 0 && len(limits) == 0 {
		return v1.PodQOSBestEffort
	}
	if guaranteed {
		for name, req := range requests {
			if lim, ok := limits[name]; !ok || lim.Cmp(req) != 0 {
				guaranteed = false
				break
			}
		}
	}
	if guaranteed && len(requests) == len(limits) {
		return v1.PodQOSGuaranteed
	}
	return v1.PodQOSBurstable
}

// podLevelResourcesSet: the pod sets cpu or memory in spec.resources.
func podLevelResourcesSet(pod *v1.Pod) bool {
	r := pod.Spec.Resources
	if r == nil {
		return false
	}
	for name := range r.Requests {
		if qosResource(name) {
			return true
		}
	}
	for name := range r.Limits {
		if qosResource(name) {
			return true
		}
	}
	return false
}

func qosResource(n v1.ResourceName) bool { return n == v1.ResourceCPU || n == v1.ResourceMemory }

// MilliCPUToShares converts a cpu request to cpu.shares (1024 per cpu, at least 2).
func MilliCPUToShares(milliCPU int64) uint64 {
	if milliCPU == 0 {
		// No request: the minimum, so the cgroup still gets a little cpu.
		return MinShares
	}
	shares := milliCPU * sharesPerCPU / milliCPUToCPU
	if shares < MinShares {
		return MinShares
	}
	if shares > MaxShares {
		return MaxShares
	}
	return uint64(shares)
}

// MilliCPUToQuota converts a cpu limit to a CFS quota for period (µs); 0 without a
// limit, at least MinQuotaPeriod with one.
func MilliCPUToQuota(milliCPU, period int64) int64 {
	if milliCPU == 0 {
		return 0
	}
	quota := milliCPU * period / milliCPUToCPU
	if quota < MinQuotaPeriod {
		return MinQuotaPeriod
	}
	return quota
}

// podAggregate sums a resource of the pod the way the scheduler does: app
// containers and sidecars (restartable init containers) add up; an ordinary init
// container, together with the sidecars started before it, counts only if it needs
// more than that sum. Pod overhead is added (for limits only to a non-zero limit).
// declared reports whether every container set the resource (for an init
// container: it or the sidecars before it), since one unlimited container leaves
// the pod unlimited.
func podAggregate(pod *v1.Pod, list func(*v1.Container) v1.ResourceList, name v1.ResourceName, isLimit bool) (total resource.Quantity, declared bool) {
	declared = true
	var sum resource.Quantity
	for i := range pod.Spec.Containers {
		q := list(&pod.Spec.Containers[i])[name]
		if q.IsZero() {
			declared = false
		}
		sum.Add(q)
	}
	var sidecars, maxInit resource.Quantity
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		q := list(c)[name]
		var need resource.Quantity
		if podutil.IsRestartableInitContainer(c) {
			sidecars.Add(q)
			sum.Add(q)
			need = sidecars.DeepCopy()
		} else {
			need = sidecars.DeepCopy()
			need.Add(q)
		}
		if need.IsZero() {
			declared = false
		}
		if need.Cmp(maxInit) > 0 {
			maxInit = need
		}
	}
	if maxInit.Cmp(sum) > 0 {
		sum = maxInit
	}
	if podLevelResourcesSet(pod) {
		// A pod-level value replaces the containers' sum; a pod-level limit makes
		// the pod limited whatever its containers say.
		pl := pod.Spec.Resources.Requests
		if isLimit {
			pl = pod.Spec.Resources.Limits
		}
		if q, ok := pl[name]; ok {
			sum, declared = q.DeepCopy(), true
		} else if isLimit {
			declared = false
		}
	}
	if o, ok := pod.Spec.Overhead[name]; ok && (!isLimit || !sum.IsZero()) {
		sum.Add(o)
	}
	return sum, declared
}

func requestsOf(c *v1.Container) v1.ResourceList { return c.Resources.Requests }
func limitsOf(c *v1.Container) v1.ResourceList   { return c.Resources.Limits }
