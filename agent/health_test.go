package agent

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/config"
	"github.com/nodelet/nodelet/cri"
	"github.com/nodelet/nodelet/internal/testsupport/eventually"
	"github.com/nodelet/nodelet/internal/testsupport/fakecri"
	"github.com/nodelet/nodelet/node"
)

// TestRuntimeReasons: the runtime's Status answers, one after another, give the
// node's reasons not to be Ready in upstream's words (updateRuntimeUp,
// runtimeState.runtimeErrors/networkErrors).
func TestRuntimeReasons(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 20, 0, 0, 0, time.UTC)
	cond := func(typ string, ok bool, reason, msg string) *runtimeapi.RuntimeCondition {
		return &runtimeapi.RuntimeCondition{Type: typ, Status: ok, Reason: reason, Message: msg}
	}
	answer := func(cs ...*runtimeapi.RuntimeCondition) *runtimeapi.StatusResponse {
		return &runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{Conditions: cs}}
	}
	ready := answer(cond(runtimeapi.RuntimeReady, true, "", ""), cond(runtimeapi.NetworkReady, true, "", ""))
	noNetwork := answer(cond(runtimeapi.RuntimeReady, true, "", ""),
		cond(runtimeapi.NetworkReady, false, "NetworkPluginNotReady", "Network plugin returns error: cni plugin not initialized"))
	notReady := answer(cond(runtimeapi.RuntimeReady, false, "ContainerdNotReady", "starting"), cond(runtimeapi.NetworkReady, true, "", ""))
	down := errors.New("connection refused")
	const (
		networkMsg    = "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized"
		runtimeMsg    = "container runtime not ready: RuntimeReady=false reason:ContainerdNotReady message:starting"
		downMsg       = "container runtime is down"
		notYetMsg     = "container runtime status check may not have completed yet"
		nilRuntimeMsg = "container runtime not ready: <nil>"
		nilNetworkMsg = "container runtime network not ready: <nil>"
	)
	type outcome struct {
		after time.Duration // since t0
		resp  *runtimeapi.StatusResponse
		err   error
	}
	tests := []struct {
		name      string
		outcomes  []outcome
		at        time.Duration
		wantBase  []string
		wantConds []string
	}{
		{"no answer yet", nil, 0, []string{notYetMsg}, nil},
		{"ready", []outcome{{0, ready, nil}}, time.Second, nil, nil},
		{"network not ready", []outcome{{0, noNetwork, nil}}, 0, nil, []string{networkMsg}},
		{"unreachable after ready: down at once", []outcome{{0, ready, nil}, {5 * time.Second, nil, down}}, 5 * time.Second, []string{downMsg}, nil},
		{"unreachable from the start", []outcome{{0, nil, down}}, 0, []string{downMsg}, nil},
		{"back after down", []outcome{{0, ready, nil}, {5 * time.Second, nil, down}, {10 * time.Second, ready, nil}}, 10 * time.Second, nil, nil},
		{"a failed call keeps the last conditions", []outcome{{0, noNetwork, nil}, {5 * time.Second, nil, down}}, 5 * time.Second,
			[]string{downMsg}, []string{networkMsg}},
		{"RuntimeReady false after a ready answer", []outcome{{0, ready, nil}, {5 * time.Second, notReady, nil}}, 5 * time.Second,
			nil, []string{runtimeMsg}},
		{"RuntimeReady false for the threshold: down too", []outcome{{0, ready, nil}, {5 * time.Second, notReady, nil}}, runtimeSyncThreshold,
			[]string{downMsg}, []string{runtimeMsg}},
		{"RuntimeReady false before any ready answer", []outcome{{0, notReady, nil}}, time.Hour, []string{notYetMsg}, []string{runtimeMsg}},
		{"both false", []outcome{{0, ready, nil}, {time.Second, answer(cond(runtimeapi.RuntimeReady, false, "ContainerdNotReady", "starting"),
			cond(runtimeapi.NetworkReady, false, "NetworkPluginNotReady", "Network plugin returns error: cni plugin not initialized")), nil}},
			time.Second, nil, []string{runtimeMsg, networkMsg}},
		{"conditions missing", []outcome{{0, answer(), nil}}, 0, []string{notYetMsg}, []string{nilRuntimeMsg, nilNetworkMsg}},
		{"no status at all is a failed call", []outcome{{0, ready, nil}, {time.Second, &runtimeapi.StatusResponse{}, nil}}, time.Second, []string{downMsg}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s runtimeState
			for _, o := range tt.outcomes {
				s = nextRuntimeState(s, o.resp, o.err, t0.Add(o.after))
			}
			base, conds := runtimeReasons(s, t0.Add(tt.at))
			if !slices.Equal(base, tt.wantBase) || !slices.Equal(conds, tt.wantConds) {
				t.Errorf("reasons = %q, %q; want %q, %q", base, conds, tt.wantBase, tt.wantConds)
			}
		})
	}
}

// TestRuntimeHealthFlipTriggersNodeStatusUpdate: the runtime's network going not
// ready, the runtime becoming unreachable and its return each reach the Node's
// Ready condition at the health check that saw them, with upstream's message,
// without waiting for the next nodeStatusUpdateFrequency tick (set to a minute
// here; the fake clock never gets there).
func TestRuntimeHealthFlipTriggersNodeStatusUpdate(t *testing.T) {
	f := fakecri.New(t)
	rt, err := cri.New(context.Background(), f.Endpoint(), "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	clk := testingclock.NewFakeClock(time.Date(2026, 12, 6, 20, 0, 0, 0, time.UTC))
	client := fake.NewClientset()
	// The fake tracker assigns no UIDs; the lease's owner reference needs one.
	client.PrependReactor("create", "nodes", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
		if n, ok := a.(k8stesting.CreateAction).GetObject().(*v1.Node); ok && n.UID == "" {
			n.UID = "uid-n1"
		}
		return false, nil, nil
	})
	var mu sync.Mutex
	var patchedAt []time.Time // fake clock time of each status patch
	client.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
		if a.GetSubresource() == "status" {
			mu.Lock()
			patchedAt = append(patchedAt, clk.Now())
			mu.Unlock()
		}
		return false, nil, nil
	})

	health := newRuntimeHealth(rt, clk)
	kc := &kubeletconfigv1beta1.KubeletConfiguration{
		NodeStatusUpdateFrequency: metav1.Duration{Duration: time.Minute},
		NodeStatusReportFrequency: metav1.Duration{Duration: time.Hour},
	}
	nodeCtl, err := node.New(client, nil, node.Config{NodeName: "n1", NodeIPs: []net.IP{net.ParseIP("10.0.0.5")}, Settings: config.Resolve(kc).Node},
		nil, nodeReadiness(health, nil, func() []string { return nil }), clk,
		node.WithMachineInfo(node.MachineInfo{NumCores: 2, MemoryCapacity: 4 << 30}))
	if err != nil {
		t.Fatal(err)
	}
	health.onChange = nodeCtl.TriggerStatusUpdate

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	// One check before the loops, so the node starts Ready and the start-up
	// readiness poll ends at once.
	health.check(ctx)
	wg.Go(func() { health.run(ctx) })
	wg.Go(func() { nodeCtl.Run(ctx) })

	ready := func() v1.NodeCondition {
		n, err := client.Tracker().Get(v1.SchemeGroupVersion.WithResource("nodes"), "", "n1")
		if err != nil {
			return v1.NodeCondition{}
		}
		for _, c := range n.(*v1.Node).Status.Conditions {
			if c.Type == v1.NodeReady {
				return c
			}
		}
		return v1.NodeCondition{}
	}
	// Waiting: the health ticker, the status timer (a minute) and the lease timer.
	waiting := func() bool { return clk.Waiters() == 3 }
	eventually.True(t, "the node Ready and every loop waiting", func() bool { return ready().Status == v1.ConditionTrue && waiting() })

	steps := []struct {
		what       string
		flip       func()
		wantStatus v1.ConditionStatus
		wantMsg    string
	}{
		{"network not ready", func() {
			f.SetCondition(runtimeapi.NetworkReady, false, "NetworkPluginNotReady", "Network plugin returns error: cni plugin not initialized")
		}, v1.ConditionFalse,
			"container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized"},
		{"network back", func() { f.SetCondition(runtimeapi.NetworkReady, true, "", "") },
			v1.ConditionTrue, "kubelet is posting ready status"},
		{"runtime unreachable", func() { f.InjectError("Status", status.Error(codes.Unavailable, "connection refused")) },
			v1.ConditionFalse, "container runtime is down"},
		{"runtime back", func() {}, v1.ConditionTrue, "kubelet is posting ready status"},
	}
	for _, s := range steps {
		s.flip()
		clk.Step(runtimeHealthPeriod) // the next health check; the status timer is a minute away
		eventually.True(t, s.what+": Ready "+string(s.wantStatus)+" "+s.wantMsg, func() bool {
			c := ready()
			return c.Status == s.wantStatus && c.Message == s.wantMsg
		})
		if c := ready(); !c.LastTransitionTime.Time.Equal(clk.Now()) {
			t.Errorf("%s: Ready's transition at %v, want at the health check (%v)", s.what, c.LastTransitionTime, clk.Now())
		}
		mu.Lock()
		last := patchedAt[len(patchedAt)-1]
		mu.Unlock()
		if !last.Equal(clk.Now()) {
			t.Errorf("%s: last status patch at %v, want at the health check %v", s.what, last, clk.Now())
		}
		eventually.True(t, "every loop waiting again", waiting)
	}
}
