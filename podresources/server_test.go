package podresources

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/testing/protocmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	api "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/nodelet/nodelet/internal/testsupport/eventually"
	"github.com/nodelet/nodelet/internal/testsupport/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

type fakePods []*v1.Pod

func (f fakePods) ActivePods() []*v1.Pod { return f }

type fakeDevices map[string][]*api.ContainerDevices // by "uid/container"

func (f fakeDevices) ContainerDevices(uid types.UID, c string) []*api.ContainerDevices {
	return f[string(uid)+"/"+c]
}
func (f fakeDevices) AllocatableDevices() []*api.ContainerDevices {
	return []*api.ContainerDevices{{ResourceName: "example.com/gpu", DeviceIds: []string{"g0", "g1"}}}
}

type fakeCPUs struct{}

func (fakeCPUs) ExclusiveCPUs(uid types.UID, c string) []int64 {
	if c == "app" {
		return []int64{1}
	}
	return nil
}
func (fakeCPUs) AllocatableCPUs() []int64 { return []int64{1, 2, 3} }

// fakeMemory: the app container holds 1Gi of memory on NUMA node 1 and
// 2Mi huge pages across nodes 0 and 1; nodes 0 and 1 can give 3Gi each.
type fakeMemory struct{}

func numa(ids ...int64) *api.TopologyInfo {
	t := &api.TopologyInfo{}
	for _, id := range ids {
		t.Nodes = append(t.Nodes, &api.NUMANode{ID: id})
	}
	return t
}

func (fakeMemory) ContainerMemory(uid types.UID, c string) []*api.ContainerMemory {
	if uid != "u1" || c != "app" {
		return nil
	}
	return []*api.ContainerMemory{
		{MemoryType: "memory", Size: 1 << 30, Topology: numa(1)},
		{MemoryType: "hugepages-2Mi", Size: 4 << 20, Topology: numa(0, 1)},
	}
}

func (fakeMemory) AllocatableMemory() []*api.ContainerMemory {
	return []*api.ContainerMemory{
		{MemoryType: "memory", Size: 3 << 30, Topology: numa(0)},
		{MemoryType: "memory", Size: 3 << 30, Topology: numa(1)},
	}
}

func testPods() fakePods {
	always := v1.ContainerRestartPolicyAlways
	return fakePods{{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu", Namespace: "ns", UID: "u1"},
		Spec: v1.PodSpec{
			InitContainers: []v1.Container{{Name: "setup"}, {Name: "sidecar", RestartPolicy: &always}},
			Containers:     []v1.Container{{Name: "app"}},
		},
	}, {
		ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: "ns", UID: "u2"},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "c"}}},
	}}
}

// serve runs the API on a temp socket and returns a client.
func serve(t *testing.T, s *Server) api.PodResourcesListerClient {
	t.Helper()
	dir, err := os.MkdirTemp("", "pr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, dir, s) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	sock := filepath.Join(dir, SocketName)
	eventually.True(t, "pod resources socket", func() bool { _, err := os.Stat(sock); return err == nil })
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return api.NewPodResourcesListerClient(conn)
}

func TestListGetAllocatable(t *testing.T) {
	devs := fakeDevices{"u1/app": {{ResourceName: "example.com/gpu", DeviceIds: []string{"g1"}}}}
	c := serve(t, NewServer(testPods(), devs, fakeCPUs{}, fakeMemory{}))
	ctx := context.Background()

	list, err := c.List(ctx, &api.ListPodResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	gpu := &api.PodResources{Name: "gpu", Namespace: "ns", Containers: []*api.ContainerResources{
		{Name: "sidecar"},
		{Name: "app", Devices: []*api.ContainerDevices{{ResourceName: "example.com/gpu", DeviceIds: []string{"g1"}}}, CpuIds: []int64{1},
			Memory: fakeMemory{}.ContainerMemory("u1", "app")},
	}}
	want := &api.ListPodResourcesResponse{PodResources: []*api.PodResources{gpu,
		{Name: "plain", Namespace: "ns", Containers: []*api.ContainerResources{{Name: "c"}}}}}
	if diff := cmp.Diff(want, list, protocmp.Transform()); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}

	got, err := c.Get(ctx, &api.GetPodResourcesRequest{PodName: "gpu", PodNamespace: "ns"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&api.GetPodResourcesResponse{PodResources: gpu}, got, protocmp.Transform()); diff != "" {
		t.Errorf("Get (-want +got):\n%s", diff)
	}
	if _, err := c.Get(ctx, &api.GetPodResourcesRequest{PodName: "nope", PodNamespace: "ns"}); err == nil || !strings.Contains(err.Error(), "pod nope in namespace ns not found") {
		t.Errorf("Get of a missing pod: %v", err)
	}

	alloc, err := c.GetAllocatableResources(ctx, &api.AllocatableResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	wantAlloc := &api.AllocatableResourcesResponse{Devices: fakeDevices{}.AllocatableDevices(), CpuIds: []int64{1, 2, 3},
		Memory: fakeMemory{}.AllocatableMemory()}
	if diff := cmp.Diff(wantAlloc, alloc, protocmp.Transform()); diff != "" {
		t.Errorf("GetAllocatableResources (-want +got):\n%s", diff)
	}
}

// Without a device, CPU or memory manager, containers list with no devices,
// no CPUs and no memory.
func TestNilProviders(t *testing.T) {
	c := serve(t, NewServer(testPods(), nil, nil, nil))
	list, err := c.List(context.Background(), &api.ListPodResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.PodResources {
		for _, ct := range p.Containers {
			if len(ct.Devices) != 0 || len(ct.CpuIds) != 0 || len(ct.Memory) != 0 {
				t.Errorf("%s/%s: %v", p.Name, ct.Name, ct)
			}
		}
	}
	alloc, err := c.GetAllocatableResources(context.Background(), &api.AllocatableResourcesRequest{})
	if err != nil || len(alloc.Devices) != 0 || len(alloc.CpuIds) != 0 || len(alloc.Memory) != 0 {
		t.Errorf("allocatable %v, %v", alloc, err)
	}
}
