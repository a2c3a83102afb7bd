// Package cgroups holds nodelet's cgroup logic: host mode detection (v1, hybrid,
// v2), QoS/pod cgroup names per driver, the cgroup driver check against the
// runtime, per-container CRI resources (cpu, memory, oom_score_adj, swap), the
// swap start-up check, and a manager for the QoS and pod cgroups with the cgroupfs
// driver or the systemd driver (transient slices created over systemd's D-Bus API).
//
// The runtime's cgroup driver comes from CRI RuntimeConfig, or from containerd
// 1.x's verbose Status (DriverFromRuntimeInfo). Pod cgroups are listed and
// removed in every hierarchy under the root (on a hybrid host name=systemd and
// the unified one too, where the runtime makes them), the runtime's container
// cgroups below them deepest first, never while a process is anywhere below.
//
// # Through github.com/opencontainers/cgroups
//
// As the kubelet does, the manager sets the QoS, pod and reserved cgroups'
// resources with the library's managers, fs (v1, hybrid) and fs2 (v2), built with
// explicit directories below the manager's root (never the library's own discovery
// through /proc/self/mountinfo), and its cgroups.Resources (SkipDevices,
// SkipFreezeOnSet): cpu.shares or cpu.weight (the library's shares conversion),
// cpu.cfs_period_us/cfs_quota_us or cpu.max, memory.limit_in_bytes or memory.max,
// pids.max. On v1 the library's Apply(-1) creates the directories and fills a new
// cpuset cgroup's cpuset.cpus/mems from its parent. The library also writes its
// companions of these settings: with an unlimited memory limit, memory.memsw
// (v1, when swap accounting is on) or memory.swap.max (v2) go unlimited too, as
// with the kubelet. Its file opener confines writes below /sys/fs/cgroup with
// openat2; elsewhere it opens only files on a cgroup filesystem, unless the
// library's TestMode is on, which the unit tests (temp-dir trees shaped like
// /sys/fs/cgroup, see internal/testsupport/cgroupfstest) set in TestMain.
//
// # By hand, and why
//
//   - cgroup.subtree_control of the ancestors (v2), and the v2 directories:
//     fs2's Apply (CreateCgroupPath) refuses paths outside /sys/fs/cgroup and
//     enables every controller the root offers; nodelet enables only cpuset, cpu,
//     io, memory, hugetlb and pids, one by one when the kernel refuses the set.
//     The value is nodelet's, the write goes through the library's opener.
//   - v1 directories in every mounted hierarchy: the library skips devices with
//     SkipDevices, but the runtime nests the containers' cgroups there too.
//   - Removal (rmdir deepest first in every hierarchy, named ones and hybrid's
//     unified included, refused while processes remain): the library's Destroy
//     removes only the paths it was given and does not check for processes.
//   - The systemd driver's slices: the library's systemd managers dial their own
//     D-Bus connection and find paths under /sys/fs/cgroup, so nodelet starts and
//     stops the slices over its own connection (systemd.go) and then writes the
//     files through fs/fs2, as the library's systemd managers do after setting
//     the unit properties.
//   - Reads for a resize (PodCgroupConfig, PodMemoryUsage) read the files directly.
//
// Hugetlb limits are not set: pods' hugepages are not part of ResourceConfig. The
// CPU and memory managers' cpusets are set per container through the CRI.
package cgroups
