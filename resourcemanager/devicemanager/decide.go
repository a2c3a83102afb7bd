package devicemanager

import (
	"fmt"
	"sort"

	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/nodelet/nodelet/resourcemanager/topologymanager"
)

// Need is what the allocation decision knows of one container's request for
// one device resource: the node's devices and who holds them.
type Need struct {
	Resource string
	// Count is the container's limit for the resource.
	Count int
	// Registered: a plugin advertised the resource (it has an entry, even empty).
	Registered bool
	// Assigned are the devices the container already holds (from the checkpoint).
	Assigned []string
	// Healthy are the resource's healthy devices.
	Healthy []string
	// InUse are the devices held by any container of an active pod.
	InUse []string
	// Reusable are devices this pod's finished init containers held, which
	// upstream hands to the pod's later containers first.
	Reusable []string
}

// Plan is a decision before the plugin's preference is asked for.
type Plan struct {
	// Done: nothing to allocate (already assigned, or none asked for).
	Done bool
	// Chosen are the devices picked from Reusable; they stay in the result.
	Chosen []string
	// Available are the free healthy devices the rest comes from, sorted (or,
	// once aligned, those on the affinity's NUMA nodes first).
	Available []string
	// First are free devices on the affinity's NUMA nodes taken before the
	// plugin's preference, when they alone cannot fill the request.
	First []string
	// Size is how many devices the container gets in total.
	Size int
}

// Decide plans the devices a container gets for one resource, as upstream's
// devicesToAllocate: a container already holding devices must ask for as many
// as before; devices its pod's init containers left are reused first; the rest
// must be free and healthy. The errors carry upstream's wording, which ends up
// in the pod's admission message.
func Decide(n Need) (Plan, error) {
	if len(n.Assigned) > 0 {
		if len(n.Assigned) != n.Count {
			return Plan{}, fmt.Errorf("container changed request for resource %q from %d to %d", n.Resource, len(n.Assigned), n.Count)
		}
		return Plan{Done: true}, nil
	}
	if n.Count == 0 {
		return Plan{Done: true}, nil
	}
	if !n.Registered {
		return Plan{}, fmt.Errorf("can't allocate unregistered device %s", n.Resource)
	}
	p := Plan{Size: n.Count}
	for _, d := range sorted(n.Reusable) {
		if len(p.Chosen) == n.Count {
			break
		}
		p.Chosen = append(p.Chosen, d)
	}
	if len(p.Chosen) == n.Count {
		p.Done = true
		return p, nil
	}
	inUse := setOf(n.InUse)
	for _, d := range sorted(n.Healthy) {
		if !inUse[d] {
			p.Available = append(p.Available, d)
		}
	}
	if need := n.Count - len(p.Chosen); len(p.Available) < need {
		return Plan{}, fmt.Errorf("requested number of devices unavailable for %s. Requested: %d, Available: %d", n.Resource, need, len(p.Available))
	}
	return p, nil
}

// NeedsPreference says whether the plugin gets a say: upstream asks only when
// there is a choice left to make.
func (p Plan) NeedsPreference() bool {
	need := p.Size - len(p.Chosen) - len(p.First)
	return !p.Done && need > 0 && len(p.Available)-len(p.First) > need
}

// MustInclude are the devices a preference request must keep.
func (p Plan) MustInclude() []string {
	return append(append([]string(nil), p.Chosen...), p.First...)
}

// Align narrows a plan to the topology manager's affinity as upstream's
// filterByAffinity: when the free devices on the affinity's NUMA nodes are
// more than needed the rest comes from them only; else all of them are
// taken first and the rest from the other nodes' devices, then from devices
// without topology. numa gives each device's NUMA nodes (none: no topology).
func Align(p Plan, affinity topologymanager.BitMask, numa map[string][]int) Plan {
	if p.Done || affinity.IsEmpty() {
		return p
	}
	var aligned, unaligned, noTopology []string
	for _, d := range p.Available {
		switch nodes := numa[d]; {
		case len(nodes) == 0:
			noTopology = append(noTopology, d)
		case affinity.AnySet(nodes):
			aligned = append(aligned, d)
		default:
			unaligned = append(unaligned, d)
		}
	}
	if p.Size-len(p.Chosen) < len(aligned) {
		p.Available = aligned
		return p
	}
	p.First = aligned
	p.Available = append(append(append([]string(nil), aligned...), unaligned...), noTopology...)
	return p
}

// DeviceHints is upstream's generateDeviceTopologyHints: a hint for every
// set of nodes that holds every reusable device with topology and, with the
// available ones, request devices; preferred are those as narrow as the
// narrowest set whose devices (free or not) could ever hold the request.
func DeviceHints(nodes []int, numa map[string][]int, available, reusable []string, request int) []topologymanager.Hint {
	minWidth := len(nodes)
	hints := []topologymanager.Hint{}
	topologymanager.IterateBitMasks(nodes, func(mask topologymanager.BitMask) {
		inMask := 0
		for _, ns := range numa {
			if mask.AnySet(ns) {
				inMask++
			}
		}
		if inMask >= request && mask.Count() < minWidth {
			minWidth = mask.Count()
		}
		matching := 0
		for _, d := range reusable {
			if len(numa[d]) == 0 {
				continue
			}
			if !mask.AnySet(numa[d]) {
				return
			}
			matching++
		}
		for _, d := range available {
			if mask.AnySet(numa[d]) {
				matching++
			}
		}
		if matching < request {
			return
		}
		hints = append(hints, topologymanager.Hint{Affinity: mask})
	})
	for i := range hints {
		hints[i].Preferred = hints[i].Affinity.Count() == minWidth
	}
	return hints
}

// Complete finishes a plan with the plugin's preferred devices (nil when it
// was not asked): the reused ones and those Align takes first, then the
// preferred ones that are free,
// then the free ones in order, as upstream falls back when a plugin prefers
// too few or unknown devices.
func Complete(p Plan, preferred []string) []string {
	if p.Size == 0 {
		return nil
	}
	out := p.MustInclude()
	taken := setOf(out)
	free := setOf(p.Available)
	add := func(ds []string) {
		for _, d := range ds {
			if len(out) == p.Size {
				return
			}
			if free[d] && !taken[d] {
				taken[d] = true
				out = append(out, d)
			}
		}
	}
	add(preferred)
	add(p.Available)
	return out
}

// ContainerKind is how a container's devices pass to the pod's later containers.
type ContainerKind int

const (
	// AppContainer keeps its devices for its life.
	AppContainer ContainerKind = iota
	// InitContainer ends before the next starts: its devices are reusable.
	InitContainer
	// SidecarContainer (a restartable init container) runs beside the app
	// containers and keeps its devices.
	SidecarContainer
)

// NextReusable is the pod's reusable devices of a resource once a container
// of kind got devices, as upstream: an init container's devices become
// reusable, other containers' leave the pool.
func NextReusable(reusable, got []string, kind ContainerKind) []string {
	set := setOf(reusable)
	for _, d := range got {
		if kind == InitContainer {
			set[d] = true
		} else {
			delete(set, d)
		}
	}
	out := make([]string, 0, len(set))
	for d := range set {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

func setOf(ds []string) map[string]bool {
	m := make(map[string]bool, len(ds))
	for _, d := range ds {
		m[d] = true
	}
	return m
}

func sorted(ds []string) []string {
	out := append([]string(nil), ds...)
	sort.Strings(out)
	return out
}

// byNUMA renders a resource's devices for the pod resources API as
// upstream: grouped by NUMA node (a device on several nodes under each),
// nodes ascending, then the devices whose plugin reports no topology in one
// entry without it; perDevice gives each device and node its own entry
// (GetAllocatableResources' shape).
func byNUMA(res string, ids []string, numa map[string][]int, perDevice bool) []*podresourcesapi.ContainerDevices {
	groups := map[int][]string{}
	var noTopology []string
	for _, d := range sorted(ids) {
		if len(numa[d]) == 0 {
			noTopology = append(noTopology, d)
			continue
		}
		for _, n := range numa[d] {
			groups[n] = append(groups[n], d)
		}
	}
	var out []*podresourcesapi.ContainerDevices
	add := func(devs []string, topo *podresourcesapi.TopologyInfo) {
		if !perDevice {
			out = append(out, &podresourcesapi.ContainerDevices{ResourceName: res, DeviceIds: devs, Topology: topo})
			return
		}
		for _, d := range devs {
			out = append(out, &podresourcesapi.ContainerDevices{ResourceName: res, DeviceIds: []string{d}, Topology: topo})
		}
	}
	nodes := make([]int, 0, len(groups))
	for n := range groups {
		nodes = append(nodes, n)
	}
	sort.Ints(nodes)
	for _, n := range nodes {
		add(groups[n], &podresourcesapi.TopologyInfo{Nodes: []*podresourcesapi.NUMANode{{ID: int64(n)}}})
	}
	if len(noTopology) > 0 {
		add(noTopology, nil)
	}
	return out
}
