package csi

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/nodelet/nodelet/internal/testsupport/eventually"
	"github.com/nodelet/nodelet/internal/testsupport/leakcheck"
	"github.com/nodelet/nodelet/pluginmanager"
)

// fakePlugin is a node plugin as node-driver-registrar and a CSI driver
// make it: a Registration server on a socket in the registry directory and
// a CSI Node server on the driver's own socket.
type fakePlugin struct {
	registerapi.UnimplementedRegistrationServer
	csipb.UnimplementedNodeServer

	info         *registerapi.PluginInfo
	nodeInfo     *csipb.NodeGetInfoResponse
	failNodeInfo atomic.Int32 // NodeGetInfo calls left to fail
	statuses     chan *registerapi.RegistrationStatus

	regSock   string
	servers   []*grpc.Server
	listeners []*net.UnixListener
	wg        sync.WaitGroup
}

func (p *fakePlugin) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return p.info, nil
}

func (p *fakePlugin) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	p.statuses <- s
	return &registerapi.RegistrationStatusResponse{}, nil
}

func (p *fakePlugin) NodeGetInfo(context.Context, *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	if p.failNodeInfo.Add(-1) >= 0 {
		return nil, errors.New("driver not ready")
	}
	return p.nodeInfo, nil
}

// startPlugin serves a CSI plugin named name: its registration socket
// <root>/plugins_registry/<name>-reg.sock and endpoint <root>/plugins/<name>/csi.sock.
func startPlugin(t *testing.T, root, name string, nodeInfo *csipb.NodeGetInfoResponse, mutate func(*fakePlugin)) *fakePlugin {
	t.Helper()
	endpoint := filepath.Join(PluginsDir(root), name, "csi.sock")
	p := &fakePlugin{
		info:     &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: name, Endpoint: endpoint, SupportedVersions: []string{"1.0.0"}},
		nodeInfo: nodeInfo,
		statuses: make(chan *registerapi.RegistrationStatus, 10),
		regSock:  filepath.Join(pluginmanager.RegistryDir(root), name+"-reg.sock"),
	}
	if mutate != nil {
		mutate(p)
	}
	csiSrv := grpc.NewServer()
	csipb.RegisterNodeServer(csiSrv, p)
	p.serve(t, csiSrv, endpoint)
	regSrv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(regSrv, p)
	p.serve(t, regSrv, p.regSock) // last: the registry may dial the endpoint at once
	t.Cleanup(p.stop)
	return p
}

// listenUnix makes a unix socket at path, creating its directory.
func listenUnix(t *testing.T, path string) *net.UnixListener {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	return l.(*net.UnixListener)
}

func (p *fakePlugin) serve(t *testing.T, s *grpc.Server, path string) {
	t.Helper()
	l := listenUnix(t, path)
	p.servers = append(p.servers, s)
	p.listeners = append(p.listeners, l)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		_ = s.Serve(l)
	}()
}

// stop ends the servers; closing the listeners removes their sockets.
func (p *fakePlugin) stop() {
	for _, s := range p.servers {
		s.Stop()
	}
	p.wg.Wait()
	p.servers = nil
}

// crash ends the servers as a killed process does: the socket files stay.
func (p *fakePlugin) crash() {
	for _, l := range p.listeners {
		l.SetUnlinkOnClose(false)
	}
	p.stop()
}

// wantRegistered waits for the plugin to be told it registered.
func (p *fakePlugin) wantRegistered(t *testing.T) {
	t.Helper()
	if s := p.status(t); !s.PluginRegistered || s.Error != "" {
		t.Fatalf("status sent to %s = %+v, want registered", p.regSock, s)
	}
}

// status waits for the next NotifyRegistrationStatus.
func (p *fakePlugin) status(t *testing.T) *registerapi.RegistrationStatus {
	t.Helper()
	select {
	case s := <-p.statuses:
		return s
	case <-time.After(eventually.Timeout):
		t.Fatalf("no registration status sent to %s", p.regSock)
		return nil
	}
}

// startRegistry runs a registry, as the CSIPlugin handler of a plugin
// watcher with the extra options, on a new root (short: sun_path is 108
// bytes) until the test ends, then checks the watcher's Run joined its
// goroutines and Close left no driver, as the agent runs them.
func startRegistry(t *testing.T, client kubernetes.Interface, extra ...pluginmanager.Option) (string, *Registry) {
	t.Helper()
	root, err := os.MkdirTemp("", "csi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	var opts []Option
	if client != nil {
		opts = append(opts, WithKubeClient(client, "n1"))
	}
	r, err := New(context.Background(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pluginmanager.New(pluginmanager.RegistryDir(root),
		append(extra, pluginmanager.WithHandler(PluginType, r), pluginmanager.WithPollInterval(10*time.Millisecond))...)
	if err != nil {
		t.Fatal(err)
	}
	leaks := leakcheck.Check(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	// Cleanups run last-in first-out: the plugins (registered later) stop first.
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		r.Close()
		if n := len(r.Drivers()); n != 0 {
			t.Errorf("%d drivers left after Run returned", n)
		}
		leaks()
	})
	eventually.True(t, "registry directory created", func() bool {
		fi, err := os.Stat(pluginmanager.RegistryDir(root))
		return err == nil && fi.IsDir() && fi.Mode().Perm() == 0o750
	})
	return root, r
}

func fakeNodeClient() *fake.Clientset {
	return fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-n1", Labels: map[string]string{"kubernetes.io/hostname": "n1"}}})
}

func getNode(t *testing.T, c kubernetes.Interface) *v1.Node {
	t.Helper()
	n, err := c.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func csiNodeDrivers(t *testing.T, c kubernetes.Interface) map[string]storagev1.CSINodeDriver {
	t.Helper()
	cn, err := c.StorageV1().CSINodes().Get(context.Background(), "n1", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]storagev1.CSINodeDriver{}
	for _, d := range cn.Spec.Drivers {
		out[d.Name] = d
	}
	return out
}

func hostpathInfo(nodeID string) *csipb.NodeGetInfoResponse {
	return &csipb.NodeGetInfoResponse{
		NodeId:             nodeID,
		MaxVolumesPerNode:  10,
		AccessibleTopology: &csipb.Topology{Segments: map[string]string{"topology.hostpath.csi/node": "n1"}},
	}
}

func TestRegistryRegistersAndDeregistersCSIDriver(t *testing.T) {
	client := fakeNodeClient()
	root, r := startRegistry(t, client)
	p := startPlugin(t, root, "hostpath.csi.k8s.io", hostpathInfo("node-1"), nil)

	p.wantRegistered(t)
	if !r.Registered("hostpath.csi.k8s.io") {
		t.Fatal("driver not registered after its plugin was told so")
	}
	info, _ := r.Driver("hostpath.csi.k8s.io")
	if info.NodeID != "node-1" || info.MaxVolumesPerNode != 10 || info.Version != "1.0.0" || info.Topology["topology.hostpath.csi/node"] != "n1" {
		t.Errorf("driver info = %+v", info)
	}

	d, ok := csiNodeDrivers(t, client)["hostpath.csi.k8s.io"]
	if !ok || d.NodeID != "node-1" || len(d.TopologyKeys) != 1 || d.TopologyKeys[0] != "topology.hostpath.csi/node" ||
		d.Allocatable == nil || d.Allocatable.Count == nil || *d.Allocatable.Count != 10 {
		t.Errorf("CSINode driver = %+v (present %v)", d, ok)
	}
	cn, _ := client.StorageV1().CSINodes().Get(context.Background(), "n1", metav1.GetOptions{})
	if len(cn.OwnerReferences) != 1 || cn.OwnerReferences[0].Kind != "Node" || cn.OwnerReferences[0].UID != "uid-n1" {
		t.Errorf("CSINode owners = %+v", cn.OwnerReferences)
	}
	n := getNode(t, client)
	if got := n.Annotations[NodeIDAnnotation]; got != `{"hostpath.csi.k8s.io":"node-1"}` {
		t.Errorf("node ID annotation = %q", got)
	}
	if n.Labels["topology.hostpath.csi/node"] != "n1" || n.Labels["kubernetes.io/hostname"] != "n1" {
		t.Errorf("node labels = %v", n.Labels)
	}

	// The volume manager's calls go over the kept connection.
	nc, err := r.NodeClient(context.Background(), "hostpath.csi.k8s.io")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := nc.NodeGetInfo(context.Background(), &csipb.NodeGetInfoRequest{})
	if err != nil || resp.GetNodeId() != "node-1" {
		t.Fatalf("NodeGetInfo through NodeClient = %v, %v", resp, err)
	}

	p.stop() // removes the registration socket
	eventually.True(t, "driver deregistered", func() bool { return !r.Registered("hostpath.csi.k8s.io") })
	eventually.True(t, "CSINode entry removed", func() bool {
		_, ok := csiNodeDrivers(t, client)["hostpath.csi.k8s.io"]
		return !ok
	})
	eventually.True(t, "node ID annotation removed", func() bool {
		_, ok := getNode(t, client).Annotations[NodeIDAnnotation]
		return !ok
	})
	if _, err := r.NodeClient(context.Background(), "hostpath.csi.k8s.io"); err == nil {
		t.Error("NodeClient of a deregistered driver succeeded")
	}
}

func TestRegistryRefusesPlugins(t *testing.T) {
	for _, c := range []struct {
		name    string
		mutate  func(*fakePlugin)
		wantErr string
	}{
		{name: "dra", mutate: func(p *fakePlugin) { p.info.Type = registerapi.DRAPlugin },
			wantErr: "no handler registered for plugin type: DRAPlugin at socket %s (DRAPlugin plugins are not supported by nodelet, only CSIPlugin)"},
		{name: "v0", mutate: func(p *fakePlugin) { p.info.SupportedVersions = []string{"0.3.0"} },
			wantErr: `RegisterPlugin error -- plugin validation failed with err: validation failed for CSI Driver v0 at endpoint`},
	} {
		t.Run(c.name, func(t *testing.T) {
			client := fakeNodeClient()
			root, r := startRegistry(t, client)
			p := startPlugin(t, root, c.name, hostpathInfo("node-1"), c.mutate)
			s := p.status(t)
			want := strings.ReplaceAll(c.wantErr, "%s", p.regSock)
			if s.PluginRegistered || !strings.Contains(s.Error, want) {
				t.Fatalf("status = %+v, want refused with %q", s, want)
			}
			if r.Registered(c.name) {
				t.Error("refused plugin registered")
			}
			if d := csiNodeDrivers(t, client); d != nil {
				t.Errorf("CSINode written for a refused plugin: %v", d)
			}
			if n := getNode(t, client); n.Annotations[NodeIDAnnotation] != "" || n.Labels["topology.hostpath.csi/node"] != "" {
				t.Errorf("node changed for a refused plugin: %v %v", n.Annotations, n.Labels)
			}
		})
	}
}

func TestRegistryTwoDrivers(t *testing.T) {
	client := fakeNodeClient()
	root, r := startRegistry(t, client)
	a := startPlugin(t, root, "a.csi.k8s.io", &csipb.NodeGetInfoResponse{NodeId: "id-a"}, nil)
	b := startPlugin(t, root, "b.csi.k8s.io", &csipb.NodeGetInfoResponse{NodeId: "id-b", MaxVolumesPerNode: 3}, nil)
	a.wantRegistered(t)
	b.wantRegistered(t)
	drivers := csiNodeDrivers(t, client)
	if len(drivers) != 2 || drivers["a.csi.k8s.io"].NodeID != "id-a" || drivers["a.csi.k8s.io"].Allocatable != nil ||
		drivers["b.csi.k8s.io"].NodeID != "id-b" || *drivers["b.csi.k8s.io"].Allocatable.Count != 3 {
		t.Errorf("CSINode drivers = %+v", drivers)
	}
	if got := getNode(t, client).Annotations[NodeIDAnnotation]; got != `{"a.csi.k8s.io":"id-a","b.csi.k8s.io":"id-b"}` {
		t.Errorf("node ID annotation = %q", got)
	}
	if got := r.Drivers(); len(got) != 2 {
		t.Errorf("Drivers() = %v", got)
	}

	a.stop()
	eventually.True(t, "a deregistered", func() bool { return !r.Registered("a.csi.k8s.io") })
	eventually.True(t, "a gone from CSINode", func() bool { return len(csiNodeDrivers(t, client)) == 1 })
	if _, ok := csiNodeDrivers(t, client)["b.csi.k8s.io"]; !ok || !r.Registered("b.csi.k8s.io") {
		t.Error("b lost with a")
	}
	eventually.True(t, "annotation keeps b only", func() bool {
		return getNode(t, client).Annotations[NodeIDAnnotation] == `{"b.csi.k8s.io":"id-b"}`
	})
}

func TestRegistryRetriesFailedRegistration(t *testing.T) {
	client := fakeNodeClient()
	root, r := startRegistry(t, client)
	p := startPlugin(t, root, "slow.csi.k8s.io", &csipb.NodeGetInfoResponse{NodeId: "id"}, func(p *fakePlugin) { p.failNodeInfo.Store(1) })
	s := p.status(t)
	if s.PluginRegistered || !strings.HasPrefix(s.Error, "RegisterPlugin error -- plugin registration failed with err: calling NodeGetInfo of CSI driver slow.csi.k8s.io") ||
		!strings.Contains(s.Error, "driver not ready") {
		t.Fatalf("first status = %+v, want the NodeGetInfo failure", s)
	}
	if d := csiNodeDrivers(t, client); len(d) != 0 {
		t.Errorf("CSINode written for a failed registration: %v", d)
	}
	p.wantRegistered(t) // the retry
	if !r.Registered("slow.csi.k8s.io") {
		t.Error("not registered after the retry")
	}
}

func TestRegistryReregistersRecreatedSocket(t *testing.T) {
	client := fakeNodeClient()
	root, r := startRegistry(t, client)
	p := startPlugin(t, root, "re.csi.k8s.io", &csipb.NodeGetInfoResponse{NodeId: "old"}, nil)
	p.wantRegistered(t)
	p.stop()
	p2 := startPlugin(t, root, "re.csi.k8s.io", &csipb.NodeGetInfoResponse{NodeId: "new"}, nil)
	p2.wantRegistered(t)
	eventually.True(t, "new node ID", func() bool {
		info, ok := r.Driver("re.csi.k8s.io")
		return ok && info.NodeID == "new" && csiNodeDrivers(t, client)["re.csi.k8s.io"].NodeID == "new"
	})
	nc, err := r.NodeClient(context.Background(), "re.csi.k8s.io")
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := nc.NodeGetInfo(context.Background(), &csipb.NodeGetInfoRequest{}); err != nil || resp.GetNodeId() != "new" {
		t.Errorf("NodeGetInfo over the new connection = %v, %v", resp, err)
	}
}

// A plugin that died without removing its socket is deregistered (as
// upstream's connection monitor does) and its socket retried.
func TestRegistryDeregistersCrashedPlugin(t *testing.T) {
	client := fakeNodeClient()
	root, r := startRegistry(t, client)
	p := startPlugin(t, root, "crash.csi.k8s.io", &csipb.NodeGetInfoResponse{NodeId: "id"}, nil)
	p.wantRegistered(t)
	p.crash()
	if _, err := os.Lstat(p.regSock); err != nil {
		t.Fatalf("crashed plugin's socket: %v", err)
	}
	eventually.True(t, "crashed driver deregistered", func() bool { return !r.Registered("crash.csi.k8s.io") })
	eventually.True(t, "CSINode entry removed", func() bool { return len(csiNodeDrivers(t, client)) == 0 })
}

func TestRegistryStandalone(t *testing.T) {
	root, r := startRegistry(t, nil)
	p := startPlugin(t, root, "solo.csi.k8s.io", &csipb.NodeGetInfoResponse{NodeId: "id"}, nil)
	p.wantRegistered(t)
	if _, err := r.NodeClient(context.Background(), "solo.csi.k8s.io"); err != nil {
		t.Error(err)
	}
}

func TestNodeClientUnknownDriver(t *testing.T) {
	r, err := New(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.NodeClient(context.Background(), "nope.csi.k8s.io")
	if err == nil || err.Error() != "driver name nope.csi.k8s.io not found in the list of registered CSI drivers" {
		t.Errorf("err = %v", err)
	}
	if r.Registered("nope.csi.k8s.io") {
		t.Error("unknown driver registered")
	}
}

func TestNewNeedsNodeNameWithClient(t *testing.T) {
	if _, err := New(context.Background(), WithKubeClient(fake.NewClientset(), "")); err == nil {
		t.Error("a client without a node name was accepted")
	}
}
