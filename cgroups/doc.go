// Package cgroups holds nodelet's cgroup logic: host mode detection (v1, hybrid,
// v2), QoS/pod cgroup names per driver, the cgroup driver check against the
// runtime, per-container CRI resources (cpu, memory, oom_score_adj, swap), the
// swap start-up check, and a manager for the QoS and pod cgroups with the cgroupfs
// driver (directories and files written directly) or the systemd driver (transient
// slices created over systemd's D-Bus API, then the same files written into them).
//
// Everything that touches the filesystem takes a root path so it can be tested on
// temp-dir trees shaped like /sys/fs/cgroup.
package cgroups
