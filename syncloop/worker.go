package syncloop

import (
	"context"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/pleg"
	"github.com/nodelet/nodelet/podruntime"
	"github.com/nodelet/nodelet/podstatus"
)

// update is the latest word on a pod; a busy worker keeps only the newest.
type update struct {
	pod     *v1.Pod
	removed bool // gone from its source
	// restart: back in its source after it left (a static pod's manifest put
	// back under the same UID): the old life ends as it would have, then a new
	// worker starts the pod again.
	restart bool
	grace   *int64 // kill with this grace period instead of the pod's
	// statusFn adjusts the final status of a pod killed for a node-level reason
	// (shutdown, eviction): phase, reason, DisruptionTarget.
	statusFn func(*v1.PodStatus)
}

// merged returns u on top of prev: the removal flag and the shortest grace
// period stick, and so does a status function until a newer one comes. A
// restart sticks until a removal cancels it.
func (u update) merged(prev update) update {
	u.restart = (u.restart || prev.restart) && !u.removed
	u.removed = u.removed || prev.removed
	if prev.grace != nil && (u.grace == nil || *prev.grace < *u.grace) {
		u.grace = prev.grace
	}
	if u.statusFn == nil {
		u.statusFn = prev.statusFn
	}
	return u
}

// worker owns one pod UID. At most one goroutine works for it at a time: the
// one running its operations (see runner.go), each joined to the one before.
type worker struct {
	uid types.UID
	// base is the loop's context: operations run under contexts derived from it.
	base context.Context
	// stopped is closed once the pod's containers are stopped (KillPod waits on it).
	stopped chan struct{}

	// Guarded by Loop.mu.
	rec    podWork
	u      update
	wakeAt time.Time          // when the resync tick must pass the worker through step again
	cancel context.CancelFunc // cancels the operation in flight
	exited chan struct{}      // closed when the last operation goroutine returned; nil before the first
	// stoppedClosed says whether stopped is closed.
	stoppedClosed bool

	// Owned by the operation goroutine.
	lastSync  time.Time
	waiting   map[string]podstatus.Waiting
	firstSeen time.Time
	reported  bool
}

func newWorker(base context.Context, u update, loopStart time.Time) *worker {
	return &worker{uid: u.pod.UID, base: base, u: u, stopped: make(chan struct{}), lastSync: loopStart}
}

// statusFor waits (bounded) for a runtime status newer than the worker's last
// action, so an operation never acts on a view older than what it did itself.
func (l *Loop) statusFor(ctx context.Context, uid types.UID, after time.Time) *pleg.PodStatus {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := l.deps.Cache.GetNewerThan(cctx, uid, after)
	if err != nil || st == nil {
		st, _ = l.deps.Cache.Get(uid)
	}
	if st == nil {
		st = &pleg.PodStatus{UID: uid}
	}
	return st
}

func (l *Loop) previousStatus(pod *v1.Pod) v1.PodStatus {
	if s, ok := l.deps.Status.GetPodStatus(pod.UID); ok {
		return s
	}
	return *pod.Status.DeepCopy()
}

func (l *Loop) generate(pod *v1.Pod, st *pleg.PodStatus, prev v1.PodStatus, waiting map[string]podstatus.Waiting, terminal bool) v1.PodStatus {
	node := l.deps.Node()
	// The status speaks of the resources the pod was allocated (allocatedResources).
	allocated, _ := l.deps.Allocations.UpdatePodFromAllocation(pod)
	in := podstatus.Input{
		Pod: allocated, Runtime: st, Previous: prev, Waiting: waiting,
		HostIPs: node.HostIPs, RuntimeName: l.cfg.RuntimeName,
		TerminationMessage: podruntime.TerminationMessage,
		Now:                l.deps.Clock.Now(), Terminal: terminal,
		ResizeConditions: l.deps.Allocations.Conditions(pod.UID),
	}
	if act := l.deps.Actuated; act != nil {
		in.Actuated = func(name string) (v1.ResourceRequirements, bool) { return act.Container(pod.UID, name) }
	}
	if l.deps.Probes != nil {
		in.Probes = l.deps.Probes
	}
	return podstatus.Generate(in)
}

// setStatus stores status and tells the probers, which probe what it names.
// loopCtx is the loop's context: a status generated once it ended is dropped.
// nodelet's stop ends the loop and the probe workers at once, and the status
// manager, which stops after them, writes what it was given last: a status
// generated during the stop may carry what the stop tore down (a readiness
// result forgotten: Ready false) rather than what was observed (issue 33).
// Checked after the status was generated, so one that passes read nothing the
// stop changed: the teardown starts only once loopCtx has ended.
func (l *Loop) setStatus(loopCtx context.Context, pod *v1.Pod, status v1.PodStatus) {
	if loopCtx.Err() != nil {
		klog.FromContext(loopCtx).V(4).Info("Stopping: a pod status generated during the stop is not stored", "pod", klog.KObj(pod), "podUID", pod.UID)
		return
	}
	l.deps.Status.SetPodStatus(pod, status)
	if l.deps.Probes != nil {
		l.deps.Probes.UpdatePodStatus(pod, status)
	}
}

// Upstream's wording for pods past spec.activeDeadlineSeconds.
const (
	reasonDeadlineExceeded  = "DeadlineExceeded"
	messageDeadlineExceeded = "Pod was active on the node longer than the specified deadline"
)

// activeDeadline is when the pod must stop being active (zero: no deadline). It
// counts from the pod's status.startTime.
func activeDeadline(pod *v1.Pod, prev v1.PodStatus) time.Time {
	if pod.Spec.ActiveDeadlineSeconds == nil || prev.StartTime == nil || prev.StartTime.IsZero() {
		return time.Time{}
	}
	return prev.StartTime.Add(time.Duration(*pod.Spec.ActiveDeadlineSeconds) * time.Second)
}

func deadlineExceededStatus(s *v1.PodStatus) {
	s.Phase = v1.PodFailed
	s.Reason = reasonDeadlineExceeded
	s.Message = messageDeadlineExceeded
}

// resizeRecheck is how soon a sync that resized a pod is followed by another,
// which reports the resources the runtime now has.
const resizeRecheck = time.Second

// runSync drives the pod one step toward its spec and reports its status.
// loopCtx is the loop's: probe workers outlive the sync, and a status is
// stored only while it lasts (setStatus).
func (l *Loop) runSync(ctx, loopCtx context.Context, w *worker, u update) opResult {
	pod := u.pod
	logger := klog.FromContext(ctx)
	now := l.deps.Clock.Now()
	if w.firstSeen.IsZero() {
		w.firstSeen = now
	}
	st := l.statusFor(ctx, w.uid, w.lastSync)
	prev := l.previousStatus(pod)
	if l.deps.Probes != nil && !podutil.IsTerminal(prev.Phase) {
		// Before the status is generated: a container with a readiness probe
		// and no worker yet would be reported ready (after a restart, one the
		// API shows not ready would flap NotReady→Ready→NotReady); a worker
		// made now answers from its first result, or from the Ready carried
		// across the restart (prober.CarriedReady).
		l.deps.Probes.AddPod(loopCtx, pod)
	}
	// The runtime is driven toward the resources the pod was allocated, which
	// differ from its spec while a resize is pending.
	allocated, _ := l.deps.Allocations.UpdatePodFromAllocation(pod)
	l.updateResizeInProgress(ctx, allocated, st)
	status := l.generate(pod, st, prev, w.waiting, false)
	l.setStatus(loopCtx, pod, status)
	l.observeStart(w, pod, status)
	if podutil.IsTerminal(status.Phase) {
		logger.V(2).Info("Pod reached a terminal phase", "phase", status.Phase)
		return opResult{Op: opSync, Terminal: true}
	}
	if l.deps.Objects != nil {
		// Before the runtime reads them: the pod may reference new objects.
		l.deps.Objects.RegisterPod(pod)
	}
	res, err := l.deps.Runtime.SyncPod(ctx, allocated, st)
	w.lastSync = l.deps.Clock.Now()
	if res.Resized {
		// Only a fresh ContainerStatus shows the new resources.
		l.deps.PLEG.RequestReinspect(pod.UID)
	}
	if res.Changed || res.Resized {
		l.requestRelist()
	}
	if ctx.Err() != nil {
		// Cancelled because the pod is stopping: the kill comes next.
		logger.V(2).Info("Pod sync cancelled", "err", err)
		return opResult{Op: opSync, Err: err}
	}
	if res.Resized {
		l.metrics.resizeDuration.WithLabelValues(strconv.FormatBool(res.ResizeErr == nil)).Observe(float64(res.ResizeDuration.Milliseconds()))
	}
	if res.ResizeErr != nil {
		l.resizeFailed(allocated, res.ResizeErr)
	}
	if changedWaiting(w.waiting, res.Waiting) || res.ResizeErr != nil {
		w.waiting = res.Waiting
		l.setStatus(loopCtx, pod, l.generate(pod, st, status, w.waiting, false))
	}
	if res.InitFailed {
		return opResult{Op: opSync, Terminal: true}
	}
	next := jitter(l.cfg.SyncFrequency, 0.5)
	if err != nil {
		logger.Error(err, "Error syncing pod, will retry")
		next = jitter(10*time.Second, 0.5)
	}
	if res.RequeueAfter > 0 && res.RequeueAfter < next {
		next = res.RequeueAfter
	}
	if res.Resized && err == nil && next > resizeRecheck {
		// Report the actuated resize (and clear PodResizeInProgress) soon.
		next = resizeRecheck
	}
	return opResult{Op: opSync, Err: err, Next: next}
}

// runKill stops the pod's containers with grace and, once nothing runs, writes
// its final status.
func (l *Loop) runKill(ctx context.Context, w *worker, grace int64) opResult {
	u, rec := l.snapshot(w)
	pod := u.pod
	logger := klog.FromContext(ctx)
	if l.deps.Probes != nil {
		l.deps.Probes.StopLivenessAndStartup(pod.UID)
	}
	// A kill should not wait up to a relist period for a fresh runtime view.
	l.requestRelist()
	st := l.statusFor(ctx, w.uid, w.lastSync)
	prev := l.previousStatus(pod)
	if err := l.deps.Runtime.KillPod(ctx, pod, st, &grace); err != nil {
		if ctx.Err() != nil {
			logger.V(2).Info("Pod kill cancelled for a shorter grace period", "err", err)
		} else {
			logger.Error(err, "Error killing pod, will retry")
		}
		return opResult{Op: opKill, Err: err}
	}
	killed := l.deps.Clock.Now()
	w.lastSync = killed
	l.requestRelist()
	st = l.statusFor(ctx, w.uid, killed)
	if anyRunning(st) {
		return opResult{Op: opKill, Running: true}
	}
	// As upstream: claims are unprepared once nothing runs and before the
	// final status, so the claim is not deallocated under a running container.
	if dr := l.deps.DynamicResources; dr != nil {
		if err := dr.UnprepareResources(ctx, pod); err != nil {
			// Upstream has no event for it: the error fails the termination,
			// which is retried.
			logger.Error(err, "Failed to unprepare dynamic resources, will retry")
			return opResult{Op: opKill, Err: err}
		}
	}
	// A node-level kill that came while this one ran brings its status function.
	u, rec = l.snapshot(w)
	statusFn := u.statusFn
	if statusFn == nil && rec.Deadline {
		statusFn = deadlineExceededStatus
	}
	// A pod that stopped resizes nothing any more (upstream clears the conditions).
	l.deps.Allocations.ClearConditions(pod.UID)
	final := l.generate(pod, st, prev, nil, true)
	if statusFn != nil {
		// The node-level killer judges the phase the pod had before it was killed (as
		// upstream applies it before the kill): containers that exited 0 because they
		// were stopped do not make the pod Succeeded.
		generated := final.Phase
		final.Phase = prev.Phase
		statusFn(&final)
		if !podutil.IsTerminal(final.Phase) {
			final.Phase = generated
		}
	}
	deleting := u.removed || pod.DeletionTimestamp != nil
	if u.restart {
		// The pod is back in its source: its old life's final status must not
		// reach the new life (or its mirror pod).
		logger.V(2).Info("Pod terminated; it restarts once its old life is cleaned up", "phase", final.Phase)
		return opResult{Op: opKill}
	}
	if deleting || statusFn != nil || podutil.IsTerminal(final.Phase) || podutil.IsTerminal(prev.Phase) {
		l.deps.Status.SetPodStatus(pod, final)
	}
	logger.V(2).Info("Pod terminated", "phase", final.Phase)
	return opResult{Op: opKill}
}

// runTearDown stops the pod's probes and tears its volumes down.
func (l *Loop) runTearDown(ctx context.Context, w *worker) opResult {
	if l.deps.Probes != nil {
		l.deps.Probes.RemovePod(w.uid)
	}
	if err := l.deps.Volumes.TearDownPod(ctx, w.uid); err != nil {
		klog.FromContext(ctx).Error(err, "Error tearing down pod volumes, will retry")
		return opResult{Op: opTearDown, Err: err}
	}
	if l.deps.Objects != nil {
		// No sync of this life reads them any more.
		l.deps.Objects.UnregisterPod(w.uid)
	}
	return opResult{Op: opTearDown}
}

// runRemove removes the pod's containers, sandboxes and directories.
func (l *Loop) runRemove(ctx context.Context, w *worker) opResult {
	u, _ := l.snapshot(w)
	logger := klog.FromContext(ctx)
	st := l.statusFor(ctx, w.uid, w.lastSync)
	if err := l.deps.Runtime.RemovePod(ctx, w.uid, st, podruntime.PodLogDir(l.cfg.PodLogsDir, u.pod)); err != nil {
		logger.Error(err, "Error removing pod's containers, will retry")
		return opResult{Op: opRemove, Err: err}
	}
	w.lastSync = l.deps.Clock.Now()
	logger.V(2).Info("Pod resources reclaimed")
	// Tell the status manager now, so the API object goes without waiting for its batch.
	if s, ok := l.deps.Status.GetPodStatus(w.uid); ok {
		l.deps.Status.SetPodStatus(u.pod, s)
	}
	return opResult{Op: opRemove}
}

// observeStart records how long a pod took from first sight to all containers running.
func (l *Loop) observeStart(w *worker, pod *v1.Pod, status v1.PodStatus) {
	if w.reported || status.Phase != v1.PodRunning {
		return
	}
	for _, cs := range status.ContainerStatuses {
		if cs.State.Running == nil {
			return
		}
	}
	w.reported = true
	d := l.deps.Clock.Since(w.firstSeen)
	l.metrics.podStart.Observe(d.Seconds())
	klog.V(2).InfoS("Pod started", "pod", klog.KObj(pod), "duration", d)
}

func changedWaiting(a, b map[string]podstatus.Waiting) bool {
	if len(a) != len(b) {
		return true
	}
	for k, v := range a {
		if b[k] != v {
			return true
		}
	}
	return false
}
