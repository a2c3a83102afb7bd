// Package cpumanager is the kubelet's CPU manager: machine topology from
// cadvisor's machine-info code, the none and static policies, the
// cpu_manager_state checkpoint and a thin executor that applies cpusets
// through CRI UpdateContainerResources.
//
// The decisions (reservation, allocation, release, the shared pool, the
// cpuset each container gets) are pure functions over a Topology and a
// State; the Manager only locks, checkpoints and calls the runtime.
//
// Topology (and the memory manager's memory and the topology manager's
// NUMA nodes) is read through cadvisor's machine-info code
// (internal/machineinfo over utils/sysinfo of github.com/google/cadvisor/lib
// v0.61.0, the module the machine code moved to from github.com/google/cadvisor;
// upstream v1.37.2 requires it too). Its footprint, measured when it
// replaced nodelet's own sysfs reader: the binary grew 29,186 bytes
// (102,561,933 -> 102,591,119; 36,631 with both readers linked), go mod
// graph 940 -> 980 lines, go list -m all 162 -> 171 modules (only
// filepath-securejoin moved, 0.4.1 -> 0.6.1, indirect); the cadvisor
// packages linked are lib/model, lib/utils/sysfs and lib/utils/sysinfo: no
// manager, container handlers or docker client.
package cpumanager
