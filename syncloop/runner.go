package syncloop

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/pleg"
)

// The runner: it passes a worker through step whenever something changes (an
// update, a runtime event, a tick, housekeeping, the end of an operation),
// applies the record step returns and carries out its actions. It owns
// cancellation: each operation runs under its own context, cancelled when step
// says so. It owns goroutines: an operation runs in the worker's one goroutine,
// which runs the next operation step starts and returns when there is none;
// a goroutine started later first waits for the previous one to return.

// event says why a worker is passed through step.
type event struct {
	woken    bool      // an update, a runtime event or a probe result
	done     *opResult // an operation ended (only from the worker's own goroutine)
	create   bool      // a new worker: it joins the loop only if step gives it a state
	rejected bool      // a new worker whose pod admission refused
}

// opRun is an operation step started, with the context that cancels it.
type opRun struct {
	op     opKind
	grace  int64
	ctx    context.Context
	cancel context.CancelFunc
}

// evaluate passes w through step with what the loop knows now and carries out
// the actions. From the worker's own goroutine (ev.done set) it returns the
// operation to run next; otherwise it starts a goroutine for it. It reports
// whether w is (still) the pod's worker.
func (l *Loop) evaluate(w *worker, ev event) (*opRun, bool) {
	if w.base.Err() != nil {
		return nil, false // the loop is stopping: no new work
	}
	// What other components know is read without the loop's lock (they may call
	// into the loop while holding theirs).
	now := l.deps.Clock.Now()
	rt, _ := l.deps.Cache.Get(w.uid)
	if rt == nil {
		rt = &pleg.PodStatus{UID: w.uid}
	}
	prev, havePrev := l.deps.Status.GetPodStatus(w.uid)

	l.mu.Lock()
	if cur := l.workers[w.uid]; (ev.create && cur != nil) || (!ev.create && cur != w) {
		// Never two workers per UID; and a dropped worker stays dropped.
		l.mu.Unlock()
		return nil, false
	}
	u := w.u
	if !havePrev {
		prev = u.pod.Status
	}
	_, wanted := l.pods[w.uid]
	in := podInputs{
		Now:            now,
		Wanted:         wanted,
		Deleted:        u.removed || u.pod.DeletionTimestamp != nil,
		Restart:        u.restart && wanted && u.pod.DeletionTimestamp == nil && !podutil.IsTerminal(u.pod.Status.Phase),
		Rejected:       ev.rejected,
		Terminal:       podutil.IsTerminal(prev.Phase),
		Killed:         u.statusFn != nil,
		ActiveDeadline: activeDeadline(u.pod, prev),
		Grace:          effectiveGrace(u.pod, u.grace),
		Woken:          ev.woken,
		Running:        anyRunning(rt),
		Present:        hasAnything(rt),
		Exited:         w.exited == nil || isClosed(w.exited),
		Done:           ev.done,
	}
	rec, acts := step(w.rec, in)
	if ev.create {
		if rec.State == stateNone {
			l.mu.Unlock()
			return nil, false
		}
		l.workers[w.uid] = w
	}
	from := w.rec.State
	w.rec = rec
	w.wakeAt = time.Time{}
	var run *opRun
	var deadline, dropped bool
	for _, a := range acts {
		switch a.Kind {
		case actStartSync, actKill, actTearDownVolumes, actRemovePod:
			ctx, cancel := context.WithCancel(w.base)
			run = &opRun{op: rec.Op, grace: a.Grace, ctx: ctx, cancel: cancel}
			w.cancel = cancel
		case actCancel:
			if w.cancel != nil {
				w.cancel()
			}
		case actRequeue:
			w.wakeAt = a.At
		case actDrop:
			delete(l.workers, w.uid)
			dropped = true
		case actDeadlineExceeded:
			deadline = true
		}
	}
	if rec.State >= stateTerminated && !w.stoppedClosed {
		w.stoppedClosed = true
		close(w.stopped)
	}
	if run != nil && ev.done == nil {
		l.spawn(w, run)
		run = nil
	}
	l.mu.Unlock()

	logger := klog.FromContext(w.base).WithValues("pod", klog.KObj(u.pod), "podUID", w.uid)
	if from != rec.State {
		logger.V(4).Info("Pod worker state changed", "from", from, "to", rec.State)
	}
	if from == stateSync && rec.State != stateSync {
		// The pod no longer counts against the node: a deferred resize may fit now.
		l.requestResizeRetry()
	}
	if deadline {
		logger.Info("Pod exceeded its active deadline; killing it", "activeDeadlineSeconds", *u.pod.Spec.ActiveDeadlineSeconds)
		l.deps.Recorder.Eventf(u.pod, v1.EventTypeNormal, reasonDeadlineExceeded, "%s", messageDeadlineExceeded)
	}
	if dropped {
		logger.V(4).Info("Pod worker forgotten")
	}
	return run, !dropped
}

// spawn starts w's goroutine for run. Called with l.mu held, while no
// operation of w is in flight (step starts none then).
func (l *Loop) spawn(w *worker, run *opRun) {
	prev, exited := w.exited, make(chan struct{})
	w.exited = exited
	l.workersWG.Add(1)
	go func() {
		defer l.workersWG.Done()
		defer close(exited)
		if prev != nil {
			<-prev // its last instructions after giving the worker up
		}
		for run != nil {
			start := l.deps.Clock.Now()
			res := l.runOp(w, run)
			run.cancel()
			l.metrics.workerDuration.WithLabelValues(opState(run.op).String()).Observe(l.deps.Clock.Since(start).Seconds())
			run, _ = l.evaluate(w, event{done: &res})
		}
	}()
}

func (l *Loop) runOp(w *worker, run *opRun) (res opResult) {
	u, _ := l.snapshot(w)
	logger := klog.FromContext(run.ctx).WithValues("pod", klog.KObj(u.pod), "podUID", w.uid)
	ctx := klog.NewContext(run.ctx, logger)
	if name := spanName(run.op); name != "" {
		var span trace.Span
		ctx, span = l.tracer.Start(ctx, name, trace.WithAttributes(podSpanAttributes(u.pod)...))
		defer func() { endSpan(span, res.Err) }()
	}
	switch run.op {
	case opSync:
		// The probe workers' context carries no span: they outlive this sync.
		return l.runSync(ctx, klog.NewContext(w.base, logger), w, u)
	case opKill:
		return l.runKill(ctx, w, run.grace)
	case opTearDown:
		return l.runTearDown(ctx, w)
	case opRemove:
		return l.runRemove(ctx, w)
	}
	return opResult{Op: run.op}
}

// snapshot returns w's latest update and record.
func (l *Loop) snapshot(w *worker) (update, podWork) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return w.u, w.rec
}

// opState is the state an operation serves (the worker duration metric's label).
func opState(op opKind) workState {
	for s := stateSync; s <= stateRemoving; s++ {
		if opFor(s) == op {
			return s
		}
	}
	return stateNone
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
