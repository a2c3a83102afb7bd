package pleg

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/cri"
	"github.com/nodelet/nodelet/internal/testsupport/eventually"
)

var _ EventSource = (*cri.Client)(nil)

// eventedHarness runs an Evented PLEG (and optionally the Generic's loop) on
// the harness's fake runtime until the test ends.
type eventedHarness struct {
	*harness
	ev        *Evented
	reg       *prometheus.Registry
	src       *flakySource
	sentinels uint32 // sentinel containers made so far
}

// flakySource is the runtime's event stream, refused at opening (as by a
// runtime that is down) while refusals are left.
type flakySource struct {
	src     EventSource
	mu      sync.Mutex
	refuse  int
	refused int
	// replay is sent first on the next stream, as containerd replays the
	// events of the last five minutes to a new subscriber.
	replay []*runtimeapi.ContainerEventResponse
}

func (f *flakySource) GetContainerEvents(ctx context.Context, ch chan *runtimeapi.ContainerEventResponse, opened func(runtimeapi.RuntimeService_GetContainerEventsClient)) error {
	f.mu.Lock()
	refuse := f.refuse > 0
	if refuse {
		f.refuse--
		f.refused++
	}
	f.mu.Unlock()
	if refuse {
		return status.Error(codes.Unavailable, "connection refused")
	}
	f.mu.Lock()
	replay := f.replay
	f.replay = nil
	f.mu.Unlock()
	return f.src.GetContainerEvents(ctx, ch, func(s runtimeapi.RuntimeService_GetContainerEventsClient) {
		opened(s)
		for _, ev := range replay {
			ch <- ev
		}
	})
}

func (f *flakySource) set(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuse = n
}

func (f *flakySource) left() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.refuse
}

// newEventedHarness starts the Evented PLEG; its first stream begins with
// replay.
func newEventedHarness(t *testing.T, runGeneric bool, replay ...*runtimeapi.ContainerEventResponse) *eventedHarness {
	t.Helper()
	reg := prometheus.NewRegistry()
	h := newHarness(t, WithMetrics(reg))
	h.pleg.SetRelistPeriod(EventedRelistPeriod, EventedRelistThreshold)
	src := &flakySource{src: h.cli, replay: replay}
	e := NewEvented(h.pleg, src, h.clock, WithEventedMetrics(reg))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	n := 1
	go func() { e.Start(ctx); done <- struct{}{} }()
	if runGeneric {
		n++
		go func() { h.pleg.Start(ctx); done <- struct{}{} }()
	}
	t.Cleanup(func() {
		cancel()
		for range n {
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Error("the PLEG did not stop after its context was cancelled")
				return
			}
		}
	})
	return &eventedHarness{harness: h, ev: e, reg: reg, src: src}
}

// waitConnected waits until the runtime has a subscriber.
func (h *eventedHarness) waitConnected(t *testing.T) {
	t.Helper()
	eventually.True(t, "the event stream", func() bool { return h.fake.EventSubscribers() > 0 })
}

// next returns the next lifecycle event.
func (h *eventedHarness) next(t *testing.T) Event {
	t.Helper()
	select {
	case ev := <-h.pleg.Watch():
		return *ev
	case <-time.After(eventually.Timeout):
		t.Fatal("no lifecycle event")
		return Event{}
	}
}

// expect reads exactly the events want (in any order), then makes a sentinel
// change and reads its event: an event sent twice would have come before it.
func (h *eventedHarness) expect(t *testing.T, sentinelSandbox, sentinelUID string, want ...Event) {
	t.Helper()
	var got []Event
	for range want {
		got = append(got, h.next(t))
	}
	if !sameEvents(got, want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
	h.sentinels++
	c := h.createContainer(sentinelSandbox, sentinelUID, "sentinel", h.sentinels, true)
	if ev := h.next(t); ev != (Event{PodUID: types.UID(sentinelUID), Type: ContainerStarted, Data: c}) {
		t.Fatalf("event after %v = %v, want the sentinel's start (a duplicate?)", want, ev)
	}
}

func TestEventedOncePerChangeWithoutStatusCalls(t *testing.T) {
	ctx := context.Background()
	h := newEventedHarness(t, false)
	h.waitConnected(t)
	sentinel := h.runPod("sentinel")
	h.next(t) // the sentinel pod's sandbox start

	h.fake.ResetCalls()
	sb := h.runPod("u")
	c := h.createContainer(sb, "u", "a", 0, true)
	h.expect(t, sentinel, "sentinel", Event{"u", ContainerStarted, sb}, Event{"u", ContainerStarted, c})
	st, _ := h.cache.Get("u")
	if len(st.Sandboxes) != 1 || len(st.Containers) != 1 || st.Containers[0].State != runtimeapi.ContainerState_CONTAINER_RUNNING || len(st.IPs) != 1 {
		t.Errorf("cached status = %+v, want the running pod with its IP", st)
	}
	if st.Name != "pod-u" || st.Namespace != "ns" {
		t.Errorf("cached pod = %s/%s", st.Namespace, st.Name)
	}
	if pods := h.pleg.Pods(); len(pods) != 2 {
		t.Errorf("Pods() = %d pods, want the two the events showed", len(pods))
	}
	for _, call := range h.fake.Calls() {
		if call == "PodSandboxStatus" || call == "ContainerStatus" || call == "ListContainers" {
			t.Errorf("the evented PLEG called %s: the event carries the statuses", call)
		}
	}

	h.fake.ExitContainer(c, 2, "")
	h.expect(t, sentinel, "sentinel", Event{"u", ContainerDied, c})
	if st, _ := h.cache.Get("u"); st.Containers[0].ExitCode != 2 {
		t.Errorf("cached exit code = %d", st.Containers[0].ExitCode)
	}

	// The safety-net relist finds nothing new: no second event.
	h.clock.Step(time.Second)
	h.pleg.Relist(ctx)
	if got := h.drain(); len(got) != 0 {
		t.Fatalf("relist after the events sent %v again", got)
	}

	// Removal: the container, then the sandbox, then the pod is gone.
	if err := h.cli.RemoveContainer(ctx, c); err != nil {
		t.Fatal(err)
	}
	h.expect(t, sentinel, "sentinel", Event{"u", ContainerRemoved, c})
	if err := h.cli.StopPodSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	h.expect(t, sentinel, "sentinel", Event{"u", ContainerDied, sb})
	if err := h.cli.RemovePodSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	h.expect(t, sentinel, "sentinel", Event{"u", ContainerRemoved, sb})
	if st, _ := h.cache.Get("u"); len(st.Sandboxes)+len(st.Containers) != 0 {
		t.Errorf("removed pod still cached: %+v", st)
	}
	for _, p := range h.pleg.Pods() {
		if p.UID == "u" {
			t.Error("removed pod still in Pods()")
		}
	}
	if got := testutil.ToFloat64(h.ev.metrics.connSuccess); got != 1 {
		t.Errorf("connection successes = %v, want 1", got)
	}
	if n := testutil.CollectAndCount(h.ev.metrics.latency); n != 1 {
		t.Errorf("latency series = %d", n)
	}
}

// TestEventedRelistAndEventsDoNotRepeat feeds events the relist already
// reported, or older than it, straight into the PLEG.
func TestEventedRelistAndEventsDoNotRepeat(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	sb := h.runPod("u")
	c := h.createContainer(sb, "u", "a", 0, true)
	h.pleg.Relist(ctx)
	h.drain()
	statusOf := func() (*runtimeapi.PodSandboxStatus, []*runtimeapi.ContainerStatus) {
		sbs, _ := h.cli.PodSandboxStatus(ctx, sb, false)
		cs, _ := h.cli.ContainerStatus(ctx, c, false)
		return sbs.GetStatus(), []*runtimeapi.ContainerStatus{cs.GetStatus()}
	}
	at := func(d time.Duration) int64 { return h.clock.Now().Add(d).UnixNano() }

	// The relist sees the exit first; the event, older, comes after it.
	h.fake.ExitContainer(c, 0, "")
	stopAt := at(100 * time.Millisecond)
	h.clock.Step(time.Second)
	h.pleg.Relist(ctx)
	if got := h.drain(); !sameEvents(got, []Event{{"u", ContainerDied, c}}) {
		t.Fatalf("relist events = %v", got)
	}
	s, cs := statusOf()
	stopped := &runtimeapi.ContainerEventResponse{ContainerId: c, ContainerEventType: evStopped, CreatedAt: stopAt, PodSandboxStatus: s, ContainersStatuses: cs}
	if out := h.pleg.applyEvent(stopped); out != eventDropped {
		t.Errorf("an event older than the relist: %v, want dropped", out)
	}
	// A start older still: out of order, dropped.
	running := []*runtimeapi.ContainerStatus{{Id: c, State: runtimeapi.ContainerState_CONTAINER_RUNNING, CreatedAt: cs[0].CreatedAt}}
	if out := h.pleg.applyEvent(&runtimeapi.ContainerEventResponse{ContainerId: c, ContainerEventType: evStarted, CreatedAt: stopAt - 1, PodSandboxStatus: s, ContainersStatuses: running}); out != eventDropped {
		t.Errorf("a start older than the stop: %v, want dropped", out)
	}
	if got := h.drain(); len(got) != 0 {
		t.Fatalf("stale events sent %v", got)
	}
	if st, _ := h.cache.Get("u"); st.Containers[0].State != runtimeapi.ContainerState_CONTAINER_EXITED {
		t.Errorf("a stale event rolled the cache back: %v", st.Containers[0].State)
	}

	// The event first, the relist after: one event too. The same event twice: once.
	c2 := h.createContainer(sb, "u", "b", 0, true)
	s, _ = statusOf()
	cs2, _ := h.cli.ContainerStatus(ctx, c2, false)
	started := &runtimeapi.ContainerEventResponse{ContainerId: c2, ContainerEventType: evStarted, CreatedAt: at(time.Millisecond), PodSandboxStatus: s, ContainersStatuses: []*runtimeapi.ContainerStatus{cs2.GetStatus()}}
	for range 2 {
		h.pleg.applyEvent(started)
	}
	h.clock.Step(time.Second)
	h.pleg.Relist(ctx)
	if got := h.drain(); !sameEvents(got, []Event{{"u", ContainerStarted, c2}}) {
		t.Fatalf("events = %v, want the start once", got)
	}
	st, _ := h.cache.Get("u")
	var ids []string
	for _, c := range st.Containers {
		ids = append(ids, c.Id)
	}
	if len(ids) != 2 || ids[0] == ids[1] {
		t.Errorf("cached containers = %v, want each once", ids)
	}
}

// stepUntil advances the fake clock (back-off, relist and refresh timers)
// until cond holds.
func (h *eventedHarness) stepUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	eventually.True(t, what, func() bool {
		if cond() {
			return true
		}
		h.clock.Step(5 * time.Second)
		return cond()
	})
}

func TestEventedFallsBackToRelistingAndRecovers(t *testing.T) {
	h := newEventedHarness(t, true)
	h.waitConnected(t)
	sb := h.runPod("u")
	c := h.createContainer(sb, "u", "a", 0, true)
	for range 2 {
		h.next(t)
	}
	if !h.ev.InUse() || h.pleg.RelistPeriod() != EventedRelistPeriod {
		t.Fatalf("in use %v, relist period %v; want evented at %v", h.ev.InUse(), h.pleg.RelistPeriod(), EventedRelistPeriod)
	}

	// The runtime drops the stream and refuses it for a while.
	h.src.set(50)
	h.fake.BreakEventStreams(status.Error(codes.Unavailable, "runtime restarting"))
	h.stepUntil(t, "the fall back to relisting", func() bool { return !h.ev.InUse() })
	if p := h.pleg.RelistPeriod(); p != DefaultRelistPeriod {
		t.Errorf("relist period after the fall back = %v, want %v", p, DefaultRelistPeriod)
	}
	if got := testutil.ToFloat64(h.ev.metrics.connErr); got < EventedMaxStreamRetries {
		t.Errorf("connection errors = %v, want at least %d", got, EventedMaxStreamRetries)
	}
	if h.src.left() == 0 {
		t.Fatal("the stream was refused fewer times than the test needs")
	}
	h.drain()

	// With no stream, the 1 s relist reports the exit.
	h.fake.ExitContainer(c, 1, "")
	var got Event
	h.stepUntil(t, "the exit, seen by relisting", func() bool {
		select {
		case ev := <-h.pleg.Watch():
			got = *ev
			return true
		default:
			return false
		}
	})
	if got != (Event{"u", ContainerDied, c}) {
		t.Errorf("event while relisting = %v", got)
	}

	// The runtime is back: the stream is re-established, the period long again.
	h.src.set(0)
	h.stepUntil(t, "the evented PLEG back in use", h.ev.InUse)
	eventually.True(t, "the event stream again", func() bool { return h.fake.EventSubscribers() > 0 })
	if p := h.pleg.RelistPeriod(); p != EventedRelistPeriod {
		t.Errorf("relist period after recovery = %v, want %v", p, EventedRelistPeriod)
	}
	if got := testutil.ToFloat64(h.ev.metrics.connSuccess); got != 2 {
		t.Errorf("connection successes = %v, want 2", got)
	}
	h.drain()
	c2 := h.createContainer(sb, "u", "b", 0, true)
	if ev := h.next(t); ev != (Event{"u", ContainerStarted, c2}) {
		t.Errorf("event after recovery = %v", ev)
	}
}

func TestEventedRuntimeWithoutStream(t *testing.T) {
	h := newHarness(t)
	h.fake.InjectError("GetContainerEvents", status.Error(codes.Unimplemented, "unknown method"))
	e := NewEvented(h.pleg, h.cli, h.clock)
	h.pleg.SetRelistPeriod(EventedRelistPeriod, EventedRelistThreshold)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.Start(ctx) }()
	eventually.True(t, "the fall back", func() bool { return !e.InUse() && h.pleg.RelistPeriod() == DefaultRelistPeriod })
	// It does not ask again.
	h.clock.Step(time.Minute)
	calls := 0
	for _, c := range h.fake.Calls() {
		if c == "GetContainerEvents" {
			calls++
		}
	}
	if calls != 1 {
		t.Errorf("GetContainerEvents called %d times, want once", calls)
	}
	cancel()
	<-done
}

func TestEventedHealthy(t *testing.T) {
	h := newHarness(t, WithEventCapacity(1))
	e := NewEvented(h.pleg, h.cli, h.clock)
	if err := e.Healthy(); err != nil {
		t.Errorf("Healthy with an empty channel = %v", err)
	}
	h.runPod("u")
	h.pleg.Relist(context.Background())
	if err := e.Healthy(); err == nil || err.Error() != "EventedPLEG: pleg event channel capacity is full with 1 events" {
		t.Errorf("Healthy with a full channel = %v", err)
	}
}

// TestEventedReplayedEventsAreDropped: containerd replays the last five
// minutes of events to a new subscriber. After a reconnection they are older
// than the catch-up relist, so none is sent again, and a pod gone since is
// not brought back.
func TestEventedReplayedEventsAreDropped(t *testing.T) {
	ctx := context.Background()
	h := newEventedHarness(t, false)
	h.waitConnected(t)
	sentinel := h.runPod("sentinel")
	h.next(t)

	gone := h.runPod("gone")
	c := h.createContainer(gone, "gone", "a", 0, true)
	h.fake.ExitContainer(c, 0, "")
	if err := h.cli.RemoveContainer(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := h.cli.StopPodSandbox(ctx, gone); err != nil {
		t.Fatal(err)
	}
	if err := h.cli.RemovePodSandbox(ctx, gone); err != nil {
		t.Fatal(err)
	}
	live := h.runPod("live")
	c2 := h.createContainer(live, "live", "b", 0, true)
	h.expect(t, sentinel, "sentinel",
		Event{"gone", ContainerStarted, gone}, Event{"gone", ContainerStarted, c}, Event{"gone", ContainerDied, c},
		Event{"gone", ContainerRemoved, c}, Event{"gone", ContainerDied, gone}, Event{"gone", ContainerRemoved, gone},
		Event{"live", ContainerStarted, live}, Event{"live", ContainerStarted, c2})

	// What the runtime would replay: every event of those pods, stamped (as
	// they were) before the relist that follows the new subscription.
	old := h.clock.Now().Add(-time.Minute)
	replay := append(oldEvents(h.harness, "gone", gone, c, old), oldEvents(h.harness, "live", live, c2, old)...)
	h.src.mu.Lock()
	h.src.replay = replay
	h.src.mu.Unlock()
	h.fake.BreakEventStreams(status.Error(codes.Unavailable, "runtime restarting"))
	h.stepUntil(t, "the replay taken by a new stream", func() bool {
		h.src.mu.Lock()
		defer h.src.mu.Unlock()
		return h.src.replay == nil
	})
	eventually.True(t, "the new stream", func() bool { return h.fake.EventSubscribers() > 0 })
	h.expect(t, sentinel, "sentinel")
	for _, p := range h.pleg.Pods() {
		if p.UID == "gone" {
			t.Error("a replayed event brought the removed pod back")
		}
	}
	if st, _ := h.cache.Get("live"); len(st.Containers) != 1 || st.Containers[0].State != runtimeapi.ContainerState_CONTAINER_RUNNING || st.Containers[0].Id != c2 {
		t.Errorf("live pod after the replay: %+v", st)
	}
}

// oldEvents are the CREATED and STARTED events of a pod's sandbox sb and
// container c, stamped from at on.
func oldEvents(h *harness, uid, sb, c string, at time.Time) []*runtimeapi.ContainerEventResponse {
	var out []*runtimeapi.ContainerEventResponse
	ts := at.UnixNano()
	for _, id := range []string{sb, c} {
		for _, typ := range []runtimeapi.ContainerEventType{evCreated, evStarted} {
			ev := &runtimeapi.ContainerEventResponse{ContainerId: id, ContainerEventType: typ, CreatedAt: ts,
				PodSandboxStatus: &runtimeapi.PodSandboxStatus{Id: sb, State: sbReady, CreatedAt: at.UnixNano(),
					Metadata: &runtimeapi.PodSandboxMetadata{Name: "pod-" + uid, Namespace: "ns", Uid: uid}, Labels: h.sandboxConfig(uid, 0).Labels}}
			if id == c {
				ev.ContainersStatuses = []*runtimeapi.ContainerStatus{{Id: c, State: cRunning, CreatedAt: at.UnixNano()}}
			}
			out = append(out, ev)
			ts++
		}
	}
	return out
}

// TestEventedStartupReplayIsDropped: at nodelet's start the runtime replays
// events of pods gone before it; the catch-up relist runs before the first
// event is applied, so they are older than what it listed and dropped.
func TestEventedStartupReplayIsDropped(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) // newHarness's start
	h := newEventedHarness(t, false, oldEvents(&harness{}, "gone", "sb-gone", "c-gone", clk.Now().Add(-time.Minute))...)
	h.waitConnected(t)
	sentinel := h.runPod("sentinel")
	if ev := h.next(t); ev != (Event{"sentinel", ContainerStarted, sentinel}) {
		t.Fatalf("first event = %v, want the sentinel's start: the replay was sent", ev)
	}
	if pods := h.pleg.Pods(); len(pods) != 1 {
		t.Errorf("Pods() = %d pods, want the sentinel only", len(pods))
	}
}
