package syncloop

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/testsupport/eventually"
	"github.com/nodelet/nodelet/podconfig"
)

// TestRemovalWhileRemovePodIsSlowKeepsOneWorker is issue 14's first defect: a
// removed pod's worker inside a slow RemovePod must stay the pod's only worker,
// however many housekeeping rounds pass, and remove the pod exactly once. (On
// main each round dropped the worker and started an "orphan" one that killed
// and removed the pod again in parallel.)
func TestRemovalWhileRemovePodIsSlowKeepsOneWorker(t *testing.T) {
	s := newStepLoop(t)
	pod := newPod("uid-slow-rm", "slow-rm")
	s.addSynced(t, pod)

	g := s.holdRemovePod(t)
	s.remove(pod)
	waitClosed(t, g.entered, "RemovePod")

	w := s.worker(pod.UID)
	if w == nil {
		t.Fatal("no worker while RemovePod runs")
	}
	for i := range 20 {
		s.clk.Step(2 * time.Second)
		s.housekeeping(s.ctx, true)
		if got := s.worker(pod.UID); got != w {
			t.Fatalf("housekeeping round %d replaced the pod's worker while RemovePod ran (orphan worker for the same UID)", i)
		}
		if n := opGoroutines(); n != 1 {
			t.Fatalf("housekeeping round %d: %d worker goroutines for the one pod, want 1", i, n)
		}
	}
	g.open()
	eventually.True(t, "the pod to be reclaimed", func() bool { return s.CanDeletePod(pod) })
	// Reclaimed is recorded by the worker's last step, just before its goroutine returns;
	// a worker is dropped only once that goroutine is gone, so wait for it first.
	s.mu.Lock()
	exited := w.exited
	s.mu.Unlock()
	waitClosed(t, exited, "the worker goroutine to return")
	s.housekeeping(s.ctx, true)
	if got := s.worker(pod.UID); got != nil {
		t.Errorf("the worker of a reclaimed pod the runtime no longer lists was not dropped")
	}
	if n := s.rt.count("RemovePod", pod.UID); n != 1 {
		t.Errorf("RemovePod called %d times, want 1", n)
	}
	if n := s.rt.count("KillPod", pod.UID); n != 1 {
		t.Errorf("KillPod called %d times, want 1", n)
	}
	s.rt.mu.Lock()
	removed := s.rt.removed["c-"+string(pod.UID)]
	s.rt.mu.Unlock()
	if removed != 1 {
		t.Errorf("RemoveContainer called %d times for the pod's container, want 1", removed)
	}
	if n := s.rt.maxActive(pod.UID); n != 1 {
		t.Errorf("%d runtime calls for the pod ran at once, want 1 (one goroutine per UID)", n)
	}
}

// TestDeleteCancelsHungSync is issue 14's second defect: a sync stuck in a
// postStart hook that never returns (it only ends with its context) is cancelled
// when the pod is deleted, and the kill follows at once, without any time passing.
func TestDeleteCancelsHungSync(t *testing.T) {
	s := newStepLoop(t)
	pod := newPod("uid-hung", "hung")
	entered, enteredOnce := signal()
	syncErr := make(chan error, 1)
	s.rt.syncHook = func(ctx context.Context, _ *v1.Pod) error {
		enteredOnce()
		<-ctx.Done() // a postStart exec hook: ExecSync without timeout ends with its context
		syncErr <- ctx.Err()
		return ctx.Err()
	}
	killed, killedOnce := signal()
	s.rt.killHook = func(ctx context.Context, _ *v1.Pod, grace *int64) error {
		killedOnce()
		return nil
	}
	s.add(pod)
	waitClosed(t, entered, "the sync to hang in postStart")

	del := pod.DeepCopy()
	del.DeletionTimestamp = ptr.To(metav1.NewTime(s.clk.Now()))
	del.DeletionGracePeriodSeconds = ptr.To[int64](1)
	s.handleUpdate(s.ctx, podconfig.Update{Op: podconfig.OpUpdate, Pods: []*v1.Pod{del}, Source: "api"})
	waitClosed(t, killed, "KillPod after the delete")
	if err := <-syncErr; !errors.Is(err, context.Canceled) {
		t.Errorf("the hung sync ended with %v, want context.Canceled", err)
	}
	eventually.True(t, "the pod to be reclaimed", func() bool { return s.CanDeletePod(del) })
	if s.rt.running(pod.UID) {
		t.Error("the pod still runs")
	}
}

// TestKillPodTimesOutOnStuckWorker is issue 14's third defect: KillPod (as the
// eviction manager calls it, holding its lock) returns an error naming the pod
// after max(1.5 × grace, 10s) when the worker never gets to the kill (a sync
// that ignores its context), instead of waiting forever.
func TestKillPodTimesOutOnStuckWorker(t *testing.T) {
	s := newStepLoop(t)
	pod := newPod("uid-stuck", "stuck")
	g := newGate(t)
	s.rt.syncHook = func(context.Context, *v1.Pod) error { return g.wait() } // deaf to cancellation
	s.add(pod)
	waitClosed(t, g.entered, "the sync to get stuck")

	errc := make(chan error, 1)
	go func() {
		errc <- s.KillPod(context.Background(), pod, time.Second, func(st *v1.PodStatus) { st.Phase = v1.PodFailed })
	}()
	eventually.True(t, "KillPod to arm its timer", s.clk.HasWaiters)
	s.clk.Step(9 * time.Second)
	select {
	case err := <-errc:
		t.Fatalf("KillPod returned %v before its 10s bound", err)
	default:
	}
	s.clk.Step(time.Second)
	select {
	case err := <-errc:
		if err == nil || !strings.Contains(err.Error(), podKey(pod)) || !strings.Contains(err.Error(), "timeout") {
			t.Fatalf("KillPod error = %v, want a timeout naming %s", err, podKey(pod))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("KillPod did not return after its bound")
	}
}

// TestKillPodAfterLoopStopped: once the loop is stopping nothing will kill the
// pod, so KillPod says so at once instead of waiting out its bound.
func TestKillPodAfterLoopStopped(t *testing.T) {
	s := newStepLoop(t)
	pod := newPod("uid-late", "late")
	s.addSynced(t, pod)
	s.stop()
	s.workersWG.Wait()
	err := s.KillPod(context.Background(), pod, time.Second, nil)
	if err == nil || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), podKey(pod)) {
		t.Fatalf("KillPod after the loop stopped = %v, want an error naming %s", err, podKey(pod))
	}
}

// opGoroutines counts the goroutines running worker operations.
func opGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "syncloop.(*Loop).spawn.func1(")
}
