// Package stats measures the node and its pods: memory, CPU and process counts
// from the kernel (procfs, cgroupfs), filesystems by statfs, container usage
// from the CRI runtime and volume and log usage from disk. It builds the
// kubelet's Summary (stats/v1alpha1), measured in the background by Cache,
// whose last measurement /stats/summary, /metrics/resource, /metrics/cadvisor
// and the eviction manager read.
//
// # Pods and containers
//
// Pods and containers come from one CRI ListPodSandboxStats call where the
// runtime has it (pod CPU, memory, network and process count with the
// containers' stats); Unimplemented, or 3 failures in a row, falls back for
// good to one ListContainerStats call and the pod cgroups. Logs are measured
// by walking the disk.
//
// # The measurement
//
// Cache measures the whole Summary every 10 s (upstream's cAdvisor
// housekeeping interval, --housekeeping-interval), one goroutine of the run
// phase. A read before the first measurement, or of one older than two
// periods, measures once, shared by concurrent readers; eviction asks for a
// measurement newer than its last reclaim or eviction (NewerThan).
//
// Each measurement also reads, into Snapshot.Cgroups, the cgroups of the pods
// nodelet knows, of their running containers and of the sandbox (pause)
// container (the pod cgroup's children named for the container and sandbox
// IDs): on v2 cpu.stat, cpu.max, memory.current, memory.stat,
// memory.swap.current, memory.events, io.stat, cgroup.procs; on v1, from each
// controller's hierarchy, cpuacct.usage, cpu.cfs_quota_us and cpu.stat,
// memory.usage_in_bytes, memory.stat, memory.use_hierarchy,
// memory.oom_control, blkio bytes, cgroup.procs. Each file is opened by name
// from its directory's descriptor with O_NOFOLLOW. The sandbox's image comes
// from the runtime's verbose PodSandboxStatus, once per sandbox; the sandbox's
// network from the runtime, else /proc/<pid>/net/dev of the sandbox process.
//
// # Volumes
//
// VolumeStatsCache measures pod volumes in the background every
// volumeStatsAggPeriod (jittered up to twice it; 0 disables), per volume as
// upstream's metrics providers: du for emptyDir, configMap, secret, projected
// and downwardAPI; statfs for local PVs; the driver's NodeGetVolumeStats for
// CSI when it has GET_VOLUME_STATS; nothing for hostPath. Claim volumes carry
// PVCRef; what to measure comes from volumes.Manager.MountedVolumes. The
// Summary and eviction read it, and it serves kubelet_volume_stats_* per claim
// on /metrics.
//
// # Parsers
//
// /proc/stat (node CPU time, boot time) is read with
// github.com/prometheus/procfs. Three files keep small parsers of their own
// (issue 34, measured on procfs v0.22.0): its meminfo and net/dev parsers
// index fields without checking how many a line has, so a blank or short line
// (a fake or lxcfs /proc) panics the measuring goroutine, and nodelet with it,
// and one unexpected line refuses the whole file; nodelet's skip what does not
// parse (meminfo is nodelet/procfs.ParseMeminfo). Its LoadAvg has no
// running/total field, which rlimit's process count reads.
package stats
