package cpumanager

import (
	"fmt"
	"slices"

	info "github.com/google/cadvisor/lib/model"
	"k8s.io/utils/cpuset"

	"github.com/nodelet/nodelet/resourcemanager/internal/machineinfo"
)

// CPUInfo places one logical CPU. CoreID is unique on the machine (the
// lowest CPU number among the core's threads), because sysfs core_id repeats
// across sockets.
type CPUInfo struct {
	SocketID   int
	CoreID     int
	NUMANodeID int
}

// Topology is the machine's CPU layout.
type Topology struct {
	NumCPUs      int
	NumCores     int
	NumSockets   int
	NumNUMANodes int
	CPUDetails   map[int]CPUInfo
}

// CPUsPerCore is the number of hardware threads per core (1 without SMT).
func (t *Topology) CPUsPerCore() int {
	if t.NumCores == 0 {
		return 0
	}
	return t.NumCPUs / t.NumCores
}

// CPUs is every CPU of the topology.
func (t *Topology) CPUs() cpuset.CPUSet {
	ids := make([]int, 0, len(t.CPUDetails))
	for id := range t.CPUDetails {
		ids = append(ids, id)
	}
	return cpuset.New(ids...)
}

// filter returns the CPUs of set whose info satisfies keep.
func (t *Topology) filter(set cpuset.CPUSet, keep func(CPUInfo) bool) cpuset.CPUSet {
	var ids []int
	for _, id := range set.UnsortedList() {
		if info, ok := t.CPUDetails[id]; ok && keep(info) {
			ids = append(ids, id)
		}
	}
	return cpuset.New(ids...)
}

// ids returns the distinct values of key over set, sorted.
func (t *Topology) ids(set cpuset.CPUSet, key func(CPUInfo) int) []int {
	seen := map[int]bool{}
	var out []int
	for _, id := range set.UnsortedList() {
		info, ok := t.CPUDetails[id]
		if !ok {
			continue
		}
		k := key(info)
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func socketOf(i CPUInfo) int { return i.SocketID }
func coreOf(i CPUInfo) int   { return i.CoreID }
func numaOf(i CPUInfo) int   { return i.NUMANodeID }

// cpusOf returns every CPU of the machine sharing key value v.
func (t *Topology) cpusOf(key func(CPUInfo) int, v int) cpuset.CPUSet {
	return t.filter(t.CPUs(), func(i CPUInfo) bool { return key(i) == v })
}

// DiscoverTopology reads the CPU topology of the online CPUs under root
// ("/" on a real host; a fixture tree in tests) through cadvisor's
// machine-info code, as upstream. A machine without NUMA node directories
// has one node per socket, as cadvisor reports it.
func DiscoverTopology(root string) (*Topology, error) {
	nodes, err := machineinfo.Nodes(root)
	if err != nil {
		return nil, fmt.Errorf("discovering CPU topology: %w", err)
	}
	return topologyFromNodes(nodes)
}

// topologyFromNodes turns cadvisor's nodes into a Topology: a core's unique
// id is its lowest thread, because cadvisor's core id repeats across sockets.
func topologyFromNodes(nodes []info.Node) (*Topology, error) {
	t := &Topology{CPUDetails: map[int]CPUInfo{}}
	sockets, numa := map[int]bool{}, map[int]bool{}
	for _, node := range nodes {
		for _, core := range node.Cores {
			if len(core.Threads) == 0 {
				continue
			}
			id := slices.Min(core.Threads)
			for _, cpu := range core.Threads {
				t.CPUDetails[cpu] = CPUInfo{SocketID: core.SocketID, CoreID: id, NUMANodeID: node.Id}
			}
			t.NumCores++
			sockets[core.SocketID], numa[node.Id] = true, true
		}
	}
	t.NumCPUs, t.NumSockets, t.NumNUMANodes = len(t.CPUDetails), len(sockets), len(numa)
	if t.NumCPUs == 0 {
		return nil, fmt.Errorf("discovering CPU topology: no online CPUs")
	}
	return t, nil
}
