// Package memorymanager is the kubelet's memory manager: per NUMA node
// memory and huge pages from cadvisor's machine-info
// code (internal/machineinfo), the None and Static policies
// (reservedMemory per node, NUMA hints for the topology manager, memory
// blocks per container of Guaranteed pods), the memory_manager_state
// checkpoint, and a thin Manager whose assignments become the containers'
// cpuset.mems at creation.
//
// reservedMemory per NUMA node is checked against the node allocatable
// reservation (node.Controller.Reservation). The Static policy's decisions
// follow upstream: the machine state per node, hints as upstream's
// calculateHints with its single/cross-node grouping rule, memory blocks along
// the topology manager's affinity (widened as upstream), init containers'
// memory reused, release.
//
// The decisions are pure functions over a State; the Manager only locks,
// checkpoints and answers the topology manager and container creation.
package memorymanager
