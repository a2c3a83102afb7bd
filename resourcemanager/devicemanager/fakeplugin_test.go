package devicemanager

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// fakePlugin is a device plugin serving on a socket in the manager's directory.
type fakePlugin struct {
	pluginapi.UnimplementedDevicePluginServer
	t        *testing.T
	dir      string
	resource string
	endpoint string
	opts     *pluginapi.DevicePluginOptions

	mu        sync.Mutex
	devices   []*pluginapi.Device
	changed   chan struct{}
	allocated [][]string
	preStart  [][]string
	preferred []string

	srv  *grpc.Server
	done chan struct{}
}

func newFakePlugin(t *testing.T, dir, resource, endpoint string, devs ...*pluginapi.Device) *fakePlugin {
	return &fakePlugin{t: t, dir: dir, resource: resource, endpoint: endpoint, devices: devs,
		changed: make(chan struct{}, 1), opts: &pluginapi.DevicePluginOptions{}}
}

func dev(id string, healthy bool) *pluginapi.Device {
	h := pluginapi.Healthy
	if !healthy {
		h = pluginapi.Unhealthy
	}
	return &pluginapi.Device{ID: id, Health: h}
}

// serve starts the plugin's gRPC server; stop ends it.
func (p *fakePlugin) serve() {
	p.t.Helper()
	sock := filepath.Join(p.dir, p.endpoint)
	_ = os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		p.t.Fatalf("plugin listen: %v", err)
	}
	p.srv = grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(p.srv, p)
	p.done = make(chan struct{})
	go func() {
		defer close(p.done)
		_ = p.srv.Serve(l)
	}()
}

func (p *fakePlugin) stop() {
	p.srv.Stop()
	<-p.done
	_ = os.Remove(filepath.Join(p.dir, p.endpoint))
}

// register calls the manager's registration socket as a plugin does.
func (p *fakePlugin) register(version string) error {
	conn, err := grpc.NewClient("unix://"+filepath.Join(p.dir, SocketName), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = pluginapi.NewRegistrationClient(conn).Register(context.Background(), &pluginapi.RegisterRequest{
		Version: version, Endpoint: p.endpoint, ResourceName: p.resource, Options: p.opts,
	})
	return err
}

func (p *fakePlugin) setDevices(devs ...*pluginapi.Device) {
	p.mu.Lock()
	p.devices = devs
	p.mu.Unlock()
	select {
	case p.changed <- struct{}{}:
	default:
	}
}

func (p *fakePlugin) ListAndWatch(_ *pluginapi.Empty, s grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	for {
		p.mu.Lock()
		resp := &pluginapi.ListAndWatchResponse{Devices: p.devices}
		p.mu.Unlock()
		if err := s.Send(resp); err != nil {
			return err
		}
		select {
		case <-s.Context().Done():
			return nil
		case <-p.changed:
		}
	}
}

func (p *fakePlugin) GetPreferredAllocation(_ context.Context, r *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return &pluginapi.PreferredAllocationResponse{ContainerResponses: []*pluginapi.ContainerPreferredAllocationResponse{{DeviceIDs: p.preferred}}}, nil
}

func (p *fakePlugin) Allocate(_ context.Context, r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := &pluginapi.AllocateResponse{}
	for _, cr := range r.ContainerRequests {
		p.allocated = append(p.allocated, cr.DevicesIds)
		out.ContainerResponses = append(out.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs:        map[string]string{"FAKE_DEVICES": joinIDs(cr.DevicesIds)},
			Mounts:      []*pluginapi.Mount{{ContainerPath: "/dev-data", HostPath: "/var/fake", ReadOnly: true}},
			Devices:     []*pluginapi.DeviceSpec{{ContainerPath: "/dev/fake0", HostPath: "/dev/null", Permissions: "rw"}},
			Annotations: map[string]string{"fake.example.com/devices": joinIDs(cr.DevicesIds)},
			CdiDevices:  []*pluginapi.CDIDevice{{Name: "example.com/fake=" + cr.DevicesIds[0]}},
		})
	}
	return out, nil
}

func (p *fakePlugin) PreStartContainer(_ context.Context, r *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.preStart = append(p.preStart, r.DevicesIds)
	return &pluginapi.PreStartContainerResponse{}, nil
}

func joinIDs(ids []string) string {
	s := ""
	for i, id := range ids {
		if i > 0 {
			s += ","
		}
		s += id
	}
	return s
}
