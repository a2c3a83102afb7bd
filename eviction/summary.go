package eviction

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// SummaryInput is what StatsFromSummary turns into eviction Stats: the kubelet
// Summary plus the facts it cannot carry.
type SummaryInput struct {
	Summary          *statsapi.Summary
	DedicatedImageFs bool
	SplitContainerFs bool
	// AllocatableMemory is the node's allocatable memory in bytes (0: unknown).
	AllocatableMemory uint64
	// Pods are the active pods; stats of pods not among them are dropped, since
	// only active pods can be evicted.
	Pods []*v1.Pod
}

// StatsFromSummary maps the Summary onto the signals' inputs as upstream does:
// memory from the node's working set, allocatable memory from the "pods" system
// container, nodefs from node.fs, imagefs/containerfs from node.runtime, PIDs from
// node.rlimit, and per pod its containers' rootfs/logs, its volumes and its
// ephemeral-storage total.
func StatsFromSummary(in SummaryInput) Stats {
	s := in.Summary
	out := Stats{}
	if s == nil {
		return out
	}
	n := s.Node
	if n.Memory != nil {
		out.Time = n.Memory.Time.Time
		out.MemoryWorkingSet = n.Memory.WorkingSetBytes
		out.MemoryAvailable = n.Memory.AvailableBytes
		if n.Memory.AvailableBytes != nil && n.Memory.WorkingSetBytes != nil {
			c := *n.Memory.AvailableBytes + *n.Memory.WorkingSetBytes
			out.MemoryCapacity = &c
		}
	}
	if n.Fs != nil {
		if out.Time.IsZero() {
			out.Time = n.Fs.Time.Time
		}
		out.NodeFs = fsStats(n.Fs)
	}
	for _, sc := range n.SystemContainers {
		if sc.Name == statsapi.SystemContainerPods && sc.Memory != nil && in.AllocatableMemory > 0 {
			a := in.AllocatableMemory
			out.AllocatableMemory = &a
			out.PodsMemoryWorkingSet = sc.Memory.WorkingSetBytes
		}
	}
	if in.DedicatedImageFs && n.Runtime != nil && n.Runtime.ImageFs != nil {
		f := fsStats(n.Runtime.ImageFs)
		out.ImageFs = &f
		if in.SplitContainerFs && n.Runtime.ContainerFs != nil {
			c := fsStats(n.Runtime.ContainerFs)
			out.ContainerFs = &c
		}
	}
	if r := n.Rlimit; r != nil && r.MaxPID != nil && r.NumOfRunningProcesses != nil {
		maxPID, cur := uint64(*r.MaxPID), uint64(*r.NumOfRunningProcesses)
		out.PIDMax, out.PIDCurrent = &maxPID, &cur
	}

	active := make(map[types.UID]*v1.Pod, len(in.Pods))
	for _, p := range in.Pods {
		active[p.UID] = p
	}
	for i := range s.Pods {
		ps := &s.Pods[i]
		pod := active[types.UID(ps.PodRef.UID)]
		if pod == nil {
			continue
		}
		eps := PodStats{Pod: pod}
		if ps.Memory != nil {
			eps.MemoryWorkingSet = ps.Memory.WorkingSetBytes
		}
		if ps.ProcessStats != nil {
			eps.Processes = ps.ProcessStats.ProcessCount
		}
		if len(ps.VolumeStats) > 0 {
			var used, inodes uint64
			for _, v := range ps.VolumeStats {
				used += deref(v.UsedBytes)
				inodes += deref(v.InodesUsed)
				eps.Volumes = append(eps.Volumes, VolumeStats{Name: v.Name, UsedBytes: v.UsedBytes})
			}
			eps.LocalVolumeUsedBytes, eps.LocalVolumeInodes = &used, &inodes
		}
		if ps.EphemeralStorage != nil {
			eps.EphemeralStorageUsedBytes = ps.EphemeralStorage.UsedBytes
		}
		for _, c := range ps.Containers {
			cs := ContainerStats{Name: c.Name}
			if c.Memory != nil {
				cs.MemoryWorkingSet = c.Memory.WorkingSetBytes
			}
			if c.Rootfs != nil {
				cs.RootfsUsedBytes, cs.RootfsInodes = c.Rootfs.UsedBytes, c.Rootfs.InodesUsed
			}
			if c.Logs != nil {
				cs.LogsUsedBytes, cs.LogsInodes = c.Logs.UsedBytes, c.Logs.InodesUsed
			}
			eps.Containers = append(eps.Containers, cs)
		}
		out.Pods = append(out.Pods, eps)
	}
	return out
}

func fsStats(f *statsapi.FsStats) FsStats {
	return FsStats{CapacityBytes: f.CapacityBytes, AvailableBytes: f.AvailableBytes, Inodes: f.Inodes, InodesFree: f.InodesFree}
}

func deref(p *uint64) uint64 {
	if p == nil {
		return 0
	}
	return *p
}
