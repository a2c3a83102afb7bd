// Package memorymanager is the kubelet's memory manager: per NUMA node
// memory and huge pages from cadvisor's machine-info
// code (internal/machineinfo), the None and Static policies
// (reservedMemory per node, NUMA hints for the topology manager, memory
// blocks per container of Guaranteed pods), the memory_manager_state
// checkpoint, and a thin Manager whose assignments become the containers'
// cpuset.mems at creation.
//
// The decisions are pure functions over a State; the Manager only locks,
// checkpoints and answers the topology manager and container creation.
package memorymanager
