package allocation

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/cgroups"
)

// fakePods admits a resize while the pod's cpu request fits free milli-cpus.
type fakePods struct {
	pods      map[types.UID]*v1.Pod
	freeMilli int64
	admitted  []types.UID
}

func (f *fakePods) DesiredPod(uid types.UID) (*v1.Pod, bool) { p, ok := f.pods[uid]; return p, ok }
func (f *fakePods) AdmitResize(_ context.Context, pod *v1.Pod) (string, string) {
	f.admitted = append(f.admitted, pod.UID)
	if pod.Spec.Containers[0].Resources.Requests.Cpu().MilliValue() > f.freeMilli {
		return "OutOfcpu", "Node didn't have enough resource: cpu"
	}
	return "", ""
}
func (f *fakePods) PodRequests(pod *v1.Pod) v1.ResourceList {
	return pod.Spec.Containers[0].Resources.Requests
}

func newTestManager(t *testing.T) (*Manager, *record.FakeRecorder, *clocktesting.FakeClock) {
	t.Helper()
	rec := record.NewFakeRecorder(100)
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	return NewManager(NewMemoryState(), cgroups.ResourceOptions{}, StaticManagers{}, rec, clk), rec, clk
}

// events takes the events recorded so far.
func events(rec *record.FakeRecorder) []string {
	out := make([]string, 0, len(rec.Events))
	for range len(rec.Events) {
		out = append(out, <-rec.Events)
	}
	return out
}

func onePod(uid types.UID, r v1.ResourceRequirements) *v1.Pod {
	p := podWith(v1.Container{Name: "c", Resources: r})
	p.UID = uid
	p.Name = string(uid)
	return p
}

// The decisions of one resize: accepted (allocation and InProgress), deferred
// for want of room (Deferred, retried), infeasible (never retried), reverted.
func TestHandleResize(t *testing.T) {
	ctx := context.Background()
	m, rec, clk := newTestManager(t)
	admitted := onePod("a", res("100m", "64Mi", "100m", "64Mi"))
	if err := m.SetAllocated(admitted); err != nil {
		t.Fatal(err)
	}
	pods := &fakePods{pods: map[types.UID]*v1.Pod{}, freeMilli: 150}

	// Too big for now: Deferred with the admission's message, one event.
	big := onePod("a", res("200m", "128Mi", "200m", "128Mi"))
	pods.pods["a"] = big
	m.PushPendingResize("a")
	if sync := m.RetryPendingResizes(ctx, pods); !slices.Equal(sync, []types.UID{"a"}) {
		t.Fatalf("sync after a deferral = %v, want [a] (its conditions changed)", sync)
	}
	conds := m.Conditions("a")
	if len(conds) != 1 || conds[0].Type != v1.PodResizePending || conds[0].Reason != v1.PodReasonDeferred ||
		conds[0].Message != "Node didn't have enough resource: cpu" || conds[0].ObservedGeneration != 2 {
		t.Fatalf("conditions after deferral = %+v", conds)
	}
	if ev := events(rec); len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning ResizeDeferred Pod resize OutOfcpu: ") {
		t.Fatalf("events = %q", ev)
	}
	if got, _ := m.UpdatePodFromAllocation(big); got.Spec.Containers[0].Resources.Limits.Cpu().MilliValue() != 100 {
		t.Fatal("a deferred resize changed the allocation")
	}
	// Still deferred on the next retry: queued, no new event, nothing to sync.
	clk.Step(time.Minute)
	if sync := m.RetryPendingResizes(ctx, pods); len(sync) != 0 || !m.HasPendingResizes() {
		t.Fatalf("second retry: sync = %v, pending = %v", sync, m.HasPendingResizes())
	}
	if ev := events(rec); len(ev) != 0 {
		t.Fatalf("a repeated deferral sent events %q", ev)
	}

	// Room frees up: allocated, InProgress with the pod's generation, started event.
	pods.freeMilli = 1000
	if sync := m.RetryPendingResizes(ctx, pods); !slices.Equal(sync, []types.UID{"a"}) || m.HasPendingResizes() {
		t.Fatalf("accepted resize: sync = %v, pending = %v", sync, m.HasPendingResizes())
	}
	if got, _ := m.UpdatePodFromAllocation(big); got != big {
		t.Fatal("the accepted resize is not the allocation")
	}
	conds = m.Conditions("a")
	if len(conds) != 1 || conds[0].Type != v1.PodResizeInProgress || conds[0].Reason != "" || conds[0].ObservedGeneration != 2 {
		t.Fatalf("conditions after acceptance = %+v", conds)
	}
	if ev := events(rec); len(ev) != 1 || !strings.HasPrefix(ev[0], "Normal ResizeStarted Pod resize started: ") {
		t.Fatalf("events = %q", ev)
	}

	// A reverted resize clears a pending condition and allocates nothing.
	m.setPending("a", "OutOfcpu", "x", 3)
	m.PushPendingResize("a")
	m.RetryPendingResizes(ctx, pods)
	if c := m.Conditions("a"); len(c) != 1 || c[0].Type != v1.PodResizeInProgress {
		t.Fatalf("conditions after a revert = %+v", c)
	}
}

func TestHandleResizeInfeasibleIsNotRetried(t *testing.T) {
	ctx := context.Background()
	rec := record.NewFakeRecorder(10)
	m := NewManager(NewMemoryState(), cgroups.ResourceOptions{SwapBehavior: cgroups.LimitedSwap, SwapControllerAvailable: true, CgroupV2: true},
		StaticManagers{}, rec, clocktesting.NewFakeClock(time.Now()))
	burstable := onePod("s", res("100m", "64Mi", "", "256Mi"))
	if err := m.SetAllocated(burstable); err != nil {
		t.Fatal(err)
	}
	want := onePod("s", res("100m", "96Mi", "", "256Mi"))
	pods := &fakePods{pods: map[types.UID]*v1.Pod{"s": want}, freeMilli: 1000}
	m.PushPendingResize("s")
	m.RetryPendingResizes(ctx, pods)
	c := m.Conditions("s")
	if len(c) != 1 || c[0].Reason != v1.PodReasonInfeasible || c[0].Message != MessageSwap {
		t.Fatalf("conditions = %+v", c)
	}
	if m.HasPendingResizes() || len(pods.admitted) != 0 {
		t.Fatalf("an infeasible resize stays queued (%v) or went to admission (%v)", m.HasPendingResizes(), pods.admitted)
	}
	if ev := events(rec); len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning ResizeInfeasible Pod resize Infeasible: ") {
		t.Fatalf("events = %q", ev)
	}
}

// Upstream's order of pending resizes: decreases first, then priority, then
// Guaranteed, then the longest waiting.
func TestPendingResizeOrder(t *testing.T) {
	ctx := context.Background()
	m, _, clk := newTestManager(t)
	mk := func(uid types.UID, from, to string, prio int32, guaranteed bool) *v1.Pod {
		shape := func(cpu string) v1.ResourceRequirements {
			if guaranteed {
				return res(cpu, "64Mi", cpu, "64Mi")
			}
			return res(cpu, "", "", "")
		}
		if err := m.SetAllocated(onePod(uid, shape(from))); err != nil {
			t.Fatal(err)
		}
		want := onePod(uid, shape(to))
		want.Spec.Priority = ptr.To(prio)
		return want
	}
	pods := &fakePods{pods: map[types.UID]*v1.Pod{}, freeMilli: 0}
	for _, p := range []*v1.Pod{
		mk("old-low", "100m", "200m", 0, false),
		mk("new-low", "100m", "200m", 0, false),
		mk("guaranteed", "100m", "200m", 0, true),
		mk("high", "100m", "200m", 10, false),
		mk("shrink", "300m", "200m", 0, false),
	} {
		pods.pods[p.UID] = p
	}
	// old-low waits longer than new-low.
	m.setPending("old-low", "OutOfcpu", "x", 2)
	clk.Step(time.Minute)
	m.setPending("new-low", "OutOfcpu", "x", 2)
	for _, uid := range []types.UID{"new-low", "old-low", "guaranteed", "shrink", "high"} {
		m.PushPendingResize(uid)
	}
	m.RetryPendingResizes(ctx, pods)
	// A shrink is admitted whatever the room (freeMilli 0 refuses only growth here:
	// 200m > 0 also refuses it, which keeps it in the order).
	want := []types.UID{"shrink", "high", "guaranteed", "old-low", "new-low"}
	if !slices.Equal(pods.admitted, want) {
		t.Fatalf("decision order = %v, want %v", pods.admitted, want)
	}
}

func TestInProgressCondition(t *testing.T) {
	m, _, clk := newTestManager(t)
	if _, changed := m.SetInProgress("a", "", "", 4); !changed {
		t.Fatal("first InProgress: no change reported")
	}
	first := m.Conditions("a")[0]
	clk.Step(time.Minute)
	// Repeated: nothing changes, not even the probe time (no status churn).
	if gen, changed := m.SetInProgress("a", "", "", 7); changed || gen != 4 {
		t.Fatalf("repeat: gen = %d, changed = %v", gen, changed)
	}
	if again := m.Conditions("a")[0]; !again.LastProbeTime.Equal(&first.LastProbeTime) {
		t.Fatal("a repeated set moved the probe time")
	}
	// An error keeps the generation and records reason and message.
	if gen, changed := m.SetInProgress("a", v1.PodReasonError, "boom", 9); !changed || gen != 4 {
		t.Fatalf("error: gen = %d, changed = %v", gen, changed)
	}
	c := m.Conditions("a")[0]
	if c.Reason != v1.PodReasonError || c.Message != "boom" || c.ObservedGeneration != 4 || c.LastTransitionTime.Equal(&first.LastTransitionTime) {
		t.Fatalf("error condition = %+v", c)
	}
	// Empty reason and message keep the error.
	m.SetInProgress("a", "", "", 4)
	if c := m.Conditions("a")[0]; c.Reason != v1.PodReasonError {
		t.Fatalf("the error was dropped: %+v", c)
	}
	if gen, cleared := m.ClearInProgress("a"); !cleared || gen != 4 || len(m.Conditions("a")) != 0 {
		t.Fatalf("clear: gen = %d, cleared = %v, left %v", gen, cleared, m.Conditions("a"))
	}
	if _, cleared := m.ClearInProgress("a"); cleared {
		t.Fatal("a second clear reported a condition")
	}

	// Backfill from the API after a restart, never over what is known.
	pod := onePod("b", res("1", "", "", ""))
	pod.Status.Conditions = []v1.PodCondition{{Type: v1.PodResizePending, Status: v1.ConditionTrue, Reason: v1.PodReasonDeferred, Message: "m", ObservedGeneration: 3}}
	m.BackfillConditions(pod)
	if c := m.Conditions("b"); len(c) != 1 || c[0].Reason != v1.PodReasonDeferred || c[0].ObservedGeneration != 3 {
		t.Fatalf("backfilled = %+v", c)
	}
	m.RemoveOrphanedPods(map[types.UID]bool{})
	if c := m.Conditions("b"); len(c) != 0 {
		t.Fatalf("orphan conditions kept: %+v", c)
	}
}
