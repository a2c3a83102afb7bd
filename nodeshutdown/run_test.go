package nodeshutdown

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/testsupport/eventually"
)

// recLock records Acquire/Release in order and lets the test play logind.
type recLock struct {
	events chan bool
	ops    chan string
	mu     sync.Mutex
	failAt int // Acquire call number (1-based) that fails
	n      int
}

func newRecLock() *recLock { return &recLock{events: make(chan bool), ops: make(chan string, 20)} }

func (f *recLock) Events() <-chan bool { return f.events }
func (f *recLock) Acquire(ctx context.Context) error {
	f.mu.Lock()
	f.n++
	fail := f.n == f.failAt
	f.mu.Unlock()
	f.ops <- "acquire"
	if fail {
		return errors.New("no logind")
	}
	return nil
}
func (f *recLock) Release() { f.ops <- "release" }

func nextOp(t *testing.T, ops <-chan string) string {
	t.Helper()
	select {
	case op := <-ops:
		return op
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for a lock operation")
		return ""
	}
}

func TestRunShutdownAndCancel(t *testing.T) {
	release := make(chan struct{})
	clk := clocktesting.NewFakeClock(t0)
	k := &fakeKiller{clock: clk, hang: map[string]chan struct{}{"second": release}, started: make(chan string, 10)}
	pods := []*v1.Pod{testPod("ns", "first", nil, nil), testPod("ns", "second", i32(100), nil)}
	m := newTestManager(t, []Group{{0, 10 * time.Second}, {100, 10 * time.Second}}, pods, k, nil)
	lock := newRecLock()
	lock.failAt = 1 // the first Acquire fails: Run goes on regardless
	changes := make(chan bool, 10)

	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan struct{})
	go func() {
		defer close(runDone)
		m.Run(ctx, lock, func(v bool) { changes <- v })
	}()
	if op := nextOp(t, lock.ops); op != "acquire" {
		t.Fatalf("first lock op = %s, want acquire", op)
	}

	// Shutdown: node marked, pods stopped group by group, lock released at the end.
	lock.events <- true
	if v := <-changes; !v || !m.ShuttingDown() || len(m.NotReadyReasons()) != 1 || m.NotReadyReasons()[0] != "node is shutting down" {
		t.Fatalf("onChange(%v), ShuttingDown %v, reasons %v; want the node shutting down", v, m.ShuttingDown(), m.NotReadyReasons())
	}
	if got := <-k.started; got != "first" {
		t.Fatalf("first pod stopped = %s, want first", got)
	}
	if got := <-k.started; got != "second" {
		t.Fatalf("second pod stopped = %s, want second", got)
	}
	close(release)
	if op := nextOp(t, lock.ops); op != "release" {
		t.Fatalf("lock op after the pods = %s, want release", op)
	}

	// Cancel: node back, lock taken again.
	lock.events <- false
	if v := <-changes; v || m.ShuttingDown() || m.NotReadyReasons() != nil {
		t.Fatalf("onChange(%v), ShuttingDown %v; want the node back", v, m.ShuttingDown())
	}
	if op := nextOp(t, lock.ops); op != "acquire" {
		t.Fatalf("lock op after cancel = %s, want acquire", op)
	}
	cancel()
	<-runDone
}

func TestRunCancelDuringShutdownStopsKilling(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	k := &fakeKiller{clock: clk, hang: map[string]chan struct{}{"low": make(chan struct{})}, started: make(chan string, 10)}
	pods := []*v1.Pod{testPod("ns", "low", nil, nil), testPod("ns", "high", i32(100), nil)}
	m := newTestManager(t, []Group{{0, 10 * time.Second}, {100, 10 * time.Second}}, pods, k, nil)
	lock := newRecLock()
	changes := make(chan bool, 10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runDone := make(chan struct{})
	go func() {
		defer close(runDone)
		m.Run(ctx, lock, func(v bool) { changes <- v })
	}()
	nextOp(t, lock.ops) // acquire
	lock.events <- true
	<-changes
	<-k.started // low hangs within its group's grace

	lock.events <- false
	// The running shutdown is stopped first (it releases), then the lock is taken again.
	if op := nextOp(t, lock.ops); op != "release" {
		t.Fatalf("lock op = %s, want release from the stopped shutdown", op)
	}
	if op := nextOp(t, lock.ops); op != "acquire" {
		t.Fatalf("lock op = %s, want acquire after the cancel", op)
	}
	if v := <-changes; v || m.ShuttingDown() {
		t.Fatal("node still shutting down after the cancel")
	}
	for _, c := range k.get() {
		if c.pod == "high" {
			t.Fatal("the next group was stopped after the shutdown was cancelled")
		}
	}
	cancel()
	<-runDone
}

// lingeringKiller's KillPod takes a while to return once its context ended (as a
// kill finishing its last CRI call would).
type lingeringKiller struct {
	started, cancelled, finish, returned chan struct{}
}

func (l *lingeringKiller) KillPod(ctx context.Context, _ *v1.Pod, _ time.Duration, _ func(*v1.PodStatus)) error {
	defer close(l.returned)
	close(l.started)
	<-ctx.Done()
	close(l.cancelled)
	<-l.finish
	return ctx.Err()
}

// TestRunJoinsKillsPastTheirGrace: a pod kill still running when its group's grace is
// up goes on in the background, but Run returns only once it has returned: nothing
// kills pods through the sync loop after the shutdown manager stopped. Before, those
// kills were never joined.
func TestRunJoinsKillsPastTheirGrace(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	k := &lingeringKiller{started: make(chan struct{}), cancelled: make(chan struct{}), finish: make(chan struct{}), returned: make(chan struct{})}
	pods := []*v1.Pod{testPod("ns", "slow", nil, nil)}
	m, err := NewManager(Options{Groups: []Group{{0, 10 * time.Second}}, Killer: k, Lister: func() []*v1.Pod { return pods }, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	lock := newRecLock()
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan struct{})
	go func() {
		defer close(runDone)
		m.Run(ctx, lock, nil)
	}()
	nextOp(t, lock.ops) // acquire
	lock.events <- true
	<-k.started
	eventually.True(t, "the group's timer", clk.HasWaiters)
	clk.Step(10 * time.Second) // the grace is up; the kill goes on
	if op := nextOp(t, lock.ops); op != "release" {
		t.Fatalf("lock op = %s, want release once the grace is up", op)
	}
	<-k.cancelled // the shutdown run ended; the kill is finishing
	cancel()
	go close(k.finish)
	<-runDone
	select {
	case <-k.returned:
	default:
		t.Error("Run returned while a pod kill was still running")
	}
}
