package nodeshutdown

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/testsupport/eventually"
)

var t0 = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

type killCall struct {
	pod    string
	grace  time.Duration
	at     time.Time
	status v1.PodStatus
	// seen while killing, from inside the shutdown
	admitted bool
	state    State
	stateErr error
}

// fakeKiller stops pods at once, except those named in hang, which block until their
// channel closes or ctx is done.
type fakeKiller struct {
	clock   *clocktesting.FakeClock
	m       *Manager // for in-kill observations
	rootDir string
	initial map[string]v1.PodStatus
	hang    map[string]chan struct{}

	mu      sync.Mutex
	calls   []killCall
	started chan string
}

func (f *fakeKiller) KillPod(ctx context.Context, pod *v1.Pod, grace time.Duration, status func(*v1.PodStatus)) error {
	initial := f.initial[pod.Name]
	c := killCall{pod: pod.Name, grace: grace, at: f.clock.Now(), status: *initial.DeepCopy()}
	status(&c.status)
	if f.m != nil {
		c.admitted, _, _ = f.m.Admit(testPod("x", "new", nil, nil))
	}
	if f.rootDir != "" {
		c.state, c.stateErr = ReadState(f.rootDir)
	}
	f.mu.Lock()
	f.calls = append(f.calls, c)
	f.mu.Unlock()
	if f.started != nil {
		f.started <- pod.Name
	}
	if ch, ok := f.hang[pod.Name]; ok {
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (f *fakeKiller) get() []killCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]killCall(nil), f.calls...)
}

func newTestManager(t *testing.T, groups []Group, pods []*v1.Pod, k *fakeKiller, reg prometheus.Registerer) *Manager {
	t.Helper()
	m, err := NewManager(Options{Groups: groups, Killer: k, Lister: func() []*v1.Pod { return pods }, RootDir: k.rootDir, Clock: k.clock, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	k.m = m
	return m
}

func TestProcessShutdownOrderAndGrace(t *testing.T) {
	groups := []Group{{0, 20 * time.Second}, {1000, 10 * time.Second}, {5000, 30 * time.Second}, {2000000000, 5 * time.Second}}
	pods := []*v1.Pod{
		testPod("ns", "critical", i32(2000000000), i64(60)),
		testPod("ns", "mid-a", i32(1000), nil),
		testPod("ns", "low-a", nil, i64(2)),
		testPod("ns", "mid-b", i32(4999), i64(60)),
		testPod("ns", "low-b", i32(-1), nil),
	}
	k := &fakeKiller{clock: clocktesting.NewFakeClock(t0)}
	m := newTestManager(t, groups, pods, k, nil)
	if err := m.ProcessShutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	calls := k.get()
	rank := map[string]int{"low-a": 0, "low-b": 0, "mid-a": 1, "mid-b": 1, "critical": 3}
	wantGrace := map[string]time.Duration{"low-a": 2 * time.Second, "low-b": 20 * time.Second, "mid-a": 10 * time.Second, "mid-b": 10 * time.Second, "critical": 5 * time.Second}
	if len(calls) != len(pods) {
		t.Fatalf("killed %d pods, want %d: %+v", len(calls), len(pods), calls)
	}
	for i, c := range calls {
		if i > 0 && rank[calls[i-1].pod] > rank[c.pod] {
			t.Errorf("pod %s (group %d) killed after %s (group %d): higher priority first", c.pod, rank[c.pod], calls[i-1].pod, rank[calls[i-1].pod])
		}
		if c.grace != wantGrace[c.pod] {
			t.Errorf("pod %s grace = %s, want %s", c.pod, c.grace, wantGrace[c.pod])
		}
	}
	if !m.ShuttingDown() {
		t.Error("ShuttingDown() = false after the shutdown ran, want true until cancelled")
	}
}

func TestProcessShutdownHungGroupDoesNotBlockPastGrace(t *testing.T) {
	groups := []Group{{0, 20 * time.Second}, {1000, 10 * time.Second}}
	pods := []*v1.Pod{testPod("ns", "hangs", nil, nil), testPod("ns", "quick", nil, nil), testPod("ns", "high", i32(1000), nil)}
	release := make(chan struct{})
	clk := clocktesting.NewFakeClock(t0)
	k := &fakeKiller{clock: clk, hang: map[string]chan struct{}{"hangs": release}, started: make(chan string, 10), rootDir: t.TempDir()}
	reg := prometheus.NewRegistry()
	m := newTestManager(t, groups, pods, k, reg)

	done := make(chan error, 1)
	go func() { done <- m.ProcessShutdown(context.Background()) }()
	for range 2 { // both low pods started
		<-k.started
	}
	eventually.True(t, "the group's timer", clk.HasWaiters)
	clk.Step(19 * time.Second)
	clk.Step(time.Second) // the group's 20s are up now, not before
	if got := <-k.started; got != "high" {
		t.Fatalf("next pod killed = %s, want high", got)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	close(release)

	var high killCall
	for _, c := range k.get() {
		if c.pod == "high" {
			high = c
		}
	}
	if want := t0.Add(20 * time.Second); !high.at.Equal(want) {
		t.Errorf("high-priority group started at %s, want %s (exactly when the hung group's grace ran out)", high.at, want)
	}

	// State file: start at the beginning, end when the last group finished (not the start time).
	st, err := ReadState(k.rootDir)
	if err != nil {
		t.Fatal(err)
	}
	if !st.StartTime.Equal(t0) || !st.EndTime.Equal(t0.Add(20*time.Second)) {
		t.Errorf("state = %+v, want start %s end %s", st, t0, t0.Add(20*time.Second))
	}
	if high.stateErr != nil || !high.state.StartTime.Equal(t0) || !high.state.EndTime.IsZero() {
		t.Errorf("state during the shutdown = %+v (%v), want start %s and no end yet", high.state, high.stateErr, t0)
	}
	raw, err := os.ReadFile(filepath.Join(k.rootDir, StateFileName))
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(raw, &fields); err != nil {
		t.Fatal(err)
	}
	if fields["startTime"] != "2026-12-02T10:00:00Z" || fields["endTime"] != "2026-12-02T10:00:20Z" {
		t.Errorf("state file = %s, want startTime/endTime keys with the shutdown's times", raw)
	}
	if got := testutil.ToFloat64(m.startGauge); got != float64(t0.Unix()) {
		t.Errorf("start gauge = %v, want %v", got, t0.Unix())
	}
	if got := testutil.ToFloat64(m.endGauge); got != float64(t0.Unix()+20) {
		t.Errorf("end gauge = %v, want %v", got, t0.Unix()+20)
	}
	if n, err := testutil.GatherAndCount(reg, "kubelet_graceful_shutdown_start_time_seconds", "kubelet_graceful_shutdown_end_time_seconds"); err != nil || n != 2 {
		t.Errorf("registered gauges = %d (%v), want 2", n, err)
	}
}

func TestProcessShutdownStopsWhenContextDone(t *testing.T) {
	groups := []Group{{0, 20 * time.Second}, {1000, 10 * time.Second}}
	pods := []*v1.Pod{testPod("ns", "hangs", nil, nil), testPod("ns", "high", i32(1000), nil)}
	k := &fakeKiller{clock: clocktesting.NewFakeClock(t0), hang: map[string]chan struct{}{"hangs": make(chan struct{})}, started: make(chan string, 10)}
	m := newTestManager(t, groups, pods, k, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.ProcessShutdown(ctx) }()
	<-k.started
	cancel()
	if err := <-done; err == nil || !strings.Contains(err.Error(), "context canceled") {
		t.Fatalf("ProcessShutdown() = %v, want a context error", err)
	}
	for _, c := range k.get() {
		if c.pod == "high" {
			t.Fatal("high-priority pod killed after the shutdown was abandoned")
		}
	}
}

func TestShutdownPodStatus(t *testing.T) {
	old := metav1.NewTime(t0.Add(-time.Hour))
	k := &fakeKiller{
		clock: clocktesting.NewFakeClock(t0),
		initial: map[string]v1.PodStatus{
			"running": {Phase: v1.PodRunning, Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}}},
			"done":    {Phase: v1.PodSucceeded},
			"already": {Phase: v1.PodRunning, Conditions: []v1.PodCondition{{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: "Other", LastTransitionTime: old}}},
		},
	}
	pods := []*v1.Pod{testPod("ns", "running", nil, nil), testPod("ns", "done", nil, nil), testPod("ns", "already", nil, nil)}
	m := newTestManager(t, []Group{{0, time.Second}}, pods, k, nil)
	if ok, _, _ := m.Admit(pods[0]); !ok {
		t.Fatal("Admit refused a pod before any shutdown")
	}
	if err := m.ProcessShutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantPhase := map[string]v1.PodPhase{"running": v1.PodFailed, "done": v1.PodSucceeded, "already": v1.PodFailed}
	wantLTT := map[string]time.Time{"running": t0, "done": t0, "already": old.Time}
	for _, c := range k.get() {
		s := c.status
		if s.Phase != wantPhase[c.pod] || s.Reason != "Terminated" || s.Message != "Pod was terminated in response to imminent node shutdown." {
			t.Errorf("%s: phase/reason/message = %s/%s/%q", c.pod, s.Phase, s.Reason, s.Message)
		}
		var found int
		for _, cond := range s.Conditions {
			if cond.Type != v1.DisruptionTarget {
				continue
			}
			found++
			if cond.Status != v1.ConditionTrue || cond.Reason != "TerminationByKubelet" || !cond.LastTransitionTime.Time.Equal(wantLTT[c.pod]) {
				t.Errorf("%s: DisruptionTarget = %+v", c.pod, cond)
			}
		}
		if found != 1 {
			t.Errorf("%s: %d DisruptionTarget conditions, want 1: %+v", c.pod, found, s.Conditions)
		}
		if c.pod == "running" && len(s.Conditions) != 2 {
			t.Errorf("running: other conditions lost: %+v", s.Conditions)
		}
		if c.admitted {
			t.Errorf("%s: a new pod was admitted while the node was shutting down", c.pod)
		}
	}
	ok, reason, msg := m.Admit(pods[0])
	if ok || reason != "NodeShutdown" || msg != "Pod was rejected as the node is shutting down." {
		t.Errorf("Admit during shutdown = %v %q %q", ok, reason, msg)
	}
	m.CancelShutdown()
	if ok, _, _ := m.Admit(pods[0]); !ok || m.ShuttingDown() {
		t.Error("Admit still refuses after the shutdown was cancelled")
	}
}

func TestNewManagerRestoresGaugesFromStateFile(t *testing.T) {
	dir := t.TempDir()
	if err := writeState(filepath.Join(dir, StateFileName), State{StartTime: t0, EndTime: t0.Add(7 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	m := newTestManager(t, nil, nil, &fakeKiller{clock: clocktesting.NewFakeClock(t0), rootDir: dir}, nil)
	if got := testutil.ToFloat64(m.endGauge); got != float64(t0.Unix()+7) {
		t.Errorf("end gauge = %v, want %v", got, t0.Unix()+7)
	}
}

func TestProcessShutdownTwiceAtOnceRefused(t *testing.T) {
	release := make(chan struct{})
	k := &fakeKiller{clock: clocktesting.NewFakeClock(t0), hang: map[string]chan struct{}{"p": release}, started: make(chan string, 1)}
	m := newTestManager(t, []Group{{0, time.Minute}}, []*v1.Pod{testPod("ns", "p", nil, nil)}, k, nil)
	done := make(chan error, 1)
	go func() { done <- m.ProcessShutdown(context.Background()) }()
	<-k.started
	if err := m.ProcessShutdown(context.Background()); err == nil {
		t.Error("second concurrent ProcessShutdown accepted")
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestProcessShutdownZeroGraceGroupDoesNotWait(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	k := &fakeKiller{clock: clocktesting.NewFakeClock(t0), hang: map[string]chan struct{}{"crit": release}, started: make(chan string, 1)}
	groups := []Group{{0, 30 * time.Second}, {2000000000, 0}}
	m := newTestManager(t, groups, []*v1.Pod{testPod("ns", "crit", i32(2000000000), nil)}, k, nil)
	if err := m.ProcessShutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-k.started // the kill was started; ProcessShutdown did not wait for it
	if c := k.get(); len(c) != 1 || c[0].grace != 0 {
		t.Fatalf("calls = %+v, want crit killed with grace 0", c)
	}
}

// A truncated or garbage state file (issue 20 scenario 8) does not stop the
// manager: it is ignored (logged) and the gauges stay unset.
func TestCorruptStateFileIgnored(t *testing.T) {
	for name, content := range map[string]string{"truncated": `{"startTime":"2026-12-`, "garbage": "\xde\xad\x00{"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, StateFileName), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			reg := prometheus.NewRegistry()
			k := &fakeKiller{clock: clocktesting.NewFakeClock(t0), rootDir: dir}
			m, err := NewManager(Options{Groups: []Group{{0, time.Second}}, Killer: k, Lister: func() []*v1.Pod { return nil }, RootDir: dir, Clock: k.clock, Registerer: reg})
			if err != nil || m == nil {
				t.Fatalf("a corrupt state file stopped the manager: %v", err)
			}
			if v := testutil.ToFloat64(m.startGauge); v != 0 {
				t.Errorf("start gauge = %v from a corrupt file, want unset", v)
			}
		})
	}
}
