// Package cpumanager is the kubelet's CPU manager: machine topology from
// sysfs, the none and static policies, the cpu_manager_state checkpoint and
// a thin executor that applies cpusets through CRI UpdateContainerResources.
//
// The decisions (reservation, allocation, release, the shared pool, the
// cpuset each container gets) are pure functions over a Topology and a
// State; the Manager only locks, checkpoints and calls the runtime.
//
// Topology is read from sysfs directly rather than through cadvisor's
// utils/sysinfo: cadvisor's sysfs reader has /sys hard-coded (tests could
// not use fixture trees) and brings its manager's dependencies; the four
// files the CPU manager needs are simple to read.
package cpumanager
