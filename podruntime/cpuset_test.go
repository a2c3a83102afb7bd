package podruntime

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// fakeCPUs pins container "pinned" to CPU 1 and the rest to the pool 0.
type fakeCPUs struct{ removed []types.UID }

func (f *fakeCPUs) CPUSetFor(_ types.UID, container string) string {
	if container == "pinned" {
		return "1"
	}
	return "0"
}

func (f *fakeCPUs) RemovePod(_ context.Context, uid types.UID) { f.removed = append(f.removed, uid) }

// fakeMemory puts container "pinned" on NUMA node 1 and leaves the rest to the runtime.
type fakeMemory struct{ removed []types.UID }

func (f *fakeMemory) MemsFor(_ types.UID, container string) string {
	if container == "pinned" {
		return "1"
	}
	return ""
}

func (f *fakeMemory) RemovePod(_ context.Context, uid types.UID) { f.removed = append(f.removed, uid) }

// The CPU manager's cpuset and the memory manager's NUMA nodes reach
// CreateContainer (linux cpuset_cpus, cpuset_mems), and a removed pod's CPUs
// and memory are released.
func TestContainerCPUSetFromCPUManager(t *testing.T) {
	r := newSyncRig(t)
	ctx := context.Background()
	cpus, mem := &fakeCPUs{}, &fakeMemory{}
	m, _ := r.managerWithDeps(Deps{CPUs: cpus, Memory: mem})
	pod := syncPod("pinned", v1.RestartPolicyAlways, nil, "pinned", "shared")
	if _, err := m.SyncPod(ctx, pod, r.status(pod)); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"pinned": "1", "shared": "0"} {
		id := r.containerID(pod, name, runtimeapi.ContainerState_CONTAINER_RUNNING)
		if got := r.fake.ContainerConfig(id).GetLinux().GetResources().GetCpusetCpus(); got != want {
			t.Errorf("container %s created with cpuset %q, want %q", name, got, want)
		}
	}
	for name, want := range map[string]string{"pinned": "1", "shared": ""} {
		id := r.containerID(pod, name, runtimeapi.ContainerState_CONTAINER_RUNNING)
		if got := r.fake.ContainerConfig(id).GetLinux().GetResources().GetCpusetMems(); got != want {
			t.Errorf("container %s created with cpuset.mems %q, want %q", name, got, want)
		}
	}
	if err := m.KillPod(ctx, pod, r.status(pod), nil); err != nil {
		t.Fatal(err)
	}
	if err := m.RemovePod(ctx, pod.UID, r.status(pod), ""); err != nil {
		t.Fatal(err)
	}
	if len(cpus.removed) != 1 || cpus.removed[0] != pod.UID {
		t.Errorf("released %v, want the pod", cpus.removed)
	}
	if len(mem.removed) != 1 || mem.removed[0] != pod.UID {
		t.Errorf("released memory of %v, want the pod", mem.removed)
	}
}
