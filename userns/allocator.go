// Package userns gives pods with spec.hostUsers: false their user namespace: a
// range of host IDs per pod (userNamespaces.idsPerPod, 65536 by default) taken
// from the kubelet user's subordinate IDs (getsubids kubelet, else the IDs
// from idsPerPod up), kept in <root>/pods/<uid>/userns (upstream's JSON) so a
// restart maps the pod the same way, and released when the pod is removed, as
// the upstream kubelet's user namespace manager does.
//
// The Allocator is pure bookkeeping of the ranges (a random free range per
// pod). The Manager reads the files back at start, releases the ranges of
// orphaned pod dirs every minute (Run), and refuses a pod with upstream's
// words when the runtime handler lacks user namespaces (CRI Status
// runtime_handlers[].features.user_namespaces).
package userns

import (
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/types"
)

// UnitLength is the size every range is a multiple of (the upstream kubelet's
// userNsUnitLength): idsPerPod, the first ID and the length of the kubelet's
// subordinate IDs must all be multiples of it.
const UnitLength = 65536

// Allocator hands out ranges of idsPerPod host IDs inside the kubelet's
// mapping [first, first+length), one per pod. It is pure bookkeeping (no I/O,
// no locking); Manager owns the files and the lock.
type Allocator struct {
	size  uint32 // idsPerPod
	off   int    // index of the first range: first/size
	used  []bool // ranges in use, by index from off
	byPod map[types.UID]int
}

// NewAllocator checks the kubelet's mapping against idsPerPod and maxPods as
// upstream does (its error words) and returns an empty allocator.
func NewAllocator(first, length, idsPerPod uint32, maxPods int) (*Allocator, error) {
	if idsPerPod == 0 || idsPerPod%UnitLength != 0 {
		return nil, fmt.Errorf("kubelet user namespace length %v is not a multiple of %d", idsPerPod, UnitLength)
	}
	if first%idsPerPod != 0 {
		return nil, fmt.Errorf("kubelet user assigned ID %v is not a multiple of %v", first, idsPerPod)
	}
	if first < idsPerPod {
		// Mapping host ID 0 into a pod would defeat the point.
		return nil, fmt.Errorf("kubelet user assigned ID %v must be greater or equal to %v", first, idsPerPod)
	}
	if length%idsPerPod != 0 {
		return nil, fmt.Errorf("kubelet user assigned IDs length %v is not a multiple of %v", length, idsPerPod)
	}
	if uint64(first)+uint64(length) > 1<<32 {
		return nil, fmt.Errorf("kubelet user assigned IDs [%v, %v) go beyond the 32-bit ID space", first, uint64(first)+uint64(length))
	}
	n := int(length / idsPerPod)
	if n < maxPods {
		return nil, fmt.Errorf("kubelet user assigned IDs are not enough to support %v pods", maxPods)
	}
	return &Allocator{size: idsPerPod, off: int(first / idsPerPod), used: make([]bool, n), byPod: map[types.UID]int{}}, nil
}

// IDsPerPod is the length of every range.
func (a *Allocator) IDsPerPod() uint32 { return a.size }

// Allocate gives pod a free range and returns its first host ID; a pod that
// has one keeps it. The scan for a free range starts at start (modulo the
// number of ranges): Manager passes a random index, as upstream picks ranges
// at random, so the next pod's IDs cannot be guessed.
func (a *Allocator) Allocate(pod types.UID, start int) (uint32, error) {
	if i, ok := a.byPod[pod]; ok {
		return a.hostID(i), nil
	}
	n := len(a.used)
	if start < 0 {
		start = -start
	}
	for k := 0; k < n; k++ {
		i := (start + k) % n
		if !a.used[i] {
			a.used[i] = true
			a.byPod[pod] = i
			return a.hostID(i), nil
		}
	}
	return 0, fmt.Errorf("could not find an empty slot to allocate a user namespace")
}

// Record marks the range a pod was given before (read back from its file) as
// used, refusing a range that does not fit this allocator or is another pod's.
func (a *Allocator) Record(pod types.UID, hostID, length uint32) error {
	if length != a.size {
		return fmt.Errorf("wrong user namespace length %v", length)
	}
	if hostID%a.size != 0 {
		return fmt.Errorf("wrong user namespace offset specified %v", hostID)
	}
	i := int(hostID/a.size) - a.off
	if i < 0 || i >= len(a.used) {
		return fmt.Errorf("id %v is out of range", hostID)
	}
	if prev, ok := a.byPod[pod]; ok {
		if prev != i {
			return fmt.Errorf("different user namespace range already used by pod %q", pod)
		}
		return nil
	}
	if a.used[i] {
		return fmt.Errorf("range picked for pod %q already taken", pod)
	}
	a.used[i] = true
	a.byPod[pod] = i
	return nil
}

// Release frees the pod's range; it reports whether the pod had one.
func (a *Allocator) Release(pod types.UID) bool {
	i, ok := a.byPod[pod]
	if !ok {
		return false
	}
	delete(a.byPod, pod)
	a.used[i] = false
	return true
}

// Allocated returns the first host ID of the pod's range.
func (a *Allocator) Allocated(pod types.UID) (uint32, bool) {
	i, ok := a.byPod[pod]
	if !ok {
		return 0, false
	}
	return a.hostID(i), true
}

// Pods lists the pods holding a range, sorted.
func (a *Allocator) Pods() []types.UID {
	out := make([]types.UID, 0, len(a.byPod))
	for uid := range a.byPod {
		out = append(out, uid)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func (a *Allocator) hostID(i int) uint32 { return uint32(i+a.off) * a.size }
