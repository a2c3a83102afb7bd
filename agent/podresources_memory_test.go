package agent

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/podresources"
	"github.com/nodelet/nodelet/resourcemanager/memorymanager"
	"github.com/nodelet/nodelet/resourcemanager/topologymanager"
)

type activePods []*v1.Pod

func (a activePods) ActivePods() []*v1.Pod { return a }

// The pod resources API reports the Static memory manager's blocks: a
// Guaranteed container's memory with its size and NUMA node, and per node
// and resource what can be allocated (total less reservedMemory), as
// upstream's ContainerMemory; a BestEffort container none.
func TestPodResourcesMemory(t *testing.T) {
	const gi, mi = uint64(1 << 30), uint64(1 << 20)
	policy, err := memorymanager.NewStaticPolicy(map[int]memorymanager.NodeMemory{
		0: {v1.ResourceMemory: 4 * gi, "hugepages-2Mi": gi},
		1: {v1.ResourceMemory: 4 * gi},
	}, map[int]map[v1.ResourceName]uint64{0: {v1.ResourceMemory: 512 * mi}})
	if err != nil {
		t.Fatal(err)
	}
	memory, err := memorymanager.New(memorymanager.Config{Policy: memorymanager.PolicyStatic, Static: policy, RootDir: t.TempDir()}, clock.RealClock{})
	if err != nil {
		t.Fatal(err)
	}
	r := v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"), v1.ResourceMemory: resource.MustParse("1Gi"), "hugepages-2Mi": resource.MustParse("4Mi")}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: "ns", UID: "g1"}, Spec: v1.PodSpec{Containers: []v1.Container{
		{Name: "app", Resources: v1.ResourceRequirements{Requests: r, Limits: r}},
	}}}
	be := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "be", Namespace: "ns", UID: "b1"}, Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c"}}}}
	one, err := topologymanager.NewBitMask(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := memory.Allocate(context.Background(), pod, &pod.Spec.Containers[0], topologymanager.Hint{Affinity: one, Preferred: true}); err != nil {
		t.Fatal(err)
	}
	srv := podresources.NewServer(activePods{pod, be}, nil, nil, podResourcesMemory{memory})
	node := func(ids ...int64) *podresourcesapi.TopologyInfo {
		ti := &podresourcesapi.TopologyInfo{Nodes: []*podresourcesapi.NUMANode{}}
		for _, id := range ids {
			ti.Nodes = append(ti.Nodes, &podresourcesapi.NUMANode{ID: id})
		}
		return ti
	}
	list, err := srv.List(context.Background(), &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{
		{Name: "g", Namespace: "ns", Containers: []*podresourcesapi.ContainerResources{{Name: "app", Memory: []*podresourcesapi.ContainerMemory{
			{MemoryType: "hugepages-2Mi", Size: 4 * mi, Topology: node(0)},
			{MemoryType: "memory", Size: gi, Topology: node(0)},
		}}}},
		{Name: "be", Namespace: "ns", Containers: []*podresourcesapi.ContainerResources{{Name: "c"}}},
	}}
	if diff := cmp.Diff(want, list, protocmp.Transform()); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	alloc, err := srv.GetAllocatableResources(context.Background(), &podresourcesapi.AllocatableResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	wantAlloc := []*podresourcesapi.ContainerMemory{
		{MemoryType: "hugepages-2Mi", Size: gi, Topology: node(0)},
		// MemTotal counts the huge pages, which are not regular memory.
		{MemoryType: "memory", Size: 4*gi - gi - 512*mi, Topology: node(0)},
		{MemoryType: "memory", Size: 4 * gi, Topology: node(1)},
	}
	if diff := cmp.Diff(wantAlloc, alloc.Memory, protocmp.Transform()); diff != "" {
		t.Errorf("allocatable memory (-want +got):\n%s", diff)
	}

	none, err := memorymanager.New(memorymanager.Config{Policy: memorymanager.PolicyNone, RootDir: t.TempDir()}, clock.RealClock{})
	if err != nil {
		t.Fatal(err)
	}
	if got := (podResourcesMemory{none}).AllocatableMemory(); len(got) != 0 {
		t.Errorf("policy None reports allocatable memory %v", got)
	}
}
