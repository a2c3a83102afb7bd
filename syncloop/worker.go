package syncloop

import (
	"context"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pleg"
	"github.com/nodelet/nodelet/podruntime"
	"github.com/nodelet/nodelet/podstatus"
)

type workState int

const (
	stateSync        workState = iota // driving the pod toward its spec
	stateTerminating                  // stopping its containers
	stateTerminated                   // containers stopped; cleaning up
	stateFinished                     // nothing left to do
)

func (s workState) String() string {
	return [...]string{"sync", "terminating", "terminated", "finished"}[s]
}

// update is the latest word on a pod; a busy worker keeps only the newest.
type update struct {
	pod     *v1.Pod
	removed bool   // gone from its source
	grace   *int64 // kill with this grace period instead of the pod's
	// statusFn adjusts the final status of a pod killed for a node-level reason
	// (shutdown, eviction): phase, reason, DisruptionTarget.
	statusFn func(*v1.PodStatus)
}

// worker owns one pod UID. Its goroutine is the only one that syncs that pod.
type worker struct {
	uid  types.UID
	wake chan struct{}
	done chan struct{}
	// stopped is closed once the pod's containers are stopped (terminated or finished).
	stopped     chan struct{}
	stoppedOnce sync.Once

	mu        sync.Mutex
	pending   *update
	current   *update
	state     workState
	nextSync  time.Time
	reclaimed bool

	// Owned by the worker goroutine.
	lastSync  time.Time
	waiting   map[string]podstatus.Waiting
	firstSeen time.Time
	reported  bool
}

func newWorker(uid types.UID, loopStart time.Time) *worker {
	return &worker{uid: uid, wake: make(chan struct{}, 1), done: make(chan struct{}), stopped: make(chan struct{}), lastSync: loopStart}
}

func (w *worker) lock()   { w.mu.Lock() }
func (w *worker) unlock() { w.mu.Unlock() }

// update records u, keeping the removal flag and the shortest grace period seen.
func (w *worker) update(u *update) {
	w.lock()
	for _, prev := range []*update{w.pending, w.current} {
		if prev == nil {
			continue
		}
		u.removed = u.removed || prev.removed
		if prev.grace != nil && (u.grace == nil || *prev.grace < *u.grace) {
			u.grace = prev.grace
		}
		if u.statusFn == nil {
			u.statusFn = prev.statusFn
		}
	}
	w.pending = u
	w.unlock()
	w.wakeSync()
}

func (w *worker) wakeSync() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *worker) take() *update {
	w.lock()
	defer w.unlock()
	if w.pending != nil {
		w.current, w.pending = w.pending, nil
	}
	return w.current
}

func (w *worker) due(now time.Time) bool {
	w.lock()
	defer w.unlock()
	return !w.nextSync.IsZero() && !now.Before(w.nextSync) && w.state != stateFinished
}

func (w *worker) requeue(at time.Time) {
	w.lock()
	w.nextSync = at
	w.unlock()
}

func (w *worker) getState() workState {
	w.lock()
	defer w.unlock()
	return w.state
}

func (w *worker) setState(s workState) {
	w.lock()
	w.state = s
	w.unlock()
}

func (w *worker) active() bool {
	w.lock()
	defer w.unlock()
	return w.state == stateSync
}

func (w *worker) finished() bool { return w.getState() == stateFinished }

func (w *worker) isReclaimed() bool {
	w.lock()
	defer w.unlock()
	return w.reclaimed
}

func (w *worker) markStopped() { w.stoppedOnce.Do(func() { close(w.stopped) }) }

func (w *worker) stop() {
	select {
	case <-w.done:
	default:
		close(w.done)
	}
}

func (l *Loop) runWorker(ctx context.Context, w *worker) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.done:
			return
		case <-w.wake:
		}
		u := w.take()
		if u == nil {
			continue
		}
		start := l.deps.Clock.Now()
		l.syncWorker(ctx, w, u)
		l.metrics.workerDuration.WithLabelValues(w.getState().String()).Observe(l.deps.Clock.Since(start).Seconds())
	}
}

// statusFor waits (bounded) for a runtime status newer than the worker's last
// action, so a sync never acts on a view older than what it did itself.
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
	in := podstatus.Input{
		Pod: pod, Runtime: st, Previous: prev, Waiting: waiting,
		HostIPs: node.HostIPs, RuntimeName: l.cfg.RuntimeName,
		TerminationMessage: podruntime.TerminationMessage,
		Now:                l.deps.Clock.Now(), Terminal: terminal,
	}
	if l.deps.Probes != nil {
		in.Probes = l.deps.Probes
	}
	return podstatus.Generate(in)
}

// setStatus stores status and tells the probers, which probe what it names.
func (l *Loop) setStatus(pod *v1.Pod, status v1.PodStatus) {
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

// deadlineLeft returns how long the pod may still be active, and whether it has
// a deadline at all. The deadline counts from the pod's status.startTime.
func deadlineLeft(pod *v1.Pod, prev v1.PodStatus, now time.Time) (time.Duration, bool) {
	if pod.Spec.ActiveDeadlineSeconds == nil || prev.StartTime == nil || prev.StartTime.IsZero() {
		return 0, false
	}
	return prev.StartTime.Add(time.Duration(*pod.Spec.ActiveDeadlineSeconds) * time.Second).Sub(now), true
}

func deadlineExceededStatus(s *v1.PodStatus) {
	s.Phase = v1.PodFailed
	s.Reason = reasonDeadlineExceeded
	s.Message = messageDeadlineExceeded
}

func (l *Loop) syncWorker(ctx context.Context, w *worker, u *update) {
	pod := u.pod
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(pod), "podUID", pod.UID)
	ctx = klog.NewContext(ctx, logger)
	now := l.deps.Clock.Now()
	if w.firstSeen.IsZero() {
		w.firstSeen = now
	}
	deleting := u.removed || pod.DeletionTimestamp != nil
	if deleting || u.grace != nil {
		// A kill should not wait up to a relist period for a fresh runtime view.
		l.requestRelist()
	}
	st := l.statusFor(ctx, w.uid, w.lastSync)
	prev := l.previousStatus(pod)

	state := w.getState()
	if state >= stateTerminated {
		w.markStopped()
	}
	if state == stateSync && !deleting && u.statusFn == nil && !podstatus.IsTerminal(prev.Phase) {
		if left, ok := deadlineLeft(pod, prev, now); ok && left <= 0 {
			logger.Info("Pod exceeded its active deadline; killing it", "activeDeadlineSeconds", *pod.Spec.ActiveDeadlineSeconds)
			l.deps.Recorder.Eventf(pod, v1.EventTypeNormal, reasonDeadlineExceeded, "%s", messageDeadlineExceeded)
			u.statusFn = deadlineExceededStatus
		}
	}
	if state == stateSync && (deleting || u.grace != nil || u.statusFn != nil || podstatus.IsTerminal(prev.Phase)) {
		state = stateTerminating
		w.setState(state)
		if l.deps.Probes != nil {
			l.deps.Probes.StopLivenessAndStartup(pod.UID)
		}
	}
	switch state {
	case stateSync:
		status := l.generate(pod, st, prev, w.waiting, false)
		l.setStatus(pod, status)
		l.observeStart(w, pod, status)
		if podstatus.IsTerminal(status.Phase) {
			logger.V(2).Info("Pod reached a terminal phase", "phase", status.Phase)
			w.setState(stateTerminating)
			w.requeue(now)
			w.wakeSync()
			return
		}
		if l.deps.Probes != nil {
			l.deps.Probes.AddPod(ctx, pod)
		}
		res, err := l.deps.Runtime.SyncPod(ctx, pod, st)
		w.lastSync = l.deps.Clock.Now()
		if res.Changed {
			l.requestRelist()
		}
		if changedWaiting(w.waiting, res.Waiting) {
			w.waiting = res.Waiting
			l.setStatus(pod, l.generate(pod, st, status, w.waiting, false))
		}
		if res.InitFailed {
			w.setState(stateTerminating)
			w.wakeSync()
			return
		}
		next := jitter(l.cfg.SyncFrequency, 0.5)
		if err != nil {
			logger.Error(err, "Error syncing pod, will retry")
			next = jitter(10*time.Second, 0.5)
		}
		if res.RequeueAfter > 0 && res.RequeueAfter < next {
			next = res.RequeueAfter
		}
		if left, ok := deadlineLeft(pod, status, w.lastSync); ok && left < next {
			next = max(left, 0)
		}
		w.requeue(w.lastSync.Add(next))

	case stateTerminating:
		if err := l.deps.Runtime.KillPod(ctx, pod, st, u.grace); err != nil {
			logger.Error(err, "Error killing pod, will retry")
			w.requeue(l.deps.Clock.Now().Add(time.Second))
			return
		}
		killed := l.deps.Clock.Now()
		w.lastSync = killed
		l.requestRelist()
		st = l.statusFor(ctx, w.uid, killed)
		if anyRunning(st) {
			w.requeue(l.deps.Clock.Now().Add(time.Second))
			return
		}
		final := l.generate(pod, st, prev, nil, true)
		if u.statusFn != nil {
			// The node-level killer judges the phase the pod had before it was killed (as
			// upstream applies it before the kill): containers that exited 0 because they
			// were stopped do not make the pod Succeeded.
			generated := final.Phase
			final.Phase = prev.Phase
			u.statusFn(&final)
			if !podstatus.IsTerminal(final.Phase) {
				final.Phase = generated
			}
		}
		if deleting || u.statusFn != nil || podstatus.IsTerminal(final.Phase) || podstatus.IsTerminal(prev.Phase) {
			l.deps.Status.SetPodStatus(pod, final)
		}
		w.markStopped()
		logger.V(2).Info("Pod terminated", "phase", final.Phase)
		w.setState(stateTerminated)
		fallthrough

	case stateTerminated:
		if l.deps.Probes != nil {
			l.deps.Probes.RemovePod(pod.UID)
		}
		if err := l.deps.Volumes.TearDownPod(ctx, pod.UID); err != nil {
			logger.Error(err, "Error tearing down pod volumes, will retry")
			w.requeue(l.deps.Clock.Now().Add(time.Second))
			return
		}
		w.setState(stateFinished)
		fallthrough

	case stateFinished:
		if deleting && !w.isReclaimed() {
			if err := l.deps.Runtime.RemovePod(ctx, pod.UID, st, podruntime.PodLogDir(l.cfg.PodLogsDir, pod)); err != nil {
				logger.Error(err, "Error removing pod's containers, will retry")
				w.requeue(l.deps.Clock.Now().Add(time.Second))
				return
			}
			w.lock()
			w.reclaimed = true
			w.nextSync = time.Time{}
			w.unlock()
			logger.V(2).Info("Pod resources reclaimed")
			// Tell the status manager now, so the API object goes without waiting for its batch.
			if s, ok := l.deps.Status.GetPodStatus(pod.UID); ok {
				l.deps.Status.SetPodStatus(pod, s)
			}
		}
	}
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
