package allocation

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/cgroups"
	"github.com/nodelet/nodelet/internal/podutil"
)

// Retry periods of pending resizes, upstream's: the first retry while the
// pod sources may not be ready yet, then every few minutes.
const (
	InitialRetryDelay = 30 * time.Second
	RetryDelay        = 3 * time.Minute
)

// Pods is what a resize decision asks of the node: the pods its sources want,
// whether a pod with new resources fits next to the other admitted pods (with
// their allocated resources) and why not (the admission's reason and message;
// "" when it fits), and a pod's requests as the scheduler counts them.
type Pods interface {
	DesiredPod(uid types.UID) (*v1.Pod, bool)
	AdmitResize(ctx context.Context, pod *v1.Pod) (reason, message string)
	PodRequests(pod *v1.Pod) v1.ResourceList
}

// resizeConditions are a pod's PodResizePending and PodResizeInProgress conditions.
type resizeConditions struct {
	pending, inProgress *v1.PodCondition
}

// Manager keeps the allocated resources of admitted pods, their resize
// conditions and the resizes waiting for room (Deferred).
type Manager struct {
	allocated *State
	opts      cgroups.ResourceOptions
	static    StaticManagers
	recorder  record.EventRecorder
	clock     clock.PassiveClock

	// queueMu serializes resize decisions and guards pending; it is taken
	// before condMu, never the other way round.
	queueMu sync.Mutex
	pending []types.UID

	condMu sync.Mutex
	conds  map[types.UID]resizeConditions
}

// NewManager returns a Manager over the allocated state. opts tell which
// containers may swap (a resize of their memory request is refused), static
// which resource managers refuse resizes of Guaranteed pods.
func NewManager(allocated *State, opts cgroups.ResourceOptions, static StaticManagers, recorder record.EventRecorder, clk clock.PassiveClock) *Manager {
	return &Manager{allocated: allocated, opts: opts, static: static, recorder: recorder, clock: clk, conds: map[types.UID]resizeConditions{}}
}

// UpdatePodFromAllocation returns pod with its allocated resources (see the
// package function), or pod itself when it has no allocation.
func (m *Manager) UpdatePodFromAllocation(pod *v1.Pod) (*v1.Pod, bool) {
	if pod == nil {
		return nil, false
	}
	alloc, ok := m.allocated.Pod(pod.UID)
	if !ok {
		return pod, false
	}
	return UpdatePodFromAllocation(pod, alloc)
}

// HasAllocation says whether the pod was admitted (has allocated resources).
func (m *Manager) HasAllocation(uid types.UID) bool {
	_, ok := m.allocated.Pod(uid)
	return ok
}

// SetAllocated checkpoints pod's resources as its allocation.
func (m *Manager) SetAllocated(pod *v1.Pod) error {
	return m.allocated.SetPod(pod.UID, ResourceInfoForPod(pod))
}

// RemovePod forgets a pod gone from its sources: its allocation, conditions
// and pending resize.
func (m *Manager) RemovePod(uid types.UID) {
	m.allocated.RemovePod(uid)
	m.condMu.Lock()
	delete(m.conds, uid)
	m.condMu.Unlock()
}

// RemoveOrphanedPods forgets the allocations and conditions of pods keep does
// not hold.
func (m *Manager) RemoveOrphanedPods(keep map[types.UID]bool) {
	m.allocated.RemoveOrphanedPods(keep)
	m.condMu.Lock()
	defer m.condMu.Unlock()
	for uid := range m.conds {
		if !keep[uid] {
			delete(m.conds, uid)
		}
	}
}

// HasPendingResizes says whether any resize waits for room.
func (m *Manager) HasPendingResizes() bool {
	m.queueMu.Lock()
	defer m.queueMu.Unlock()
	return len(m.pending) > 0
}

// PushPendingResize queues pod's resize for the next RetryPendingResizes.
func (m *Manager) PushPendingResize(uid types.UID) {
	m.queueMu.Lock()
	defer m.queueMu.Unlock()
	if !slices.Contains(m.pending, uid) {
		m.pending = append(m.pending, uid)
	}
}

// RetryPendingResizes decides every queued resize, in upstream's order (see
// sortPending), and returns the pods to sync now: those whose allocation or
// resize conditions changed. A Deferred resize stays queued; an accepted or
// Infeasible one leaves the queue.
func (m *Manager) RetryPendingResizes(ctx context.Context, pods Pods) []types.UID {
	m.queueMu.Lock()
	defer m.queueMu.Unlock()
	logger := klog.FromContext(ctx)
	var queued []*v1.Pod
	for _, uid := range m.pending {
		if p, ok := pods.DesiredPod(uid); ok {
			queued = append(queued, p)
		}
	}
	m.sortPending(queued, pods)
	var still []types.UID
	var sync []types.UID
	for _, pod := range queued {
		before := m.Conditions(pod.UID)
		allocated, err := m.handleResize(ctx, pod, pods)
		switch {
		case err != nil:
			logger.Error(err, "Failed to handle pod resources resize", "pod", klog.KObj(pod))
			still = append(still, pod.UID)
		case m.pendingReason(pod.UID) == v1.PodReasonDeferred:
			logger.V(4).Info("Pod resize is deferred; will reevaluate later", "pod", klog.KObj(pod))
			still = append(still, pod.UID)
		}
		if allocated || !conditionsEqual(before, m.Conditions(pod.UID)) {
			sync = append(sync, pod.UID)
		}
	}
	m.pending = still
	return sync
}

// handleResize decides one pod's resize: its desired resources against its
// allocation. It reports whether the allocation changed.
func (m *Manager) handleResize(ctx context.Context, pod *v1.Pod, pods Pods) (bool, error) {
	allocated, differs := m.UpdatePodFromAllocation(pod)
	if !differs {
		// Desired is allocated (a reverted resize): nothing pends.
		m.ClearPending(pod.UID)
		return false, nil
	}
	reason, message := "", ResizeInfeasible(pod, allocated, m.opts, m.static)
	if message != "" {
		reason = v1.PodReasonInfeasible
	} else {
		reason, message = pods.AdmitResize(ctx, pod)
	}
	if reason == "" {
		if err := m.SetAllocated(pod); err != nil {
			return false, err
		}
		m.ClearPending(pod.UID)
		// A new allocation starts a new resize: a former error and generation go.
		m.ClearInProgress(pod.UID)
		m.SetInProgress(pod.UID, "", "", pod.Generation)
		klog.FromContext(ctx).V(2).Info("Pod resize allocated", "pod", klog.KObj(pod), "generation", pod.Generation)
		m.recorder.Eventf(pod, v1.EventTypeNormal, EventResizeStarted, "%s", ResizeStartedMessage(pod, pod.Generation))
		return true, nil
	}
	if m.setPending(pod.UID, reason, message, pod.Generation) {
		ev := EventResizeDeferred
		if reason == v1.PodReasonInfeasible {
			ev = EventResizeInfeasible
		}
		m.recorder.Eventf(pod, v1.EventTypeWarning, ev, "%s", ResizePendingMessage(pod, reason, message, pod.Generation))
	}
	return false, nil
}

// sortPending orders resizes as upstream: those not increasing requests first
// (they always fit), then by priority, then Guaranteed before others, then
// the longest pending first.
func (m *Manager) sortPending(queued []*v1.Pod, pods Pods) {
	increasing := map[types.UID]bool{}
	since := map[types.UID]time.Time{}
	for _, p := range queued {
		if allocated, differs := m.UpdatePodFromAllocation(p); differs {
			old, cur := pods.PodRequests(allocated), pods.PodRequests(p)
			increasing[p.UID] = cur.Cpu().Cmp(*old.Cpu()) > 0 || cur.Memory().Cmp(*old.Memory()) > 0
		}
		m.condMu.Lock()
		if c := m.conds[p.UID].pending; c != nil {
			since[p.UID] = c.LastTransitionTime.Time
		}
		m.condMu.Unlock()
	}
	// first puts true before false.
	first := func(b bool) int {
		if b {
			return 0
		}
		return 1
	}
	guaranteed := func(p *v1.Pod) bool { return cgroups.QOSClass(p) == v1.PodQOSGuaranteed }
	slices.SortStableFunc(queued, func(a, b *v1.Pod) int {
		ta, oka := since[a.UID]
		tb, okb := since[b.UID]
		return cmp.Or(
			cmp.Compare(first(!increasing[a.UID]), first(!increasing[b.UID])),
			cmp.Compare(podutil.Priority(b), podutil.Priority(a)),
			cmp.Compare(first(guaranteed(a)), first(guaranteed(b))),
			cmp.Compare(first(oka), first(okb)),
			ta.Compare(tb),
		)
	})
}

// Conditions returns copies of the pod's resize conditions, PodResizePending first.
func (m *Manager) Conditions(uid types.UID) []v1.PodCondition {
	m.condMu.Lock()
	defer m.condMu.Unlock()
	var out []v1.PodCondition
	for _, c := range []*v1.PodCondition{m.conds[uid].pending, m.conds[uid].inProgress} {
		if c != nil {
			out = append(out, *c.DeepCopy())
		}
	}
	return out
}

func (m *Manager) pendingReason(uid types.UID) string {
	m.condMu.Lock()
	defer m.condMu.Unlock()
	if c := m.conds[uid].pending; c != nil {
		return c.Reason
	}
	return ""
}

// setPending sets PodResizePending: Infeasible, or Deferred for any other
// reason (OutOfcpu, ...), as upstream. It reports whether the reason or the
// generation changed.
func (m *Manager) setPending(uid types.UID, reason, message string, generation int64) bool {
	if reason != v1.PodReasonInfeasible {
		reason = v1.PodReasonDeferred
	}
	m.condMu.Lock()
	defer m.condMu.Unlock()
	c := m.conds[uid]
	prev := c.pending
	c.pending = m.resizeCondition(v1.PodResizePending, prev, reason, message, generation)
	m.conds[uid] = c
	return prev == nil || prev.Reason != reason || prev.ObservedGeneration != generation
}

// ClearPending drops PodResizePending.
func (m *Manager) ClearPending(uid types.UID) {
	m.condMu.Lock()
	defer m.condMu.Unlock()
	c := m.conds[uid]
	c.pending = nil
	m.setLocked(uid, c)
}

// SetInProgress sets PodResizeInProgress. As upstream, an existing condition
// keeps its generation (clear it first for a new one) and, when reason and
// message are empty, its reason and message. It returns the condition's
// generation and whether anything changed.
func (m *Manager) SetInProgress(uid types.UID, reason, message string, generation int64) (int64, bool) {
	m.condMu.Lock()
	defer m.condMu.Unlock()
	c := m.conds[uid]
	prev := c.inProgress
	if prev != nil {
		if reason == "" && message == "" {
			reason, message = prev.Reason, prev.Message
		}
		generation = prev.ObservedGeneration
	}
	c.inProgress = m.resizeCondition(v1.PodResizeInProgress, prev, reason, message, generation)
	m.conds[uid] = c
	return generation, prev != c.inProgress
}

// ClearInProgress drops PodResizeInProgress, returning its generation and
// whether there was one.
func (m *Manager) ClearInProgress(uid types.UID) (int64, bool) {
	m.condMu.Lock()
	defer m.condMu.Unlock()
	c := m.conds[uid]
	if c.inProgress == nil {
		return 0, false
	}
	gen := c.inProgress.ObservedGeneration
	c.inProgress = nil
	m.setLocked(uid, c)
	return gen, true
}

// ResizesInProgress counts the pods with PodResizeInProgress
// (kubelet_pod_in_progress_resizes).
func (m *Manager) ResizesInProgress() int {
	m.condMu.Lock()
	defer m.condMu.Unlock()
	n := 0
	for _, c := range m.conds {
		if c.inProgress != nil {
			n++
		}
	}
	return n
}

// ClearConditions drops both conditions (the pod reached a terminal phase).
func (m *Manager) ClearConditions(uid types.UID) {
	m.condMu.Lock()
	defer m.condMu.Unlock()
	delete(m.conds, uid)
}

// BackfillConditions takes the resize conditions a pod's API status carries
// (after a restart of nodelet), unless the pod has some already.
func (m *Manager) BackfillConditions(pod *v1.Pod) {
	m.condMu.Lock()
	defer m.condMu.Unlock()
	c := m.conds[pod.UID]
	for _, pc := range pod.Status.Conditions {
		cp := pc
		switch {
		case pc.Type == v1.PodResizePending && c.pending == nil:
			c.pending = &cp
		case pc.Type == v1.PodResizeInProgress && c.inProgress == nil:
			c.inProgress = &cp
		}
	}
	m.setLocked(pod.UID, c)
}

func (m *Manager) setLocked(uid types.UID, c resizeConditions) {
	if c.pending == nil && c.inProgress == nil {
		delete(m.conds, uid)
		return
	}
	m.conds[uid] = c
}

// resizeCondition is the new condition of type t; prev itself when nothing
// but its probe time would change (no status churn for a repeated set).
func (m *Manager) resizeCondition(t v1.PodConditionType, prev *v1.PodCondition, reason, message string, generation int64) *v1.PodCondition {
	if prev != nil && prev.Reason == reason && prev.Message == message && prev.ObservedGeneration == generation {
		return prev
	}
	now := metav1.NewTime(m.clock.Now().Truncate(time.Second))
	transition := now
	if prev != nil && prev.Reason == reason {
		transition = prev.LastTransitionTime
	}
	return &v1.PodCondition{
		Type: t, Status: v1.ConditionTrue, LastProbeTime: now, LastTransitionTime: transition,
		ObservedGeneration: generation, Reason: reason, Message: message,
	}
}

func conditionsEqual(a, b []v1.PodCondition) bool {
	return slices.EqualFunc(a, b, func(x, y v1.PodCondition) bool {
		return x.Type == y.Type && x.Reason == y.Reason && x.Message == y.Message && x.ObservedGeneration == y.ObservedGeneration
	})
}
