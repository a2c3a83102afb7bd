package eviction

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/nodelet/nodelet/internal/podutil"
)

// The local storage limits (localStorageCapacityIsolation) as kubelet_evictions
// labels them, with upstream's names. They are not thresholds: they cannot be
// configured and drive no node condition.
const (
	SignalEmptyDirFsLimit           Signal = "emptydirfs.limit"
	SignalEphemeralPodFsLimit       Signal = "ephemeralpodfs.limit"
	SignalEphemeralContainerFsLimit Signal = "ephemeralcontainerfs.limit"
)

// Upstream's status messages, trailing space included.
const (
	emptyDirMessageFmt                  = "Usage of EmptyDir volume %q exceeds the limit %q. "
	podEphemeralStorageMessageFmt       = "Pod ephemeral local storage usage exceeds the total limit of containers %s. "
	containerEphemeralStorageMessageFmt = "Container %s exceeded its local ephemeral storage limit %q. "
)

// LocalStorageInput is what the local storage checks decide on.
type LocalStorageInput struct {
	// Isolation is localStorageCapacityIsolation; false turns every check off.
	Isolation bool
	// Pods are the active pods on the node.
	Pods  []*v1.Pod
	Stats Stats
}

// LocalStorageViolation is a pod over one of its local ephemeral storage limits.
type LocalStorageViolation struct {
	Pod    *v1.Pod
	Signal Signal
	// What is over: the volume or container name, "" for the pod's total.
	Name         string
	Usage, Limit resource.Quantity
	// Critical pods are reported but never evicted, as upstream.
	Critical           bool
	GracePeriodSeconds int64
	// Status holds the fields to set on the evicted pod's status. Upstream adds no
	// DisruptionTarget condition here: going over its own limits is the pod's
	// failure, not a disruption, so Job pod failure policies must count it.
	Status v1.PodStatus
}

// DecideLocalStorage returns every pod over one of its local ephemeral storage
// limits, checked as upstream in this order, the first one found per pod:
//   - a disk-backed emptyDir whose usage exceeds its sizeLimit;
//   - the pod's ephemeral-storage usage (writable layers, logs, local ephemeral
//     volumes, /etc/hosts) above the sum of its containers' ephemeral-storage
//     limits, when any container sets one;
//   - a container whose logs, and writable layer unless the runtime keeps
//     images on a filesystem of their own, exceed its ephemeral-storage limit.
//
// Pods without stats are skipped. All of them are evicted at once, unlike
// node pressure which takes one pod per cycle.
func DecideLocalStorage(in LocalStorageInput) []LocalStorageViolation {
	if !in.Isolation {
		return nil
	}
	byUID := statsByUID(in.Stats)
	var out []LocalStorageViolation
	for _, pod := range in.Pods {
		ps, ok := byUID[string(pod.UID)]
		if !ok {
			continue
		}
		v, ok := emptyDirOverLimit(pod, ps)
		if !ok {
			v, ok = podOverLimit(pod, ps)
		}
		if !ok {
			v, ok = containerOverLimit(pod, ps, in.Stats.HasDedicatedImageFs())
		}
		if !ok {
			continue
		}
		v.Pod = pod
		v.Critical = podutil.IsCriticalPod(pod)
		v.GracePeriodSeconds = ImmediateEvictionGracePeriodSeconds
		out = append(out, v)
	}
	return out
}

func violation(sig Signal, name string, usage uint64, limit resource.Quantity, msg string) LocalStorageViolation {
	return LocalStorageViolation{
		Signal: sig,
		Name:   name,
		Usage:  *resource.NewQuantity(int64(usage), resource.BinarySI),
		Limit:  limit,
		Status: v1.PodStatus{Phase: v1.PodFailed, Reason: Reason, Message: msg},
	}
}

func emptyDirOverLimit(pod *v1.Pod, ps *PodStats) (LocalStorageViolation, bool) {
	used := map[string]*uint64{}
	for _, v := range ps.Volumes {
		used[v.Name] = v.UsedBytes
	}
	for _, vol := range pod.Spec.Volumes {
		ed := vol.EmptyDir
		// A memory-backed emptyDir is a tmpfs no bigger than its sizeLimit: the
		// kernel enforces it, and its pages are memory, not disk.
		if ed == nil || ed.Medium == v1.StorageMediumMemory || ed.SizeLimit == nil || ed.SizeLimit.Sign() <= 0 {
			continue
		}
		u := used[vol.Name]
		if u == nil || resource.NewQuantity(int64(*u), resource.BinarySI).Cmp(*ed.SizeLimit) <= 0 {
			continue
		}
		return violation(SignalEmptyDirFsLimit, vol.Name, *u, *ed.SizeLimit,
			fmt.Sprintf(emptyDirMessageFmt, vol.Name, ed.SizeLimit.String())), true
	}
	return LocalStorageViolation{}, false
}

func podOverLimit(pod *v1.Pod, ps *PodStats) (LocalStorageViolation, bool) {
	// Upstream's pod limit: containers summed, init containers and sidecars as
	// the scheduler counts them, overhead added. Present once any container
	// names the resource, even with 0.
	limit, found := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})[v1.ResourceEphemeralStorage]
	if !found {
		return LocalStorageViolation{}, false
	}
	used := deref(ps.EphemeralStorageUsedBytes)
	if resource.NewQuantity(int64(used), resource.BinarySI).Cmp(limit) <= 0 {
		return LocalStorageViolation{}, false
	}
	return violation(SignalEphemeralPodFsLimit, "", used, limit,
		fmt.Sprintf(podEphemeralStorageMessageFmt, limit.String())), true
}

func containerOverLimit(pod *v1.Pod, ps *PodStats, dedicatedImageFs bool) (LocalStorageViolation, bool) {
	limits := map[string]resource.Quantity{}
	for _, c := range pod.Spec.Containers {
		if q, ok := c.Resources.Limits[v1.ResourceEphemeralStorage]; ok && q.Value() != 0 {
			limits[c.Name] = q
		}
	}
	for _, cs := range ps.Containers {
		limit, ok := limits[cs.Name]
		if !ok {
			continue
		}
		// With a dedicated imagefs the writable layer is not on the disk the
		// limit protects, as upstream counts it.
		used := deref(cs.LogsUsedBytes)
		if !dedicatedImageFs {
			used += deref(cs.RootfsUsedBytes)
		}
		if resource.NewQuantity(int64(used), resource.BinarySI).Cmp(limit) <= 0 {
			continue
		}
		return violation(SignalEphemeralContainerFsLimit, cs.Name, used, limit,
			fmt.Sprintf(containerEphemeralStorageMessageFmt, cs.Name, limit.String())), true
	}
	return LocalStorageViolation{}, false
}
