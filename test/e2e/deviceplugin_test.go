//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

const e2eDevice = "example.com/e2e-dev"

// e2ePlugin is a device plugin run by the test itself in nodelet's device
// plugin directory: two devices, and an Allocate answer with an env variable
// naming them and a mount of a host directory the container writes to.
type e2ePlugin struct {
	pluginapi.UnimplementedDevicePluginServer
	dir, hostDir string
	srv          *grpc.Server
	wg           sync.WaitGroup
}

func (p *e2ePlugin) start(t *testing.T) {
	t.Helper()
	sock := filepath.Join(p.dir, "e2e-dev.sock")
	_ = os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatalf("device plugin listen: %v", err)
	}
	p.srv = grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(p.srv, p)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		_ = p.srv.Serve(l)
	}()
	conn, err := grpc.NewClient("unix://"+filepath.Join(p.dir, "kubelet.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	err = framework.WaitFor(context.Background(), time.Minute, "device plugin registration", func(ctx context.Context) (bool, error) {
		_, err := pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
			Version: pluginapi.Version, Endpoint: "e2e-dev.sock", ResourceName: e2eDevice,
		})
		return err == nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func (p *e2ePlugin) stop() {
	if p.srv != nil {
		p.srv.Stop()
		p.wg.Wait()
	}
}

func (p *e2ePlugin) ListAndWatch(_ *pluginapi.Empty, s grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	err := s.Send(&pluginapi.ListAndWatchResponse{Devices: []*pluginapi.Device{
		{ID: "dev-0", Health: pluginapi.Healthy}, {ID: "dev-1", Health: pluginapi.Healthy},
	}})
	if err != nil {
		return err
	}
	<-s.Context().Done()
	return nil
}

func (p *e2ePlugin) Allocate(_ context.Context, r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	out := &pluginapi.AllocateResponse{}
	for _, c := range r.ContainerRequests {
		out.ContainerResponses = append(out.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs:   map[string]string{"E2E_DEVICES": strings.Join(c.DevicesIds, ",")},
			Mounts: []*pluginapi.Mount{{ContainerPath: "/e2e-dev", HostPath: p.hostDir}},
		})
	}
	return out, nil
}

// nodeDevices waits until the Node reports capacity and allocatable of resource res.
func nodeDevices(ctx context.Context, t *testing.T, f *framework.Framework, res v1.ResourceName, capacity, allocatable int64) {
	t.Helper()
	err := framework.WaitFor(ctx, time.Minute, fmt.Sprintf("%s capacity %d allocatable %d", res, capacity, allocatable), func(ctx context.Context) (bool, error) {
		n, err := f.Client.CoreV1().Nodes().Get(ctx, f.Env.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c, a := n.Status.Capacity[res], n.Status.Allocatable[res]
		return c.Value() == capacity && a.Value() == allocatable, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestDevicePlugin (issue 21): a device plugin registers and its devices
// become the node's extended resource; a pod asking for one runs with the
// plugin's env and mount; a pod asking for more than is free is refused
// with UnexpectedAdmissionError; the plugin restarted is allocatable again;
// nodelet restarted keeps the pod and its device, which the pod resources
// API lists.
func TestDevicePlugin(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	l := &lifecycle{f: f, ns: f.NewNamespace(), dir: t.TempDir()}
	n := startNode(t, f, framework.NodeletOptions{})
	p := &e2ePlugin{dir: filepath.Join(n.RootDir, "device-plugins"), hostDir: t.TempDir()}
	t.Cleanup(p.stop)
	p.start(t)
	nodeDevices(ctx, t, f, e2eDevice, 2, 2)

	pod := f.BusyboxPod(l.ns, "with-device", "sh", "-c", "echo $E2E_DEVICES > /e2e-dev/out; sleep 3600")
	pod.Spec.NodeName = f.Env.NodeName
	pod.Spec.Containers[0].Resources.Limits = v1.ResourceList{e2eDevice: resource.MustParse("1")}
	l.create(ctx, t, pod)
	l.wait(ctx, t, pod.Name, 2*time.Minute, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	var got string
	err := framework.WaitFor(ctx, time.Minute, "the container's E2E_DEVICES in the plugin's mount", func(context.Context) (bool, error) {
		b, err := os.ReadFile(filepath.Join(p.hostDir, "out"))
		got = strings.TrimSpace(string(b))
		return err == nil && got != "", nil
	})
	if err != nil || got != "dev-0" {
		t.Fatalf("E2E_DEVICES = %q (%v), want dev-0", got, err)
	}

	greedy := f.BusyboxPod(l.ns, "too-many-devices", "sleep", "3600")
	greedy.Spec.Containers[0].Resources.Limits = v1.ResourceList{e2eDevice: resource.MustParse("2")}
	l.rejected(ctx, t, greedy, "UnexpectedAdmissionError",
		"Allocate failed due to requested number of devices unavailable for example.com/e2e-dev. Requested: 2, Available: 1, which is unexpected")

	// The plugin restarts: capacity stays, allocatable comes back once it registers again.
	p.stop()
	nodeDevices(ctx, t, f, e2eDevice, 2, 0)
	p.start(t)
	nodeDevices(ctx, t, f, e2eDevice, 2, 2)

	// nodelet restarts (and removes the plugin's socket, as upstream): the pod
	// keeps running with its device; the plugin registers again.
	before := l.wait(ctx, t, pod.Name, time.Second, "", func(*v1.Pod) bool { return true })
	restartForRegistration(ctx, t, n)
	f.WaitForNodeReady(ctx, 2*time.Minute)
	p.stop()
	p.start(t)
	nodeDevices(ctx, t, f, e2eDevice, 2, 2)
	after := l.wait(ctx, t, pod.Name, time.Minute, "still running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	if b, a := before.Status.ContainerStatuses[0], after.Status.ContainerStatuses[0]; b.ContainerID != a.ContainerID || a.RestartCount != 0 {
		t.Errorf("container changed across the restart: %s -> %s (restarts %d)", b.ContainerID, a.ContainerID, a.RestartCount)
	}

	cs := podResourcesOf(ctx, t, podResourcesClient(t, n), l.ns, pod.Name).GetContainers()
	if len(cs) != 1 || len(cs[0].Devices) != 1 || cs[0].Devices[0].ResourceName != e2eDevice || strings.Join(cs[0].Devices[0].DeviceIds, ",") != "dev-0" {
		t.Errorf("pod resources: %v, want main with %s dev-0", cs, e2eDevice)
	}
}

// podResourcesOf is the pod's entry in the pod resources API, once nodelet knows the pod:
// right after a restart its pod sources may not have delivered the pod yet.
func podResourcesOf(ctx context.Context, t *testing.T, pr podresourcesapi.PodResourcesListerClient, ns, pod string) *podresourcesapi.PodResources {
	t.Helper()
	var res *podresourcesapi.GetPodResourcesResponse
	var lastErr error
	err := framework.WaitFor(ctx, time.Minute, "pod "+pod+" in the pod resources API", func(ctx context.Context) (bool, error) {
		res, lastErr = pr.Get(ctx, &podresourcesapi.GetPodResourcesRequest{PodName: pod, PodNamespace: ns})
		return lastErr == nil, nil
	})
	if err != nil {
		t.Fatalf("%v: %v", err, lastErr)
	}
	return res.PodResources
}

// podResourcesClient is a client of n's pod resources socket, closed at cleanup.
func podResourcesClient(t *testing.T, n *framework.Nodelet) podresourcesapi.PodResourcesListerClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+filepath.Join(n.RootDir, "pod-resources", "kubelet.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return podresourcesapi.NewPodResourcesListerClient(conn)
}

// restartForRegistration restarts nodelet and waits for the new process's device plugin
// registration socket. The old process unlinks the socket as it stops (it closes the
// listener), so the socket there after the start is the new one; comparing files instead
// does not work, as the new socket may get the old one's inode. The node may still be Ready
// from before the restart, so its condition says nothing here.
func restartForRegistration(ctx context.Context, t *testing.T, n *framework.Nodelet) {
	t.Helper()
	regSock := filepath.Join(n.RootDir, "device-plugins", "kubelet.sock")
	if err := n.Stop(); err != nil {
		t.Fatalf("stopping nodelet: %v", err)
	}
	if _, err := os.Lstat(regSock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the stopped nodelet left its registration socket %s (%v)", regSock, err)
	}
	n.Restart()
	err := framework.WaitFor(ctx, 2*time.Minute, "the restarted nodelet's registration socket", func(context.Context) (bool, error) {
		_, err := os.Lstat(regSock)
		return err == nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
