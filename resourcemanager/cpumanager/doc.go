// Package cpumanager is the kubelet's CPU manager: machine topology from
// cadvisor's machine-info code, the none and static policies, the
// cpu_manager_state checkpoint and a thin executor that applies cpusets
// through CRI UpdateContainerResources.
//
// The decisions (reservation, allocation, release, the shared pool, the
// cpuset each container gets) are pure functions over a Topology and a
// State; the Manager only locks, checkpoints and calls the runtime.
//
// The static policy reserves CPUs from reservedSystemCPUs, or kubeReserved
// plus systemReserved rounded up, and gives Guaranteed containers with whole
// CPUs exclusive CPUs packed as upstream: whole NUMA nodes or sockets, whole
// cores, then threads from the fullest socket; with the options
// full-pcpus-only (SMTAlignmentError), distribute-cpus-across-numa and
// strict-cpu-reservation. Init containers' CPUs are reused by the app
// containers. It gives the topology manager NUMA hints (free CPUs per node
// set, as upstream's generateCPUTopologyHints) and allocates on the chosen
// affinity's CPUs first. The Manager allocates each container at admission for
// the topology manager (an UnexpectedAdmissionError when it cannot; a refused
// pod's new CPUs are taken back), gives podruntime each container's cpuset at
// CreateContainer, and reconciles running containers with
// UpdateContainerResources every cpuManagerReconcilePeriod (decideUpdates,
// decideStale). The start from <root>/cpu_manager_state is resourcestate's
// decision.
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
