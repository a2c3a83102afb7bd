package prober

import (
	"context"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"
)

// hangingExec is an exec probe that never answers: ExecSync returns only when its
// context ends. It counts the calls in flight.
type hangingExec struct {
	entered  chan struct{}
	mu       sync.Mutex
	inFlight int
}

func (h *hangingExec) ExecSync(ctx context.Context, _ string, _ []string, _ time.Duration) ([]byte, []byte, error) {
	h.mu.Lock()
	h.inFlight++
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.inFlight--
		h.mu.Unlock()
	}()
	h.entered <- struct{}{}
	<-ctx.Done()
	return nil, nil, ctx.Err()
}

func (h *hangingExec) running() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.inFlight
}

// hangingProbe's timeout is far above any test's run time: only a stop ends the call.
func hangingProbe() *v1.Probe {
	p := execProbe("hang", 1, 1)
	p.TimeoutSeconds = 3600
	return p
}

func joinHarness(t *testing.T) (*Manager, *hangingExec, *fakeStatus, context.Context) {
	clk := testingclock.NewFakeClock(time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC))
	exec := &hangingExec{entered: make(chan struct{}, 16)}
	status := &fakeStatus{s: map[types.UID]v1.PodStatus{}}
	m := NewManager(exec, status, nil, clk)
	clk.Step(time.Hour) // past the start-up jitter: the first probe is at once
	// The workers' context outlives each test's checks: only RemovePod or Run stops them.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); m.Wait() })
	return m, exec, status, ctx
}

func podNamed(uid string, c v1.Container) *v1.Pod {
	p := podWith(c)
	p.Name, p.UID = uid, types.UID(uid)
	return p
}

// TestRemovePodJoinsWorkers: when RemovePod returns, the pod's workers have returned,
// a probe in flight included, so nothing probes (or execs in) the pod's containers
// after the sync loop removed it. Before, RemovePod only signalled the workers and an
// exec probe in flight kept running.
func TestRemovePodJoinsWorkers(t *testing.T) {
	m, exec, status, ctx := joinHarness(t)
	pod := podNamed("uid-1", v1.Container{Name: "app", LivenessProbe: hangingProbe(), ReadinessProbe: hangingProbe()})
	other := podNamed("uid-2", v1.Container{Name: "app", ReadinessProbe: hangingProbe()})
	status.set(pod.UID, runningStatus(true, time.Time{}))
	otherStatus := runningStatus(true, time.Time{})
	otherStatus.ContainerStatuses[0].ContainerID = "containerd://c2"
	status.set(other.UID, otherStatus)
	m.AddPod(ctx, pod)
	m.AddPod(ctx, other)
	for range 3 {
		<-exec.entered
	}

	m.RemovePod(pod.UID)
	if n := m.workerCount(); n != 1 {
		t.Errorf("%d workers right after RemovePod, want 1 (the other pod's)", n)
	}
	if n := exec.running(); n != 1 {
		t.Errorf("%d exec probes in flight right after RemovePod, want 1 (the other pod's)", n)
	}
}

// TestRunJoinsAllWorkers: Run returns once every worker has returned, and no worker
// starts after it.
func TestRunJoinsAllWorkers(t *testing.T) {
	m, exec, status, ctx := joinHarness(t)
	for _, uid := range []string{"uid-1", "uid-2"} {
		pod := podNamed(uid, v1.Container{Name: "app", LivenessProbe: hangingProbe()})
		status.set(pod.UID, runningStatus(true, time.Time{}))
		m.AddPod(ctx, pod)
		<-exec.entered
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(runCtx) }()
	stop()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if n, r := m.workerCount(), exec.running(); n != 0 || r != 0 {
		t.Fatalf("after Run returned: %d workers, %d probes in flight; want none", n, r)
	}

	late := podNamed("uid-3", v1.Container{Name: "app", LivenessProbe: hangingProbe()})
	late.DeletionTimestamp = &metav1.Time{}
	m.AddPod(ctx, late)
	if n := m.workerCount(); n != 0 {
		t.Errorf("AddPod after Run returned started %d workers, want none", n)
	}
}
