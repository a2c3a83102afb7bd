package eviction

import (
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/internal/podutil"
)

// Upstream strings for evicted pods.
const (
	Reason                     = "Evicted"
	DisruptionTargetCondition  = v1.DisruptionTarget
	ReasonTerminationByKubelet = "TerminationByKubelet"

	// ImmediateEvictionGracePeriodSeconds is used for hard thresholds.
	ImmediateEvictionGracePeriodSeconds int64 = 1

	// Event annotation keys, as upstream.
	AnnotationOffendingContainers      = "offending_containers"
	AnnotationOffendingContainersUsage = "offending_containers_usage"
	AnnotationStarvedResource          = "starved_resource"

	defaultTerminationGracePeriodSeconds int64 = 30
	maxExplainedCandidates                     = 5
)

// ReclaimKind is a node-level reclaim action.
type ReclaimKind string

// Node-level reclaim actions run before evicting for disk signals.
const (
	ReclaimContainers ReclaimKind = "containerGC"
	ReclaimImages     ReclaimKind = "imageGC"
)

// DecideInput is everything one eviction cycle decides on.
type DecideInput struct {
	// Active are the met thresholds whose grace period elapsed (TrackResult.Active).
	Active       []Threshold
	Observations Observations
	Stats        Stats
	// Pods are the active (not terminated) pods on the node.
	Pods []*v1.Pod
	// ReclaimAttempted says node-level reclaim already ran this cycle and
	// the threshold is still met; eviction may proceed.
	ReclaimAttempted bool
	// MaxPodGracePeriodSeconds caps the grace period of soft evictions
	// (evictionMaxPodGracePeriod); ≤ 0 means the pod's own period.
	MaxPodGracePeriodSeconds int64
	// Now stamps the DisruptionTarget condition.
	Now time.Time
}

// Decision is the outcome of one cycle.
type Decision struct {
	// Threshold is the threshold acted upon; nil means nothing to do.
	Threshold *Threshold
	Observed  Observation
	// Reclaim lists node-level reclaim to run before any eviction. When it
	// is non-empty Victim is nil: re-observe after reclaiming and decide again
	// with ReclaimAttempted.
	Reclaim []ReclaimKind
	// Victim is the single pod to evict this cycle, if any.
	Victim             *Candidate
	GracePeriodSeconds int64
	// Status holds the fields to set on the evicted pod's status.
	Status           v1.PodStatus
	EventAnnotations map[string]string
	// Candidates are the top of the ranking, for the explanation.
	Candidates []Candidate
	// LocalStorage are the pods found over their local storage limits; when
	// any was evicted the cycle decided nothing about node pressure.
	LocalStorage []LocalStorageViolation
	Explanation  string
}

// ReclaimFor returns the node-level reclaim that can relieve sig on this
// node's filesystem layout.
func ReclaimFor(sig Signal, stats Stats) []ReclaimKind {
	if signalCondition(sig) != v1.NodeDiskPressure {
		return nil
	}
	both := []ReclaimKind{ReclaimContainers, ReclaimImages}
	isImage := sig == SignalImageFsAvailable || sig == SignalImageFsInodesFree
	isNode := sig == SignalNodeFsAvailable || sig == SignalNodeFsInodesFree
	switch {
	case !stats.HasDedicatedImageFs():
		return both
	case stats.SplitContainerFs():
		if isImage {
			return both
		}
		// Writable layers (and dead containers) live on nodefs/containerfs.
		return []ReclaimKind{ReclaimContainers}
	case isNode:
		return nil // nothing the runtime owns lives on a nodefs separate from imagefs
	default:
		return both
	}
}

// evictionOrder puts memory signals first, then the rest, hard before soft.
func evictionOrder(ts []Threshold) []Threshold {
	out := slices.Clone(ts)
	slices.SortStableFunc(out, func(a, b Threshold) int {
		am, bm := signalResource(a.Signal) == v1.ResourceMemory, signalResource(b.Signal) == v1.ResourceMemory
		if r := cmpBoolFirst(am, bm); r != 0 {
			return r
		}
		return cmpBoolFirst(a.Hard, b.Hard)
	})
	return out
}

// Decide picks what to do in one cycle: the threshold to act on, whether
// node-level reclaim must run first, and at most one victim.
func Decide(in DecideInput) Decision {
	if len(in.Active) == 0 {
		return Decision{Explanation: "no eviction threshold met"}
	}
	th := evictionOrder(in.Active)[0]
	obs := in.Observations[th.Signal]
	d := Decision{Threshold: &th, Observed: obs}
	thrQ := th.Value.Resolve(&obs.Capacity)
	head := fmt.Sprintf("signal %s observed %s, threshold %s (%s)", th.Signal, obs.Available.String(), thrQ.String(), hardSoft(th))

	if !in.ReclaimAttempted {
		if r := ReclaimFor(th.Signal, in.Stats); len(r) > 0 {
			d.Reclaim = r
			d.Explanation = head + fmt.Sprintf("; reclaiming node-level resources (%s) before evicting", joinKinds(r))
			return d
		}
	}

	ranked := Rank(th.Signal, in.Pods, in.Stats)
	d.Candidates = ranked[:min(len(ranked), maxExplainedCandidates)]
	var ranking []string
	for i, c := range d.Candidates {
		ranking = append(ranking, fmt.Sprintf("%d. %s: %s", i+1, podKey(c.Pod), c.Why))
	}
	rankStr := "no pods"
	if len(ranking) > 0 {
		rankStr = strings.Join(ranking, "; ")
	}
	for i := range ranked {
		if ranked[i].Critical {
			continue
		}
		v := ranked[i]
		d.Victim = &v
		break
	}
	if d.Victim == nil {
		d.Explanation = head + "; no evictable pod (ranking: " + rankStr + ")"
		return d
	}
	d.GracePeriodSeconds = gracePeriod(th, d.Victim.Pod, in.MaxPodGracePeriodSeconds)
	msg, ann := evictionMessage(signalResource(th.Signal), th.Signal, *thrQ, obs.Available, d.Victim, in.Stats)
	d.EventAnnotations = ann
	d.Status = v1.PodStatus{
		Phase:   v1.PodFailed,
		Reason:  Reason,
		Message: msg,
		Conditions: []v1.PodCondition{{
			Type:               DisruptionTargetCondition,
			Status:             v1.ConditionTrue,
			Reason:             ReasonTerminationByKubelet,
			Message:            msg,
			LastTransitionTime: metav1.NewTime(in.Now),
		}},
	}
	d.Explanation = fmt.Sprintf("%s; ranking: %s; evicting %s (grace %ds) because it ranks first among non-critical pods: %s",
		head, rankStr, podKey(d.Victim.Pod), d.GracePeriodSeconds, d.Victim.Why)
	return d
}

func hardSoft(t Threshold) string {
	if t.Hard {
		return "hard"
	}
	return "soft, grace " + t.GracePeriod.String()
}

func joinKinds(ks []ReclaimKind) string {
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}

func podKey(p *v1.Pod) string { return p.Namespace + "/" + p.Name }

func gracePeriod(t Threshold, pod *v1.Pod, maxSoft int64) int64 {
	if t.Hard {
		return ImmediateEvictionGracePeriodSeconds
	}
	own := defaultTerminationGracePeriodSeconds
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		own = *pod.Spec.TerminationGracePeriodSeconds
	}
	if maxSoft > 0 && maxSoft < own {
		return maxSoft
	}
	return own
}

// evictionMessage builds the upstream-style message and event annotations,
// naming each container whose usage of the starved resource is above its request.
func evictionMessage(res v1.ResourceName, sig Signal, threshold, available resource.Quantity, victim *Candidate, stats Stats) (string, map[string]string) {
	var b strings.Builder
	fmt.Fprintf(&b, "The node was low on resource: %s. Threshold quantity: %s, available: %s. ", res, threshold.String(), available.String())
	var names, usages []string
	if victim.Stats != nil && (res == v1.ResourceMemory || res == v1.ResourceEphemeralStorage) {
		parts := diskParts(sig, stats)
		for _, c := range victim.Pod.Spec.Containers {
			cs := findContainer(victim.Stats, c.Name)
			if cs == nil {
				continue
			}
			var used uint64
			var ok bool
			if res == v1.ResourceMemory {
				if cs.MemoryWorkingSet != nil {
					used, ok = *cs.MemoryWorkingSet, true
				}
			} else {
				used, ok = diskUsage(&PodStats{Containers: []ContainerStats{*cs}}, fsParts{root: parts.root, logs: parts.logs}, false)
			}
			if !ok {
				continue
			}
			req := c.Resources.Requests[res]
			usage := resource.NewQuantity(int64(used), resource.BinarySI)
			if usage.Cmp(req) > 0 {
				fmt.Fprintf(&b, "Container %s was using %s, request is %s, has larger consumption of %s. ", c.Name, usage.String(), req.String(), res)
				names = append(names, c.Name)
				usages = append(usages, usage.String())
			}
		}
	}
	ann := map[string]string{
		AnnotationOffendingContainers:      strings.Join(names, ","),
		AnnotationOffendingContainersUsage: strings.Join(usages, ","),
		AnnotationStarvedResource:          string(res),
	}
	return strings.TrimSpace(b.String()), ann
}

func findContainer(ps *PodStats, name string) *ContainerStats {
	for i := range ps.Containers {
		if ps.Containers[i].Name == name {
			return &ps.Containers[i]
		}
	}
	return nil
}

// Admission.

// AdmitResult says whether a pod may start on the node.
type AdmitResult struct {
	Admit   bool
	Reason  string
	Message string
}

// Admit refuses pods the node cannot take under pressure, as upstream: with
// only MemoryPressure, BestEffort pods are refused unless they tolerate the
// memory-pressure taint; under any other pressure every pod is refused.
// Critical pods are always admitted.
func Admit(pod *v1.Pod, conditions []v1.NodeConditionType) AdmitResult {
	if len(conditions) == 0 || podutil.IsCriticalPod(pod) {
		return AdmitResult{Admit: true}
	}
	if len(conditions) == 1 && conditions[0] == v1.NodeMemoryPressure {
		if !IsBestEffort(pod) {
			return AdmitResult{Admit: true}
		}
		taint := v1.Taint{Key: TaintNodeMemoryPressure, Effect: v1.TaintEffectNoSchedule}
		for _, tol := range pod.Spec.Tolerations {
			if tol.ToleratesTaint(klog.Background(), &taint, false) {
				return AdmitResult{Admit: true}
			}
		}
	}
	names := make([]string, len(conditions))
	for i, c := range conditions {
		names[i] = string(c)
	}
	return AdmitResult{
		Reason:  Reason,
		Message: fmt.Sprintf("The node had condition: %v. ", names), // upstream's, trailing space included
	}
}

// IsBestEffort reports whether no container sets any CPU or memory request or limit.
func IsBestEffort(pod *v1.Pod) bool {
	check := func(cs []v1.Container) bool {
		for _, c := range cs {
			for _, rl := range []v1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
				for _, n := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
					if q, ok := rl[n]; ok && !q.IsZero() {
						return false
					}
				}
			}
		}
		return true
	}
	return check(pod.Spec.InitContainers) && check(pod.Spec.Containers)
}
