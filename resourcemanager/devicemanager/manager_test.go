package devicemanager

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/internal/testsupport/eventually"
	"github.com/nodelet/nodelet/resourcemanager/topologymanager"
)

const fakeResource = "example.com/fake"

// shortDir is a temp dir with a path short enough for unix sockets.
// allocatePod admits a pod's devices as the agent does under topology
// manager policy none: inactive pods' devices freed once the sources are
// ready, then each container, init containers first, with no NUMA affinity.
func allocatePod(ctx context.Context, m *Manager, pod *v1.Pod, active []*v1.Pod, sourcesReady bool) error {
	if sourcesReady {
		m.FreeInactive(pod.UID, active)
	}
	for _, c := range podutil.AllContainers(pod) {
		if err := m.Allocate(ctx, pod, &c, topologymanager.Hint{}); err != nil {
			return err
		}
	}
	return nil
}

func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// startManager runs a manager on dir until the returned stop is called, on
// a one NUMA node machine.
func startManager(t *testing.T, dir string, clk *clocktesting.FakeClock) (*Manager, func()) {
	t.Helper()
	return startManagerOn(t, dir, clk, []int{0})
}

// startManagerOn is startManager on a machine of the given NUMA nodes.
func startManagerOn(t *testing.T, dir string, clk *clocktesting.FakeClock, numaNodes []int) (*Manager, func()) {
	t.Helper()
	m, err := New(dir, clk, numaNodes)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	eventually.True(t, "registration socket", func() bool {
		fi, err := os.Stat(dir + "/" + SocketName)
		return err == nil && fi.Mode()&os.ModeSocket != 0
	})
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(stop)
	return m, stop
}

func counts(m *Manager) (int64, int64) {
	c, a, _ := m.Capacity()
	cq, aq := c[fakeResource], a[fakeResource]
	return cq.Value(), aq.Value()
}

func waitCounts(t *testing.T, m *Manager, capacity, allocatable int64) {
	t.Helper()
	eventually.True(t, "capacity/allocatable", func() bool {
		c, a := counts(m)
		return c == capacity && a == allocatable
	})
}

func gpuPod(uid string, n int64) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p-" + uid, Namespace: "ns", UID: types.UID(uid)},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{
			Limits: v1.ResourceList{fakeResource: *resource.NewQuantity(n, resource.DecimalSI)}}}}},
	}
}

func TestRegisterListAndWatchFeedsCapacity(t *testing.T) {
	dir := shortDir(t)
	m, _ := startManager(t, dir, clocktesting.NewFakeClock(time.Now()))
	p := newFakePlugin(t, dir, fakeResource, "fake.sock", dev("a", true), dev("b", true))
	p.serve()
	defer p.stop()
	if err := p.register(pluginapi.Version); err != nil {
		t.Fatal(err)
	}
	waitCounts(t, m, 2, 2)
	// A device turning unhealthy leaves allocatable, not capacity.
	p.setDevices(dev("a", true), dev("b", false))
	waitCounts(t, m, 2, 1)
	if diff := cmp.Diff([]string{"a"}, m.AllocatableDevices()[0].DeviceIds); diff != "" {
		t.Errorf("allocatable devices (-want +got):\n%s", diff)
	}
}

func TestRegisterRefusals(t *testing.T) {
	dir := shortDir(t)
	startManager(t, dir, clocktesting.NewFakeClock(time.Now()))
	p := newFakePlugin(t, dir, fakeResource, "fake.sock")
	p.serve()
	defer p.stop()
	for _, tc := range []struct {
		name, version, resource, endpoint, want string
	}{
		{"old version", "v1alpha", fakeResource, "fake.sock", `requested API version "v1alpha" is not supported`},
		{"native resource", pluginapi.Version, "cpu", "fake.sock", `the ResourceName "cpu" is invalid`},
		{"path in endpoint", pluginapi.Version, fakeResource, "../fake.sock", "must be a socket name"},
		{"missing socket", pluginapi.Version, fakeResource, "nope.sock", "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newFakePlugin(t, dir, tc.resource, tc.endpoint)
			err := q.register(tc.version)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to say %q", err, tc.want)
			}
		})
	}
	// A symlink to a socket is refused: the endpoint is not followed.
	if err := os.Symlink(dir+"/fake.sock", dir+"/link.sock"); err != nil {
		t.Fatal(err)
	}
	q := newFakePlugin(t, dir, fakeResource, "link.sock")
	if err := q.register(pluginapi.Version); err == nil || !strings.Contains(err.Error(), "is not a socket") {
		t.Fatalf("symlink endpoint: error %v", err)
	}
}

func TestAllocateIntoContainerConfig(t *testing.T) {
	dir := shortDir(t)
	m, _ := startManager(t, dir, clocktesting.NewFakeClock(time.Now()))
	p := newFakePlugin(t, dir, fakeResource, "fake.sock", dev("a", true), dev("b", true), dev("c", true))
	p.opts = &pluginapi.DevicePluginOptions{PreStartRequired: true, GetPreferredAllocationAvailable: true}
	p.preferred = []string{"c"}
	p.serve()
	defer p.stop()
	if err := p.register(pluginapi.Version); err != nil {
		t.Fatal(err)
	}
	waitCounts(t, m, 3, 3)
	ctx := context.Background()
	pod := gpuPod("u1", 1)
	if err := allocatePod(ctx, m, pod, nil, true); err != nil {
		t.Fatal(err)
	}
	// Admission again (a resync) keeps the assignment and does not call the plugin.
	if err := allocatePod(ctx, m, pod, nil, true); err != nil {
		t.Fatal(err)
	}
	cfg := &runtimeapi.ContainerConfig{Envs: []*runtimeapi.KeyValue{{Key: "OWN", Value: []byte("1")}}}
	if err := m.ApplyDevices(ctx, pod, &pod.Spec.Containers[0], cfg); err != nil {
		t.Fatal(err)
	}
	want := &runtimeapi.ContainerConfig{
		Envs:        []*runtimeapi.KeyValue{{Key: "FAKE_DEVICES", Value: []byte("c")}, {Key: "OWN", Value: []byte("1")}},
		Mounts:      []*runtimeapi.Mount{{ContainerPath: "/dev-data", HostPath: "/var/fake", Readonly: true}},
		Devices:     []*runtimeapi.Device{{ContainerPath: "/dev/fake0", HostPath: "/dev/null", Permissions: "rw"}},
		Annotations: map[string]string{"fake.example.com/devices": "c"},
		CDIDevices:  []*runtimeapi.CDIDevice{{Name: "example.com/fake=c"}},
	}
	if diff := cmp.Diff(want.String(), cfg.String()); diff != "" {
		t.Errorf("container config (-want +got):\n%s", diff)
	}
	p.mu.Lock()
	if diff := cmp.Diff([][]string{{"c"}}, p.allocated); diff != "" {
		t.Errorf("Allocate calls (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([][]string{{"c"}}, p.preStart); diff != "" {
		t.Errorf("PreStartContainer calls (-want +got):\n%s", diff)
	}
	p.mu.Unlock()
	if got := m.ContainerDevices("u1", "c"); len(got) != 1 || got[0].ResourceName != fakeResource || got[0].DeviceIds[0] != "c" {
		t.Errorf("ContainerDevices = %v", got)
	}

	// A second pod gets the rest; a third asking too many fails with upstream's words.
	if err := allocatePod(ctx, m, gpuPod("u2", 2), []*v1.Pod{pod}, true); err != nil {
		t.Fatal(err)
	}
	err := allocatePod(ctx, m, gpuPod("u3", 1), []*v1.Pod{pod, gpuPod("u2", 2)}, true)
	if err == nil || err.Error() != "requested number of devices unavailable for example.com/fake. Requested: 1, Available: 0" {
		t.Fatalf("over-allocation: %v", err)
	}
	// Pods no longer active free their devices.
	if err := allocatePod(ctx, m, gpuPod("u3", 1), []*v1.Pod{pod}, true); err != nil {
		t.Fatalf("after u2 went: %v", err)
	}
}

func TestInitContainerDevicesReused(t *testing.T) {
	dir := shortDir(t)
	m, _ := startManager(t, dir, clocktesting.NewFakeClock(time.Now()))
	p := newFakePlugin(t, dir, fakeResource, "fake.sock", dev("a", true), dev("b", true))
	p.serve()
	defer p.stop()
	if err := p.register(pluginapi.Version); err != nil {
		t.Fatal(err)
	}
	waitCounts(t, m, 2, 2)
	pod := gpuPod("u1", 2)
	pod.Spec.InitContainers = []v1.Container{{Name: "init", Resources: pod.Spec.Containers[0].Resources}}
	if err := allocatePod(context.Background(), m, pod, nil, true); err != nil {
		t.Fatalf("init container's devices should be reused: %v", err)
	}
	if got := m.ContainerDevices("u1", "c"); len(got) != 1 || len(got[0].DeviceIds) != 2 {
		t.Errorf("app container devices = %v", got)
	}
}

func TestCheckpointKeepsAssignmentsAcrossRestart(t *testing.T) {
	dir := shortDir(t)
	clk := clocktesting.NewFakeClock(time.Now())
	m, stop := startManager(t, dir, clk)
	p := newFakePlugin(t, dir, fakeResource, "fake.sock", dev("a", true), dev("b", true))
	p.serve()
	if err := p.register(pluginapi.Version); err != nil {
		t.Fatal(err)
	}
	waitCounts(t, m, 2, 2)
	pod := gpuPod("u1", 1)
	ctx := context.Background()
	if err := allocatePod(ctx, m, pod, nil, true); err != nil {
		t.Fatal(err)
	}
	stop()
	p.stop()

	// A new nodelet: the assignment and its Allocate answer come from the checkpoint.
	m2, _ := startManager(t, dir, clk)
	if got := m2.ContainerDevices("u1", "c"); len(got) != 1 || got[0].DeviceIds[0] != "a" {
		t.Fatalf("ContainerDevices after restart = %v", got)
	}
	cfg := &runtimeapi.ContainerConfig{}
	if err := m2.ApplyDevices(ctx, pod, &pod.Spec.Containers[0], cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Envs) != 1 || string(cfg.Envs[0].Value) != "a" {
		t.Errorf("envs after restart = %v", cfg.Envs)
	}
	// Admission counts the assigned device as allocatable while the plugin is away.
	if q := m2.AdmissionAllocatable()[fakeResource]; q.Value() != 1 {
		t.Errorf("admission allocatable after restart = %s, want 1 (the assigned device)", q.String())
	}
	// Pods re-admitted one by one before the sources are ready free nothing.
	if err := allocatePod(ctx, m2, gpuPod("u9", 0), nil, false); err != nil {
		t.Fatal(err)
	}
	if got := m2.ContainerDevices("u1", "c"); len(got) != 1 {
		t.Fatalf("u1's devices freed before the sources were ready: %v", got)
	}
	// Re-admission after the restart keeps the assignment without the plugin.
	if err := allocatePod(ctx, m2, pod, nil, true); err != nil {
		t.Fatal(err)
	}
	// The plugin registers again: its free device is the only one left.
	p.serve()
	defer p.stop()
	if err := p.register(pluginapi.Version); err != nil {
		t.Fatal(err)
	}
	waitCounts(t, m2, 2, 2)
	if err := allocatePod(ctx, m2, gpuPod("u2", 1), []*v1.Pod{pod}, true); err != nil {
		t.Fatal(err)
	}
	if got := m2.ContainerDevices("u2", "c"); len(got) != 1 || got[0].DeviceIds[0] != "b" {
		t.Errorf("second pod got %v, want b", got)
	}
}

func TestCorruptCheckpointIgnored(t *testing.T) {
	dir := shortDir(t)
	if err := os.WriteFile(dir+"/"+CheckpointName, []byte(`{"Data":{"PodDeviceEntries":[]},"Checksum":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readCheckpoint(dir + "/" + CheckpointName); err == nil || !strings.Contains(err.Error(), "corrupted") {
		t.Fatalf("readCheckpoint: %v", err)
	}
	if _, err := New(dir, clocktesting.NewFakeClock(time.Now()), []int{0}); err != nil {
		t.Fatal(err)
	}
	if aside, _ := filepath.Glob(dir + "/" + CheckpointName + ".corrupt-*"); len(aside) != 1 {
		t.Errorf("corrupt checkpoint not set aside: %v", aside)
	}
}

func TestPluginRestartReregisters(t *testing.T) {
	dir := shortDir(t)
	clk := clocktesting.NewFakeClock(time.Now())
	m, _ := startManager(t, dir, clk)
	p := newFakePlugin(t, dir, fakeResource, "fake.sock", dev("a", true), dev("b", true))
	p.serve()
	if err := p.register(pluginapi.Version); err != nil {
		t.Fatal(err)
	}
	waitCounts(t, m, 2, 2)
	// The plugin goes: capacity stays, nothing allocatable.
	p.stop()
	waitCounts(t, m, 2, 0)
	// It comes back on a new socket and registers again.
	p.serve()
	defer p.stop()
	if err := p.register(pluginapi.Version); err != nil {
		t.Fatal(err)
	}
	waitCounts(t, m, 2, 2)
}

func TestGoneResourceDroppedAfterGrace(t *testing.T) {
	dir := shortDir(t)
	clk := clocktesting.NewFakeClock(time.Now())
	m, _ := startManager(t, dir, clk)
	p := newFakePlugin(t, dir, fakeResource, "fake.sock", dev("a", true))
	p.serve()
	if err := p.register(pluginapi.Version); err != nil {
		t.Fatal(err)
	}
	waitCounts(t, m, 1, 1)
	p.stop()
	waitCounts(t, m, 1, 0)
	clk.Step(DefaultStopGracePeriod + time.Second)
	c, _, deleted := m.Capacity()
	if _, ok := c[fakeResource]; ok || len(deleted) != 1 || deleted[0] != fakeResource {
		t.Fatalf("after the grace period: capacity %v, deleted %v", c, deleted)
	}
}

// A plugin that keeps its registration connection open does not hold up the stop.
func TestStopWithOpenRegistrationConnection(t *testing.T) {
	dir := shortDir(t)
	_, stop := startManager(t, dir, clocktesting.NewFakeClock(time.Now()))
	conn, err := grpc.NewClient("unix://"+dir+"/"+SocketName, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A refused registration still leaves the connection up.
	_, _ = pluginapi.NewRegistrationClient(conn).Register(context.Background(), &pluginapi.RegisterRequest{Version: "v0"})
	done := make(chan struct{})
	go func() {
		stop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(stopTimeout + 10*time.Second):
		t.Fatal("Run did not return with a registration connection open")
	}
}
