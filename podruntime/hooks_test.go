package podruntime

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pleg"
	"github.com/nodelet/nodelet/prober"
)

func TestComputeActionsProbeKills(t *testing.T) {
	sidecarPod := testPod(v1.RestartPolicyNever, "app")
	sidecarPod.Spec.InitContainers = []v1.Container{{Name: "proxy", Image: "busybox", RestartPolicy: ptr.To(v1.ContainerRestartPolicyAlways)}}
	probeGracePod := testPod(v1.RestartPolicyAlways, "app")
	probeGracePod.Spec.Containers[0].LivenessProbe = &v1.Probe{TerminationGracePeriodSeconds: ptr.To[int64](5)}
	tests := []struct {
		name     string
		pod      *v1.Pod
		failed   map[string]string // container ID -> probe
		running  []string
		wantKill map[string]string
		killPod  bool
		// wantGrace is the kill's grace override (probe terminationGracePeriodSeconds).
		wantGrace *int64
	}{
		{
			name: "liveness failure under Always kills, restart follows", pod: testPod(v1.RestartPolicyAlways, "app"),
			failed: map[string]string{"app-id": "liveness"}, running: []string{"app"},
			wantKill: map[string]string{"app-id": "Container app failed liveness probe, will be restarted"},
		},
		{
			name: "startup failure under OnFailure", pod: testPod(v1.RestartPolicyOnFailure, "app"),
			failed: map[string]string{"app-id": "startup"}, running: []string{"app"},
			wantKill: map[string]string{"app-id": "Container app failed startup probe, will be restarted"},
		},
		{
			name: "liveness failure under Never is not restarted and ends the pod", pod: testPod(v1.RestartPolicyNever, "app"),
			failed: map[string]string{"app-id": "liveness"}, running: []string{"app"},
			wantKill: map[string]string{"app-id": "Container app failed liveness probe"}, killPod: true,
		},
		{
			name: "healthy containers are kept", pod: testPod(v1.RestartPolicyAlways, "app", "other"),
			failed: map[string]string{"app-id": "liveness"}, running: []string{"app", "other"},
			wantKill: map[string]string{"app-id": "Container app failed liveness probe, will be restarted"},
		},
		{
			name: "the probe's own grace period", pod: probeGracePod,
			failed: map[string]string{"app-id": "liveness"}, running: []string{"app"},
			wantKill: map[string]string{"app-id": "Container app failed liveness probe, will be restarted"}, wantGrace: ptr.To[int64](5),
		},
		{
			name: "a sidecar always restarts", pod: sidecarPod,
			failed: map[string]string{"proxy-id": "liveness"}, running: []string{"proxy", "app"},
			wantKill: map[string]string{"proxy-id": "Container proxy failed liveness probe, will be restarted"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &pleg.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{readySandbox(0)}}
			for i, name := range tt.running {
				st.Containers = append(st.Containers, ctr(tt.pod, name, runtimeapi.ContainerState_CONTAINER_RUNNING, 0, int64(i+1)))
			}
			got := ComputeActions(gatherFacts(tt.pod, st, t0, nil, fakeProbes{failed: tt.failed}, nil))
			if len(got.KillContainers) != len(tt.wantKill) || got.KillPod != tt.killPod || len(got.StartContainers) != 0 {
				t.Fatalf("got %+v; want kills %v, killPod %v, nothing started", got, tt.wantKill, tt.killPod)
			}
			if g, ok := got.KillGrace["app-id"]; (tt.wantGrace == nil) == ok || (ok && g != *tt.wantGrace) {
				t.Errorf("KillGrace = %v, want %v", got.KillGrace, tt.wantGrace)
			}
			for id, msg := range tt.wantKill {
				if got.KillContainers[id] != msg {
					t.Errorf("KillContainers[%s] = %q, want %q", id, got.KillContainers[id], msg)
				}
			}
		})
	}
}

type fakeProbes struct {
	failed     map[string]string // container ID -> probe
	notStarted map[string]bool
}

func (f fakeProbes) Unhealthy(id string) (string, bool)     { p, ok := f.failed[id]; return p, ok }
func (f fakeProbes) Started(_ types.UID, _, id string) bool { return !f.notStarted[id] }

// TestSidecarStartupGatesNextInit: the init container after a sidecar with a
// startup probe starts only once the sidecar has started.
func TestSidecarStartupGatesNextInit(t *testing.T) {
	pod := testPod(v1.RestartPolicyAlways, "app")
	pod.Spec.InitContainers = []v1.Container{
		{Name: "proxy", Image: "busybox", RestartPolicy: ptr.To(v1.ContainerRestartPolicyAlways), StartupProbe: &v1.Probe{}},
		{Name: "setup", Image: "busybox"},
	}
	st := &pleg.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{readySandbox(0)}, Containers: []*runtimeapi.ContainerStatus{
		ctr(pod, "proxy", runtimeapi.ContainerState_CONTAINER_RUNNING, 0, 1),
	}}
	if got := ComputeActions(Facts{Pod: pod, Status: st, Now: t0, Probes: map[string]ProbeVerdict{"proxy-id": {NotStarted: true}}}); len(got.StartInit) != 0 || len(got.StartContainers) != 0 {
		t.Errorf("before the sidecar started: %+v, want nothing started", got)
	}
	if got := ComputeActions(Facts{Pod: pod, Status: st, Now: t0}); !slices.Equal(got.StartInit, []int{1}) {
		t.Errorf("after the sidecar started: StartInit = %v, want [1]", got.StartInit)
	}
}

type stopCall struct {
	id    string
	grace int64
}

type recordingRuntime struct {
	Runtime
	mu    sync.Mutex
	stops []stopCall
}

func (r *recordingRuntime) StopContainer(_ context.Context, id string, grace int64) error {
	r.mu.Lock()
	r.stops = append(r.stops, stopCall{id, grace})
	r.mu.Unlock()
	return nil
}

func (r *recordingRuntime) StopPodSandbox(context.Context, string) error { return nil }

// fakeHooks runs a hook by calling fn with the container's name.
type fakeHooks struct {
	fn func(ctx context.Context, name string) (string, error)
}

func (f fakeHooks) RunHook(ctx context.Context, _ clock.Clock, _ *v1.Pod, t prober.Target, _ *v1.LifecycleHandler) (string, error) {
	return f.fn(ctx, t.Container.Name)
}

func hookManager(rt Runtime, hooks Hooks, clk clock.Clock) (*Manager, *record.FakeRecorder) {
	rec := record.NewFakeRecorder(100)
	m := New(Config{}, Deps{Runtime: rt, Node: func() NodeFacts { return NodeFacts{} }, Recorder: rec, Clock: clk, Hooks: hooks})
	return m, rec
}

func drain(rec *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func preStopExec() *v1.Lifecycle {
	return &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"drain"}}}}
}

// TestKillPodOrderAndPreStopGrace: app containers stop first with the grace left
// after their preStop hook; sidecars then stop in reverse order.
func TestKillPodOrderAndPreStopGrace(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	pod := testPod(v1.RestartPolicyAlways, "app")
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](10)
	pod.Spec.Containers[0].Lifecycle = preStopExec()
	pod.Spec.InitContainers = []v1.Container{
		{Name: "s1", Image: "busybox", RestartPolicy: ptr.To(v1.ContainerRestartPolicyAlways)},
		{Name: "s2", Image: "busybox", RestartPolicy: ptr.To(v1.ContainerRestartPolicyAlways)},
	}
	rt := &recordingRuntime{}
	var hooked []string
	m, rec := hookManager(rt, fakeHooks{fn: func(_ context.Context, name string) (string, error) {
		hooked = append(hooked, name)
		clk.Step(3 * time.Second) // the hook takes 3s
		return "", nil
	}}, clk)
	st := &pleg.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{readySandbox(0)}, Containers: []*runtimeapi.ContainerStatus{
		ctr(pod, "s1", runtimeapi.ContainerState_CONTAINER_RUNNING, 0, 1),
		ctr(pod, "s2", runtimeapi.ContainerState_CONTAINER_RUNNING, 0, 2),
		ctr(pod, "app", runtimeapi.ContainerState_CONTAINER_RUNNING, 0, 3),
	}}
	if err := m.KillPod(context.Background(), pod, st, nil); err != nil {
		t.Fatal(err)
	}
	want := []stopCall{{"app-id", 7}, {"s2-id", 7}, {"s1-id", 7}}
	if len(rt.stops) != len(want) {
		t.Fatalf("stops = %v, want %v", rt.stops, want)
	}
	for i := range want {
		if rt.stops[i] != want[i] {
			t.Errorf("stops = %v, want %v", rt.stops, want)
		}
	}
	if len(hooked) != 1 || hooked[0] != "app" {
		t.Errorf("preStop ran for %v, want [app]", hooked)
	}
	events := drain(rec)
	if len(events) != 3 || !strings.Contains(events[0], "Killing Stopping container app") {
		t.Errorf("events = %q", events)
	}
}

func TestPreStopHook(t *testing.T) {
	tests := []struct {
		name      string
		grace     int64
		hook      func(clk *testingclock.FakeClock) func(ctx context.Context, name string) (string, error)
		wantGrace int64
		wantEvent string
	}{
		{
			name: "failure is an event and the container still stops", grace: 30,
			hook: func(*testingclock.FakeClock) func(context.Context, string) (string, error) {
				return func(context.Context, string) (string, error) {
					return "Exec lifecycle hook failed", errors.New("exit 1")
				}
			},
			wantGrace: 30, wantEvent: "Warning FailedPreStopHook Exec lifecycle hook failed",
		},
		{
			name: "a hook longer than the grace period is cut off; the container still gets the minimum", grace: 5,
			hook: func(clk *testingclock.FakeClock) func(context.Context, string) (string, error) {
				return func(ctx context.Context, _ string) (string, error) {
					go func() {
						for !clk.HasWaiters() {
							time.Sleep(time.Millisecond)
						}
						clk.Step(5 * time.Second)
					}()
					<-ctx.Done()
					return "", ctx.Err()
				}
			},
			wantGrace: minimumGracePeriod,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := testingclock.NewFakeClock(t0)
			pod := testPod(v1.RestartPolicyAlways, "app")
			pod.Spec.TerminationGracePeriodSeconds = ptr.To(tt.grace)
			pod.Spec.Containers[0].Lifecycle = preStopExec()
			rt := &recordingRuntime{}
			m, rec := hookManager(rt, fakeHooks{fn: tt.hook(clk)}, clk)
			st := &pleg.PodStatus{Containers: []*runtimeapi.ContainerStatus{ctr(pod, "app", runtimeapi.ContainerState_CONTAINER_RUNNING, 0, 1)}}
			if err := m.KillPod(context.Background(), pod, st, nil); err != nil {
				t.Fatal(err)
			}
			if len(rt.stops) != 1 || rt.stops[0].grace != tt.wantGrace {
				t.Errorf("stops = %v, want grace %d", rt.stops, tt.wantGrace)
			}
			events := strings.Join(drain(rec), "\n")
			if tt.wantEvent != "" && !strings.Contains(events, tt.wantEvent) {
				t.Errorf("events %q lack %q", events, tt.wantEvent)
			}
			if tt.wantEvent == "" && strings.Contains(events, "FailedPreStopHook") {
				t.Errorf("a hook cut off by the grace period is reported as failed: %q", events)
			}
		})
	}
}

func TestPostStartFailureKillsContainer(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	pod := testPod(v1.RestartPolicyAlways, "app")
	c := &pod.Spec.Containers[0]
	c.Lifecycle = &v1.Lifecycle{PostStart: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"init"}}}}
	rt := &recordingRuntime{}
	m, rec := hookManager(rt, fakeHooks{fn: func(context.Context, string) (string, error) {
		return "Exec lifecycle hook ([init]) failed", errors.New("exit 3")
	}}, clk)
	if err := m.runPostStart(context.Background(), pod, c, "app-id", "10.0.0.1"); err == nil {
		t.Fatal("runPostStart succeeded with a failing hook")
	}
	if len(rt.stops) != 1 || rt.stops[0].id != "app-id" {
		t.Errorf("stops = %v, want the container stopped", rt.stops)
	}
	events := drain(rec)
	if len(events) != 2 || events[0] != "Warning FailedPostStartHook PostStartHook failed" || events[1] != "Normal Killing FailedPostStartHook" {
		t.Errorf("events = %q", events)
	}

	// A passing hook leaves the container alone.
	rt.stops = nil
	m2, _ := hookManager(rt, fakeHooks{fn: func(context.Context, string) (string, error) { return "", nil }}, clk)
	if err := m2.runPostStart(context.Background(), pod, c, "app-id", "10.0.0.1"); err != nil || len(rt.stops) != 0 {
		t.Errorf("passing hook: err %v, stops %v", err, rt.stops)
	}
}

// TestPreStopHookJoined: a preStop hook cut short (here by the kill's context ending)
// has returned by the time KillPod has: it runs through the runtime client, which is
// closed once nodelet's goroutines are joined. Before, it was left running.
func TestPreStopHookJoined(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	pod := testPod(v1.RestartPolicyAlways, "app")
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
	pod.Spec.Containers[0].Lifecycle = preStopExec()
	started, finish, returned := make(chan struct{}), make(chan struct{}), make(chan struct{})
	m, _ := hookManager(&recordingRuntime{}, fakeHooks{fn: func(ctx context.Context, _ string) (string, error) {
		defer close(returned)
		close(started)
		<-ctx.Done()
		<-finish // winding down takes a moment
		return "", ctx.Err()
	}}, clk)
	st := &pleg.PodStatus{Containers: []*runtimeapi.ContainerStatus{ctr(pod, "app", runtimeapi.ContainerState_CONTAINER_RUNNING, 0, 1)}}
	ctx, cancel := context.WithCancel(context.Background())
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		_ = m.KillPod(ctx, pod, st, nil)
	}()
	<-started
	cancel()
	go close(finish)
	<-killed
	select {
	case <-returned:
	default:
		t.Error("KillPod returned while its preStop hook was still running")
	}
}

// TestPostStartCutShortByCancellation: a postStart hook that never returns ends
// when the sync's context is cancelled (the pod is being deleted); that is no
// hook failure and no kill of its own: the pod's kill follows.
func TestPostStartCutShortByCancellation(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	pod := testPod(v1.RestartPolicyAlways, "app")
	c := &pod.Spec.Containers[0]
	c.Lifecycle = &v1.Lifecycle{PostStart: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"sleep", "3600"}}}}
	rt := &recordingRuntime{}
	ctx, cancel := context.WithCancel(context.Background())
	m, rec := hookManager(rt, fakeHooks{fn: func(ctx context.Context, _ string) (string, error) {
		cancel() // the delete arrives while the hook hangs
		<-ctx.Done()
		return "Exec lifecycle hook ([sleep 3600]) failed", ctx.Err()
	}}, clk)
	err := m.runPostStart(ctx, pod, c, "app-id", "10.0.0.1")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("runPostStart = %v, want context.Canceled", err)
	}
	if len(rt.stops) != 0 {
		t.Errorf("stops = %v, want none (the pod's kill stops it)", rt.stops)
	}
	if events := drain(rec); len(events) != 0 {
		t.Errorf("events = %q, want none", events)
	}
}
