package node

import (
	"context"
	"errors"
	"net"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/config"
	"github.com/nodelet/nodelet/internal/testsupport/eventually"
)

var testNow = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

type fakeRuntime struct {
	mu      sync.Mutex
	name    string
	version string
	err     error
}

func (f *fakeRuntime) Version(_ context.Context, _ string) (*runtimeapi.VersionResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	return &runtimeapi.VersionResponse{RuntimeName: f.name, RuntimeVersion: f.version}, nil
}

// readiness is a settable ReadinessFunc.
type readiness struct {
	mu      sync.Mutex
	reasons []string
}

func (r *readiness) set(reasons ...string) { r.mu.Lock(); r.reasons = reasons; r.mu.Unlock() }
func (r *readiness) fn() []string          { r.mu.Lock(); defer r.mu.Unlock(); return r.reasons }

type pressureSource struct {
	mu sync.Mutex
	p  Pressure
}

func (s *pressureSource) set(p Pressure) { s.mu.Lock(); s.p = p; s.mu.Unlock() }
func (s *pressureSource) fn() Pressure   { s.mu.Lock(); defer s.mu.Unlock(); return s.p }

type harness struct {
	c        *Controller
	client   *fake.Clientset
	clk      *clocktesting.FakeClock
	rt       *fakeRuntime
	ready    *readiness
	pressure *pressureSource
	recorder *record.FakeRecorder
}

func testKubeletConfig() *kubeletconfigv1beta1.KubeletConfiguration {
	return &kubeletconfigv1beta1.KubeletConfiguration{
		RegisterWithTaints:        []v1.Taint{{Key: "example.com/dedicated", Value: "x", Effect: v1.TaintEffectNoSchedule}},
		MaxPods:                   110,
		KubeReserved:              map[string]string{"cpu": "100m", "memory": "256Mi"},
		SystemReserved:            map[string]string{"memory": "256Mi"},
		EvictionHard:              map[string]string{"memory.available": "100Mi", "nodefs.available": "10%"},
		NodeStatusUpdateFrequency: metav1.Duration{Duration: 10 * time.Second},
		NodeStatusReportFrequency: metav1.Duration{Duration: 5 * time.Minute},
		NodeLeaseDurationSeconds:  40,
		ProviderID:                "nodelet://n1",
		Port:                      10250,
	}
}

func newHarness(t *testing.T, mutate func(*Config), objects ...k8sruntime.Object) *harness {
	t.Helper()
	h := &harness{
		client:   fake.NewClientset(objects...),
		clk:      clocktesting.NewFakeClock(testNow),
		rt:       &fakeRuntime{name: "containerd", version: "1.6.20"},
		ready:    &readiness{},
		pressure: &pressureSource{},
		recorder: record.NewFakeRecorder(100),
	}
	// The fake tracker assigns no UIDs; the lease owner reference needs one.
	h.client.PrependReactor("create", "nodes", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
		if n, ok := a.(k8stesting.CreateAction).GetObject().(*v1.Node); ok && n.UID == "" {
			n.UID = "uid-" + types.UID(n.Name)
		}
		return false, nil, nil
	})
	cfg := Config{
		NodeName: "n1",
		Hostname: "n1.example",
		NodeIPs:  []net.IP{net.ParseIP("10.0.0.5")},
		Labels:   map[string]string{"example.com/role": "worker"},
		Settings: config.Resolve(testKubeletConfig()).Node,
		Version:  "v1.37.2+nodelet",
	}
	if mutate != nil {
		mutate(&cfg)
	}
	m := testMachine()
	m.HugePages = []HugePage{{SizeKiB: 2048, NumPages: 0}}
	c, err := New(h.client, h.client, cfg, h.rt, h.ready.fn, h.clk,
		WithMachineInfo(m), WithPressure(h.pressure.fn), WithEventRecorder(h.recorder))
	if err != nil {
		t.Fatal(err)
	}
	h.c = c
	return h
}

func (h *harness) node(t *testing.T) *v1.Node {
	t.Helper()
	// Read through the tracker so the test's own reads are not recorded as actions.
	obj, err := h.client.Tracker().Get(v1.SchemeGroupVersion.WithResource("nodes"), "", "n1")
	if err != nil {
		t.Fatal(err)
	}
	return obj.(*v1.Node)
}

func (h *harness) lease() *coordinationv1.Lease {
	obj, err := h.client.Tracker().Get(coordinationv1.SchemeGroupVersion.WithResource("leases"), "kube-node-lease", "n1")
	if err != nil {
		return nil
	}
	return obj.(*coordinationv1.Lease)
}

// actions returns "verb resource[/subresource]" for each recorded call, then clears them.
func (h *harness) actions() []string {
	var out []string
	for _, a := range h.client.Actions() {
		s := a.GetVerb() + " " + a.GetResource().Resource
		if a.GetSubresource() != "" {
			s += "/" + a.GetSubresource()
		}
		out = append(out, s)
	}
	h.client.ClearActions()
	return out
}

func (h *harness) events() []string {
	var out []string
	for {
		select {
		case e := <-h.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func condition(n *v1.Node, t v1.NodeConditionType) *v1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == t {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func TestRegisterCreatesNode(t *testing.T) {
	h := newHarness(t, nil)
	if h.c.Node() != nil {
		t.Fatal("Node() before registration is not nil")
	}
	if err := h.c.Register(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, want := h.actions(), []string{"create nodes"}; !reflect.DeepEqual(got, want) {
		t.Errorf("actions = %v, want %v", got, want)
	}
	n := h.node(t)

	wantLabels := map[string]string{
		"kubernetes.io/hostname":  "n1.example",
		"kubernetes.io/os":        "linux",
		"kubernetes.io/arch":      runtime.GOARCH,
		"beta.kubernetes.io/os":   "linux",
		"beta.kubernetes.io/arch": runtime.GOARCH,
		"example.com/role":        "worker",
	}
	if !reflect.DeepEqual(n.Labels, wantLabels) {
		t.Errorf("labels = %v, want %v", n.Labels, wantLabels)
	}
	if n.Annotations["volumes.kubernetes.io/controller-managed-attach-detach"] != "true" {
		t.Errorf("annotations = %v, want controller-managed attach/detach", n.Annotations)
	}
	if want := []v1.Taint{{Key: "example.com/dedicated", Value: "x", Effect: v1.TaintEffectNoSchedule}}; !reflect.DeepEqual(n.Spec.Taints, want) {
		t.Errorf("taints = %v, want %v", n.Spec.Taints, want)
	}
	if n.Spec.ProviderID != "nodelet://n1" {
		t.Errorf("providerID = %q", n.Spec.ProviderID)
	}

	checkResources(t, "capacity", n.Status.Capacity, map[v1.ResourceName]int64{
		v1.ResourceCPU: 4000, v1.ResourceMemory: 8 * gi, v1.ResourceEphemeralStorage: 100 * gi, v1.ResourcePods: 110, "hugepages-2Mi": 0,
	})
	checkResources(t, "allocatable", n.Status.Allocatable, map[v1.ResourceName]int64{
		v1.ResourceCPU: 3900, v1.ResourceMemory: 8*gi - 612*mi, v1.ResourceEphemeralStorage: 100*gi - tenPercentOf100Gi, v1.ResourcePods: 110, "hugepages-2Mi": 0,
	})

	wantInfo := v1.NodeSystemInfo{
		MachineID: "machine-id", SystemUUID: "system-uuid", BootID: "boot-id", KernelVersion: "6.18.0",
		OSImage: "Debian GNU/Linux 12 (bookworm)", ContainerRuntimeVersion: "containerd://1.6.20",
		KubeletVersion: "v1.37.2+nodelet", OperatingSystem: "linux", Architecture: runtime.GOARCH,
		Swap: &v1.NodeSwapStatus{Capacity: ptr.To(2 * gi)},
	}
	if !reflect.DeepEqual(n.Status.NodeInfo, wantInfo) {
		t.Errorf("nodeInfo = %+v\nwant       %+v", n.Status.NodeInfo, wantInfo)
	}
	wantAddrs := []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.5"}, {Type: v1.NodeHostName, Address: "n1.example"}}
	if !reflect.DeepEqual(n.Status.Addresses, wantAddrs) {
		t.Errorf("addresses = %v, want %v", n.Status.Addresses, wantAddrs)
	}
	if n.Status.DaemonEndpoints.KubeletEndpoint.Port != 10250 {
		t.Errorf("kubelet port = %d", n.Status.DaemonEndpoints.KubeletEndpoint.Port)
	}

	now := metav1.NewTime(testNow)
	wantConds := []v1.NodeCondition{
		{Type: v1.NodeMemoryPressure, Status: v1.ConditionFalse, Reason: "KubeletHasSufficientMemory", Message: "kubelet has sufficient memory available", LastHeartbeatTime: now, LastTransitionTime: now},
		{Type: v1.NodeDiskPressure, Status: v1.ConditionFalse, Reason: "KubeletHasNoDiskPressure", Message: "kubelet has no disk pressure", LastHeartbeatTime: now, LastTransitionTime: now},
		{Type: v1.NodePIDPressure, Status: v1.ConditionFalse, Reason: "KubeletHasSufficientPID", Message: "kubelet has sufficient PID available", LastHeartbeatTime: now, LastTransitionTime: now},
		{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now},
	}
	if !reflect.DeepEqual(n.Status.Conditions, wantConds) {
		t.Errorf("conditions = %+v\nwant        %+v", n.Status.Conditions, wantConds)
	}
	wantEvents := []string{
		"Normal NodeHasSufficientMemory Node n1 status is now: NodeHasSufficientMemory",
		"Normal NodeHasNoDiskPressure Node n1 status is now: NodeHasNoDiskPressure",
		"Normal NodeHasSufficientPID Node n1 status is now: NodeHasSufficientPID",
		"Normal NodeReady Node n1 status is now: NodeReady",
	}
	if got := h.events(); !reflect.DeepEqual(got, wantEvents) {
		t.Errorf("events = %q, want %q", got, wantEvents)
	}
	if got := h.c.Node(); got == nil || got.UID != "uid-n1" {
		t.Errorf("Node() = %v, want the created node", got)
	}

	// A second Register is a no-op.
	if err := h.c.Register(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := h.actions(); len(got) != 0 {
		t.Errorf("second Register made calls: %v", got)
	}
}

func TestRegisterReconcilesExistingNode(t *testing.T) {
	old := metav1.NewTime(testNow.Add(-time.Hour))
	existing := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: "n1", UID: "old-uid",
			Labels: map[string]string{
				"kubernetes.io/hostname": "stale-name",
				"kubernetes.io/os":       "linux",
				"admin.example.com/zone": "a",
			},
		},
		Spec: v1.NodeSpec{Taints: []v1.Taint{{Key: "admin", Effect: v1.TaintEffectNoExecute}}},
		Status: v1.NodeStatus{
			Capacity: v1.ResourceList{
				"example.com/dongle": q("4"),
				"hugepages-1Gi":      q("2Gi"),
				v1.ResourceCPU:       q("1"),
			},
			Conditions: []v1.NodeCondition{
				{Type: v1.NodeNetworkUnavailable, Status: v1.ConditionFalse, Reason: "RouteCreated", LastHeartbeatTime: old, LastTransitionTime: old},
				{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady", Message: "old", LastHeartbeatTime: old, LastTransitionTime: old},
			},
			Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.9"}},
		},
	}
	h := newHarness(t, nil, existing)
	if err := h.c.Register(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, want := h.actions(), []string{"create nodes", "get nodes", "patch nodes/status"}; !reflect.DeepEqual(got, want) {
		t.Errorf("actions = %v, want %v", got, want)
	}
	n := h.node(t)
	if n.Labels["kubernetes.io/hostname"] != "n1.example" || n.Labels["kubernetes.io/arch"] != runtime.GOARCH || n.Labels["beta.kubernetes.io/os"] != "linux" {
		t.Errorf("default labels not reconciled: %v", n.Labels)
	}
	if n.Labels["admin.example.com/zone"] != "a" {
		t.Errorf("admin label lost: %v", n.Labels)
	}
	if _, ok := n.Labels["example.com/role"]; ok {
		t.Errorf("--node-labels applied to an existing node (upstream applies them only at creation): %v", n.Labels)
	}
	if want := existing.Spec.Taints; !reflect.DeepEqual(n.Spec.Taints, want) {
		t.Errorf("taints = %v, want unchanged %v", n.Spec.Taints, want)
	}
	if got := n.Status.Capacity["example.com/dongle"]; got.Value() != 4 {
		t.Errorf("extended resource capacity = %v, want kept", n.Status.Capacity)
	}
	if got := n.Status.Allocatable["example.com/dongle"]; got.Value() != 4 {
		t.Errorf("extended resource allocatable = %v, want its capacity", n.Status.Allocatable)
	}
	if _, ok := n.Status.Capacity["hugepages-1Gi"]; ok {
		t.Errorf("hugepages-1Gi the machine lacks is still in capacity: %v", n.Status.Capacity)
	}
	if got := n.Status.Capacity[v1.ResourceCPU]; got.Value() != 4 {
		t.Errorf("cpu capacity = %s, want 4", got.String())
	}
	if c := condition(n, v1.NodeNetworkUnavailable); c == nil || c.Reason != "RouteCreated" {
		t.Errorf("foreign condition lost: %+v", n.Status.Conditions)
	}
	ready := condition(n, v1.NodeReady)
	if ready == nil || ready.Message != "kubelet is posting ready status" || !ready.LastTransitionTime.Equal(&old) || !ready.LastHeartbeatTime.Equal(ptr.To(metav1.NewTime(testNow))) {
		t.Errorf("Ready = %+v, want refreshed message and heartbeat, unchanged transition time", ready)
	}
	if len(n.Status.Addresses) != 2 || n.Status.Addresses[0].Address != "10.0.0.5" {
		t.Errorf("addresses = %v, want replaced", n.Status.Addresses)
	}
	if got := h.events(); len(got) != 3 || strings.Contains(strings.Join(got, ","), "NodeReady") {
		t.Errorf("events = %q, want the three new pressure conditions and no NodeReady", got)
	}
	if h.c.Node().UID != "old-uid" {
		t.Errorf("Node() UID = %q, want the existing node's", h.c.Node().UID)
	}
}

func TestRegisterRetriesWithBackoff(t *testing.T) {
	h := newHarness(t, nil)
	var mu sync.Mutex
	failures := 3
	h.client.PrependReactor("create", "nodes", func(k8stesting.Action) (bool, k8sruntime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if failures > 0 {
			failures--
			return true, nil, apierrors.NewServiceUnavailable("apiserver starting")
		}
		return false, nil, nil
	})
	done := make(chan error, 1)
	go func() { done <- h.c.Register(context.Background()) }()
	for _, d := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond} {
		eventually.True(t, "a waiter on the fake clock", h.clk.HasWaiters)
		h.clk.Step(d - time.Millisecond)
		select {
		case err := <-done:
			t.Fatalf("Register returned %v before its %v back-off elapsed", err, d)
		case <-time.After(20 * time.Millisecond):
		}
		h.clk.Step(time.Millisecond)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Register did not finish")
	}
	if h.c.Node() == nil {
		t.Error("Node() nil after registration")
	}
}

func TestRegisterStopsWithContext(t *testing.T) {
	h := newHarness(t, nil)
	h.client.PrependReactor("create", "nodes", func(k8stesting.Action) (bool, k8sruntime.Object, error) {
		return true, nil, errors.New("down")
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.c.Register(ctx) }()
	eventually.True(t, "a waiter on the fake clock", h.clk.HasWaiters)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Register = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Register ignored the cancelled context")
	}
}

func TestRegisterNodeFalse(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Settings.RegisterNode = false })
	if err := h.c.Register(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := h.actions(); len(got) != 0 {
		t.Errorf("Register with registerNode=false made calls: %v", got)
	}
	// The status loop still updates a Node someone else created.
	if _, err := h.client.CoreV1().Nodes().Create(context.Background(), &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := h.c.updateNodeStatus(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c := condition(h.node(t), v1.NodeReady); c == nil || c.Status != v1.ConditionTrue {
		t.Errorf("Ready = %+v after a status update", c)
	}
	if h.c.Node() == nil {
		t.Error("Node() nil after a status update")
	}
}

func TestStatusUpdates(t *testing.T) {
	type step struct {
		advance   time.Duration
		ready     []string
		pressure  Pressure
		runtime   error
		wantPatch bool
		wantReady v1.ConditionStatus
		wantMsg   string
		// wantTransition is how long before this step's time Ready last transitioned.
		wantTransitionAgo time.Duration
		wantEvents        []string
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{
			name: "unchanged status is not patched until the report frequency elapses",
			steps: []step{
				{advance: 10 * time.Second, wantPatch: false, wantReady: v1.ConditionTrue, wantMsg: messageReady, wantTransitionAgo: 10 * time.Second},
				{advance: 4*time.Minute + 40*time.Second, wantPatch: false, wantReady: v1.ConditionTrue, wantMsg: messageReady, wantTransitionAgo: 4*time.Minute + 50*time.Second},
				{advance: 10 * time.Second, wantPatch: true, wantReady: v1.ConditionTrue, wantMsg: messageReady, wantTransitionAgo: 5 * time.Minute},
				{advance: 10 * time.Second, wantPatch: false, wantReady: v1.ConditionTrue, wantMsg: messageReady, wantTransitionAgo: 5*time.Minute + 10*time.Second},
			},
		},
		{
			name: "readiness flips: patched at once, transition time moves, events recorded",
			steps: []step{
				{advance: 10 * time.Second, ready: []string{"PLEG is not healthy", "container runtime is down"}, wantPatch: true,
					wantReady: v1.ConditionFalse, wantMsg: "[PLEG is not healthy, container runtime is down]",
					wantEvents: []string{"Normal NodeNotReady Node n1 status is now: NodeNotReady"}},
				{advance: 10 * time.Second, ready: []string{"PLEG is not healthy"}, wantPatch: true,
					wantReady: v1.ConditionFalse, wantMsg: "PLEG is not healthy", wantTransitionAgo: 10 * time.Second},
				{advance: 10 * time.Second, ready: []string{"PLEG is not healthy"}, wantPatch: false,
					wantReady: v1.ConditionFalse, wantMsg: "PLEG is not healthy", wantTransitionAgo: 20 * time.Second},
				{advance: 10 * time.Second, wantPatch: true, wantReady: v1.ConditionTrue, wantMsg: messageReady,
					wantEvents: []string{"Normal NodeReady Node n1 status is now: NodeReady"}},
			},
		},
		{
			name: "pressure conditions follow the pressure source",
			steps: []step{
				{advance: 10 * time.Second, pressure: Pressure{Memory: true, PID: true}, wantPatch: true, wantReady: v1.ConditionTrue, wantMsg: messageReady, wantTransitionAgo: 10 * time.Second,
					wantEvents: []string{"Normal NodeHasInsufficientMemory Node n1 status is now: NodeHasInsufficientMemory", "Normal NodeHasInsufficientPID Node n1 status is now: NodeHasInsufficientPID"}},
				{advance: 10 * time.Second, pressure: Pressure{Disk: true}, wantPatch: true, wantReady: v1.ConditionTrue, wantMsg: messageReady, wantTransitionAgo: 20 * time.Second,
					wantEvents: []string{"Normal NodeHasSufficientMemory Node n1 status is now: NodeHasSufficientMemory", "Normal NodeHasDiskPressure Node n1 status is now: NodeHasDiskPressure", "Normal NodeHasSufficientPID Node n1 status is now: NodeHasSufficientPID"}},
			},
		},
		{
			name: "a failing runtime version call keeps the last known version",
			steps: []step{
				{advance: 10 * time.Second, runtime: errors.New("runtime down"), wantPatch: false, wantReady: v1.ConditionTrue, wantMsg: messageReady, wantTransitionAgo: 10 * time.Second},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			if err := h.c.Register(context.Background()); err != nil {
				t.Fatal(err)
			}
			h.actions()
			h.events()
			for i, s := range tc.steps {
				h.clk.Step(s.advance)
				h.ready.set(s.ready...)
				h.pressure.set(s.pressure)
				h.rt.mu.Lock()
				h.rt.err = s.runtime
				h.rt.mu.Unlock()
				if err := h.c.updateNodeStatus(context.Background()); err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				acts := h.actions()
				patched := len(acts) == 2 && acts[1] == "patch nodes/status"
				if patched != s.wantPatch || acts[0] != "get nodes" {
					t.Errorf("step %d: actions %v, want patch=%v", i, acts, s.wantPatch)
				}
				n := h.node(t)
				r := condition(n, v1.NodeReady)
				if r.Status != s.wantReady || r.Message != s.wantMsg {
					t.Errorf("step %d: Ready = %s %q, want %s %q", i, r.Status, r.Message, s.wantReady, s.wantMsg)
				}
				if want := h.clk.Now().Add(-s.wantTransitionAgo); !r.LastTransitionTime.Time.Equal(want) {
					t.Errorf("step %d: Ready lastTransitionTime = %v, want %v", i, r.LastTransitionTime, want)
				}
				if s.wantPatch && !r.LastHeartbeatTime.Time.Equal(h.clk.Now()) {
					t.Errorf("step %d: heartbeat %v not advanced to %v", i, r.LastHeartbeatTime, h.clk.Now())
				}
				for _, ct := range []struct {
					t    v1.NodeConditionType
					want bool
				}{{v1.NodeMemoryPressure, s.pressure.Memory}, {v1.NodeDiskPressure, s.pressure.Disk}, {v1.NodePIDPressure, s.pressure.PID}} {
					if c := condition(n, ct.t); (c.Status == v1.ConditionTrue) != ct.want {
						t.Errorf("step %d: %s = %s, want true=%v", i, ct.t, c.Status, ct.want)
					}
				}
				if n.Status.NodeInfo.ContainerRuntimeVersion != "containerd://1.6.20" {
					t.Errorf("step %d: runtime version = %q", i, n.Status.NodeInfo.ContainerRuntimeVersion)
				}
				if got := h.events(); !reflect.DeepEqual(got, s.wantEvents) {
					t.Errorf("step %d: events %q, want %q", i, got, s.wantEvents)
				}
			}
		})
	}
}

func TestStatusUpdateRetriesAndReregisters(t *testing.T) {
	h := newHarness(t, nil)
	if err := h.c.Register(context.Background()); err != nil {
		t.Fatal(err)
	}
	var failures []bool
	var mu sync.Mutex
	h.client.PrependReactor("get", "nodes", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		failures = append(failures, a.(k8stesting.GetActionImpl).GetGetOptions().ResourceVersion == "0")
		if len(failures) <= 2 {
			return true, nil, errors.New("timeout")
		}
		return false, nil, nil
	})
	h.clk.Step(5 * time.Minute)
	if err := h.c.updateNodeStatus(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := []bool{true, false, false}; !reflect.DeepEqual(failures, want) {
		t.Errorf("GETs from cache per try = %v, want %v (cache on the first try only)", failures, want)
	}

	// A node deleted behind our back makes the next loop register it again.
	if err := h.client.CoreV1().Nodes().Delete(context.Background(), "n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := h.c.updateNodeStatus(context.Background()); err == nil {
		t.Fatal("update of a deleted node succeeded")
	}
	if h.c.isRegistered() {
		t.Fatal("still marked registered after the node vanished")
	}
	if err := h.c.Register(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.node(t)
}

func TestNodeStatusPatchReplacesAddresses(t *testing.T) {
	tests := []struct {
		name     string
		old, new []v1.NodeAddress
	}{
		{
			name: "single to dual stack",
			old:  []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.5"}, {Type: v1.NodeHostName, Address: "n1"}},
			new:  []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.5"}, {Type: v1.NodeInternalIP, Address: "fd00::5"}, {Type: v1.NodeHostName, Address: "n1"}},
		},
		{
			name: "dual stack to single",
			old:  []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.5"}, {Type: v1.NodeInternalIP, Address: "fd00::5"}, {Type: v1.NodeHostName, Address: "n1"}},
			new:  []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.6"}, {Type: v1.NodeHostName, Address: "n1"}},
		},
		{
			name: "unchanged",
			old:  []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.5"}},
			new:  []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.5"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			old := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: v1.NodeStatus{Addresses: tc.old}}
			client := fake.NewClientset(old)
			updated := old.DeepCopy()
			updated.Status.Addresses = tc.new
			patch, err := nodeStatusPatch(old, updated)
			if err != nil {
				t.Fatal(err)
			}
			got, err := client.CoreV1().Nodes().Patch(context.Background(), "n1", types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
			if err != nil {
				t.Fatalf("applying %s: %v", patch, err)
			}
			if !reflect.DeepEqual(got.Status.Addresses, tc.new) {
				t.Errorf("after patch %s addresses = %v, want %v", patch, got.Status.Addresses, tc.new)
			}
		})
	}
}

func TestLease(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()

	// Before registration: created without an owner.
	h.c.syncLease(ctx)
	if got, want := h.actions(), []string{"get leases", "create leases"}; !reflect.DeepEqual(got, want) {
		t.Errorf("first sync actions = %v, want %v", got, want)
	}
	l := h.lease()
	if l == nil {
		t.Fatal("no lease created")
	}
	if *l.Spec.HolderIdentity != "n1" || *l.Spec.LeaseDurationSeconds != 40 || !l.Spec.RenewTime.Time.Equal(testNow) || len(l.OwnerReferences) != 0 {
		t.Errorf("created lease = %+v", l)
	}

	if err := h.c.Register(ctx); err != nil {
		t.Fatal(err)
	}
	h.actions()

	// Renewal: an optimistic update from the cached lease, no GET; owner now set.
	h.clk.Step(10 * time.Second)
	h.c.syncLease(ctx)
	if got, want := h.actions(), []string{"update leases"}; !reflect.DeepEqual(got, want) {
		t.Errorf("renew actions = %v, want %v", got, want)
	}
	l = h.lease()
	if !l.Spec.RenewTime.Time.Equal(testNow.Add(10 * time.Second)) {
		t.Errorf("renewTime = %v, want advanced by 10s", l.Spec.RenewTime)
	}
	wantOwner := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "n1", UID: "uid-n1"}}
	if !reflect.DeepEqual(l.OwnerReferences, wantOwner) {
		t.Errorf("owner references = %v, want %v", l.OwnerReferences, wantOwner)
	}

	tests := []struct {
		name     string
		failures []error // returned by successive updates
		want     []string
	}{
		{name: "conflict re-reads and retries", failures: []error{conflict()}, want: []string{"update leases", "get leases", "update leases"}},
		{name: "two conflicts", failures: []error{conflict(), conflict()}, want: []string{"update leases", "get leases", "update leases", "get leases", "update leases"}},
		{name: "other error reads and retries", failures: []error{errors.New("timeout")}, want: []string{"update leases", "get leases", "update leases"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			failures := append([]error(nil), tc.failures...)
			h.client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, k8sruntime.Object, error) {
				mu.Lock()
				defer mu.Unlock()
				if len(failures) > 0 {
					err := failures[0]
					failures = failures[1:]
					return true, nil, err
				}
				return false, nil, nil
			})
			h.clk.Step(10 * time.Second)
			h.c.syncLease(ctx)
			if got := h.actions(); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("actions = %v, want %v", got, tc.want)
			}
			l := h.lease()
			if !l.Spec.RenewTime.Time.Equal(h.clk.Now()) {
				t.Errorf("renewTime = %v, want %v", l.Spec.RenewTime, h.clk.Now())
			}
			h.client.ReactionChain = h.client.ReactionChain[1:]
		})
	}
}

func conflict() error {
	return apierrors.NewConflict(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "n1", errors.New("changed"))
}

func TestLeaseEnsureBacksOff(t *testing.T) {
	h := newHarness(t, nil)
	var mu sync.Mutex
	gets := 0
	h.client.PrependReactor("get", "leases", func(k8stesting.Action) (bool, k8sruntime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		gets++
		if gets <= 2 {
			return true, nil, errors.New("apiserver down")
		}
		return false, nil, nil
	})
	done := make(chan struct{})
	go func() { h.c.syncLease(context.Background()); close(done) }()
	for _, d := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond} {
		eventually.True(t, "a waiter on the fake clock", h.clk.HasWaiters)
		h.clk.Step(d)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("syncLease did not finish")
	}
	if h.lease() == nil {
		t.Error("lease not created after back-off")
	}
}

// TestRun drives the real loops on the fake clock: registration, a status update, lease
// renewals at the quarter-duration interval, and TriggerStatusUpdate.
func TestRun(t *testing.T) {
	h := newHarness(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.c.Run(ctx); close(done) }()

	// The lease loop may create the Lease before registration ends; it then wakes on the
	// registration, renews at once to take the Node as owner and waits anew. Counting waiters
	// before that wake counted its stale timer, and the renewal then landed after the 9.9 s
	// step (a flake), so wait for the owned Lease first.
	eventually.True(t, "node registered and lease owned by it", func() bool {
		l := h.lease()
		return h.c.Node() != nil && l != nil && len(l.OwnerReferences) > 0
	})
	// Both loops now wait: status for 10s, lease for 10s, each +≤4% jitter.
	eventually.True(t, "both loops waiting", func() bool { return h.clk.Waiters() == 2 })
	h.clk.Step(9900 * time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	if !h.lease().Spec.RenewTime.Time.Equal(testNow) {
		t.Fatalf("lease renewed before 10s: %v", h.lease().Spec.RenewTime)
	}
	h.clk.Step(600 * time.Millisecond)
	eventually.True(t, "lease renewed after 10s", func() bool { return h.lease().Spec.RenewTime.Time.Equal(h.clk.Now()) })

	// A readiness change is reported without waiting for the period.
	eventually.True(t, "both loops waiting", func() bool { return h.clk.Waiters() == 2 })
	h.ready.set("node is shutting down")
	h.c.TriggerStatusUpdate()
	eventually.True(t, "NotReady reported", func() bool {
		c := condition(h.node(t), v1.NodeReady)
		return c.Status == v1.ConditionFalse && c.Message == "node is shutting down"
	})

	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

func TestStandaloneRunWaits(t *testing.T) {
	c, err := New(nil, nil, Config{NodeName: "n1"}, nil, nil, clocktesting.NewFakeClock(testNow), WithMachineInfo(testMachine()))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Register(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	c.Run(ctx)
	if c.Node() != nil {
		t.Error("standalone controller has a Node")
	}
	if a := c.Allocatable(); a.Cpu().MilliValue() != 4000 {
		t.Errorf("standalone allocatable cpu = %v", a.Cpu())
	}
}

func TestNodeImages(t *testing.T) {
	imgs := &fakeImages{list: []*runtimeapi.Image{
		{Id: "small", RepoTags: []string{"small:1"}, Size: 10},
		{Id: "big", RepoTags: []string{"big:1", "big:2", "big:3"}, RepoDigests: []string{"big@sha256:a", "big@sha256:b", "big@sha256:c"}, Size: 1000},
		{Id: "mid", RepoTags: []string{"mid:1"}, Size: 100},
	}}
	tests := []struct {
		name      string
		maxImages *int32
		want      []v1.ContainerImage
	}{
		{name: "default cap, sorted by size, five names, digests first", want: []v1.ContainerImage{
			{Names: []string{"big@sha256:a", "big@sha256:b", "big@sha256:c", "big:1", "big:2"}, SizeBytes: 1000},
			{Names: []string{"mid:1"}, SizeBytes: 100},
			{Names: []string{"small:1"}, SizeBytes: 10},
		}},
		{name: "capped at two", maxImages: ptr.To[int32](2), want: []v1.ContainerImage{
			{Names: []string{"big@sha256:a", "big@sha256:b", "big@sha256:c", "big:1", "big:2"}, SizeBytes: 1000},
			{Names: []string{"mid:1"}, SizeBytes: 100},
		}},
		{name: "zero reports none", maxImages: ptr.To[int32](0), want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kc := &kubeletconfigv1beta1.KubeletConfiguration{NodeStatusMaxImages: tc.maxImages}
			cfg := Config{NodeName: "n1", Settings: config.Resolve(kc).Node, NodeIPs: []net.IP{net.ParseIP("10.0.0.5")}}
			c, err := New(nil, nil, cfg, nil, nil, nil, WithMachineInfo(testMachine()), WithImageLister(imgs))
			if err != nil {
				t.Fatal(err)
			}
			n := &v1.Node{}
			c.setNodeStatus(context.Background(), n)
			if !reflect.DeepEqual(n.Status.Images, tc.want) {
				t.Errorf("images = %+v\nwant %+v", n.Status.Images, tc.want)
			}
		})
	}
}

// volumesInUse follows the volume manager's list, and leaves the status (so
// the patch removes it) once the list is empty.
func TestVolumesInUse(t *testing.T) {
	var inUse []v1.UniqueVolumeName
	cfg := Config{NodeName: "n1", Settings: config.Resolve(testKubeletConfig()).Node, NodeIPs: []net.IP{net.ParseIP("10.0.0.5")}}
	c, err := New(nil, nil, cfg, nil, nil, nil, WithMachineInfo(testMachine()), WithVolumesInUse(func() []v1.UniqueVolumeName { return inUse }))
	if err != nil {
		t.Fatal(err)
	}
	old := &v1.Node{}
	inUse = []v1.UniqueVolumeName{"kubernetes.io/csi/d^h1"}
	n := old.DeepCopy()
	c.setNodeStatus(context.Background(), n)
	if !reflect.DeepEqual(n.Status.VolumesInUse, inUse) {
		t.Fatalf("volumesInUse = %v, want %v", n.Status.VolumesInUse, inUse)
	}
	inUse = []v1.UniqueVolumeName{}
	after := n.DeepCopy()
	c.setNodeStatus(context.Background(), after)
	if after.Status.VolumesInUse != nil {
		t.Fatalf("volumesInUse = %#v, want nil", after.Status.VolumesInUse)
	}
	patch, err := nodeStatusPatch(n, after)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(patch), `"volumesInUse":null`) {
		t.Errorf("patch %s does not drop volumesInUse", patch)
	}
}

type fakeImages struct{ list []*runtimeapi.Image }

func (f *fakeImages) ListImages(context.Context, *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	return append([]*runtimeapi.Image(nil), f.list...), nil
}

func TestHeartbeatClientCarriesStatusAndLease(t *testing.T) {
	mainClient := fake.NewClientset()
	hb := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u"}})
	clk := clocktesting.NewFakeClock(testNow)
	c, err := New(mainClient, hb, Config{NodeName: "n1", NodeIPs: []net.IP{net.ParseIP("10.0.0.5")}, Settings: config.Resolve(testKubeletConfig()).Node}, nil, nil, clk, WithMachineInfo(testMachine()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Register(ctx); err != nil {
		t.Fatal(err)
	}
	mainClient.ClearActions()
	clk.Step(10 * time.Second)
	if err := c.updateNodeStatus(ctx); err != nil {
		t.Fatal(err)
	}
	c.syncLease(ctx)
	if got := mainClient.Actions(); len(got) != 0 {
		t.Errorf("main client used for heartbeats: %v", got)
	}
	var verbs []string
	for _, a := range hb.Actions() {
		verbs = append(verbs, a.GetVerb()+" "+a.GetResource().Resource)
	}
	if want := []string{"get nodes", "patch nodes", "get leases", "create leases"}; !reflect.DeepEqual(verbs, want) {
		t.Errorf("heartbeat client actions = %v, want %v", verbs, want)
	}
}

func TestSwapStatus(t *testing.T) {
	tests := []struct {
		name string
		swap uint64
		want *v1.NodeSwapStatus
	}{
		{name: "no swap: no swap status (zero is invalid in the API)", swap: 0, want: nil},
		{name: "swap on", swap: 1 << 30, want: &v1.NodeSwapStatus{Capacity: ptr.To(gi)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := testMachine()
			m.SwapCapacity = tc.swap
			c, err := New(nil, nil, Config{NodeName: "n1", NodeIPs: []net.IP{net.ParseIP("10.0.0.5")}}, nil, nil, nil, WithMachineInfo(m))
			if err != nil {
				t.Fatal(err)
			}
			n := &v1.Node{Status: v1.NodeStatus{NodeInfo: v1.NodeSystemInfo{Swap: &v1.NodeSwapStatus{Capacity: ptr.To(int64(7))}}}}
			c.setNodeStatus(context.Background(), n)
			if !reflect.DeepEqual(n.Status.NodeInfo.Swap, tc.want) {
				t.Errorf("swap = %v, want %v", n.Status.NodeInfo.Swap, tc.want)
			}
		})
	}
}

// TestRunReportsReadyFastAtStartup: a node that starts not ready is reported Ready within the
// fast poll period once it is, without waiting for nodeStatusUpdateFrequency.
func TestRunReportsReadyFastAtStartup(t *testing.T) {
	h := newHarness(t, nil)
	h.ready.set("container runtime is down")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.c.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	eventually.True(t, "registered NotReady", func() bool { return h.c.Node() != nil })
	if c := condition(h.node(t), v1.NodeReady); c.Status != v1.ConditionFalse {
		t.Fatalf("Ready = %s at start, want False", c.Status)
	}
	// status, lease and the fast readiness poll all wait on the clock.
	eventually.True(t, "three loops waiting", func() bool { return h.clk.Waiters() == 3 })
	h.ready.set()
	h.clk.Step(fastReadyPollPeriod)
	eventually.True(t, "Ready reported", func() bool { return condition(h.node(t), v1.NodeReady).Status == v1.ConditionTrue })
	if since := h.clk.Since(testNow); since >= 10*time.Second {
		t.Errorf("Ready reported after %v, want within the fast poll", since)
	}
}

type fakeStatuser struct {
	resp *runtimeapi.StatusResponse
	err  error
}

func (f *fakeStatuser) Status(context.Context, bool) (*runtimeapi.StatusResponse, error) {
	return f.resp, f.err
}

func TestRuntimeHandlersAndFeatures(t *testing.T) {
	prev := []v1.NodeRuntimeHandler{{Name: "old"}}
	tests := []struct {
		name         string
		st           *fakeStatuser
		wantHandlers []v1.NodeRuntimeHandler
		wantFeatures *v1.NodeFeatures
	}{
		{
			name: "handlers and features from CRI",
			st: &fakeStatuser{resp: &runtimeapi.StatusResponse{
				RuntimeHandlers: []*runtimeapi.RuntimeHandler{
					{Name: "", Features: &runtimeapi.RuntimeHandlerFeatures{RecursiveReadOnlyMounts: true, UserNamespaces: true}},
					{Name: "crun"},
				},
				Features: &runtimeapi.RuntimeFeatures{SupplementalGroupsPolicy: true},
			}},
			wantHandlers: []v1.NodeRuntimeHandler{
				{Name: "", Features: &v1.NodeRuntimeHandlerFeatures{RecursiveReadOnlyMounts: ptr.To(true), UserNamespaces: ptr.To(true)}},
				{Name: "crun", Features: &v1.NodeRuntimeHandlerFeatures{RecursiveReadOnlyMounts: ptr.To(false), UserNamespaces: ptr.To(false)}},
			},
			wantFeatures: &v1.NodeFeatures{SupplementalGroupsPolicy: ptr.To(true)},
		},
		{
			name:         "old runtime without handlers or features (containerd 1.6)",
			st:           &fakeStatuser{resp: &runtimeapi.StatusResponse{}},
			wantFeatures: &v1.NodeFeatures{SupplementalGroupsPolicy: ptr.To(false)},
		},
		{
			name:         "error keeps the previous values",
			st:           &fakeStatuser{err: errors.New("down")},
			wantHandlers: prev,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{NodeName: "n1", NodeIPs: []net.IP{net.ParseIP("10.0.0.5")}}
			c, err := New(nil, nil, cfg, nil, nil, nil, WithMachineInfo(testMachine()), WithRuntimeStatus(tc.st))
			if err != nil {
				t.Fatal(err)
			}
			n := &v1.Node{Status: v1.NodeStatus{RuntimeHandlers: prev}}
			c.setNodeStatus(context.Background(), n)
			if !reflect.DeepEqual(n.Status.RuntimeHandlers, tc.wantHandlers) {
				t.Errorf("runtimeHandlers = %+v, want %+v", n.Status.RuntimeHandlers, tc.wantHandlers)
			}
			if !reflect.DeepEqual(n.Status.Features, tc.wantFeatures) {
				t.Errorf("features = %+v, want %+v", n.Status.Features, tc.wantFeatures)
			}
		})
	}
}

// The heartbeat reset (closing the client's connections) runs when an update
// fails again within one heartbeat, not on a single failure, as upstream.
func TestRepeatedHeartbeatFailureCallback(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	resets := 0
	WithOnRepeatedHeartbeatFailure(func() { resets++ })(h.c)
	if err := h.c.Register(ctx); err != nil {
		t.Fatal(err)
	}
	failGets := 1
	h.client.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, k8sruntime.Object, error) {
		if failGets > 0 {
			failGets--
			return true, nil, errors.New("timeout")
		}
		return false, nil, nil
	})
	if err := h.c.updateNodeStatus(ctx); err != nil {
		t.Fatal(err)
	}
	if resets != 0 {
		t.Fatalf("resets after one failed status update = %d, want 0", resets)
	}
	failGets = 3
	if err := h.c.updateNodeStatus(ctx); err != nil {
		t.Fatal(err)
	}
	if resets != 2 {
		t.Fatalf("resets after three failed status updates in a row = %d, want 2", resets)
	}

	resets = 0
	h.c.syncLease(ctx) // creates the lease
	h.client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, k8sruntime.Object, error) {
		return true, nil, errors.New("timeout")
	})
	h.c.latestLease = nil // renew through GET and retried updates
	h.c.syncLease(ctx)
	if resets != maxLeaseUpdateRetries-1 {
		t.Fatalf("resets after %d failed lease updates = %d, want %d", maxLeaseUpdateRetries, resets, maxLeaseUpdateRetries-1)
	}
}

// A Lease created before the Node was registered gets its owner reference as soon
// as the Node's UID is known, without waiting for the next renewal (the upstream
// NodeLease conformance spec reads it seconds after the node agent started).
func TestLeaseOwnedOnceRegistered(t *testing.T) {
	h := newHarness(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { h.c.runLease(ctx) })
	defer func() {
		cancel()
		wg.Wait()
	}()
	eventually.True(t, "the lease to be created", func() bool { return h.lease() != nil })
	if l := h.lease(); len(l.OwnerReferences) != 0 {
		t.Fatalf("lease owned before the node was registered: %v", l.OwnerReferences)
	}
	if err := h.c.Register(ctx); err != nil {
		t.Fatal(err)
	}
	// No clock step: the renewal timer has not fired.
	eventually.True(t, "the lease to be owned by the node", func() bool {
		l := h.lease()
		return l != nil && len(l.OwnerReferences) == 1 && l.OwnerReferences[0].UID == "uid-n1"
	})
}

// TestReadyMessageSaysAppArmor: a ready node on an AppArmor host says so in
// its Ready condition's message, as upstream's; a not ready one does not.
func TestReadyMessageSaysAppArmor(t *testing.T) {
	var reasons []string
	c, err := New(nil, nil, Config{NodeName: "n1", AppArmorEnabled: true}, nil, func() []string { return reasons },
		clocktesting.NewFakeClock(testNow), WithMachineInfo(testMachine()))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.readyCondition(); got.Status != v1.ConditionTrue || got.Message != "kubelet is posting ready status. AppArmor enabled" {
		t.Errorf("ready condition %+v, want the AppArmor note", got)
	}
	reasons = []string{"PLEG is not healthy"}
	if got := c.readyCondition(); got.Status != v1.ConditionFalse || got.Message != "PLEG is not healthy" {
		t.Errorf("not ready condition %+v, want only the reason", got)
	}
}

// TestAggregateMessage: several reasons read as upstream's aggregated error does.
func TestAggregateMessage(t *testing.T) {
	tests := []struct {
		reasons []string
		want    string
	}{
		{[]string{"container runtime is down"}, "container runtime is down"},
		{[]string{"container runtime is down", "PLEG is not healthy: pleg has yet to be successful"},
			"[container runtime is down, PLEG is not healthy: pleg has yet to be successful]"},
		{[]string{"a", "b", "a"}, "[a, b]"},
		{[]string{"a", "a"}, "a"},
	}
	for _, tt := range tests {
		if got := aggregateMessage(tt.reasons); got != tt.want {
			t.Errorf("aggregateMessage(%q) = %q, want %q", tt.reasons, got, tt.want)
		}
	}
}
