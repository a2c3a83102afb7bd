package syncloop

import (
	"time"

	v1 "k8s.io/api/core/v1"
)

// The pod worker's lifecycle as a pure transition function: step takes a
// worker's record and a snapshot of what the loop knows of the pod and returns
// the next record and the actions to carry out, as raft's Ready does. The
// runner (runner.go) gathers the snapshot, applies the record and does the I/O;
// it decides nothing.

// workState is where a worker is in its pod's life. States only move forward,
// except that leftovers found long after a removal send a pod round again.
type workState int

const (
	stateNone        workState = iota // no worker yet: step decides whether one is needed
	stateSync                         // driving the pod toward its spec
	stateTerminating                  // stopping its containers
	stateTerminated                   // containers stopped; tearing its volumes down
	stateRemoving                     // removing its containers, sandboxes and directories
	stateFinished                     // nothing left to do
)

func (s workState) String() string {
	return [...]string{"none", "sync", "terminating", "terminated", "removing", "finished"}[s]
}

// opKind is a worker's one piece of I/O: each state but finished has one.
type opKind int

const (
	opNone     opKind = iota
	opSync            // podruntime SyncPod and the pod's status
	opKill            // podruntime KillPod and the final status
	opTearDown        // the pod's volumes and probes
	opRemove          // podruntime RemovePod
)

func (o opKind) String() string {
	return [...]string{"none", "sync", "kill", "teardown", "remove"}[o]
}

func opFor(s workState) opKind {
	switch s {
	case stateSync:
		return opSync
	case stateTerminating:
		return opKill
	case stateTerminated:
		return opTearDown
	case stateRemoving:
		return opRemove
	}
	return opNone
}

// podWork is a worker's record; step alone changes it.
type podWork struct {
	State workState
	// Op is the operation in flight (opNone: idle); OpGrace the grace period a
	// kill in flight uses; Cancelled that its context was cancelled.
	Op        opKind
	OpGrace   int64
	Cancelled bool
	// Grace is the grace period once terminating; it only shrinks.
	Grace int64
	// Due asks for the state's operation as soon as the worker is idle;
	// RetryAt for it at that time (zero: not scheduled).
	Due     bool
	RetryAt time.Time
	// Deadline: terminating because spec.activeDeadlineSeconds passed.
	Deadline bool
	// Reclaimed: the pod's containers, sandboxes and directories are removed
	// (or it never had any), at ReclaimedAt.
	Reclaimed   bool
	ReclaimedAt time.Time
}

// podInputs is what step knows of the world when it runs.
type podInputs struct {
	Now time.Time
	// Wanted: a pod source holds the pod. Deleted: it left its source, has a
	// deletionTimestamp, or is an orphan. Restart: a source holds it again
	// after it left (a static pod manifest put back under the same UID), and
	// the pod object is neither terminal nor being deleted: once the old life
	// is finished and reclaimed and its goroutine exited, the worker is dropped
	// and housekeeping starts the pod again from none (upstream's
	// restartRequested).
	Wanted, Deleted, Restart bool
	// Rejected: admission refused the pod (only asked of a new worker).
	Rejected bool
	// Terminal: the pod's phase is Succeeded or Failed.
	Terminal bool
	// Killed: a node-level kill (shutdown, eviction) asked to stop the pod,
	// with the function that sets its final status.
	Killed bool
	// ActiveDeadline is when spec.activeDeadlineSeconds runs out (zero: none).
	ActiveDeadline time.Time
	// Grace is the grace period the pod would be killed with now: the smallest
	// of its deletion grace period and a node-level override, else its spec's.
	Grace int64
	// Woken: an update, a runtime event or a probe result asks for a pass.
	Woken bool
	// Running: a container runs (or is created) or a sandbox is ready.
	// Present: the runtime lists anything of the pod at all.
	Running, Present bool
	// Exited: no goroutine of the worker is left.
	Exited bool
	// Done is the result of the operation that just ended, if any.
	Done *opResult
}

// opResult is how an operation ended.
type opResult struct {
	Op  opKind
	Err error
	// Terminal (sync): the pod reached a terminal phase or failed for good.
	Terminal bool
	// Next (sync): when to sync again.
	Next time.Duration
	// Running (kill): something still runs after the kill.
	Running bool
}

// actionKind is what the runner is asked to do.
type actionKind int

const (
	actStartSync        actionKind = iota // run opSync under a new context
	actKill                               // run opKill with Grace under a new context
	actTearDownVolumes                    // run opTearDown
	actRemovePod                          // run opRemove
	actCancel                             // cancel the operation in flight
	actRequeue                            // pass again at At
	actDrop                               // forget the worker
	actDeadlineExceeded                   // tell (event, log) that the active deadline passed
)

func (a actionKind) String() string {
	return [...]string{"StartSync", "Kill", "TearDownVolumes", "RemovePod", "Cancel", "Requeue", "Drop", "DeadlineExceeded"}[a]
}

type action struct {
	Kind  actionKind
	Grace int64     // actKill
	At    time.Time // actRequeue
}

// retryPeriod is how soon a failed kill, teardown or removal is tried again.
const retryPeriod = time.Second

// leftoverGrace is how long a removed pod may still be listed by the runtime
// (a relist lags behind the removal) before the worker removes it again.
const leftoverGrace = 10 * time.Second

// step is the worker's transition function.
func step(w podWork, in podInputs) (podWork, []action) {
	var acts []action
	if w.State == stateNone {
		switch {
		case in.Wanted && in.Rejected && !in.Present:
			// Nothing ran and nothing will: the worker only keeps the UID known.
			return podWork{State: stateFinished, Reclaimed: true, ReclaimedAt: in.Now}, nil
		case in.Wanted, in.Present:
			// A wanted pod starts syncing; an orphan (or a rejected pod that
			// ran before) goes straight on to terminating below.
			w = podWork{State: stateSync, Due: true}
		default:
			return w, nil // nothing to own
		}
	}
	if in.Woken {
		w.Due = true
	}
	if d := in.Done; d != nil {
		w = finish(w, *d, in)
	}

	terminate := in.Deleted || !in.Wanted || in.Terminal || in.Killed || in.Rejected || (in.Done != nil && in.Done.Terminal)
	deadline := !in.ActiveDeadline.IsZero() && !in.Now.Before(in.ActiveDeadline)
	if w.State == stateSync && (terminate || deadline) {
		w.State, w.Grace, w.Due, w.RetryAt = stateTerminating, in.Grace, true, time.Time{}
		if !terminate {
			w.Deadline = true
			acts = append(acts, action{Kind: actDeadlineExceeded})
		}
		if w.Op == opSync && !w.Cancelled {
			// A sync may wait for ever (a postStart hook, an image pull, a pull
			// slot): the kill must not wait for it.
			w.Cancelled = true
			acts = append(acts, action{Kind: actCancel})
		}
	}
	if w.State == stateTerminating && in.Grace < w.Grace {
		w.Grace = in.Grace
		if w.Op == opKill && w.OpGrace > w.Grace && !w.Cancelled {
			// The kill in flight waits longer than now allowed: start over.
			w.Cancelled = true
			acts = append(acts, action{Kind: actCancel})
		}
	}
	if w.State == stateFinished && in.Deleted && !w.Reclaimed {
		w.State, w.Due = stateRemoving, true
	}
	if w.State == stateFinished && w.Reclaimed && in.Deleted && in.Present && in.Now.Sub(w.ReclaimedAt) >= leftoverGrace {
		// Still listed long after the removal: something was left (or came
		// back). The same worker goes round again; a second one never starts.
		w.State, w.Reclaimed, w.ReclaimedAt, w.Grace, w.Due = stateTerminating, false, time.Time{}, in.Grace, true
	}

	if w.Op == opNone && (w.Due || (!w.RetryAt.IsZero() && !in.Now.Before(w.RetryAt))) {
		w.Due, w.RetryAt = false, time.Time{}
		switch op := opFor(w.State); op {
		case opSync:
			w.Op = op
			acts = append(acts, action{Kind: actStartSync})
		case opKill:
			w.Op, w.OpGrace = op, w.Grace
			acts = append(acts, action{Kind: actKill, Grace: w.Grace})
		case opTearDown:
			w.Op = op
			acts = append(acts, action{Kind: actTearDownVolumes})
		case opRemove:
			w.Op = op
			acts = append(acts, action{Kind: actRemovePod})
		}
	}

	if at := wakeAt(w, in); !at.IsZero() {
		acts = append(acts, action{Kind: actRequeue, At: at})
	}
	if w.State == stateFinished && w.Op == opNone && in.Exited && w.Reclaimed && !in.Present && (!in.Wanted || in.Restart) {
		acts = append(acts, action{Kind: actDrop})
	}
	return w, acts
}

// finish records how the operation in flight ended. A result only moves the
// state it was run for: a sync cancelled because the pod is terminating ends in
// terminating already.
func finish(w podWork, d opResult, in podInputs) podWork {
	cancelled := w.Cancelled
	w.Op, w.OpGrace, w.Cancelled = opNone, 0, false
	if opFor(w.State) != d.Op {
		return w
	}
	switch d.Op {
	case opSync:
		w.RetryAt = in.Now.Add(d.Next)
	case opKill:
		switch {
		case cancelled:
			w.Due = true // again at once, with the shorter grace period
		case d.Err != nil || d.Running:
			w.RetryAt = in.Now.Add(retryPeriod)
		default:
			w.State, w.Due = stateTerminated, true
		}
	case opTearDown:
		switch {
		case d.Err != nil:
			w.RetryAt = in.Now.Add(retryPeriod)
		case in.Deleted:
			w.State, w.Due = stateRemoving, true
		default:
			w.State = stateFinished
		}
	case opRemove:
		if d.Err != nil {
			w.RetryAt = in.Now.Add(retryPeriod)
			break
		}
		w.State, w.Reclaimed, w.ReclaimedAt = stateFinished, true, in.Now
	}
	return w
}

// wakeAt is when the runner must pass again without being asked: a retry or
// resync, the active deadline of a syncing pod (also with a sync in flight, which
// the deadline cancels), or the end of a removed pod's leftover grace.
func wakeAt(w podWork, in podInputs) time.Time {
	var at time.Time
	earliest := func(t time.Time) {
		if !t.IsZero() && (at.IsZero() || t.Before(at)) {
			at = t
		}
	}
	if w.Op == opNone {
		earliest(w.RetryAt)
	}
	if w.State == stateSync {
		earliest(in.ActiveDeadline)
	}
	if w.State == stateFinished && w.Reclaimed && in.Deleted && in.Present {
		earliest(w.ReclaimedAt.Add(leftoverGrace))
	}
	return at
}

// effectiveGrace is the grace period a terminating pod is killed with: the
// smaller of the API's deletion grace period and a node-level override, else
// the spec's (30s by default); never below 1s, as upstream.
func effectiveGrace(pod *v1.Pod, override *int64) int64 {
	g := int64(-1)
	if pod.DeletionGracePeriodSeconds != nil {
		g = *pod.DeletionGracePeriodSeconds
	}
	if override != nil && (g < 0 || *override < g) {
		g = *override
	}
	if g < 0 {
		g = 30
		if pod.Spec.TerminationGracePeriodSeconds != nil {
			g = *pod.Spec.TerminationGracePeriodSeconds
		}
	}
	return max(g, 1)
}

// killTimeout bounds how long a node-level kill waits for the pod to stop: one
// and a half grace periods, at least 10s for the runtime's SIGKILL round trip
// (upstream's bound).
func killTimeout(grace int64) time.Duration {
	return time.Duration(max(grace+grace/2, 10)) * time.Second
}
