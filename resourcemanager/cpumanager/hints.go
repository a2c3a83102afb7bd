package cpumanager

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/cpuset"

	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/resourcemanager/topologymanager"
)

// resourceCPU is the hints' resource name.
const resourceCPU = string(v1.ResourceCPU)

// TopologyHints are the static policy's NUMA hints for a container, as
// upstream's: none (don't care) for a container that shares the pool; for
// one already holding CPUs, the hints of those CPUs (none placeable when the
// request changed); else the node sets whose free (and reusable) CPUs fit
// the request, the narrowest preferred.
func (p *StaticPolicy) TopologyHints(s State, pod *v1.Pod, c *v1.Container) topologymanager.ProviderHints {
	n := GuaranteedCPUs(pod, c)
	if n == 0 {
		return nil
	}
	if set, ok := s.Lookup(string(pod.UID), c.Name); ok {
		if set.Size() != n {
			return topologymanager.ProviderHints{resourceCPU: {}}
		}
		return topologymanager.ProviderHints{resourceCPU: p.cpuHints(set, cpuset.New(), n)}
	}
	return topologymanager.ProviderHints{resourceCPU: p.cpuHints(p.Available(s), reusable(s, pod, c.Name), n)}
}

// PodTopologyHints are the hints for the whole pod (the pod scope): its
// exclusive CPUs as the pod level counts them (the larger of the init
// containers' peak and the long-running containers' sum).
func (p *StaticPolicy) PodTopologyHints(s State, pod *v1.Pod) topologymanager.ProviderHints {
	n := podGuaranteedCPUs(pod)
	if n == 0 {
		return nil
	}
	assigned := cpuset.New()
	for _, set := range s.Assignments[string(pod.UID)] {
		assigned = assigned.Union(set)
	}
	if assigned.Size() > 0 {
		if assigned.Size() != n {
			return topologymanager.ProviderHints{resourceCPU: {}}
		}
		return topologymanager.ProviderHints{resourceCPU: p.cpuHints(assigned, cpuset.New(), n)}
	}
	return topologymanager.ProviderHints{resourceCPU: p.cpuHints(p.Available(s), cpuset.New(), n)}
}

// podGuaranteedCPUs is upstream's pod-level count: sidecars add to the app
// containers and to every later init container's peak.
func podGuaranteedCPUs(pod *v1.Pod) int {
	initPeak, sidecars := 0, 0
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		n := GuaranteedCPUs(pod, c)
		if podutil.IsRestartableInitContainer(c) {
			sidecars += n
		} else if sidecars+n > initPeak {
			initPeak = sidecars + n
		}
	}
	apps := 0
	for i := range pod.Spec.Containers {
		apps += GuaranteedCPUs(pod, &pod.Spec.Containers[i])
	}
	return max(initPeak, apps+sidecars)
}

// cpuHints is upstream's generateCPUTopologyHints: a hint for every set of
// NUMA nodes that holds every reusable CPU and, with the free ones, n CPUs;
// preferred are the hints as narrow as the narrowest node set whose CPUs
// (free or not) could ever hold n.
func (p *StaticPolicy) cpuHints(avail, reuse cpuset.CPUSet, n int) []topologymanager.Hint {
	nodes := p.Topology.ids(p.Topology.CPUs(), numaOf)
	minWidth := len(nodes)
	hints := []topologymanager.Hint{}
	topologymanager.IterateBitMasks(nodes, func(mask topologymanager.BitMask) {
		in := func(i CPUInfo) bool { return mask.IsSet(i.NUMANodeID) }
		if p.Topology.filter(p.Topology.CPUs(), in).Size() >= n && mask.Count() < minWidth {
			minWidth = mask.Count()
		}
		if p.Topology.filter(reuse, in).Size() != reuse.Size() {
			return // a reusable CPU lies outside these nodes
		}
		if reuse.Size()+p.Topology.filter(avail, in).Size() < n {
			return
		}
		hints = append(hints, topologymanager.Hint{Affinity: mask})
	})
	for i := range hints {
		hints[i].Preferred = hints[i].Affinity.Count() == minWidth
	}
	return hints
}
