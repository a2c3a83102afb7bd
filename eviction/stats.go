package eviction

import (
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// FsStats describes one filesystem. A nil pointer field means "not measured".
type FsStats struct {
	CapacityBytes  *uint64
	AvailableBytes *uint64
	Inodes         *uint64
	InodesFree     *uint64
}

// ContainerStats is the usage of one container of a pod.
type ContainerStats struct {
	Name             string
	MemoryWorkingSet *uint64
	// RootfsUsedBytes is the writable layer (on imagefs/containerfs).
	RootfsUsedBytes *uint64
	RootfsInodes    *uint64
	LogsUsedBytes   *uint64
	LogsInodes      *uint64
}

// PodStats is the usage of one pod.
type PodStats struct {
	Pod              *v1.Pod
	MemoryWorkingSet *uint64
	// LocalVolumeUsedBytes covers the pod's local ephemeral volumes (emptyDir etc.).
	LocalVolumeUsedBytes *uint64
	LocalVolumeInodes    *uint64
	// Volumes are the pod's volumes measured on nodefs, by name.
	Volumes []VolumeStats
	// EphemeralStorageUsedBytes is the pod's local ephemeral storage as the stats
	// count it: writable layers, logs, local ephemeral volumes, /etc/hosts.
	EphemeralStorageUsedBytes *uint64
	Processes                 *uint64
	Containers                []ContainerStats
}

// VolumeStats is the disk usage of one of a pod's volumes.
type VolumeStats struct {
	Name      string
	UsedBytes *uint64
}

// Stats is what the eviction manager needs of the node each cycle. The agent
// fills it from CRI/cadvisor; nil means not measured.
type Stats struct {
	Time time.Time

	MemoryCapacity   *uint64
	MemoryAvailable  *uint64 // informational; memory.available is capacity − working set
	MemoryWorkingSet *uint64

	// AllocatableMemory is the node's allocatable memory; PodsMemoryWorkingSet
	// is the working set of the pods cgroup.
	AllocatableMemory    *uint64
	PodsMemoryWorkingSet *uint64

	NodeFs      FsStats
	ImageFs     *FsStats // nil: no dedicated image filesystem
	ContainerFs *FsStats // nil: container writable layers live with the images

	PIDMax     *uint64
	PIDCurrent *uint64

	Pods []PodStats
}

// Observation is the observed available amount of a signal and its capacity.
type Observation struct {
	Available resource.Quantity
	Capacity  resource.Quantity
	Time      time.Time
}

// Observations holds one Observation per measured signal.
type Observations map[Signal]Observation

// HasDedicatedImageFs reports whether images live on their own filesystem.
func (s Stats) HasDedicatedImageFs() bool { return s.ImageFs != nil }

// SplitContainerFs reports whether writable layers live on a filesystem
// other than the images' (KEP-4191 split disk).
func (s Stats) SplitContainerFs() bool { return s.ImageFs != nil && s.ContainerFs != nil }

func binQ(v uint64) resource.Quantity {
	return *resource.NewQuantity(int64(v), resource.BinarySI)
}

func decQ(v uint64) resource.Quantity {
	return *resource.NewQuantity(int64(v), resource.DecimalSI)
}

// Observe computes every signal it can from stats, as upstream does:
// memory.available = capacity − working set (clamped at 0),
// allocatableMemory.available = allocatable − pods' working set,
// *fs.available/inodesFree from the filesystem, pid.available = max − current.
// Without a dedicated imagefs, imagefs.* mirror nodefs.*; without a split
// containerfs, containerfs.* mirror imagefs.* (or nodefs.*).
func Observe(s Stats) Observations {
	obs := Observations{}
	if s.MemoryCapacity != nil && s.MemoryWorkingSet != nil {
		obs[SignalMemoryAvailable] = Observation{
			Available: binQ(satSub(*s.MemoryCapacity, *s.MemoryWorkingSet)),
			Capacity:  binQ(*s.MemoryCapacity),
			Time:      s.Time,
		}
	}
	if s.AllocatableMemory != nil && s.PodsMemoryWorkingSet != nil {
		obs[SignalAllocatableMemoryAvailable] = Observation{
			Available: binQ(satSub(*s.AllocatableMemory, *s.PodsMemoryWorkingSet)),
			Capacity:  binQ(*s.AllocatableMemory),
			Time:      s.Time,
		}
	}
	fsObs := func(fs FsStats, avail, inodes Signal) {
		if fs.CapacityBytes != nil && fs.AvailableBytes != nil {
			obs[avail] = Observation{Available: binQ(*fs.AvailableBytes), Capacity: binQ(*fs.CapacityBytes), Time: s.Time}
		}
		if fs.Inodes != nil && fs.InodesFree != nil {
			obs[inodes] = Observation{Available: decQ(*fs.InodesFree), Capacity: decQ(*fs.Inodes), Time: s.Time}
		}
	}
	fsObs(s.NodeFs, SignalNodeFsAvailable, SignalNodeFsInodesFree)
	imageFs := s.NodeFs
	if s.ImageFs != nil {
		imageFs = *s.ImageFs
	}
	fsObs(imageFs, SignalImageFsAvailable, SignalImageFsInodesFree)
	containerFs := imageFs
	if s.SplitContainerFs() {
		containerFs = *s.ContainerFs
	}
	fsObs(containerFs, SignalContainerFsAvailable, SignalContainerFsInodesFree)
	if s.PIDMax != nil && s.PIDCurrent != nil {
		obs[SignalPIDAvailable] = Observation{
			Available: decQ(satSub(*s.PIDMax, *s.PIDCurrent)),
			Capacity:  decQ(*s.PIDMax),
			Time:      s.Time,
		}
	}
	return obs
}

func satSub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

// ThresholdsMet returns the thresholds whose signal is observed below the
// threshold value. With enforceMinReclaim the threshold counts as met until
// the signal is above value + minReclaim (hysteresis after an eviction).
func ThresholdsMet(thresholds []Threshold, obs Observations, enforceMinReclaim bool) []Threshold {
	var out []Threshold
	for _, t := range thresholds {
		o, ok := obs[t.Signal]
		if !ok {
			continue
		}
		q := t.Value.Resolve(&o.Capacity)
		if enforceMinReclaim && t.MinReclaim != nil {
			q.Add(*t.MinReclaim.Resolve(&o.Capacity))
		}
		if q.Cmp(o.Available) > 0 {
			out = append(out, t)
		}
	}
	return out
}

// signalResource is the resource a signal starves, as named in messages.
func signalResource(s Signal) v1.ResourceName {
	switch s {
	case SignalMemoryAvailable, SignalAllocatableMemoryAvailable:
		return v1.ResourceMemory
	case SignalNodeFsAvailable, SignalImageFsAvailable, SignalContainerFsAvailable:
		return v1.ResourceEphemeralStorage
	case SignalNodeFsInodesFree, SignalImageFsInodesFree, SignalContainerFsInodesFree:
		return resourceInodes
	case SignalPIDAvailable:
		return resourcePIDs
	}
	return ""
}

const (
	resourceInodes v1.ResourceName = "inodes"
	resourcePIDs   v1.ResourceName = "pids"
)

// signalCondition is the node condition a signal drives.
func signalCondition(s Signal) v1.NodeConditionType {
	switch signalResource(s) {
	case v1.ResourceMemory:
		return v1.NodeMemoryPressure
	case v1.ResourceEphemeralStorage, resourceInodes:
		return v1.NodeDiskPressure
	case resourcePIDs:
		return v1.NodePIDPressure
	}
	return ""
}
