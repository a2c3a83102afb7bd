package devicemanager

import (
	"sort"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/resourcemanager/topologymanager"
)

// GetTopologyHints are the NUMA hints for a container's device resources
// whose plugin reports device topology, as upstream's: a container that
// already holds devices gets their hints (none placeable when the request
// changed), else the node sets its free and reusable devices can serve;
// resources without topology are left out (no preference).
func (m *Manager) GetTopologyHints(pod *v1.Pod, c *v1.Container) topologymanager.ProviderHints {
	m.mu.Lock()
	defer m.mu.Unlock()
	hints := topologymanager.ProviderHints{}
	for res, q := range c.Resources.Limits {
		held := m.pods[pod.UID][c.Name][string(res)]
		var assigned []string
		if held != nil {
			assigned = held.ids
		}
		if h, ok := m.hintsLocked(pod, string(res), int(q.Value()), assigned, m.reusableLocked(pod, c.Name, string(res))); ok {
			hints[string(res)] = h
		}
	}
	return hints
}

// GetPodTopologyHints are the hints for the whole pod's device requests
// (the pod scope), counted as the scheduler counts the pod's requests.
func (m *Manager) GetPodTopologyHints(pod *v1.Pod) topologymanager.ProviderHints {
	m.mu.Lock()
	defer m.mu.Unlock()
	hints := topologymanager.ProviderHints{}
	for res, q := range podutil.PodRequests(pod) {
		if h, ok := m.hintsLocked(pod, string(res), int(q.Value()), m.podDevicesLocked(pod.UID, string(res)), nil); ok {
			hints[string(res)] = h
		}
	}
	return hints
}

// podDevicesLocked are every device of res the pod's containers hold.
func (m *Manager) podDevicesLocked(uid types.UID, res string) []string {
	var out []string
	for _, rss := range m.pods[uid] {
		if a := rss[res]; a != nil {
			out = append(out, a.ids...)
		}
	}
	sort.Strings(out)
	return out
}

// hintsLocked decides one resource's hints; ok is false for a resource
// that is no device plugin's or whose devices report no topology.
func (m *Manager) hintsLocked(pod *v1.Pod, res string, request int, assigned, reusable []string) ([]topologymanager.Hint, bool) {
	rs := m.resources[res]
	if rs == nil || request == 0 || !hasTopology(rs.numa) {
		return nil, false
	}
	if len(assigned) > 0 {
		if len(assigned) != request {
			klog.InfoS("Devices already allocated to the pod differ from its request", "pod", klog.KObj(pod), "resource", res, "allocated", len(assigned), "request", request)
			return []topologymanager.Hint{}, true
		}
		return DeviceHints(m.numaNodes, rs.numa, assigned, nil, request), true
	}
	ids, _ := m.inUseLocked(res)
	inUse := setOf(ids)
	var available []string
	for _, d := range rs.healthy {
		if !inUse[d] {
			available = append(available, d)
		}
	}
	if len(available)+len(reusable) < request {
		klog.InfoS("Not enough devices for topology hints", "pod", klog.KObj(pod), "resource", res, "request", request, "available", len(available), "reusable", len(reusable))
		return []topologymanager.Hint{}, true
	}
	return DeviceHints(m.numaNodes, rs.numa, available, reusable, request), true
}

func hasTopology(numa map[string][]int) bool {
	for _, nodes := range numa {
		if len(nodes) > 0 {
			return true
		}
	}
	return false
}
