package pleg

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
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
	"github.com/nodelet/nodelet/internal/testsupport/fakecri"
)

const image = "registry.local/pause:1"

var _ Runtime = (*cri.Client)(nil)

type harness struct {
	t     testing.TB
	fake  *fakecri.Runtime
	cli   *cri.Client
	clock *clocktesting.FakeClock
	cache *Cache
	pleg  *Generic
}

func newHarness(t testing.TB, opts ...Option) *harness {
	t.Helper()
	f := fakecri.New(t)
	f.AddImage(image)
	c, err := cri.New(context.Background(), f.Endpoint(), "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cache := NewCache(clk)
	return &harness{t: t, fake: f, cli: c, clock: clk, cache: cache, pleg: NewGeneric(c, cache, 0, 0, clk, opts...)}
}

func (h *harness) sandboxConfig(uid string, attempt uint32) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "pod-" + uid, Namespace: "ns", Uid: uid, Attempt: attempt},
		LogDirectory: "/var/log/pods/ns_pod-" + uid + "_" + uid,
		Labels:       map[string]string{cri.LabelPodUID: uid, cri.LabelPodName: "pod-" + uid, cri.LabelPodNamespace: "ns"},
	}
}

func (h *harness) runPod(uid string) string {
	h.t.Helper()
	id, err := h.cli.RunPodSandbox(context.Background(), h.sandboxConfig(uid, 0), "")
	if err != nil {
		h.t.Fatal(err)
	}
	return id
}

// createContainer creates (and, if start, starts) a container in sandbox sb.
func (h *harness) createContainer(sb, uid, name string, attempt uint32, start bool) string {
	h.t.Helper()
	ctx := context.Background()
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name, Attempt: attempt},
		Image:    &runtimeapi.ImageSpec{Image: image},
		Labels:   map[string]string{cri.LabelPodUID: uid, cri.LabelContainerName: name},
	}
	id, err := h.cli.CreateContainer(ctx, sb, cfg, h.sandboxConfig(uid, 0))
	if err != nil {
		h.t.Fatal(err)
	}
	if start {
		if err := h.cli.StartContainer(ctx, id); err != nil {
			h.t.Fatal(err)
		}
	}
	return id
}

// drain returns the events already queued (Relist sends before returning).
func (h *harness) drain() []Event {
	var out []Event
	for {
		select {
		case ev := <-h.pleg.Watch():
			out = append(out, *ev)
		default:
			return out
		}
	}
}

func sameEvents(got, want []Event) bool {
	if len(got) != len(want) {
		return false
	}
	seen := map[Event]int{}
	for _, e := range got {
		seen[e]++
	}
	for _, e := range want {
		if seen[e] == 0 {
			return false
		}
		seen[e]--
	}
	return true
}

func TestRelistEventsAndCache(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	const uid = "uid-1"
	var sb, c1, c2, c3 string

	steps := []struct {
		name   string
		act    func()
		want   func() []Event
		verify func(t *testing.T, st *PodStatus)
	}{
		{
			name: "pod starts",
			act: func() {
				sb = h.runPod(uid)
				c1 = h.createContainer(sb, uid, "a", 0, true)
				c2 = h.createContainer(sb, uid, "b", 0, true)
			},
			want: func() []Event {
				return []Event{{uid, ContainerStarted, sb}, {uid, ContainerStarted, c1}, {uid, ContainerStarted, c2}}
			},
			verify: func(t *testing.T, st *PodStatus) {
				if st.Name != "pod-uid-1" || st.Namespace != "ns" || len(st.Sandboxes) != 1 || len(st.Containers) != 2 {
					t.Fatalf("status = %+v", st)
				}
				if st.Containers[0].Id != c2 || st.Containers[1].Id != c1 {
					t.Errorf("containers not newest first: %s, %s", st.Containers[0].Id, st.Containers[1].Id)
				}
				if len(st.IPs) != 1 || !strings.HasPrefix(st.IPs[0], "10.88.") {
					t.Errorf("IPs = %v", st.IPs)
				}
			},
		},
		{
			name: "nothing changes",
			act:  func() {},
			want: func() []Event { return nil },
		},
		{
			name: "container exits",
			act:  func() { h.fake.ExitContainer(c1, 1, "") },
			want: func() []Event { return []Event{{uid, ContainerDied, c1}} },
			verify: func(t *testing.T, st *PodStatus) {
				for _, c := range st.Containers {
					if c.Id == c1 && (c.State != runtimeapi.ContainerState_CONTAINER_EXITED || c.ExitCode != 1) {
						t.Errorf("cached c1 = %v", c)
					}
				}
			},
		},
		{
			name: "exited container removed",
			act: func() {
				if err := h.cli.RemoveContainer(ctx, c1); err != nil {
					t.Fatal(err)
				}
			},
			want:   func() []Event { return []Event{{uid, ContainerRemoved, c1}} },
			verify: func(t *testing.T, st *PodStatus) { wantContainers(t, st, c2) },
		},
		{
			name: "created container is inspected but not announced",
			act:  func() { c3 = h.createContainer(sb, uid, "c", 0, false) },
			want: func() []Event { return nil },
			verify: func(t *testing.T, st *PodStatus) {
				wantContainers(t, st, c3, c2)
				if st.Containers[0].State != runtimeapi.ContainerState_CONTAINER_CREATED {
					t.Errorf("c3 state = %v", st.Containers[0].State)
				}
			},
		},
		{
			name: "running container vanishes between relists",
			act: func() {
				if err := h.cli.StopContainer(ctx, c2, 0); err != nil {
					t.Fatal(err)
				}
				if err := h.cli.RemoveContainer(ctx, c2); err != nil {
					t.Fatal(err)
				}
			},
			want: func() []Event { return []Event{{uid, ContainerDied, c2}, {uid, ContainerRemoved, c2}} },
		},
		{
			name: "sandbox stops: pod keeps its IP",
			act: func() {
				_ = h.cli.StartContainer(ctx, c3)
				h.pleg.Relist(ctx)
				h.drain()
				if err := h.cli.StopPodSandbox(ctx, sb); err != nil {
					t.Fatal(err)
				}
			},
			want: func() []Event { return []Event{{uid, ContainerDied, sb}, {uid, ContainerDied, c3}} },
			verify: func(t *testing.T, st *PodStatus) {
				if st.Sandboxes[0].State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY || st.Sandboxes[0].GetNetwork().GetIp() != "" {
					t.Errorf("sandbox = %v", st.Sandboxes[0])
				}
				if len(st.IPs) != 1 || !strings.HasPrefix(st.IPs[0], "10.88.") {
					t.Errorf("IPs of a stopped pod = %v, want the previous IP kept", st.IPs)
				}
			},
		},
		{
			name: "sandbox removed: pod gone",
			act: func() {
				if err := h.cli.RemovePodSandbox(ctx, sb); err != nil {
					t.Fatal(err)
				}
			},
			want: func() []Event { return []Event{{uid, ContainerRemoved, sb}, {uid, ContainerRemoved, c3}} },
			verify: func(t *testing.T, st *PodStatus) {
				if st.UID != uid || len(st.Sandboxes)+len(st.Containers) != 0 {
					t.Errorf("status of a removed pod = %+v, want empty", st)
				}
				if pods := h.pleg.Pods(); len(pods) != 0 {
					t.Errorf("Pods() = %v, want none", pods)
				}
			},
		},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			s.act()
			h.clock.Step(time.Second)
			h.pleg.Relist(ctx)
			got := h.drain()
			if want := s.want(); !sameEvents(got, want) {
				t.Fatalf("events = %v, want %v", got, want)
			}
			st, err := h.cache.Get(uid)
			if err != nil {
				t.Fatalf("cache error: %v", err)
			}
			if s.verify != nil {
				s.verify(t, st)
			}
		})
	}
}

func wantContainers(t *testing.T, st *PodStatus, ids ...string) {
	t.Helper()
	var got []string
	for _, c := range st.Containers {
		got = append(got, c.Id)
	}
	if strings.Join(got, ",") != strings.Join(ids, ",") {
		t.Errorf("cached containers = %v, want %v", got, ids)
	}
}

func TestNewSandboxNewestFirstAndIPs(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	const uid = "u"
	old := h.runPod(uid)
	h.pleg.Relist(ctx)
	h.drain()
	st, _ := h.cache.Get(uid)
	oldIP := st.IPs[0]
	_ = h.cli.StopPodSandbox(ctx, old)
	cfg := h.sandboxConfig(uid, 1)
	cur, err := h.cli.RunPodSandbox(ctx, cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	h.clock.Step(time.Second)
	h.pleg.Relist(ctx)
	st, _ = h.cache.Get(uid)
	if len(st.Sandboxes) != 2 || st.Sandboxes[0].Id != cur {
		t.Fatalf("sandboxes not newest first: %v", st.Sandboxes)
	}
	if len(st.IPs) != 1 || st.IPs[0] == oldIP {
		t.Errorf("IPs = %v, want the new sandbox's, not %s", st.IPs, oldIP)
	}
	if got := h.drain(); !sameEvents(got, []Event{{uid, ContainerDied, old}, {uid, ContainerStarted, cur}}) {
		t.Errorf("events = %v", got)
	}
}

func TestIgnoresObjectsWithoutPodUID(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	cfg := h.sandboxConfig("x", 0)
	cfg.Labels = map[string]string{"app": "not-a-pod"}
	if _, err := h.cli.RunPodSandbox(ctx, cfg, ""); err != nil {
		t.Fatal(err)
	}
	h.pleg.Relist(ctx)
	if evs := h.drain(); len(evs) != 0 {
		t.Errorf("events for an unlabeled sandbox: %v", evs)
	}
	if pods := h.pleg.Pods(); len(pods) != 0 {
		t.Errorf("Pods() = %v", pods)
	}
}

func TestPods(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	h.runPod("a")
	sb := h.runPod("b")
	h.createContainer(sb, "b", "c", 0, true)
	h.pleg.Relist(ctx)
	pods := h.pleg.Pods()
	if len(pods) != 2 || pods[0].UID != "a" || pods[1].UID != "b" || len(pods[1].Containers) != 1 || pods[0].Name != "pod-a" {
		t.Fatalf("Pods() = %+v", pods)
	}
}

// TestListed: only a successful listing makes Pods authoritative, and a later
// failure does not take that back (Pods keeps the last successful listing).
func TestListed(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	h.runPod("a")
	h.fake.InjectError("ListPodSandbox", status.Error(codes.DeadlineExceeded, "runtime slow"))
	h.pleg.Relist(ctx)
	if h.pleg.Listed() || len(h.pleg.Pods()) != 0 {
		t.Fatalf("after a failed first relist: Listed() = %v, Pods() = %v", h.pleg.Listed(), h.pleg.Pods())
	}
	h.pleg.Relist(ctx)
	if !h.pleg.Listed() || len(h.pleg.Pods()) != 1 {
		t.Fatalf("after a good relist: Listed() = %v, Pods() = %v", h.pleg.Listed(), h.pleg.Pods())
	}
	h.fake.InjectError("ListContainers", status.Error(codes.Unavailable, "runtime down"))
	h.pleg.Relist(ctx)
	if !h.pleg.Listed() || len(h.pleg.Pods()) != 1 {
		t.Fatalf("after a later failed relist: Listed() = %v, Pods() = %v", h.pleg.Listed(), h.pleg.Pods())
	}
}

func TestHealthy(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	if err := h.pleg.Healthy(); err == nil || err.Error() != "pleg has yet to be successful" {
		t.Errorf("before any relist: %v", err)
	}
	h.pleg.Relist(ctx)
	if err := h.pleg.Healthy(); err != nil {
		t.Errorf("right after a relist: %v", err)
	}
	h.clock.Step(3 * time.Minute)
	if err := h.pleg.Healthy(); err != nil {
		t.Errorf("at exactly the threshold: %v", err)
	}
	h.clock.Step(time.Second)
	// A failing listing must not refresh the health clock.
	h.fake.InjectError("ListPodSandbox", status.Error(codes.Unavailable, "runtime down"))
	h.pleg.Relist(ctx)
	err := h.pleg.Healthy()
	if want := "pleg was last seen active 3m1s ago; threshold is 3m0s"; err == nil || err.Error() != want {
		t.Errorf("after a failed relist: %v, want %q", err, want)
	}
	if err := h.pleg.RelistError(); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "listing pod sandboxes") {
		t.Errorf("RelistError = %v, want the listing error", err)
	}
	h.pleg.Relist(ctx)
	if err := h.pleg.Healthy(); err != nil {
		t.Errorf("after a good relist: %v", err)
	}
	if err := h.pleg.RelistError(); err != nil {
		t.Errorf("RelistError after a good relist = %v", err)
	}
}

func TestHungRuntimeTurnsUnhealthy(t *testing.T) {
	f := fakecri.New(t)
	c, err := cri.New(context.Background(), f.Endpoint(), "", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(context.Background()) }()
	clk := clocktesting.NewFakeClock(time.Now())
	g := NewGeneric(c, NewCache(clk), time.Second, time.Minute, clk)
	g.Relist(context.Background())
	f.SetDelay("ListContainers", 2*time.Second) // longer than the client timeout
	clk.Step(61 * time.Second)
	g.Relist(context.Background())
	if err := g.Healthy(); err == nil || !strings.Contains(err.Error(), "last seen active 1m1s ago") {
		t.Errorf("Healthy with a hung ListContainers = %v", err)
	}
}

func TestDiscardedEventsAreCounted(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	h := newHarness(t, WithEventCapacity(2), WithMetrics(reg))
	sb := h.runPod("u")
	h.createContainer(sb, "u", "a", 0, true)
	h.createContainer(sb, "u", "b", 0, true)
	h.pleg.Relist(ctx) // 3 ContainerStarted events, room for 2
	if got := len(h.drain()); got != 2 {
		t.Errorf("delivered %d events, want 2", got)
	}
	if got := testutil.ToFloat64(h.pleg.metrics.discard); got != 1 {
		t.Errorf("kubelet_pleg_discard_events = %v, want 1", got)
	}
	h.clock.Step(2 * time.Second)
	h.pleg.Relist(ctx)
	if n := testutil.CollectAndCount(h.pleg.metrics.duration); n != 1 {
		t.Errorf("duration series = %d", n)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP kubelet_pleg_relist_interval_seconds Interval in seconds between relisting in PLEG.
# TYPE kubelet_pleg_relist_interval_seconds histogram
kubelet_pleg_relist_interval_seconds_bucket{le="0.005"} 0
kubelet_pleg_relist_interval_seconds_bucket{le="0.01"} 0
kubelet_pleg_relist_interval_seconds_bucket{le="0.025"} 0
kubelet_pleg_relist_interval_seconds_bucket{le="0.05"} 0
kubelet_pleg_relist_interval_seconds_bucket{le="0.1"} 0
kubelet_pleg_relist_interval_seconds_bucket{le="0.25"} 0
kubelet_pleg_relist_interval_seconds_bucket{le="0.5"} 0
kubelet_pleg_relist_interval_seconds_bucket{le="1"} 0
kubelet_pleg_relist_interval_seconds_bucket{le="2.5"} 1
kubelet_pleg_relist_interval_seconds_bucket{le="5"} 1
kubelet_pleg_relist_interval_seconds_bucket{le="10"} 1
kubelet_pleg_relist_interval_seconds_bucket{le="+Inf"} 1
kubelet_pleg_relist_interval_seconds_sum 2
kubelet_pleg_relist_interval_seconds_count 1
`), "kubelet_pleg_relist_interval_seconds"); err != nil {
		t.Error(err)
	}
	if got := testutil.ToFloat64(h.pleg.metrics.runningPods); got != 1 {
		t.Errorf("kubelet_running_pods = %v, want 1", got)
	}
	if got := testutil.ToFloat64(h.pleg.metrics.runningContainers.WithLabelValues("running")); got != 2 {
		t.Errorf("kubelet_running_containers{running} = %v, want 2", got)
	}
	_ = h.pleg.Healthy()
	if got := testutil.ToFloat64(h.pleg.metrics.lastSeen); got != float64(h.clock.Now().Unix()) {
		t.Errorf("kubelet_pleg_last_seen_seconds = %v, want %d", got, h.clock.Now().Unix())
	}
}

func TestFailedInspectionIsRetried(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	sb := h.runPod("u")
	c := h.createContainer(sb, "u", "a", 0, true)
	h.pleg.Relist(ctx)
	h.drain()
	before, _ := h.cache.Get("u")

	h.fake.ExitContainer(c, 0, "")
	h.fake.InjectError("ContainerStatus", status.Error(codes.Internal, "flaky"))
	h.clock.Step(time.Second)
	h.pleg.Relist(ctx)
	if evs := h.drain(); len(evs) != 0 {
		t.Errorf("events sent although the pod could not be inspected: %v", evs)
	}
	st, err := h.cache.Get("u")
	if status.Code(err) != codes.Internal {
		t.Errorf("cache error = %v, want the inspection error", err)
	}
	if st != before {
		t.Errorf("a failed inspection replaced the cached status with %+v", st)
	}

	h.clock.Step(time.Second)
	h.pleg.Relist(ctx)
	if evs := h.drain(); !sameEvents(evs, []Event{{"u", ContainerDied, c}}) {
		t.Errorf("events on retry = %v", evs)
	}
	st, err = h.cache.Get("u")
	if err != nil || st.Containers[0].State != runtimeapi.ContainerState_CONTAINER_EXITED {
		t.Errorf("cache after retry = %+v, %v", st, err)
	}
}

func TestContainerGoneBeforeInspection(t *testing.T) {
	// The listing saw the container, the status call did not: skip it, no error.
	ctx := context.Background()
	h := newHarness(t)
	sb := h.runPod("u")
	h.createContainer(sb, "u", "a", 0, true)
	h.fake.InjectError("ContainerStatus", status.Error(codes.NotFound, "gone"))
	h.pleg.Relist(ctx)
	st, err := h.cache.Get("u")
	if err != nil || len(st.Containers) != 0 || len(st.Sandboxes) != 1 {
		t.Errorf("status = %+v, %v", st, err)
	}
}

func TestInspectionIsParallel(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	for i := range 8 {
		h.runPod(fmt.Sprint("p", i))
	}
	const delay = 200 * time.Millisecond
	h.fake.SetDelay("PodSandboxStatus", delay)
	start := time.Now()
	h.pleg.Relist(ctx)
	took := time.Since(start)
	// 8 pods, 4 at a time: two rounds. Serial would be 8 × 200ms.
	if took >= 6*delay {
		t.Errorf("relist of 8 changed pods took %v; inspection is not parallel", took)
	}
	if got := len(h.drain()); got != 8 {
		t.Errorf("%d events, want 8", got)
	}
	for i := range 8 {
		if st, _ := h.cache.Get(types.UID(fmt.Sprint("p", i))); len(st.Sandboxes) != 1 {
			t.Errorf("pod p%d not cached", i)
		}
	}
}

func TestStartLoop(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sb := h.runPod("u")
	stopped := make(chan struct{})
	go func() { defer close(stopped); h.pleg.Start(ctx) }()
	wait := func() Event {
		select {
		case ev := <-h.pleg.Watch():
			return *ev
		case <-time.After(5 * time.Second):
			t.Fatal("no event")
			return Event{}
		}
	}
	if ev := wait(); ev != (Event{"u", ContainerStarted, sb}) {
		t.Errorf("first event = %v", ev)
	}
	c := h.createContainer(sb, "u", "a", 0, true)
	// The loop sleeps on the fake clock: wait for its timer, then fire it.
	eventually.True(t, "the relist timer", h.clock.HasWaiters)
	h.clock.Step(time.Second)
	if ev := wait(); ev != (Event{"u", ContainerStarted, c}) {
		t.Errorf("second event = %v", ev)
	}
	// The cache holds what an event announces by the time it is received.
	if st, _ := h.cache.Get("u"); len(st.Containers) != 1 || st.Containers[0].Id != c {
		t.Errorf("cache behind the event: %+v", st)
	}
	// A forced relist may run while the loop's does; they serialize.
	h.fake.ExitContainer(c, 0, "")
	go h.pleg.Relist(ctx)
	eventually.True(t, "the relist timer again", h.clock.HasWaiters)
	h.clock.Step(time.Second)
	if ev := wait(); ev != (Event{"u", ContainerDied, c}) {
		t.Errorf("third event = %v", ev)
	}
	select {
	case ev := <-h.pleg.Watch():
		t.Errorf("duplicate event from concurrent relists: %v", ev)
	case <-time.After(100 * time.Millisecond):
	}
	cancel()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("Start did not return after ctx was cancelled")
	}
}

func TestCache(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	c := NewCache(clk)
	t0 := clk.Now()

	if st, err := c.Get("nope"); err != nil || st == nil || st.UID != "nope" {
		t.Errorf("Get(unknown) = %+v, %v", st, err)
	}

	// Older updates do not overwrite newer ones.
	c.Set("a", &PodStatus{UID: "a", Name: "new"}, nil, t0.Add(2*time.Second))
	c.Set("a", &PodStatus{UID: "a", Name: "old"}, nil, t0.Add(time.Second))
	if st, _ := c.Get("a"); st.Name != "new" {
		t.Errorf("stale Set won: %q", st.Name)
	}
	boom := errors.New("boom")
	c.Set("b", nil, boom, time.Time{}) // zero ts = clock now
	if st, err := c.Get("b"); !errors.Is(err, boom) || st == nil || st.UID != "b" {
		t.Errorf("Get(b) = %+v, %v", st, err)
	}
	c.Delete("a")
	if st, _ := c.Get("a"); st.Name != "" {
		t.Errorf("Get after Delete = %+v", st)
	}
}

func TestGetNewerThan(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	t0 := clk.Now()
	type result struct {
		st  *PodStatus
		err error
	}
	tests := []struct {
		name    string
		prepare func(c *Cache)
		unblock func(c *Cache) // nil: must return at once
		check   func(t *testing.T, r result)
	}{
		{
			name:    "already newer",
			prepare: func(c *Cache) { c.Set("u", &PodStatus{UID: "u", Name: "x"}, nil, t0.Add(time.Second)) },
			check: func(t *testing.T, r result) {
				if r.st.Name != "x" {
					t.Errorf("got %+v", r.st)
				}
			},
		},
		{
			name:    "same time is not newer: waits for the pod's Set",
			prepare: func(c *Cache) { c.Set("u", &PodStatus{UID: "u", Name: "old"}, nil, t0) },
			unblock: func(c *Cache) { c.Set("u", &PodStatus{UID: "u", Name: "new"}, nil, t0.Add(time.Second)) },
			check: func(t *testing.T, r result) {
				if r.st.Name != "new" {
					t.Errorf("got %+v", r.st)
				}
			},
		},
		{
			name:    "other pod's Set does not unblock, global timestamp does",
			prepare: func(c *Cache) {},
			unblock: func(c *Cache) {
				c.Set("other", &PodStatus{UID: "other"}, nil, t0.Add(time.Second))
				c.UpdateTime(t0.Add(time.Second))
			},
			check: func(t *testing.T, r result) {
				if r.err != nil || r.st.UID != "u" {
					t.Errorf("got %+v, %v", r.st, r.err)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCache(clk)
			tc.prepare(c)
			done := make(chan result, 1)
			go func() {
				st, err := c.GetNewerThan(context.Background(), "u", t0)
				done <- result{st, err}
			}()
			if tc.unblock != nil {
				select {
				case r := <-done:
					t.Fatalf("returned before it should: %+v", r)
				case <-time.After(50 * time.Millisecond):
				}
				tc.unblock(c)
			}
			select {
			case r := <-done:
				tc.check(t, r)
			case <-time.After(5 * time.Second):
				t.Fatal("GetNewerThan did not return")
			}
		})
	}

	t.Run("context cancelled", func(t *testing.T) {
		c := NewCache(clk)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		st, err := c.GetNewerThan(ctx, "u", t0)
		if !errors.Is(err, context.DeadlineExceeded) || st == nil || st.UID != "u" {
			t.Errorf("got %+v, %v", st, err)
		}
		c.mu.Lock()
		n := len(c.subs)
		c.mu.Unlock()
		if n != 0 {
			t.Errorf("cancelled waiter left subscribed")
		}
	})
}

func TestRelistUnblocksWaiters(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	sb := h.runPod("u")
	h.pleg.Relist(ctx)
	t0 := h.clock.Now()
	done := make(chan *PodStatus, 2)
	for _, uid := range []types.UID{"u", "unknown"} {
		go func() {
			st, _ := h.cache.GetNewerThan(ctx, uid, t0)
			done <- st
		}()
	}
	time.Sleep(50 * time.Millisecond)
	select {
	case st := <-done:
		t.Fatalf("returned before the next relist: %+v", st)
	default:
	}
	h.clock.Step(time.Second)
	h.pleg.Relist(ctx) // no change: only the global timestamp moves
	for range 2 {
		select {
		case st := <-done:
			if st.UID == "u" && (len(st.Sandboxes) != 1 || st.Sandboxes[0].Id != sb) {
				t.Errorf("status for u = %+v", st)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("relist did not unblock GetNewerThan")
		}
	}
}

// syncAfterListing is a runtime whose first ListContainers runs sync once the
// listing is taken: a pod worker's sync that lands between a relist's listing
// and its inspection of the pod.
type syncAfterListing struct {
	Runtime
	once sync.Once
	sync func()
}

func (r *syncAfterListing) ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	list, err := r.Runtime.ListContainers(ctx, filter)
	r.once.Do(r.sync)
	return list, err
}

// An inspection shows the containers of the listing before it: a container a
// sync created after the listing is missing from it, so it must not count as
// newer than that sync. If it did, the worker's next sync (GetNewerThan its
// last one) would miss the container it created: create it again (the
// runtime: AlreadyExists) and report it waiting, without allocatedResources.
func TestInspectionIsNoNewerThanItsListing(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	sb := h.runPod("u")
	var id string
	var synced time.Time // the worker's lastSync
	rt := &syncAfterListing{Runtime: h.cli, sync: func() {
		h.clock.Step(time.Second)
		id = h.createContainer(sb, "u", "app", 0, true)
		synced = h.clock.Now()
		h.clock.Step(time.Second) // the inspection starts after the sync ended
	}}
	g := NewGeneric(rt, h.cache, 0, 0, h.clock)
	g.Relist(ctx)
	if synced.IsZero() {
		t.Fatal("the relist did not list containers")
	}
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if st, err := h.cache.GetNewerThan(wctx, "u", synced); err == nil {
		t.Fatalf("a relist that listed before the sync gave a status newer than it, with containers %v", st.Containers)
	}

	h.clock.Step(time.Second)
	g.Relist(ctx)
	st, err := h.cache.GetNewerThan(ctx, "u", synced)
	if err != nil {
		t.Fatal(err)
	}
	wantContainers(t, st, id)
}

// A resize changes a running container's resources and nothing else: only a
// requested reinspection brings the new resources into the cache.
func TestRequestReinspectRefreshesUnchangedPod(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	sb := h.runPod("r1")
	id := h.createContainer(sb, "r1", "app", 0, true)
	h.pleg.Relist(ctx)
	h.drain()
	shares := func() int64 {
		st, _ := h.cache.Get("r1")
		for _, c := range st.Containers {
			if c.Id == id {
				return c.GetResources().GetLinux().GetCpuShares()
			}
		}
		return -1
	}
	if err := h.cli.UpdateContainerResources(ctx, id, &runtimeapi.ContainerResources{Linux: &runtimeapi.LinuxContainerResources{CpuShares: 512}}); err != nil {
		t.Fatal(err)
	}
	h.pleg.Relist(ctx)
	if got := shares(); got == 512 {
		t.Fatal("a plain relist re-inspected an unchanged pod")
	}
	h.pleg.RequestReinspect("r1")
	h.pleg.Relist(ctx)
	if got := shares(); got != 512 {
		t.Fatalf("after a requested reinspection cpu shares = %d, want 512", got)
	}
	if evs := h.drain(); len(evs) != 0 {
		t.Fatalf("the reinspection sent events %v", evs)
	}
}

// TestRelistCostIsFlatInUnchangedPods: a relist of N unchanged pods is the
// two list calls and no status call; a change inspects only its pod.
func TestRelistCostIsFlatInUnchangedPods(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	const n = 30
	var exiting string
	for i := range n {
		uid := fmt.Sprintf("pod-%02d", i)
		sb := h.runPod(uid)
		id := h.createContainer(sb, uid, "main", 0, true)
		h.createContainer(sb, uid, "created", 0, false) // CREATED: an unknown state, unchanged
		exited := h.createContainer(sb, uid, "init", 0, true)
		h.fake.ExitContainer(exited, 0, "")
		if i == 0 {
			exiting = id
		}
	}
	h.pleg.Relist(ctx)
	h.drain()
	count := func() map[string]int {
		calls := map[string]int{}
		for _, c := range h.fake.Calls() {
			calls[c]++
		}
		h.fake.ResetCalls()
		return calls
	}

	h.fake.ResetCalls()
	for range 3 {
		h.pleg.Relist(ctx)
	}
	want := map[string]int{"ListPodSandbox": 3, "ListContainers": 3}
	if got := count(); !maps.Equal(got, want) {
		t.Errorf("3 relists of %d unchanged pods made calls %v, want %v", n, got, want)
	}
	if evs := h.drain(); len(evs) != 0 {
		t.Errorf("unchanged pods sent events %v", evs)
	}

	h.fake.ExitContainer(exiting, 1, "")
	h.pleg.Relist(ctx)
	// One pod inspected: its sandbox and its three containers.
	want = map[string]int{"ListPodSandbox": 1, "ListContainers": 1, "PodSandboxStatus": 1, "ContainerStatus": 3}
	if got := count(); !maps.Equal(got, want) {
		t.Errorf("a relist with one changed pod made calls %v, want %v", got, want)
	}
}
