//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

// draTestDriver is a DRA driver run by the test itself: a registration
// server in nodelet's plugins_registry and the DRA v1 service on its own
// socket. It records the prepare and unprepare calls and answers each
// claim with one CDI device, whose spec the test writes.
type draTestDriver struct {
	drapb.UnimplementedDRAPluginServer
	name, cdiID string

	mu         sync.Mutex
	prepared   []string // claim UIDs
	unprepared []string
	registered chan *registerapi.RegistrationStatus

	srvs []*grpc.Server
	wg   sync.WaitGroup
}

type draRegistration struct {
	registerapi.UnimplementedRegistrationServer
	d        *draTestDriver
	endpoint string
}

func (r *draRegistration) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.DRAPlugin, Name: r.d.name, Endpoint: r.endpoint,
		SupportedVersions: []string{drapb.DRAPluginService}}, nil
}

func (r *draRegistration) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	select {
	case r.d.registered <- s:
	default:
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

func (d *draTestDriver) NodePrepareResources(_ context.Context, req *drapb.NodePrepareResourcesRequest) (*drapb.NodePrepareResourcesResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	resp := &drapb.NodePrepareResourcesResponse{Claims: map[string]*drapb.NodePrepareResourceResponse{}}
	for _, c := range req.Claims {
		d.prepared = append(d.prepared, c.Uid)
		resp.Claims[c.Uid] = &drapb.NodePrepareResourceResponse{Devices: []*drapb.Device{{
			RequestNames: []string{"dev"}, PoolName: "pool", DeviceName: "dev-0", CdiDeviceIds: []string{d.cdiID},
		}}}
	}
	return resp, nil
}

func (d *draTestDriver) NodeUnprepareResources(_ context.Context, req *drapb.NodeUnprepareResourcesRequest) (*drapb.NodeUnprepareResourcesResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	resp := &drapb.NodeUnprepareResourcesResponse{Claims: map[string]*drapb.NodeUnprepareResourceResponse{}}
	for _, c := range req.Claims {
		d.unprepared = append(d.unprepared, c.Uid)
		resp.Claims[c.Uid] = &drapb.NodeUnprepareResourceResponse{}
	}
	return resp, nil
}

func (d *draTestDriver) calls() (prepared, unprepared []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.prepared...), append([]string(nil), d.unprepared...)
}

func (d *draTestDriver) serve(t *testing.T, sock string, register func(*grpc.Server)) {
	t.Helper()
	_ = os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatalf("listening on %s: %v", sock, err)
	}
	s := grpc.NewServer()
	register(s)
	d.srvs = append(d.srvs, s)
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		_ = s.Serve(l)
	}()
}

func (d *draTestDriver) stop() {
	for _, s := range d.srvs {
		s.Stop()
	}
	d.wg.Wait()
}

// TestDRAClaim (issue 21): a DRA driver registers through plugins_registry;
// the scheduler allocates its device (a ResourceSlice the test publishes)
// to a pod's ResourceClaim; nodelet prepares the claim with the driver
// before the pod starts, the driver's CDI device reaches the container
// (containerd applies the CDI spec's env), and deleting the pod unprepares
// the claim.
func TestDRAClaim(t *testing.T) {
	f := framework.New(t)
	cdiDir := f.Env.All["CDI_SPEC_DIR"]
	if cdiDir == "" {
		t.Skip("the rig's runtime has no CDI spec directory (CDI_SPEC_DIR): containerd2 only")
	}
	ctx := context.Background()
	ns := f.NewNamespace()
	n := startNode(t, f, framework.NodeletOptions{})

	// A name of its own per run: DeviceClasses and ResourceSlices are cluster-wide.
	suffix := strings.ToLower(ns)
	driver := "e2e.dra.nodelet.io"
	kind := "nodelet.io/e2e-" + suffix
	d := &draTestDriver{name: driver, cdiID: kind + "=dev-0", registered: make(chan *registerapi.RegistrationStatus, 1)}
	t.Cleanup(d.stop)

	// The CDI spec of the device: an env variable the container shows.
	spec := map[string]any{
		"cdiVersion": "0.6.0",
		"kind":       kind,
		"devices": []any{map[string]any{"name": "dev-0", "containerEdits": map[string]any{
			"env": []string{"DRA_E2E_DEVICE=dev-0-" + suffix}}}},
	}
	blob, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	specPath := filepath.Join(cdiDir, "nodelet-e2e-"+suffix+".json")
	if err := os.WriteFile(specPath, blob, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(specPath) })

	sockDir, err := os.MkdirTemp("", "dra")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(sockDir) })
	endpoint := filepath.Join(sockDir, "dra.sock")
	d.serve(t, endpoint, func(s *grpc.Server) { drapb.RegisterDRAPluginServer(s, d) })
	regSock := filepath.Join(n.RootDir, "plugins_registry", "e2e-dra-reg.sock")
	if err := os.MkdirAll(filepath.Dir(regSock), 0o750); err != nil {
		t.Fatal(err)
	}
	d.serve(t, regSock, func(s *grpc.Server) {
		registerapi.RegisterRegistrationServer(s, &draRegistration{d: d, endpoint: endpoint})
	})
	select {
	case s := <-d.registered:
		if !s.PluginRegistered {
			t.Fatalf("nodelet refused the DRA driver: %s", s.Error)
		}
	case <-time.After(time.Minute):
		t.Fatal("nodelet did not register the DRA driver within a minute")
	}

	res := f.Client.ResourceV1()
	class := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-" + suffix},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", driver)}}}},
	}
	if _, err := res.DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating DeviceClass (is resource.k8s.io/v1 served?): %v", err)
	}
	t.Cleanup(func() { _ = res.DeviceClasses().Delete(context.Background(), class.Name, metav1.DeleteOptions{}) })
	slice := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-" + suffix},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   driver,
			NodeName: ptr.To(f.Env.NodeName),
			Pool:     resourceapi.ResourcePool{Name: "pool", Generation: 1, ResourceSliceCount: 1},
			Devices:  []resourceapi.Device{{Name: "dev-0"}},
		},
	}
	if _, err := res.ResourceSlices().Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ResourceSlice: %v", err)
	}
	t.Cleanup(func() { _ = res.ResourceSlices().Delete(context.Background(), slice.Name, metav1.DeleteOptions{}) })
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "claim"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "dev", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class.Name}}}}},
	}
	claim, err = res.ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating ResourceClaim: %v", err)
	}

	pod := f.BusyboxPod(ns, "with-claim", "sh", "-c", "echo device=$DRA_E2E_DEVICE; sleep 3600")
	pod.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "c", ResourceClaimName: ptr.To("claim")}}
	pod.Spec.Containers[0].Resources.Claims = []v1.ResourceClaim{{Name: "c", Request: "dev"}}
	pod = scheduledPod(ctx, t, f, pod)
	f.WaitForPodPhase(ctx, ns, pod.Name, v1.PodRunning, 2*time.Minute)

	got, err := res.ResourceClaims(ns).Get(ctx, "claim", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Allocation == nil || len(got.Status.ReservedFor) != 1 || got.Status.ReservedFor[0].UID != pod.UID {
		t.Fatalf("claim not allocated and reserved for the pod: %+v", got.Status)
	}
	prepared, _ := d.calls()
	if len(prepared) != 1 || prepared[0] != string(claim.UID) {
		t.Fatalf("NodePrepareResources calls = %v, want one for claim %s", prepared, claim.UID)
	}
	want := "device=dev-0-" + suffix
	var logs string
	err = framework.WaitFor(ctx, time.Minute, "the container's DRA_E2E_DEVICE from the CDI spec", func(ctx context.Context) (bool, error) {
		raw, err := f.Client.CoreV1().Pods(ns).GetLogs(pod.Name, &v1.PodLogOptions{}).DoRaw(ctx)
		logs = strings.TrimSpace(string(raw))
		return err == nil && logs != "", nil
	})
	if err != nil || logs != want {
		t.Fatalf("container log = %q (%v), want %q: the CDI device did not reach the container", logs, err, want)
	}
	state, err := os.ReadFile(filepath.Join(n.RootDir, "dra_manager_state"))
	if err != nil || !strings.Contains(string(state), string(claim.UID)) || !strings.Contains(string(state), d.cdiID) {
		t.Fatalf("dra_manager_state does not list the prepared claim %s with %s: %s (%v)", claim.UID, d.cdiID, state, err)
	}

	// A grace period, so the pod object stays until nodelet reports it
	// terminated, which is after the claim is unprepared (upstream's order).
	f.DeletePod(ctx, ns, pod.Name, ptr.To[int64](1))
	f.WaitForPodGone(ctx, ns, pod.Name, 2*time.Minute)
	_, unprepared := d.calls()
	if len(unprepared) != 1 || unprepared[0] != string(claim.UID) {
		t.Fatalf("NodeUnprepareResources calls = %v, want one for claim %s", unprepared, claim.UID)
	}
	state, err = os.ReadFile(filepath.Join(n.RootDir, "dra_manager_state"))
	if err != nil || strings.Contains(string(state), string(claim.UID)) {
		t.Fatalf("dra_manager_state still lists claim %s after the pod went: %s (%v)", claim.UID, state, err)
	}
}
