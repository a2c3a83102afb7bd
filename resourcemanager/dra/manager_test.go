package dra

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pluginmanager"
)

// fakeDriver is a DRA driver on a temp unix socket: it records the claims
// it is asked to prepare and unprepare and gives each one CDI device per
// request.
type fakeDriver struct {
	drapb.UnimplementedDRAPluginServer
	name string

	mu          sync.Mutex
	prepares    [][]string // claim names per call
	unprepares  [][]string
	failPrepare string // per-claim error
}

func (d *fakeDriver) NodePrepareResources(_ context.Context, req *drapb.NodePrepareResourcesRequest) (*drapb.NodePrepareResourcesResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var names []string
	resp := &drapb.NodePrepareResourcesResponse{Claims: map[string]*drapb.NodePrepareResourceResponse{}}
	for _, c := range req.Claims {
		names = append(names, c.Name)
		if d.failPrepare != "" {
			resp.Claims[c.Uid] = &drapb.NodePrepareResourceResponse{Error: d.failPrepare}
			continue
		}
		resp.Claims[c.Uid] = &drapb.NodePrepareResourceResponse{Devices: []*drapb.Device{
			{RequestNames: []string{"gpu"}, PoolName: "pool", DeviceName: "gpu-0", CdiDeviceIds: []string{d.name + "/gpu=" + c.Name}},
		}}
	}
	d.prepares = append(d.prepares, names)
	return resp, nil
}

func (d *fakeDriver) NodeUnprepareResources(_ context.Context, req *drapb.NodeUnprepareResourcesRequest) (*drapb.NodeUnprepareResourcesResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var names []string
	resp := &drapb.NodeUnprepareResourcesResponse{Claims: map[string]*drapb.NodeUnprepareResourceResponse{}}
	for _, c := range req.Claims {
		names = append(names, c.Name)
		resp.Claims[c.Uid] = &drapb.NodeUnprepareResourceResponse{}
	}
	d.unprepares = append(d.unprepares, names)
	return resp, nil
}

func (d *fakeDriver) calls() (prepares, unprepares [][]string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([][]string(nil), d.prepares...), append([][]string(nil), d.unprepares...)
}

// startDriver serves d on a new unix socket and returns its path.
func startDriver(t *testing.T, d *fakeDriver) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dra") // short: sun_path is 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "dra.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	drapb.RegisterDRAPluginServer(s, d)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = s.Serve(l)
	}()
	t.Cleanup(func() { s.Stop(); wg.Wait() })
	return sock
}

const driverName = "gpu.example.com"

func claimFor(name string, uid types.UID, pods ...*v1.Pod) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: uid},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: driverName, Pool: "pool", Device: "gpu-0"}},
		}}},
	}
	for _, p := range pods {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p.Name, UID: p.UID})
	}
	return c
}

func claimPod(name string, uid types.UID, claim string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: uid},
		Spec: v1.PodSpec{
			ResourceClaims: []v1.PodResourceClaim{{Name: "c", ResourceClaimName: ptr.To(claim)}},
			Containers: []v1.Container{{Name: "main", Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "c", Request: "gpu"}}}},
				{Name: "sidecar"}},
		},
	}
}

// testManager is a manager on a temp root with the fake driver registered.
func testManager(t *testing.T, root string, d *fakeDriver, objs ...*resourceapi.ResourceClaim) (*Manager, *Plugins) {
	t.Helper()
	client := fake.NewClientset()
	for _, o := range objs {
		if _, err := client.ResourceV1().ResourceClaims(o.Namespace).Create(context.Background(), o, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	plugins := NewPlugins()
	t.Cleanup(plugins.Close)
	if d != nil {
		if err := plugins.RegisterPlugin(context.Background(), pluginmanager.Plugin{Name: d.name, Endpoint: startDriver(t, d), Versions: []string{drapb.DRAPluginService}}); err != nil {
			t.Fatal(err)
		}
	}
	m, err := New(root, client, plugins)
	if err != nil {
		t.Fatal(err)
	}
	return m, plugins
}

func cdiOf(t *testing.T, m *Manager, pod *v1.Pod, c int) []string {
	t.Helper()
	cfg := &runtimeapi.ContainerConfig{CDIDevices: []*runtimeapi.CDIDevice{{Name: "plugin/dev=0"}}}
	if err := m.ApplyDevices(context.Background(), pod, &pod.Spec.Containers[c], cfg); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range cfg.CDIDevices {
		out = append(out, d.Name)
	}
	return out
}

func TestPrepareSharedClaimUnpreparedWithItsLastPod(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	d := &fakeDriver{name: driverName}
	p1, p2 := claimPod("p1", "uid-1", "shared"), claimPod("p2", "uid-2", "shared")
	m, _ := testManager(t, root, d, claimFor("shared", "claim-uid", p1, p2))

	for _, p := range []*v1.Pod{p1, p2, p1} {
		if err := m.PrepareResources(ctx, p); err != nil {
			t.Fatalf("PrepareResources(%s): %v", p.Name, err)
		}
	}
	if prepares, _ := d.calls(); !reflect.DeepEqual(prepares, [][]string{{"shared"}}) {
		t.Fatalf("NodePrepareResources calls = %v, want one for the shared claim", prepares)
	}
	if got, want := cdiOf(t, m, p2, 0), []string{"plugin/dev=0", driverName + "/gpu=shared"}; !reflect.DeepEqual(got, want) {
		t.Errorf("CDI devices of the claiming container = %v, want %v (the device plugin's kept)", got, want)
	}
	if got := cdiOf(t, m, p2, 1); !reflect.DeepEqual(got, []string{"plugin/dev=0"}) {
		t.Errorf("CDI devices of a container naming no claim = %v", got)
	}

	// A restart reads the claim and both pods back from dra_manager_state.
	m2, _ := testManager(t, root, d, claimFor("shared", "claim-uid", p1, p2))
	want := []ClaimState{{ClaimUID: "claim-uid", ClaimName: "shared", Namespace: "ns",
		PodUIDs: map[string]struct{}{"uid-1": {}, "uid-2": {}},
		DriverState: map[string]DriverState{driverName: {Devices: []Device{{PoolName: "pool", DeviceName: "gpu-0",
			RequestNames: []string{"gpu"}, CDIDeviceIDs: []string{driverName + "/gpu=shared"}}}}}}}
	if got := m2.Claims(); !reflect.DeepEqual(got, want) {
		t.Fatalf("claims after a restart = %+v, want %+v", got, want)
	}

	if err := m2.UnprepareResources(ctx, p1); err != nil {
		t.Fatal(err)
	}
	if _, unprepares := d.calls(); len(unprepares) != 0 {
		t.Fatalf("claim unprepared while p2 still uses it: %v", unprepares)
	}
	if err := m2.UnprepareResources(ctx, p2); err != nil {
		t.Fatal(err)
	}
	if err := m2.UnprepareResources(ctx, p2); err != nil { // idempotent
		t.Fatal(err)
	}
	if _, unprepares := d.calls(); !reflect.DeepEqual(unprepares, [][]string{{"shared"}}) {
		t.Fatalf("NodeUnprepareResources calls = %v, want one once the last pod went", unprepares)
	}
	states, err := readState(filepath.Join(root, StateFileName))
	if err != nil || len(states) != 0 {
		t.Fatalf("checkpoint after unprepare = %+v, %v; want empty", states, err)
	}
}

func TestPrepareRefusals(t *testing.T) {
	ctx := context.Background()
	pod := claimPod("p", "uid-1", "c")
	for _, c := range []struct {
		name     string
		claim    *resourceapi.ResourceClaim
		driver   *fakeDriver
		recorded bool
		wantErr  string
	}{
		{name: "claim missing", driver: &fakeDriver{name: driverName},
			wantErr: `prepare dynamic resources: fetch ResourceClaim c: resourceclaims.resource.k8s.io "c" not found`},
		{name: "not reserved for the pod", claim: claimFor("c", "claim-uid"), driver: &fakeDriver{name: driverName},
			wantErr: "prepare dynamic resources: pod p (uid-1) is not allowed to use ResourceClaim c (claim-uid)"},
		{name: "driver not registered", claim: claimFor("c", "claim-uid", pod),
			wantErr: "prepare dynamic resources: DRA driver gpu.example.com is not registered"},
		{name: "driver fails the claim", claim: claimFor("c", "claim-uid", pod), driver: &fakeDriver{name: driverName, failPrepare: "no GPU left"}, recorded: true,
			wantErr: "prepare dynamic resources: NodePrepareResources failed for ResourceClaim c: no GPU left"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var claims []*resourceapi.ResourceClaim
			if c.claim != nil {
				claims = append(claims, c.claim)
			}
			m, _ := testManager(t, t.TempDir(), c.driver, claims...)
			err := m.PrepareResources(ctx, pod)
			if err == nil || err.Error() != c.wantErr {
				t.Fatalf("PrepareResources = %v, want %q", err, c.wantErr)
			}
			// Refused before any driver call: nothing recorded, so a container
			// naming the claim could not get its config (a driver's failure
			// leaves the pod recorded, for the unprepare).
			cfg := &runtimeapi.ContainerConfig{}
			if err := m.ApplyDevices(ctx, pod, &pod.Spec.Containers[0], cfg); (err == nil) != c.recorded {
				t.Errorf("ApplyDevices after the refusal = %v, %v; want an error: %t", cfg.CDIDevices, err, !c.recorded)
			}
		})
	}
}

func TestPrepareFailedDriverCallKeepsPodForUnprepare(t *testing.T) {
	// A driver failing a claim after the pod was recorded: the pod going
	// away must still unprepare what the driver may have half prepared.
	ctx := context.Background()
	pod := claimPod("p", "uid-1", "c")
	d := &fakeDriver{name: driverName, failPrepare: "busy"}
	m, _ := testManager(t, t.TempDir(), d, claimFor("c", "claim-uid", pod))
	if err := m.PrepareResources(ctx, pod); err == nil {
		t.Fatal("PrepareResources succeeded")
	}
	if err := m.UnprepareResources(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if _, unprepares := d.calls(); !reflect.DeepEqual(unprepares, [][]string{{"c"}}) {
		t.Fatalf("NodeUnprepareResources calls = %v, want one", unprepares)
	}
}

func TestPodWithoutClaimsNeedsNoAPI(t *testing.T) {
	m, err := New(t.TempDir(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.PrepareResources(context.Background(), &v1.Pod{}); err != nil {
		t.Fatal(err)
	}
	err = m.PrepareResources(context.Background(), claimPod("p", "u", "c"))
	if err == nil || !strings.Contains(err.Error(), "nodelet runs without one") {
		t.Fatalf("standalone PrepareResources of a pod with claims = %v", err)
	}
}

func TestStateCorruptStopsStart(t *testing.T) {
	root := t.TempDir()
	if err := writeState(filepath.Join(root, StateFileName), []ClaimState{{ClaimUID: "u", ClaimName: "c", Namespace: "ns"}}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, StateFileName)
	blob, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(blob), `\"c\"`, `\"x\"`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = New(root, nil, nil)
	if !errors.Is(err, errCorrupt) || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("New with a tampered checkpoint = %v, want a checksum error", err)
	}
}
