package syncloop

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/cgroups"
	"github.com/nodelet/nodelet/internal/podutil"
)

// Critical pod preemption on admission (upstream's CriticalPodAdmissionHandler):
// a critical pod (static, mirror or of a system-critical priority) that is short
// only of resources is admitted after the node stops lower-priority pods whose
// requests free what it lacks.

// Upstream's reason and messages for a pod preempted to admit a critical one.
const (
	ReasonPreempting          = "Preempting"
	messagePreempting         = "Preempted in order to admit critical pod"
	messagePreemptedCondition = "Pod was preempted by Kubelet to accommodate a critical pod."
)

// Shortfall is how much more of a resource the node must free for a pod to fit,
// in the scheduler's units (millicores for cpu, 1 a pod for pods).
type Shortfall struct {
	Resource v1.ResourceName
	Quantity int64
}

// Admission is the decision on a new pod.
type Admission struct {
	// Rejection, when set, refuses the pod.
	Rejection *Rejection
	// Preempt are the pods to stop before the pod is admitted; Shortfalls what
	// stopping them frees, in the order upstream found them (the first names
	// kubelet_preemptions' preemption_signal).
	Preempt    []*v1.Pod
	Shortfalls []Shortfall
	// RecheckNode: only the node affinity failed; as upstream, the Node is read
	// from the API server again and the pod judged anew, as its labels may have
	// just changed.
	RecheckNode bool
}

// DecideAdmission is Admit with upstream's critical pod preemption: a critical
// pod whose only unfits are resource shortages is admitted once the pods
// podsToPreempt chooses are stopped (or rejected with UnexpectedAdmissionError
// when no set of them frees enough); for one that also fails another filter,
// the first of those is the reason.
func DecideAdmission(pod *v1.Pod, admitted []*v1.Pod, node AdmitNode) Admission {
	rej, unfits := admissionChecks(pod, admitted, node)
	if rej != nil {
		return Admission{Rejection: rej}
	}
	if len(unfits) == 0 {
		return Admission{Rejection: admitAppArmor(pod, node.AppArmorEnabled)}
	}
	recheck := true
	for _, u := range unfits {
		recheck = recheck && u.predicate == predicateNodeAffinity
	}
	if podutil.IsCriticalPod(pod) {
		var need []Shortfall
		var other []unfit
		for _, u := range unfits {
			if u.short != nil {
				need = append(need, Shortfall{Resource: u.short.resource, Quantity: u.short.missing()})
			} else {
				other = append(other, u)
			}
		}
		if len(other) == 0 {
			// A pod AppArmor refuses anyway stops no one.
			if rej := admitAppArmor(pod, node.AppArmorEnabled); rej != nil {
				return Admission{Rejection: rej}
			}
			victims, err := podsToPreempt(pod, admitted, need)
			if err != nil {
				return Admission{Rejection: &Rejection{Reason: reasonUnexpected,
					Message: fmt.Sprintf("Unexpected error while attempting to recover from admission failure: preemption: error finding a set of pods to preempt: %v", err)}}
			}
			return Admission{Preempt: victims, Shortfalls: need}
		}
		// A shortage is no reason to refuse a critical pod; the others stand.
		unfits = other
	}
	return Admission{Rejection: unfits[0].rejection(), RecheckNode: recheck}
}

// podsToPreempt chooses which of pods to stop so that what they request covers
// need, as upstream: only pods preemptor may preempt (podutil.Preemptable); the
// Guaranteed ones needed even with every BestEffort and Burstable pod stopped,
// then the Burstable ones needed with every BestEffort pod and those, then the
// BestEffort ones needed beside the others chosen; within a class, repeatedly the
// pod nearest to what is still missing (nearestPods). An error when even all of
// them would not free enough.
func podsToPreempt(preemptor *v1.Pod, pods []*v1.Pod, need []Shortfall) ([]*v1.Pod, error) {
	var bestEffort, burstable, guaranteed []*v1.Pod
	for _, p := range pods {
		if !podutil.Preemptable(preemptor, p) {
			continue
		}
		switch cgroups.QOSClass(p) {
		case v1.PodQOSBestEffort:
			bestEffort = append(bestEffort, p)
		case v1.PodQOSBurstable:
			burstable = append(burstable, p)
		case v1.PodQOSGuaranteed:
			guaranteed = append(guaranteed, p)
		}
	}
	if rest := stillMissing(need, concat(bestEffort, burstable, guaranteed)); len(rest) > 0 {
		return nil, fmt.Errorf("no set of running pods found to reclaim resources: %s", shortfallsString(rest))
	}
	g, err := nearestPods(guaranteed, stillMissing(need, concat(bestEffort, burstable)))
	if err != nil {
		return nil, err
	}
	b, err := nearestPods(burstable, stillMissing(need, concat(bestEffort, g)))
	if err != nil {
		return nil, err
	}
	e, err := nearestPods(bestEffort, stillMissing(need, concat(b, g)))
	if err != nil {
		return nil, err
	}
	return concat(e, b, g), nil
}

// nearestPods picks from pods, one at a time, the pod whose requests leave the
// least of need missing (shortfallDistance), the smaller pod on a tie, until
// nothing is missing: as few pods as it can, preferring small ones.
func nearestPods(pods []*v1.Pod, need []Shortfall) ([]*v1.Pod, error) {
	pods = append([]*v1.Pod(nil), pods...)
	var out []*v1.Pod
	for len(need) > 0 {
		if len(pods) == 0 {
			return nil, fmt.Errorf("no set of running pods found to reclaim resources: %s", shortfallsString(need))
		}
		// A distance is at most 1 a shortfall.
		best, bestDist := 0, float64(len(need)+1)
		for i, p := range pods {
			d := shortfallDistance(need, p)
			if d < bestDist || (d == bestDist && smallerRequest(p, pods[best])) {
				best, bestDist = i, d
			}
		}
		chosen := pods[best]
		need = stillMissing(need, []*v1.Pod{chosen})
		out = append(out, chosen)
		// Removed as upstream does (the last pod takes its place), which decides later ties.
		pods[best] = pods[len(pods)-1]
		pods = pods[:len(pods)-1]
	}
	return out, nil
}

// shortfallDistance is how far stopping pod leaves each shortfall from being
// covered, as the sum of the squared missing fractions: every resource weighs
// the same whatever its unit.
func shortfallDistance(need []Shortfall, pod *v1.Pod) float64 {
	d := 0.0
	for _, s := range need {
		if left := float64(s.Quantity - requestValue(pod, s.Resource)); left > 0 {
			f := left / float64(s.Quantity)
			d += f * f
		}
	}
	return d
}

// stillMissing is what of need stays missing once pods are stopped.
func stillMissing(need []Shortfall, pods []*v1.Pod) []Shortfall {
	var out []Shortfall
	for _, s := range need {
		q := s.Quantity
		for _, p := range pods {
			if q -= requestValue(p, s.Resource); q <= 0 {
				break
			}
		}
		if q > 0 {
			out = append(out, Shortfall{Resource: s.Resource, Quantity: q})
		}
	}
	return out
}

// smallerRequest: a requests less memory than b, or as much and less cpu (or
// the same of both).
func smallerRequest(a, b *v1.Pod) bool {
	for _, name := range []v1.ResourceName{v1.ResourceMemory, v1.ResourceCPU} {
		ra, rb := requestValue(a, name), requestValue(b, name)
		if ra != rb {
			return ra < rb
		}
	}
	return true
}

// requestValue is what stopping pod frees of a resource, in the scheduler's
// units: 1 of pods; else its requests, with its overhead only when it requests
// some of the resource at all (as upstream counts preemption).
func requestValue(pod *v1.Pod, name v1.ResourceName) int64 {
	if name == v1.ResourcePods {
		return 1
	}
	q := podutil.PodRequests(pod)[name]
	if o, ok := pod.Spec.Overhead[name]; ok && q.Cmp(o) == 0 {
		q = resource.Quantity{}
	}
	return schedulerValue(name, q)
}

func shortfallsString(need []Shortfall) string {
	var b strings.Builder
	b.WriteString("[")
	for _, s := range need {
		fmt.Fprintf(&b, "(res: %v, q: %d), ", s.Resource, s.Quantity)
	}
	return b.String() + "]"
}

func concat(lists ...[]*v1.Pod) []*v1.Pod {
	var out []*v1.Pod
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}
