// Package statussync is upstream's status manager: it keeps the node's view of
// each pod's status (podstatus computes it) and writes it to the API server's
// pods/status subresource, only when it differs from what the API holds.
package statussync

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/podstatus"
)

// BatchPeriod is upstream's syncBatch period.
const BatchPeriod = 10 * time.Second

// MirrorLookup finds the API server's mirror pod of a static pod. podconfig.Config
// satisfies it.
type MirrorLookup interface {
	MirrorPod(staticPodUID types.UID) (*v1.Pod, bool)
}

// Manager caches pod statuses and syncs them to the API server. Create it with NewManager.
type Manager struct {
	client    kubernetes.Interface
	mirrors   MirrorLookup
	clk       clock.Clock
	canDelete func(pod *v1.Pod) bool
	metrics   *metrics

	syncCh chan struct{}

	mu       sync.Mutex
	statuses map[types.UID]*entry
}

// entry is one pod's status and what is known of its API object.
type entry struct {
	pod     *v1.Pod // the pod as last given to SetPodStatus (the static pod for static pods)
	status  v1.PodStatus
	version uint64 // bumped on each change
	synced  uint64 // version last written (or found equal) in the API
	// changedAt is when the oldest unsynced change arrived (for the sync duration metric).
	changedAt time.Time
	// apiPod is the API object (the mirror for static pods) as last read or patched.
	apiPod *v1.Pod
	// examinedRV is the resourceVersion of the caller's pod copy at our last sync: that
	// copy was checked against the API then, so it is no reason to check again.
	examinedRV string
	// deleted: the API object was deleted (or is gone); nothing more to do.
	deleted bool
}

// Option configures a Manager.
type Option func(*Manager)

// WithDeleteWhenReclaimed makes the Manager delete a pod from the API server (grace 0,
// UID precondition) once it has a deletionTimestamp and canDelete(pod) is true, meaning
// all its containers are stopped and its sandbox removed. canDelete gets the API object.
func WithDeleteWhenReclaimed(canDelete func(pod *v1.Pod) bool) Option {
	return func(m *Manager) { m.canDelete = canDelete }
}

// WithMetrics registers kubelet_pod_status_sync_duration_seconds with reg.
func WithMetrics(reg prometheus.Registerer) Option {
	return func(m *Manager) { m.metrics = newMetrics(reg) }
}

// NewManager returns a Manager. A nil client keeps statuses locally only (standalone).
// mirrors may be nil when there are no static pods.
func NewManager(client kubernetes.Interface, mirrors MirrorLookup, clk clock.Clock, opts ...Option) *Manager {
	m := &Manager{
		client:   client,
		mirrors:  mirrors,
		clk:      clk,
		syncCh:   make(chan struct{}, 1),
		statuses: map[types.UID]*entry{},
	}
	for _, o := range opts {
		o(m)
	}
	return m
}

// SetPodStatus records status for pod. If it differs from the last one (ignoring
// condition probe and transition times), a sync is scheduled at once. A terminal phase
// (Succeeded, Failed) is never replaced by a non-terminal one; startTime never moves
// once set; a condition's lastTransitionTime, when left zero, is carried over while the
// condition's status is unchanged.
func (m *Manager) SetPodStatus(pod *v1.Pod, status v1.PodStatus) {
	status = *status.DeepCopy()
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.statuses[pod.UID]
	var old *v1.PodStatus
	if ok {
		old = &e.status
	} else if pod.Status.Phase != "" || pod.Status.StartTime != nil {
		// First status for a pod the API already knows (e.g. after a restart).
		old = &pod.Status
	}
	if old != nil && podutil.IsTerminal(old.Phase) && !podutil.IsTerminal(status.Phase) {
		klog.ErrorS(nil, "Refusing to move a pod from a terminal phase to a non-terminal one",
			"pod", klog.KObj(pod), "podUID", pod.UID, "oldPhase", old.Phase, "newPhase", status.Phase)
		if ok {
			e.pod = pod.DeepCopy()
			m.scheduleIfDeletable(e)
		}
		return
	}
	if old != nil {
		if old.StartTime != nil {
			status.StartTime = old.StartTime.DeepCopy()
		}
		carryTransitionTimes(&status, old, m.clk.Now())
	} else {
		carryTransitionTimes(&status, &v1.PodStatus{}, m.clk.Now())
	}
	normalizeStatus(&status)

	if !ok {
		e = &entry{}
		m.statuses[pod.UID] = e
	}
	e.pod = pod.DeepCopy()
	if ok && statusEqual(e.status, status) {
		m.scheduleIfDeletable(e)
		return
	}
	e.status = status
	e.version++
	if e.synced == e.version-1 {
		e.changedAt = m.clk.Now()
	}
	m.signal()
}

// scheduleIfDeletable: a pod waiting for deletion is checked again at once, so the
// caller's status after cleanup deletes it without waiting for the batch.
func (m *Manager) scheduleIfDeletable(e *entry) {
	if m.canDelete != nil && !e.deleted && (e.pod.DeletionTimestamp != nil || (e.apiPod != nil && e.apiPod.DeletionTimestamp != nil)) {
		m.signal()
	}
}

func (m *Manager) signal() {
	select {
	case m.syncCh <- struct{}{}:
	default:
	}
}

// GetPodStatus returns the status last set for the pod with this UID.
func (m *Manager) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.statuses[uid]
	if !ok {
		return v1.PodStatus{}, false
	}
	return *e.status.DeepCopy(), true
}

// RemoveOrphanedStatuses forgets every pod whose UID is not in keep.
func (m *Manager) RemoveOrphanedStatuses(keep map[types.UID]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for uid := range m.statuses {
		if !keep[uid] {
			delete(m.statuses, uid)
		}
	}
}

// ForgetPodStatus forgets the status of the pod with this UID at once, written or
// not. The sync loop calls it when a pod comes back to its source under a UID
// this node ran before (a static pod's manifest put back: its UID is a hash of the
// content): the next SetPodStatus starts the new life, which a terminal phase kept
// from the old one would refuse, and the old life's status is not written to the
// new life's mirror pod.
func (m *Manager) ForgetPodStatus(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.statuses, uid)
}

// FinalFlushTimeout bounds the last sync Run makes once its context ended: nodelet's
// stop must not wait long on an API server that does not answer.
const FinalFlushTimeout = 5 * time.Second

// Run syncs until ctx is done: changed statuses at once (changes that arrive during a
// sync are coalesced into the next one), and every pod that may need it every
// BatchPeriod. Once ctx ends it makes one last attempt, bounded by FinalFlushTimeout,
// to write the changes not synced yet (the sync loop stops first, so its last
// statuses are in), and returns when that is done. With no client it only waits for
// ctx.
func (m *Manager) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	if m.client == nil {
		logger.Info("No API server client: pod statuses are kept locally only")
		<-ctx.Done()
		return
	}
	t := m.clk.NewTimer(BatchPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			m.finalFlush(ctx)
			return
		case <-m.syncCh:
			m.syncBatch(ctx, false)
		case <-t.C():
			m.syncBatch(ctx, true)
			t.Reset(BatchPeriod)
		}
	}
}

// finalFlush writes the unsynced changes (and due deletions) once more, with ctx's
// values but not its cancellation, for at most FinalFlushTimeout.
func (m *Manager) finalFlush(ctx context.Context) {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), FinalFlushTimeout)
	defer cancel()
	m.syncBatch(fctx, false)
	if fctx.Err() != nil {
		klog.FromContext(ctx).Info("Stopping: the last pod status sync ran out of time; the next start writes what is left", "timeout", FinalFlushTimeout)
	}
}

// syncBatch syncs every entry with an unsynced change or a pending deletion; with all,
// also entries whose API status may have drifted from ours. The caller's canDelete and
// the mirror lookup run without mu held.
func (m *Manager) syncBatch(ctx context.Context, all bool) {
	type candidate struct {
		uid         types.UID
		pod, apiPod *v1.Pod
		status      v1.PodStatus
		dirty       bool
		examinedRV  string
	}
	m.mu.Lock()
	cands := make([]candidate, 0, len(m.statuses))
	for uid, e := range m.statuses {
		if e.deleted {
			continue
		}
		cands = append(cands, candidate{uid, e.pod, e.apiPod, e.status, e.version != e.synced, e.examinedRV})
	}
	m.mu.Unlock()
	sort.Slice(cands, func(i, j int) bool { return cands[i].uid < cands[j].uid })
	// Writes run syncWorkers at a time: one at a time, a burst of pod starts waited on
	// the round trips of each write in turn, well below the client's QPS. Each UID is
	// synced by one worker only, so a pod's writes stay in order.
	due := make(chan types.UID)
	var wg sync.WaitGroup
	for range syncWorkers {
		wg.Go(func() {
			for uid := range due {
				m.syncPod(ctx, uid)
			}
		})
	}
	for _, c := range cands {
		if ctx.Err() != nil {
			break
		}
		if c.dirty || m.deletionDue(c.pod, c.apiPod) || (all && m.needsReconcile(c.pod, c.apiPod, &c.status, c.examinedRV)) {
			due <- c.uid
		}
	}
	close(due)
	wg.Wait()
}

// syncWorkers is how many pod status writes are in flight at once.
const syncWorkers = 4

// deletionDue: the API pod is being deleted and the caller says its resources are reclaimed.
func (m *Manager) deletionDue(pod, apiPod *v1.Pod) bool {
	if m.canDelete == nil || podutil.IsStaticPod(pod) {
		return false
	}
	p := apiPod
	if p == nil || p.DeletionTimestamp == nil {
		if pod.DeletionTimestamp == nil {
			return false
		}
		p = pod
	}
	return m.canDelete(p.DeepCopy())
}

// needsReconcile reports whether the API's status (as last known) differs from ours.
func (m *Manager) needsReconcile(pod, apiPod *v1.Pod, status *v1.PodStatus, examinedRV string) bool {
	api := apiPod
	if podutil.IsStaticPod(pod) {
		if m.mirrors == nil {
			return false
		}
		mirror, ok := m.mirrors.MirrorPod(pod.UID)
		if !ok {
			return false
		}
		api = mirror
	} else if pod.ResourceVersion != "" && pod.ResourceVersion != examinedRV && (api == nil || pod.ResourceVersion != api.ResourceVersion) {
		// The caller's copy is another (likely newer) view of the API object than ours.
		api = pod
	}
	if api == nil {
		return true
	}
	if podutil.IsTerminal(api.Status.Phase) && !podutil.IsTerminal(status.Phase) {
		return false // never written; see syncPod
	}
	want := mergeStatus(&api.Status, status)
	return !statusEqual(api.Status, want)
}

// target is where a pod's status goes: the pod itself, or a static pod's mirror.
type target struct {
	namespace, name string
	uid             types.UID
}

func (m *Manager) targetFor(pod *v1.Pod) (target, bool) {
	if !podutil.IsStaticPod(pod) {
		return target{pod.Namespace, pod.Name, pod.UID}, true
	}
	if m.mirrors == nil {
		return target{}, false
	}
	mirror, ok := m.mirrors.MirrorPod(pod.UID)
	if !ok {
		return target{}, false
	}
	return target{mirror.Namespace, mirror.Name, mirror.UID}, true
}

// syncPod writes one pod's status, and deletes the pod when that is due.
func (m *Manager) syncPod(ctx context.Context, uid types.UID) {
	m.mu.Lock()
	e, ok := m.statuses[uid]
	if !ok || e.deleted {
		m.mu.Unlock()
		return
	}
	pod := e.pod
	status := *e.status.DeepCopy()
	version := e.version
	changedAt := e.changedAt
	m.mu.Unlock()

	tgt, ok := m.targetFor(pod)
	if !ok {
		// A static pod whose mirror is not (yet) in the API: the batch retries.
		klog.V(4).InfoS("Static pod has no mirror pod yet, status not written", "pod", klog.KObj(pod), "podUID", uid)
		return
	}
	pods := m.client.CoreV1().Pods(tgt.namespace)
	// The patch is computed against the newest copy of the API object we hold (our last
	// write's answer or the pod watch's copy), not one fetched for it: a GET per write
	// was half of the requests a pod start sends. The patch carries the UID as a
	// precondition and touches only what the node owns, so a stale base cannot undo
	// others' changes; a Conflict reads the pod again.
	apiPod := m.baseFor(uid, tgt)
	for attempt := 0; ; attempt++ {
		var err error
		if apiPod == nil {
			apiPod, err = pods.Get(ctx, tgt.name, metav1.GetOptions{})
		}
		if apierrors.IsNotFound(err) {
			klog.V(3).InfoS("Pod is gone from the API server, status not written", "pod", klog.KObj(pod), "podUID", uid)
			m.markGone(uid)
			return
		}
		if err != nil {
			klog.ErrorS(err, "Unable to get pod to write its status", "pod", klog.KObj(pod), "podUID", uid)
			return
		}
		if apiPod.UID != tgt.uid {
			klog.V(3).InfoS("Pod in the API server has another UID, status not written", "pod", klog.KObj(pod), "podUID", tgt.uid, "apiUID", apiPod.UID)
			m.markGone(uid)
			return
		}
		if podutil.IsTerminal(apiPod.Status.Phase) && !podutil.IsTerminal(status.Phase) {
			klog.ErrorS(nil, "API server has the pod in a terminal phase, not writing a non-terminal one",
				"pod", klog.KObj(pod), "podUID", uid, "apiPhase", apiPod.Status.Phase, "phase", status.Phase)
			m.markSynced(uid, version, pod.ResourceVersion, apiPod, time.Time{})
			break
		}
		merged := mergeStatus(&apiPod.Status, &status)
		if statusEqual(apiPod.Status, merged) {
			m.markSynced(uid, version, pod.ResourceVersion, apiPod, time.Time{})
			break
		}
		patch, err := statusPatch(tgt.uid, &apiPod.Status, &merged)
		if err != nil {
			klog.ErrorS(err, "Unable to compute pod status patch", "pod", klog.KObj(pod), "podUID", uid)
			return
		}
		patched, err := pods.Patch(ctx, tgt.name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
		if apierrors.IsConflict(err) && attempt < 2 {
			klog.V(3).InfoS("Conflict writing pod status, reading the pod again", "pod", klog.KObj(pod), "podUID", uid)
			apiPod = nil
			continue
		}
		if apierrors.IsNotFound(err) {
			klog.V(3).InfoS("Pod is gone from the API server, status not written", "pod", klog.KObj(pod), "podUID", uid)
			m.markGone(uid)
			return
		}
		if err != nil {
			klog.ErrorS(err, "Unable to patch pod status", "pod", klog.KObj(pod), "podUID", uid)
			return
		}
		klog.V(3).InfoS("Patched pod status", "pod", klog.KObj(pod), "podUID", uid, "phase", merged.Phase, "patch", string(patch))
		apiPod = patched
		m.markSynced(uid, version, pod.ResourceVersion, apiPod, changedAt)
		break
	}

	if podutil.IsStaticPod(pod) || m.canDelete == nil || apiPod.DeletionTimestamp == nil || !m.canDelete(apiPod.DeepCopy()) {
		return
	}
	grace := int64(0)
	err := pods.Delete(ctx, tgt.name, metav1.DeleteOptions{
		GracePeriodSeconds: &grace,
		Preconditions:      &metav1.Preconditions{UID: &tgt.uid},
	})
	if err != nil && !apierrors.IsNotFound(err) {
		klog.ErrorS(err, "Unable to delete terminated pod", "pod", klog.KObj(pod), "podUID", uid)
		return
	}
	klog.V(2).InfoS("Deleted pod from the API server after its resources were reclaimed", "pod", klog.KObj(pod), "podUID", uid)
	m.markGone(uid)
}

// baseFor returns the newest copy of tgt's API object known without a request, or nil:
// for a static pod the mirror as the pod source last saw it, otherwise the newer of our
// last read or write and the caller's copy from the pod watch.
func (m *Manager) baseFor(uid types.UID, tgt target) *v1.Pod {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.statuses[uid]
	if !ok {
		return nil
	}
	cands := []*v1.Pod{e.apiPod}
	if podutil.IsStaticPod(e.pod) {
		if m.mirrors != nil {
			if mirror, ok := m.mirrors.MirrorPod(uid); ok {
				cands = append(cands, mirror)
			}
		}
	} else {
		cands = append(cands, e.pod)
	}
	var base *v1.Pod
	for _, p := range cands {
		if p == nil || p.UID != tgt.uid || p.ResourceVersion == "" {
			continue
		}
		if base == nil || newerVersion(p.ResourceVersion, base.ResourceVersion) {
			base = p
		}
	}
	return base
}

// newerVersion reports whether resourceVersion a is newer than b. Versions are opaque
// to clients in general; the API server's are etcd revisions, and one that does not
// parse as such is never taken as newer, so the base stays the copy we hold.
func newerVersion(a, b string) bool {
	av, aerr := strconv.ParseUint(a, 10, 64)
	bv, berr := strconv.ParseUint(b, 10, 64)
	return aerr == nil && berr == nil && av > bv
}

func (m *Manager) markSynced(uid types.UID, version uint64, examinedRV string, apiPod *v1.Pod, changedAt time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.statuses[uid]
	if !ok {
		return
	}
	e.apiPod = apiPod
	e.examinedRV = examinedRV
	if version > e.synced {
		e.synced = version
	}
	if !changedAt.IsZero() && m.metrics != nil {
		m.metrics.syncDuration.Observe(m.clk.Since(changedAt).Seconds())
	}
	if e.synced != e.version {
		// Changed again while we wrote; the duration of the next write counts from now.
		e.changedAt = m.clk.Now()
	}
}

// markGone stops syncing a pod whose API object no longer exists (or was replaced).
// A static pod's mirror is recreated by the mirror reconciler, so its status is kept
// pending and written to the next mirror instead.
func (m *Manager) markGone(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.statuses[uid]; ok && !podutil.IsStaticPod(e.pod) {
		e.deleted = true
		e.synced = e.version
	}
}

// isKubeletCondition: the condition types the node owns; others in the API object
// (set by the scheduler, controllers, eviction) are kept as they are.
func isKubeletCondition(t v1.PodConditionType) bool {
	switch t {
	case v1.PodReadyToStartContainers, v1.PodInitialized, v1.PodReady, v1.ContainersReady,
		v1.PodResizePending, v1.PodResizeInProgress:
		return true
	}
	return false
}

// mergeStatus returns the status to write: ours, with the API's foreign conditions,
// its PodScheduled condition and startTime, and the scheduler's and controllers' fields.
func mergeStatus(api, ours *v1.PodStatus) v1.PodStatus {
	out := *ours.DeepCopy()
	have := map[v1.PodConditionType]int{}
	for i, c := range out.Conditions {
		have[c.Type] = i
	}
	for _, c := range api.Conditions {
		i, inOurs := have[c.Type]
		switch {
		case c.Type == v1.PodScheduled && inOurs:
			out.Conditions[i] = *c.DeepCopy() // the scheduler's, not ours
		case !inOurs && !isKubeletCondition(c.Type):
			out.Conditions = append(out.Conditions, *c.DeepCopy())
		}
	}
	if api.StartTime != nil {
		out.StartTime = api.StartTime.DeepCopy()
	}
	if out.NominatedNodeName == "" {
		out.NominatedNodeName = api.NominatedNodeName
	}
	if len(out.ResourceClaimStatuses) == 0 {
		out.ResourceClaimStatuses = api.ResourceClaimStatuses
	}
	// Only report a terminal phase once no container can still be running, so nothing
	// acts on "Succeeded"/"Failed" (and deletes) while processes are alive.
	if podutil.IsTerminal(out.Phase) && !podutil.IsTerminal(api.Phase) && anyRunning(&out) {
		out.Phase = api.Phase
	}
	normalizeStatus(&out)
	return out
}

func anyRunning(s *v1.PodStatus) bool {
	for _, list := range [][]v1.ContainerStatus{s.InitContainerStatuses, s.ContainerStatuses, s.EphemeralContainerStatuses} {
		for _, c := range list {
			if c.State.Running != nil {
				return true
			}
		}
	}
	return false
}

// statusPatch is a strategic-merge patch from old to new; it carries metadata.uid so the
// API server refuses it for another pod of the same name.
func statusPatch(uid types.UID, old, new *v1.PodStatus) ([]byte, error) {
	oldJSON, err := json.Marshal(v1.Pod{Status: *old})
	if err != nil {
		return nil, fmt.Errorf("marshal old pod status: %w", err)
	}
	newJSON, err := json.Marshal(v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: uid}, Status: *new})
	if err != nil {
		return nil, fmt.Errorf("marshal new pod status: %w", err)
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(oldJSON, newJSON, v1.Pod{})
	if err != nil {
		return nil, fmt.Errorf("create pod status patch: %w", err)
	}
	return patch, nil
}

// carryTransitionTimes fills zero lastTransitionTimes: the old time while a condition's
// status is unchanged, now when it changed or is new. Times already set are kept.
func carryTransitionTimes(status, old *v1.PodStatus, now time.Time) {
	for i := range status.Conditions {
		c := &status.Conditions[i]
		if !c.LastTransitionTime.IsZero() {
			continue
		}
		c.LastTransitionTime = metav1.NewTime(now)
		for _, o := range old.Conditions {
			if o.Type == c.Type && o.Status == c.Status && !o.LastTransitionTime.IsZero() {
				c.LastTransitionTime = o.LastTransitionTime
			}
		}
	}
}

// statusEqual compares statuses as the API would store them, ignoring the conditions'
// probe and transition times (as upstream), and condition order.
func statusEqual(a, b v1.PodStatus) bool {
	return apiequality.Semantic.DeepEqual(forCompare(a), forCompare(b))
}

func forCompare(s v1.PodStatus) v1.PodStatus {
	s = *s.DeepCopy()
	normalizeStatus(&s)
	for i := range s.Conditions {
		s.Conditions[i].LastProbeTime = metav1.Time{}
		s.Conditions[i].LastTransitionTime = metav1.Time{}
	}
	sort.SliceStable(s.Conditions, func(i, j int) bool { return s.Conditions[i].Type < s.Conditions[j].Type })
	return s
}

// normalizeStatus truncates times to seconds (what the API stores) and orders
// container statuses as upstream (init containers stay in spec order), so a status
// read back from the API compares equal to ours.
func normalizeStatus(s *v1.PodStatus) {
	trunc := func(t *metav1.Time) {
		if t != nil && !t.IsZero() {
			*t = metav1.NewTime(t.Rfc3339Copy().Time)
		}
	}
	trunc(s.StartTime)
	for i := range s.Conditions {
		trunc(&s.Conditions[i].LastProbeTime)
		trunc(&s.Conditions[i].LastTransitionTime)
	}
	for _, list := range [][]v1.ContainerStatus{s.InitContainerStatuses, s.ContainerStatuses, s.EphemeralContainerStatuses} {
		for i := range list {
			c := &list[i]
			for _, st := range []*v1.ContainerState{&c.State, &c.LastTerminationState} {
				if st.Running != nil {
					trunc(&st.Running.StartedAt)
				}
				if st.Terminated != nil {
					trunc(&st.Terminated.StartedAt)
					trunc(&st.Terminated.FinishedAt)
				}
			}
		}
	}
	podstatus.SortContainerStatuses(s)
}

type metrics struct {
	syncDuration prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{syncDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
		Subsystem: "kubelet",
		Name:      "pod_status_sync_duration_seconds",
		Help:      "Duration in seconds to sync a pod status update: from the first change of the pod's status until the API server has it.",
		Buckets:   []float64{0.010, 0.050, 0.100, 0.500, 1, 5, 10, 20, 30, 45, 60},
	})}
	if err := reg.Register(m.syncDuration); err != nil {
		klog.ErrorS(err, "Unable to register pod status metrics")
	}
	return m
}
