// Package podresources serves the kubelet's pod resources API
// (k8s.io/kubelet/pkg/apis/podresources/v1: List, Get,
// GetAllocatableResources) on <root>/pod-resources/kubelet.sock, which
// monitoring agents (GPU exporters) read to map devices to pods. It is rate
// limited as upstream (100 QPS, burst 10). Devices come from the device
// manager, exclusive CPUs from the CPU manager and NUMA memory from the memory
// manager (the agent passes them; each may be nil).
package podresources

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	api "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/nodelet/nodelet/internal/podutil"
)

const (
	// DirName is the API's directory under the root directory, SocketName its socket.
	DirName    = "pod-resources"
	SocketName = "kubelet.sock"
	// Upstream's podresources.DefaultQPS and DefaultBurstTokens.
	defaultQPS   = 100
	defaultBurst = 10
)

// Pods are the pods the node runs (syncloop.Loop).
type Pods interface {
	ActivePods() []*v1.Pod
}

// Devices are the device plugins' assignments (devicemanager.Manager).
type Devices interface {
	ContainerDevices(uid types.UID, container string) []*api.ContainerDevices
	AllocatableDevices() []*api.ContainerDevices
}

// CPUs are a CPU manager's exclusive CPUs; without one, containers have none.
type CPUs interface {
	ExclusiveCPUs(uid types.UID, container string) []int64
	AllocatableCPUs() []int64
}

// Memory is a memory manager's NUMA memory (the Static policy's blocks);
// under policy None containers have none and nothing is allocatable.
type Memory interface {
	ContainerMemory(uid types.UID, container string) []*api.ContainerMemory
	AllocatableMemory() []*api.ContainerMemory
}

// Server implements the PodResourcesLister service.
type Server struct {
	api.UnimplementedPodResourcesListerServer
	pods    Pods
	devices Devices
	cpus    CPUs
	memory  Memory
}

// NewServer serves pods' resources; devices, cpus and memory may be nil.
func NewServer(pods Pods, devices Devices, cpus CPUs, memory Memory) *Server {
	if devices == nil {
		devices = noDevices{}
	}
	if cpus == nil {
		cpus = noCPUs{}
	}
	if memory == nil {
		memory = noMemory{}
	}
	return &Server{pods: pods, devices: devices, cpus: cpus, memory: memory}
}

type noDevices struct{}

func (noDevices) ContainerDevices(types.UID, string) []*api.ContainerDevices { return nil }
func (noDevices) AllocatableDevices() []*api.ContainerDevices                { return nil }

type noCPUs struct{}

func (noCPUs) ExclusiveCPUs(types.UID, string) []int64 { return nil }
func (noCPUs) AllocatableCPUs() []int64                { return nil }

type noMemory struct{}

func (noMemory) ContainerMemory(types.UID, string) []*api.ContainerMemory { return nil }
func (noMemory) AllocatableMemory() []*api.ContainerMemory                { return nil }

// List lists the node's active pods with their containers' resources.
func (s *Server) List(_ context.Context, _ *api.ListPodResourcesRequest) (*api.ListPodResourcesResponse, error) {
	pods := s.pods.ActivePods()
	out := &api.ListPodResourcesResponse{PodResources: make([]*api.PodResources, 0, len(pods))}
	for _, p := range pods {
		out.PodResources = append(out.PodResources, s.podResources(p))
	}
	return out, nil
}

// Get is one active pod's resources.
func (s *Server) Get(_ context.Context, req *api.GetPodResourcesRequest) (*api.GetPodResourcesResponse, error) {
	for _, p := range s.pods.ActivePods() {
		if p.Name == req.PodName && p.Namespace == req.PodNamespace {
			return &api.GetPodResourcesResponse{PodResources: s.podResources(p)}, nil
		}
	}
	return nil, fmt.Errorf("pod %s in namespace %s not found", req.PodName, req.PodNamespace)
}

// GetAllocatableResources is what the node can give: healthy devices and,
// with the static CPU manager and the Static memory manager, the CPUs and
// the NUMA memory they can hand out.
func (s *Server) GetAllocatableResources(_ context.Context, _ *api.AllocatableResourcesRequest) (*api.AllocatableResourcesResponse, error) {
	return &api.AllocatableResourcesResponse{
		Devices: s.devices.AllocatableDevices(),
		CpuIds:  s.cpus.AllocatableCPUs(),
		Memory:  s.memory.AllocatableMemory(),
	}, nil
}

// podResources lists the app containers and, as upstream with sidecars,
// the restartable init containers, which hold resources for the pod's life.
func (s *Server) podResources(p *v1.Pod) *api.PodResources {
	pr := &api.PodResources{Name: p.Name, Namespace: p.Namespace}
	add := func(c *v1.Container) {
		pr.Containers = append(pr.Containers, &api.ContainerResources{
			Name:    c.Name,
			Devices: s.devices.ContainerDevices(p.UID, c.Name),
			CpuIds:  s.cpus.ExclusiveCPUs(p.UID, c.Name),
			Memory:  s.memory.ContainerMemory(p.UID, c.Name),
		})
	}
	for i := range p.Spec.InitContainers {
		if podutil.IsRestartableInitContainer(&p.Spec.InitContainers[i]) {
			add(&p.Spec.InitContainers[i])
		}
	}
	for i := range p.Spec.Containers {
		add(&p.Spec.Containers[i])
	}
	return pr
}

// Serve serves s on dir/kubelet.sock until ctx is done, rate limited as
// upstream (a request over the limit gets ResourceExhausted).
func Serve(ctx context.Context, dir string, s *Server) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("creating the pod resources directory: %w", err)
	}
	sock := filepath.Join(dir, SocketName)
	if err := os.Remove(sock); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("removing the old pod resources socket: %w", err)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("listening on the pod resources socket: %w", err)
	}
	limiter := rate.NewLimiter(defaultQPS, defaultBurst)
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if !limiter.Allow() {
			return nil, status.Error(codes.ResourceExhausted, "rejected by rate limit")
		}
		return h(ctx, req)
	}))
	api.RegisterPodResourcesListerServer(srv, s)
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(l) }()
	klog.InfoS("Pod resources API serving", "path", sock)
	select {
	case <-ctx.Done():
		srv.Stop()
		<-serveErr
		return nil
	case err := <-serveErr:
		return fmt.Errorf("serving the pod resources API: %w", err)
	}
}
