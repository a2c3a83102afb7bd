// Package cpumanager is the kubelet's CPU manager: machine topology from
// cadvisor's machine-info code, the none and static policies, the
// cpu_manager_state checkpoint and a thin executor that applies cpusets
// through CRI UpdateContainerResources.
//
// The decisions (reservation, allocation, release, the shared pool, the
// cpuset each container gets) are pure functions over a Topology and a
// State; the Manager only locks, checkpoints and calls the runtime.
//
// Topology (and the memory manager's memory per NUMA node) is read through
// cadvisor's machine-info code (internal/machineinfo over
// github.com/google/cadvisor/lib v0.61.0 utils/sysinfo), as upstream. Its
// footprint, measured when it replaced nodelet's own sysfs reader: the
// nodelet binary grew 36,631 bytes (102,561,933 -> 102,598,564), go mod
// graph 940 -> 980 lines, go list -m all 162 -> 171 modules (only
// filepath-securejoin moved, 0.4.1 -> 0.6.1, indirect); the linked cadvisor
// packages are lib/model, lib/utils/sysfs and lib/utils/sysinfo: no manager,
// container handlers or docker client.
package cpumanager
