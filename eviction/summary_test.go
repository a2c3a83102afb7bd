package eviction

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

func TestStatsFromSummary(t *testing.T) {
	active := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: "uid-a"}}
	sum := &statsapi.Summary{
		Node: statsapi.NodeStats{
			Memory: &statsapi.MemoryStats{WorkingSetBytes: u(300), AvailableBytes: u(700)},
			Fs:     &statsapi.FsStats{CapacityBytes: u(1000), AvailableBytes: u(100), Inodes: u(50), InodesFree: u(5)},
			Runtime: &statsapi.RuntimeStats{
				ImageFs:     &statsapi.FsStats{CapacityBytes: u(2000), AvailableBytes: u(1500)},
				ContainerFs: &statsapi.FsStats{CapacityBytes: u(3000), AvailableBytes: u(2500)},
			},
			Rlimit:           &statsapi.RlimitStats{MaxPID: ptrInt64(1000), NumOfRunningProcesses: ptrInt64(900)},
			SystemContainers: []statsapi.ContainerStats{{Name: statsapi.SystemContainerPods, Memory: &statsapi.MemoryStats{WorkingSetBytes: u(250)}}},
		},
		Pods: []statsapi.PodStats{
			{PodRef: statsapi.PodReference{UID: "uid-a"}, Memory: &statsapi.MemoryStats{WorkingSetBytes: u(200)},
				VolumeStats:      []statsapi.VolumeStats{{Name: "scratch", FsStats: statsapi.FsStats{UsedBytes: u(10), InodesUsed: u(1)}}, {Name: "cfg", FsStats: statsapi.FsStats{UsedBytes: u(5)}}},
				EphemeralStorage: &statsapi.FsStats{UsedBytes: u(22)},
				Containers:       []statsapi.ContainerStats{{Name: "app", Rootfs: &statsapi.FsStats{UsedBytes: u(7)}, Logs: &statsapi.FsStats{UsedBytes: u(3)}}}},
			{PodRef: statsapi.PodReference{UID: "gone"}},
		},
	}
	tests := []struct {
		name                            string
		dedicated, split                bool
		allocatable                     uint64
		wantImageFs, wantSplit, wantAll bool
	}{
		{name: "images on nodefs", wantImageFs: false},
		{name: "dedicated imagefs", dedicated: true, wantImageFs: true},
		{name: "split containerfs", dedicated: true, split: true, wantImageFs: true, wantSplit: true},
		{name: "allocatable known", allocatable: 400, wantAll: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := StatsFromSummary(SummaryInput{Summary: sum, DedicatedImageFs: tt.dedicated, SplitContainerFs: tt.split,
				AllocatableMemory: tt.allocatable, Pods: []*v1.Pod{active}})
			if s.HasDedicatedImageFs() != tt.wantImageFs || s.SplitContainerFs() != tt.wantSplit {
				t.Errorf("imagefs=%v split=%v, want %v %v", s.HasDedicatedImageFs(), s.SplitContainerFs(), tt.wantImageFs, tt.wantSplit)
			}
			obs := Observe(s)
			if got := avail(obs, SignalMemoryAvailable); got != 700 {
				t.Errorf("memory.available = %d, want 700 (capacity 1000 - working set 300)", got)
			}
			if got, ok := obs[SignalAllocatableMemoryAvailable]; ok != tt.wantAll || ok && got.Available.Value() != 150 {
				t.Errorf("allocatableMemory.available = %v (present %v), want 150 when allocatable is known", got.Available.String(), ok)
			}
			if got := avail(obs, SignalImageFsAvailable); tt.wantImageFs && got != 1500 || !tt.wantImageFs && got != 100 {
				t.Errorf("imagefs.available = %d", got)
			}
			if got := avail(obs, SignalPIDAvailable); got != 100 {
				t.Errorf("pid.available = %d, want 100", got)
			}
			if len(s.Pods) != 1 || s.Pods[0].Pod != active {
				t.Fatalf("pods = %+v, want only the active pod", s.Pods)
			}
			p := s.Pods[0]
			if *p.LocalVolumeUsedBytes != 15 || *p.LocalVolumeInodes != 1 || *p.MemoryWorkingSet != 200 {
				t.Errorf("pod stats = vol %d/%d mem %d", *p.LocalVolumeUsedBytes, *p.LocalVolumeInodes, *p.MemoryWorkingSet)
			}
			if len(p.Volumes) != 2 || p.Volumes[0].Name != "scratch" || *p.Volumes[0].UsedBytes != 10 || p.Volumes[1].Name != "cfg" || *p.Volumes[1].UsedBytes != 5 {
				t.Errorf("volumes = %+v, want scratch 10 and cfg 5 by name", p.Volumes)
			}
			if p.EphemeralStorageUsedBytes == nil || *p.EphemeralStorageUsedBytes != 22 {
				t.Errorf("ephemeral storage = %v, want the Summary's 22", p.EphemeralStorageUsedBytes)
			}
			if used, _ := diskUsage(&p, fsParts{root: true, logs: true, volumes: true}, false); used != 25 {
				t.Errorf("disk usage = %d, want 25 (volumes 15 + rootfs 7 + logs 3)", used)
			}
		})
	}
}

func avail(obs Observations, s Signal) int64 {
	q := obs[s].Available
	return q.Value()
}

func ptrInt64(v int64) *int64 { return &v }
