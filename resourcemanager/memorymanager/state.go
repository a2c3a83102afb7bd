package memorymanager

import (
	"maps"
	"slices"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/resourcemanager/internal/resourcestate"
	"github.com/nodelet/nodelet/resourcemanager/memorymanager/internal/state"
)

// MemoryTable is one resource's memory on one NUMA node, in bytes:
// upstream's checkpoint type, so the state is checkpointed without a copy
// of its own.
type MemoryTable = state.MemoryTable

// NodeState is one NUMA node: its memory by resource, how many blocks use
// it, and the group of nodes it is allocated with (itself alone until a
// cross-node allocation groups it). Upstream's checkpoint type.
type NodeState = state.NUMANodeState

// NodeMap is the machine's NUMA nodes by ID.
type NodeMap map[int]*NodeState

// Block is memory of one resource given to a container on a set of nodes.
// Upstream's checkpoint type.
type Block = state.Block

// State is the memory manager's state: the machine and the blocks by pod
// UID and container name. Reusable is the memory the pod being admitted
// has in its init containers, which its later containers take again
// (upstream keeps it in memory only, so does nodelet): pod UID → affinity
// mask → resource → bytes.
type State struct {
	Machine     NodeMap
	Assignments map[string]map[string][]Block
	Reusable    map[string]map[string]map[v1.ResourceName]uint64
}

// Clone returns a deep copy so decisions never mutate their input.
func (s State) Clone() State {
	out := State{Machine: NodeMap{}, Assignments: map[string]map[string][]Block{}, Reusable: map[string]map[string]map[v1.ResourceName]uint64{}}
	for id, n := range s.Machine {
		c := &NodeState{NumberOfAssignments: n.NumberOfAssignments, Cells: slices.Clone(n.Cells), MemoryMap: map[v1.ResourceName]*MemoryTable{}}
		for res, t := range n.MemoryMap {
			tt := *t
			c.MemoryMap[res] = &tt
		}
		out.Machine[id] = c
	}
	for pod, cs := range s.Assignments {
		out.Assignments[pod] = map[string][]Block{}
		for name, blocks := range cs {
			bs := make([]Block, len(blocks))
			for i, b := range blocks {
				bs[i] = Block{NUMAAffinity: slices.Clone(b.NUMAAffinity), Type: b.Type, Size: b.Size}
			}
			out.Assignments[pod][name] = bs
		}
	}
	for pod, masks := range s.Reusable {
		out.Reusable[pod] = map[string]map[v1.ResourceName]uint64{}
		for mask, sizes := range masks {
			out.Reusable[pod][mask] = maps.Clone(sizes)
		}
	}
	return out
}

// Containers are the pod's containers holding memory blocks, sorted.
func (s State) Containers(podUID string) []string {
	return resourcestate.Containers(s.Assignments, podUID)
}

// Nodes are the machine's NUMA node IDs, ascending.
func (m NodeMap) Nodes() []int {
	return slices.Sorted(maps.Keys(m))
}

// NUMANodes are the nodes a container's memory is on (its cpuset.mems),
// ascending; none for a container without blocks.
func (s State) NUMANodes(podUID, container string) []int {
	set := map[int]bool{}
	for _, b := range s.Assignments[podUID][container] {
		for _, n := range b.NUMAAffinity {
			set[n] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// resources are every resource any node has.
func (m NodeMap) resources() map[v1.ResourceName]bool {
	out := map[v1.ResourceName]bool{}
	for _, n := range m {
		for name := range n.MemoryMap {
			out[name] = true
		}
	}
	return out
}
