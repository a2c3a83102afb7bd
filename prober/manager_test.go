package prober

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/testsupport/eventually"
)

// fakeExec answers exec probes from a per-command result the test changes.
type fakeExec struct {
	mu    sync.Mutex
	fail  map[string]bool // command -> exits 1
	calls map[string]int
}

type exitErr struct{}

func (exitErr) Error() string   { return "exit 1" }
func (exitErr) ExitStatus() int { return 1 }

func (f *fakeExec) ExecSync(_ context.Context, _ string, cmd []string, _ time.Duration) ([]byte, []byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[cmd[0]]++
	if f.fail[cmd[0]] {
		return []byte(cmd[0] + " says no"), nil, exitErr{}
	}
	return nil, nil, nil
}

func (f *fakeExec) set(cmd string, fail bool) {
	f.mu.Lock()
	f.fail[cmd] = fail
	f.mu.Unlock()
}

func (f *fakeExec) count(cmd string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[cmd]
}

type fakeStatus struct {
	mu sync.Mutex
	s  map[types.UID]v1.PodStatus
}

func (f *fakeStatus) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.s[uid]
	return s, ok
}

func (f *fakeStatus) set(uid types.UID, s v1.PodStatus) {
	f.mu.Lock()
	f.s[uid] = s
	f.mu.Unlock()
}

func execProbe(cmd string, period, failure int32) *v1.Probe {
	return &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{cmd}}}, PeriodSeconds: period, FailureThreshold: failure}
}

func runningStatus(started bool, since time.Time) v1.PodStatus {
	return v1.PodStatus{Phase: v1.PodRunning, PodIP: "10.0.0.1", ContainerStatuses: []v1.ContainerStatus{{
		Name: "app", ContainerID: "containerd://c1", Started: ptr.To(started),
		State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(since)}},
	}}}
}

type harness struct {
	clk    *testingclock.FakeClock
	exec   *fakeExec
	status *fakeStatus
	rec    *record.FakeRecorder
	m      *Manager
	cancel context.CancelFunc
	ctx    context.Context
}

func newHarness(t *testing.T) *harness {
	clk := testingclock.NewFakeClock(time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC))
	h := &harness{clk: clk, exec: &fakeExec{fail: map[string]bool{}, calls: map[string]int{}},
		status: &fakeStatus{s: map[types.UID]v1.PodStatus{}}, rec: record.NewFakeRecorder(100)}
	h.m = NewManager(h.exec, h.status, h.rec, clk)
	// Past the start-up window: workers probe at once, without the start-up jitter.
	clk.Step(time.Hour)
	h.ctx, h.cancel = context.WithCancel(context.Background())
	t.Cleanup(func() { h.cancel(); h.m.Wait() })
	return h
}

// tick advances one period once the worker waits on its ticker again.
func (h *harness) tick(t *testing.T, d time.Duration) {
	t.Helper()
	eventually.True(t, "a waiting worker", h.clk.HasWaiters)
	h.clk.Step(d)
	// The fake ticker drops ticks the worker has not taken yet; give it time to take this one.
	time.Sleep(20 * time.Millisecond)
}

func podWith(c v1.Container) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-1"},
		Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyAlways, Containers: []v1.Container{c}}}
}

func TestReadinessInitialFailureThenThresholds(t *testing.T) {
	h := newHarness(t)
	pod := podWith(v1.Container{Name: "app", ReadinessProbe: &v1.Probe{
		ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"ready"}}}, PeriodSeconds: 1, SuccessThreshold: 2, FailureThreshold: 2,
	}})
	h.exec.set("ready", true)
	// Only the worker's first probe and fake-clock ticks drive probes here: the
	// status is stored before the worker exists and UpdatePodStatus is not called,
	// since its trigger may or may not fold into the first probe and the count of
	// probes would then depend on scheduling.
	h.status.set(pod.UID, runningStatus(true, h.clk.Now()))
	h.m.AddPod(h.ctx, pod)
	if h.m.Ready(pod.UID, "app", "c1") {
		t.Fatal("ready before the readiness probe ran")
	}
	eventually.True(t, "the first (failed) probe", func() bool { return h.exec.count("ready") == 1 })
	eventually.True(t, "the initial Failure", func() bool { r, ok := h.m.readiness.get("c1"); return ok && r == Failure })
	if u := <-h.m.ReadinessUpdates(); u.ContainerID != "c1" || u.Result != Failure || u.PodUID != pod.UID {
		t.Errorf("first readiness update = %+v", u)
	}
	h.exec.set("ready", false)
	h.tick(t, time.Second)
	eventually.True(t, "a successful probe", func() bool { return h.exec.count("ready") == 2 })
	if h.m.Ready(pod.UID, "app", "c1") {
		t.Fatal("ready after one success with successThreshold 2")
	}
	h.tick(t, time.Second)
	eventually.True(t, "ready after two successes", func() bool { return h.m.Ready(pod.UID, "app", "c1") })
	if u := <-h.m.ReadinessUpdates(); u.Result != Success {
		t.Errorf("readiness update = %+v, want success", u)
	}
	h.exec.set("ready", true)
	h.tick(t, time.Second)
	eventually.True(t, "a failed probe", func() bool { return h.exec.count("ready") == 4 })
	if !h.m.Ready(pod.UID, "app", "c1") {
		t.Fatal("unready after one failure with failureThreshold 2")
	}
	h.tick(t, time.Second)
	eventually.True(t, "unready after two failures", func() bool { return !h.m.Ready(pod.UID, "app", "c1") })
	select {
	case e := <-h.rec.Events:
		if !strings.Contains(e, "Unhealthy Readiness probe failed: ready says no") {
			t.Errorf("event = %q", e)
		}
	default:
		t.Error("no Unhealthy event")
	}
}

func TestLivenessFailureHoldsUntilNewContainer(t *testing.T) {
	h := newHarness(t)
	pod := podWith(v1.Container{Name: "app", LivenessProbe: execProbe("alive", 1, 1)})
	h.status.set(pod.UID, runningStatus(true, h.clk.Now()))
	h.m.AddPod(h.ctx, pod)
	eventually.True(t, "initial Success", func() bool { r, ok := h.m.liveness.get("c1"); return ok && r == Success })
	if _, bad := h.m.Unhealthy("c1"); bad {
		t.Fatal("unhealthy with liveness initially Success")
	}
	h.exec.set("alive", true)
	h.tick(t, time.Second)
	eventually.True(t, "liveness failure", func() bool { p, bad := h.m.Unhealthy("c1"); return bad && p == "liveness" })
	n := h.exec.count("alive")
	// On hold: the dying container is not probed again.
	h.tick(t, time.Second)
	h.tick(t, time.Second)
	if got := h.exec.count("alive"); got != n {
		t.Errorf("probed a container that failed liveness %d more times", got-n)
	}
	// A new container instance is probed again, starting from Success.
	h.exec.set("alive", false)
	st := runningStatus(true, h.clk.Now())
	st.ContainerStatuses[0].ContainerID = "containerd://c2"
	h.status.set(pod.UID, st)
	h.tick(t, time.Second)
	eventually.True(t, "the new container probed", func() bool { return h.exec.count("alive") > n })
	if _, bad := h.m.Unhealthy("c2"); bad {
		t.Error("new container unhealthy")
	}
	if _, ok := h.m.liveness.get("c1"); ok {
		t.Error("the old container's result was kept")
	}
}

func TestStartupGatesLivenessAndReadiness(t *testing.T) {
	h := newHarness(t)
	pod := podWith(v1.Container{Name: "app",
		StartupProbe:   execProbe("startup", 1, 10),
		LivenessProbe:  execProbe("alive", 1, 1),
		ReadinessProbe: execProbe("ready", 1, 1),
	})
	h.exec.set("startup", true)
	h.status.set(pod.UID, runningStatus(false, h.clk.Now()))
	h.m.AddPod(h.ctx, pod)
	eventually.True(t, "a startup probe", func() bool { return h.exec.count("startup") >= 1 })
	if h.m.Started(pod.UID, "app", "c1") {
		t.Error("started before the startup probe passed")
	}
	h.tick(t, time.Second)
	h.tick(t, time.Second)
	if h.exec.count("alive") != 0 || h.exec.count("ready") != 0 {
		t.Fatalf("liveness/readiness ran before startup passed: %d/%d", h.exec.count("alive"), h.exec.count("ready"))
	}
	h.exec.set("startup", false)
	h.tick(t, time.Second)
	eventually.True(t, "started", func() bool { return h.m.Started(pod.UID, "app", "c1") })
	h.status.set(pod.UID, runningStatus(true, h.clk.Now()))
	n := h.exec.count("startup")
	h.tick(t, time.Second)
	eventually.True(t, "liveness and readiness running", func() bool { return h.exec.count("alive") > 0 && h.exec.count("ready") > 0 })
	if h.exec.count("startup") != n {
		t.Error("startup probe ran again after it passed")
	}
}

func TestStartupFailureIsUnhealthy(t *testing.T) {
	h := newHarness(t)
	pod := podWith(v1.Container{Name: "app", StartupProbe: execProbe("startup", 1, 2)})
	h.exec.set("startup", true)
	h.status.set(pod.UID, runningStatus(false, h.clk.Now()))
	h.m.AddPod(h.ctx, pod)
	eventually.True(t, "a probe", func() bool { return h.exec.count("startup") >= 1 })
	if _, bad := h.m.Unhealthy("c1"); bad {
		t.Fatal("unhealthy after one of two allowed failures")
	}
	h.tick(t, time.Second)
	eventually.True(t, "startup failure", func() bool { p, bad := h.m.Unhealthy("c1"); return bad && p == "startup" })
}

func TestInitialDelay(t *testing.T) {
	h := newHarness(t)
	p := execProbe("alive", 1, 1)
	p.InitialDelaySeconds = 5
	pod := podWith(v1.Container{Name: "app", LivenessProbe: p})
	h.status.set(pod.UID, runningStatus(true, h.clk.Now()))
	h.m.AddPod(h.ctx, pod)
	for i := 0; i < 4; i++ {
		h.tick(t, time.Second)
	}
	eventually.True(t, "a waiting worker", h.clk.HasWaiters)
	if n := h.exec.count("alive"); n != 0 {
		t.Fatalf("probed %d times within the initial delay", n)
	}
	for i := 0; i < 3 && h.exec.count("alive") == 0; i++ {
		h.tick(t, time.Second)
	}
	eventually.True(t, "a probe after the initial delay", func() bool { return h.exec.count("alive") >= 1 })
}

func TestWorkersStop(t *testing.T) {
	tests := []struct {
		name   string
		policy v1.RestartPolicy
		status func(time.Time) v1.PodStatus
		remove bool
		// stopLiveness calls StopLivenessAndStartup; the readiness worker stays.
		stopLiveness bool
	}{
		{name: "pod succeeded", policy: v1.RestartPolicyAlways, status: func(now time.Time) v1.PodStatus {
			s := runningStatus(true, now)
			s.Phase = v1.PodSucceeded
			return s
		}},
		{name: "container terminated under restartPolicy Never", policy: v1.RestartPolicyNever, status: func(now time.Time) v1.PodStatus {
			s := runningStatus(true, now)
			s.ContainerStatuses[0].State = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 1}}
			return s
		}},
		{name: "RemovePod", policy: v1.RestartPolicyAlways, status: func(now time.Time) v1.PodStatus { return runningStatus(true, now) }, remove: true},
		{name: "StopLivenessAndStartup keeps readiness", policy: v1.RestartPolicyAlways, status: func(now time.Time) v1.PodStatus { return runningStatus(true, now) }, stopLiveness: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			pod := podWith(v1.Container{Name: "app", ReadinessProbe: execProbe("ready", 1, 1), LivenessProbe: execProbe("alive", 1, 1)})
			pod.Spec.RestartPolicy = tt.policy
			h.status.set(pod.UID, runningStatus(true, h.clk.Now()))
			h.m.AddPod(h.ctx, pod)
			if n := h.m.workerCount(); n != 2 {
				t.Fatalf("%d workers, want 2", n)
			}
			h.m.AddPod(h.ctx, pod) // idempotent
			if n := h.m.workerCount(); n != 2 {
				t.Fatalf("%d workers after a second AddPod, want 2", n)
			}
			eventually.True(t, "first probes", func() bool { return h.exec.count("ready") > 0 && h.exec.count("alive") > 0 })
			h.status.set(pod.UID, tt.status(h.clk.Now()))
			if tt.stopLiveness {
				h.m.StopLivenessAndStartup(pod.UID)
				eventually.True(t, "the liveness worker gone", func() bool { return h.m.workerCount() == 1 })
				if h.m.getWorker(pod.UID, "app", Readiness) == nil {
					t.Fatal("the readiness worker stopped too")
				}
				if _, ok := h.m.liveness.get("c1"); ok {
					t.Error("the stopped liveness worker left its result")
				}
				return
			}
			if tt.remove {
				h.m.RemovePod(pod.UID)
			} else {
				h.tick(t, time.Second)
			}
			eventually.True(t, "workers gone", func() bool { return h.m.workerCount() == 0 })
			if _, ok := h.m.readiness.get("c1"); ok {
				t.Error("a stopped worker left its result")
			}
		})
	}
}

func TestStartupJitterSpreadsFirstProbe(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC))
	exec := &fakeExec{fail: map[string]bool{}, calls: map[string]int{}}
	status := &fakeStatus{s: map[types.UID]v1.PodStatus{}}
	m := NewManager(exec, status, nil, clk)
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); m.Wait() }()
	pod := podWith(v1.Container{Name: "app", LivenessProbe: execProbe("alive", 10, 1)})
	status.set(pod.UID, runningStatus(true, clk.Now()))
	m.AddPod(ctx, pod)
	eventually.True(t, "the worker waiting", clk.HasWaiters)
	time.Sleep(20 * time.Millisecond)
	if exec.count("alive") != 0 {
		t.Fatal("a worker made right after start-up probed without a random delay")
	}
	clk.Step(10 * time.Second) // the delay is below one period
	eventually.True(t, "the first probe", func() bool { return exec.count("alive") == 1 })
}

func TestDeletionStopsLiveness(t *testing.T) {
	h := newHarness(t)
	pod := podWith(v1.Container{Name: "app", LivenessProbe: execProbe("alive", 1, 1)})
	now := metav1.NewTime(h.clk.Now())
	pod.DeletionTimestamp = &now
	h.exec.set("alive", true)
	h.status.set(pod.UID, runningStatus(true, h.clk.Now()))
	h.m.AddPod(h.ctx, pod)
	eventually.True(t, "worker gone", func() bool { return h.m.workerCount() == 0 })
	if h.exec.count("alive") != 0 {
		t.Error("probed the liveness of a terminating pod")
	}
}

func TestProbeMetrics(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC))
	exec := &fakeExec{fail: map[string]bool{"alive": true}, calls: map[string]int{}}
	status := &fakeStatus{s: map[types.UID]v1.PodStatus{}}
	reg := prometheus.NewRegistry()
	m := NewManager(exec, status, nil, clk, WithMetrics(reg))
	clk.Step(time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); m.Wait() }()
	pod := podWith(v1.Container{Name: "app", LivenessProbe: execProbe("alive", 1, 3)})
	status.set(pod.UID, runningStatus(true, clk.Now()))
	m.AddPod(ctx, pod)
	eventually.True(t, "a failed probe counted", func() bool {
		return testutil.ToFloat64(m.metrics.total.WithLabelValues("Liveness", "failed", "app", "web", "default", "uid-1")) == 1
	})
	m.RemovePod(pod.UID)
	eventually.True(t, "the series dropped with the worker", func() bool { return testutil.CollectAndCount(m.metrics.total) == 0 })
}

// Issue 33 (a Ready flap across a nodelet restart): nodelet's stop ends every
// probe worker, and until it exits Ready must answer what the probes last
// observed. The workers forgot their results on the way out: a ready
// container read as not ready while its worker was still registered, and an
// unready one as ready once it was gone (no worker: no probe); a status the
// sync loop generated during the stop carried that to the API server.
func TestStopKeepsResults(t *testing.T) {
	h := newHarness(t)
	withID := func(id string) v1.PodStatus {
		s := runningStatus(true, h.clk.Now())
		s.ContainerStatuses[0].ContainerID = "containerd://" + id
		return s
	}
	ready := podWith(v1.Container{Name: "app", ReadinessProbe: execProbe("ok", 1, 1)})
	unready := podWith(v1.Container{Name: "app", ReadinessProbe: execProbe("no", 1, 1)})
	unready.UID = "uid-2"
	h.exec.set("no", true)
	h.status.set(ready.UID, withID("c-ready"))
	h.status.set(unready.UID, withID("c-unready"))
	runDone := make(chan struct{})
	go func() { defer close(runDone); h.m.Run(h.ctx) }()
	h.m.AddPod(h.ctx, ready)
	h.m.AddPod(h.ctx, unready)
	eventually.True(t, "the ready container probed ready", func() bool { return h.m.Ready(ready.UID, "app", "c-ready") })
	eventually.True(t, "the unready container probed", func() bool { return h.exec.count("no") > 0 })
	if h.m.Ready(unready.UID, "app", "c-unready") {
		t.Fatal("unready container reads ready before the stop")
	}

	h.cancel() // nodelet stops: the loop's and the manager's context end
	select {
	case <-runDone:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if n := h.m.workerCount(); n != 0 {
		t.Fatalf("%d workers left after Run returned", n)
	}
	if !h.m.Ready(ready.UID, "app", "c-ready") {
		t.Error("after the stop the ready container reads not ready")
	}
	if h.m.Ready(unready.UID, "app", "c-unready") {
		t.Error("after the stop the unready container reads ready")
	}
}
