package syncloop

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// wanted is a pod its source holds, syncing, nothing in flight, grace 30s.
func wanted(mod func(*podInputs)) podInputs {
	in := podInputs{Now: t0, Wanted: true, Grace: 30, Running: true, Present: true, Exited: true}
	if mod != nil {
		mod(&in)
	}
	return in
}

// gone is a pod removed from its source (or an orphan).
func gone(mod func(*podInputs)) podInputs {
	return wanted(func(in *podInputs) {
		in.Wanted, in.Deleted = false, true
		if mod != nil {
			mod(in)
		}
	})
}

// restarted is a removed pod back in its source under the same UID (Restart),
// its old life stopped and gone from the runtime, its goroutine exited.
func restarted(mod func(*podInputs)) podInputs {
	return wanted(func(in *podInputs) {
		in.Deleted, in.Restart, in.Running, in.Present = true, true, false, false
		if mod != nil {
			mod(in)
		}
	})
}

var errBoom = errors.New("boom")

func TestStep(t *testing.T) {
	for _, tc := range []struct {
		name     string
		w        podWork
		in       podInputs
		want     podWork
		wantActs []action
	}{
		// Creation: step decides whether a UID needs a worker at all.
		{
			name: "new pod starts syncing",
			in:   wanted(func(in *podInputs) { in.Running, in.Present, in.Exited = false, false, true }),
			want: podWork{State: stateSync, Op: opSync}, wantActs: []action{{Kind: actStartSync}},
		},
		{
			name: "admission rejected: finished, nothing to reclaim, no operation",
			in:   wanted(func(in *podInputs) { in.Rejected, in.Terminal, in.Running, in.Present = true, true, false, false }),
			want: podWork{State: stateFinished, Reclaimed: true, ReclaimedAt: t0},
		},
		{
			name: "admission rejected a pod that ran before a restart: stopped (not removed)",
			in:   wanted(func(in *podInputs) { in.Rejected, in.Terminal = true, true }),
			want: podWork{State: stateTerminating, Grace: 30, Op: opKill, OpGrace: 30}, wantActs: []action{{Kind: actKill, Grace: 30}},
		},
		{
			name: "orphan in the runtime: killed with the grace on its containers",
			in:   gone(func(in *podInputs) { in.Grace = 7 }),
			want: podWork{State: stateTerminating, Grace: 7, Op: opKill, OpGrace: 7}, wantActs: []action{{Kind: actKill, Grace: 7}},
		},
		{
			name: "orphan with nothing left in the runtime: no worker",
			in:   gone(func(in *podInputs) { in.Running, in.Present = false, false }),
			want: podWork{},
		},
		{
			name: "pod already terminal at start (restart): stopped, not synced",
			in:   wanted(func(in *podInputs) { in.Terminal = true }),
			want: podWork{State: stateTerminating, Grace: 30, Op: opKill, OpGrace: 30}, wantActs: []action{{Kind: actKill, Grace: 30}},
		},

		// Syncing.
		{
			name: "a woken idle worker syncs",
			w:    podWork{State: stateSync, RetryAt: at(time.Minute)},
			in:   wanted(func(in *podInputs) { in.Woken = true }),
			want: podWork{State: stateSync, Op: opSync}, wantActs: []action{{Kind: actStartSync}},
		},
		{
			name: "an update during a sync is kept for after it",
			w:    podWork{State: stateSync, Op: opSync},
			in:   wanted(func(in *podInputs) { in.Woken = true }),
			want: podWork{State: stateSync, Op: opSync, Due: true},
		},
		{
			name: "a sync that ends requeues itself",
			w:    podWork{State: stateSync, Op: opSync},
			in:   wanted(func(in *podInputs) { in.Done = &opResult{Op: opSync, Next: time.Minute} }),
			want: podWork{State: stateSync, RetryAt: at(time.Minute)}, wantActs: []action{{Kind: actRequeue, At: at(time.Minute)}},
		},
		{
			name: "a sync that ends with an update pending syncs again at once",
			w:    podWork{State: stateSync, Op: opSync, Due: true},
			in:   wanted(func(in *podInputs) { in.Done = &opResult{Op: opSync, Next: time.Minute} }),
			want: podWork{State: stateSync, Op: opSync}, wantActs: []action{{Kind: actStartSync}},
		},
		{
			name: "the resync comes",
			w:    podWork{State: stateSync, RetryAt: at(time.Minute)},
			in:   wanted(func(in *podInputs) { in.Now = at(time.Minute) }),
			want: podWork{State: stateSync, Op: opSync}, wantActs: []action{{Kind: actStartSync}},
		},
		{
			name: "not yet time: requeued again",
			w:    podWork{State: stateSync, RetryAt: at(time.Minute)},
			in:   wanted(nil),
			want: podWork{State: stateSync, RetryAt: at(time.Minute)}, wantActs: []action{{Kind: actRequeue, At: at(time.Minute)}},
		},

		// Termination requested (issue 14 item 2): the sync in flight is cancelled.
		{
			name: "deletion cancels the sync in flight; the kill waits for it to return",
			w:    podWork{State: stateSync, Op: opSync},
			in:   wanted(func(in *podInputs) { in.Deleted, in.Grace, in.Woken = true, 1, true }),
			want: podWork{State: stateTerminating, Grace: 1, Op: opSync, Cancelled: true, Due: true}, wantActs: []action{{Kind: actCancel}},
		},
		{
			name: "removal from the source cancels the sync in flight",
			w:    podWork{State: stateSync, Op: opSync},
			in:   gone(func(in *podInputs) { in.Woken = true }),
			want: podWork{State: stateTerminating, Grace: 30, Op: opSync, Cancelled: true, Due: true}, wantActs: []action{{Kind: actCancel}},
		},
		{
			name: "a cancelled sync is not cancelled twice",
			w:    podWork{State: stateTerminating, Grace: 1, Op: opSync, Cancelled: true, Due: true},
			in:   wanted(func(in *podInputs) { in.Deleted, in.Grace, in.Woken = true, 1, true }),
			want: podWork{State: stateTerminating, Grace: 1, Op: opSync, Cancelled: true, Due: true},
		},
		{
			name: "the cancelled sync returns: the kill starts",
			w:    podWork{State: stateTerminating, Grace: 1, Op: opSync, Cancelled: true, Due: true},
			in:   wanted(func(in *podInputs) { in.Deleted, in.Grace, in.Done = true, 1, &opResult{Op: opSync, Err: errBoom} }),
			want: podWork{State: stateTerminating, Grace: 1, Op: opKill, OpGrace: 1}, wantActs: []action{{Kind: actKill, Grace: 1}},
		},
		{
			name: "node-level kill (status fn) of an idle pod: killed with its grace",
			w:    podWork{State: stateSync, RetryAt: at(time.Minute)},
			in:   wanted(func(in *podInputs) { in.Killed, in.Grace, in.Woken = true, 5, true }),
			want: podWork{State: stateTerminating, Grace: 5, Op: opKill, OpGrace: 5}, wantActs: []action{{Kind: actKill, Grace: 5}},
		},
		{
			name: "node-level kill during a sync cancels it",
			w:    podWork{State: stateSync, Op: opSync},
			in:   wanted(func(in *podInputs) { in.Killed, in.Grace = true, 5 }),
			want: podWork{State: stateTerminating, Grace: 5, Op: opSync, Cancelled: true, Due: true}, wantActs: []action{{Kind: actCancel}},
		},
		{
			name: "terminal phase: terminating",
			w:    podWork{State: stateSync, RetryAt: at(time.Minute)},
			in:   wanted(func(in *podInputs) { in.Terminal = true }),
			want: podWork{State: stateTerminating, Grace: 30, Op: opKill, OpGrace: 30}, wantActs: []action{{Kind: actKill, Grace: 30}},
		},
		{
			name: "a sync that finds the pod terminal or its init failed: terminating",
			w:    podWork{State: stateSync, Op: opSync},
			in:   wanted(func(in *podInputs) { in.Done = &opResult{Op: opSync, Terminal: true} }),
			want: podWork{State: stateTerminating, Grace: 30, Op: opKill, OpGrace: 30}, wantActs: []action{{Kind: actKill, Grace: 30}},
		},

		// Active deadline.
		{
			name: "deadline ahead: requeued for it, also during a sync",
			w:    podWork{State: stateSync, Op: opSync},
			in:   wanted(func(in *podInputs) { in.ActiveDeadline = at(5 * time.Second) }),
			want: podWork{State: stateSync, Op: opSync}, wantActs: []action{{Kind: actRequeue, At: at(5 * time.Second)}},
		},
		{
			name:     "deadline exceeded: told, killed",
			w:        podWork{State: stateSync, RetryAt: at(time.Minute)},
			in:       wanted(func(in *podInputs) { in.ActiveDeadline = t0 }),
			want:     podWork{State: stateTerminating, Grace: 30, Deadline: true, Op: opKill, OpGrace: 30},
			wantActs: []action{{Kind: actDeadlineExceeded}, {Kind: actKill, Grace: 30}},
		},
		{
			name:     "deadline exceeded during a sync: told, sync cancelled",
			w:        podWork{State: stateSync, Op: opSync},
			in:       wanted(func(in *podInputs) { in.ActiveDeadline = at(-time.Second) }),
			want:     podWork{State: stateTerminating, Grace: 30, Deadline: true, Op: opSync, Cancelled: true, Due: true},
			wantActs: []action{{Kind: actDeadlineExceeded}, {Kind: actCancel}},
		},
		{
			name: "deadline past but the pod is being deleted anyway: no deadline status",
			w:    podWork{State: stateSync},
			in:   wanted(func(in *podInputs) { in.ActiveDeadline, in.Deleted = t0, true }),
			want: podWork{State: stateTerminating, Grace: 30, Op: opKill, OpGrace: 30}, wantActs: []action{{Kind: actKill, Grace: 30}},
		},

		// Terminating (issue 14 item 2: a shorter grace period restarts the kill).
		{
			name: "grace shrinks during the kill: the kill is cancelled",
			w:    podWork{State: stateTerminating, Grace: 30, Op: opKill, OpGrace: 30},
			in:   wanted(func(in *podInputs) { in.Deleted, in.Grace = true, 2 }),
			want: podWork{State: stateTerminating, Grace: 2, Op: opKill, OpGrace: 30, Cancelled: true}, wantActs: []action{{Kind: actCancel}},
		},
		{
			name: "the cancelled kill returns: killed again at once with the shorter grace",
			w:    podWork{State: stateTerminating, Grace: 2, Op: opKill, OpGrace: 30, Cancelled: true},
			in:   wanted(func(in *podInputs) { in.Deleted, in.Grace, in.Done = true, 2, &opResult{Op: opKill, Err: errBoom} }),
			want: podWork{State: stateTerminating, Grace: 2, Op: opKill, OpGrace: 2}, wantActs: []action{{Kind: actKill, Grace: 2}},
		},
		{
			name: "a longer grace never lengthens the kill",
			w:    podWork{State: stateTerminating, Grace: 2, Op: opKill, OpGrace: 2},
			in:   wanted(func(in *podInputs) { in.Deleted, in.Grace = true, 30 }),
			want: podWork{State: stateTerminating, Grace: 2, Op: opKill, OpGrace: 2},
		},
		{
			name: "kill failed: retried",
			w:    podWork{State: stateTerminating, Grace: 2, Op: opKill, OpGrace: 2},
			in:   wanted(func(in *podInputs) { in.Deleted, in.Grace, in.Done = true, 2, &opResult{Op: opKill, Err: errBoom} }),
			want: podWork{State: stateTerminating, Grace: 2, RetryAt: at(time.Second)}, wantActs: []action{{Kind: actRequeue, At: at(time.Second)}},
		},
		{
			name: "kill done but something still runs: retried",
			w:    podWork{State: stateTerminating, Grace: 2, Op: opKill, OpGrace: 2},
			in:   wanted(func(in *podInputs) { in.Deleted, in.Grace, in.Done = true, 2, &opResult{Op: opKill, Running: true} }),
			want: podWork{State: stateTerminating, Grace: 2, RetryAt: at(time.Second)}, wantActs: []action{{Kind: actRequeue, At: at(time.Second)}},
		},
		{
			name: "kill done: volumes next",
			w:    podWork{State: stateTerminating, Grace: 2, Op: opKill, OpGrace: 2},
			in:   wanted(func(in *podInputs) { in.Deleted, in.Grace, in.Running, in.Done = true, 2, false, &opResult{Op: opKill} }),
			want: podWork{State: stateTerminated, Grace: 2, Op: opTearDown}, wantActs: []action{{Kind: actTearDownVolumes}},
		},

		// Terminated and removal.
		{
			name: "volumes torn down of a deleted pod: removal next",
			w:    podWork{State: stateTerminated, Op: opTearDown},
			in:   gone(func(in *podInputs) { in.Running, in.Done = false, &opResult{Op: opTearDown} }),
			want: podWork{State: stateRemoving, Op: opRemove}, wantActs: []action{{Kind: actRemovePod}},
		},
		{
			name: "volumes torn down of a pod killed for the node: finished, containers kept",
			w:    podWork{State: stateTerminated, Op: opTearDown},
			in:   wanted(func(in *podInputs) { in.Killed, in.Running, in.Done = true, false, &opResult{Op: opTearDown} }),
			want: podWork{State: stateFinished},
		},
		{
			name: "teardown failed: retried",
			w:    podWork{State: stateTerminated, Op: opTearDown},
			in:   gone(func(in *podInputs) { in.Running, in.Done = false, &opResult{Op: opTearDown, Err: errBoom} }),
			want: podWork{State: stateTerminated, RetryAt: at(time.Second)}, wantActs: []action{{Kind: actRequeue, At: at(time.Second)}},
		},
		{
			name: "removal failed: retried",
			w:    podWork{State: stateRemoving, Op: opRemove},
			in:   gone(func(in *podInputs) { in.Running, in.Done = false, &opResult{Op: opRemove, Err: errBoom} }),
			want: podWork{State: stateRemoving, RetryAt: at(time.Second)}, wantActs: []action{{Kind: actRequeue, At: at(time.Second)}},
		},
		{
			name: "removal retry time: removed again",
			w:    podWork{State: stateRemoving, RetryAt: at(time.Second)},
			in:   gone(func(in *podInputs) { in.Now, in.Running = at(time.Second), false }),
			want: podWork{State: stateRemoving, Op: opRemove}, wantActs: []action{{Kind: actRemovePod}},
		},
		{
			name: "removal done: reclaimed; dropped only later, by housekeeping, once its goroutine exited",
			w:    podWork{State: stateRemoving, Op: opRemove},
			in: gone(func(in *podInputs) {
				in.Running, in.Present, in.Exited, in.Done = false, false, false, &opResult{Op: opRemove}
			}),
			want: podWork{State: stateFinished, Reclaimed: true, ReclaimedAt: t0},
		},
		{
			name: "a node-killed pod that is deleted later: removed then",
			w:    podWork{State: stateFinished},
			in:   wanted(func(in *podInputs) { in.Deleted, in.Running = true, false }),
			want: podWork{State: stateRemoving, Op: opRemove}, wantActs: []action{{Kind: actRemovePod}},
		},
		{
			name: "a finished pod still wanted stays, quiet",
			w:    podWork{State: stateFinished},
			in:   wanted(func(in *podInputs) { in.Terminal, in.Running, in.Woken = true, false, true }),
			want: podWork{State: stateFinished},
		},

		// Housekeeping (issue 14 item 1): never an orphan next to a worker, never a drop too early.
		{
			name: "removal in flight (finished-but-not-reclaimed on main): not dropped, nothing started",
			w:    podWork{State: stateRemoving, Op: opRemove},
			in:   gone(func(in *podInputs) { in.Running, in.Exited = false, false }),
			want: podWork{State: stateRemoving, Op: opRemove},
		},
		{
			name: "reclaimed, runtime still lists it briefly: kept, not an orphan",
			w:    podWork{State: stateFinished, Reclaimed: true, ReclaimedAt: t0},
			in:   gone(func(in *podInputs) { in.Now, in.Running = at(2*time.Second), false }),
			want: podWork{State: stateFinished, Reclaimed: true, ReclaimedAt: t0}, wantActs: []action{{Kind: actRequeue, At: at(leftoverGrace)}},
		},
		{
			name: "reclaimed, runtime still lists it long after: the same worker goes round again",
			w:    podWork{State: stateFinished, Reclaimed: true, ReclaimedAt: t0},
			in:   gone(func(in *podInputs) { in.Now, in.Grace = at(leftoverGrace), 3 }),
			want: podWork{State: stateTerminating, Grace: 3, Op: opKill, OpGrace: 3}, wantActs: []action{{Kind: actKill, Grace: 3}},
		},
		{
			name: "reclaimed, gone from the runtime, goroutine exited: dropped",
			w:    podWork{State: stateFinished, Reclaimed: true, ReclaimedAt: t0},
			in:   gone(func(in *podInputs) { in.Running, in.Present = false, false }),
			want: podWork{State: stateFinished, Reclaimed: true, ReclaimedAt: t0}, wantActs: []action{{Kind: actDrop}},
		},
		{
			name: "reclaimed and gone, but its goroutine is still returning: not yet",
			w:    podWork{State: stateFinished, Reclaimed: true, ReclaimedAt: t0},
			in:   gone(func(in *podInputs) { in.Running, in.Present, in.Exited = false, false, false }),
			want: podWork{State: stateFinished, Reclaimed: true, ReclaimedAt: t0},
		},
		{
			name: "rejected pod removed from its source: dropped",
			w:    podWork{State: stateFinished, Reclaimed: true, ReclaimedAt: t0},
			in:   gone(func(in *podInputs) { in.Terminal, in.Running, in.Present = true, false, false }),
			want: podWork{State: stateFinished, Reclaimed: true, ReclaimedAt: t0}, wantActs: []action{{Kind: actDrop}},
		},
		{
			name: "a deleted pod its source still holds is not dropped (no restart asked)",
			w:    podWork{State: stateFinished, Reclaimed: true, ReclaimedAt: t0},
			in:   wanted(func(in *podInputs) { in.Deleted, in.Running, in.Present = true, false, false }),
			want: podWork{State: stateFinished, Reclaimed: true, ReclaimedAt: t0},
		},

		// Back in its source under the same UID (a static pod's manifest put back):
		// the old life ends as it would have, then the worker gives way and the pod
		// starts again from none (upstream's restartRequested). On main the worker
		// stayed finished for ever and the pod never ran again.
		{
			name: "back in its source while being killed: the kill goes on",
			w:    podWork{State: stateTerminating, Grace: 30, Op: opKill, OpGrace: 30},
			in:   restarted(func(in *podInputs) { in.Woken = true }),
			want: podWork{State: stateTerminating, Grace: 30, Op: opKill, OpGrace: 30, Due: true},
		},
		{
			name: "back in its source while its volumes are torn down: removal still follows",
			w:    podWork{State: stateTerminated, Op: opTearDown},
			in:   restarted(func(in *podInputs) { in.Done = &opResult{Op: opTearDown} }),
			want: podWork{State: stateRemoving, Op: opRemove}, wantActs: []action{{Kind: actRemovePod}},
		},
		{
			name: "back in its source while RemovePod runs: not dropped, nothing started",
			w:    podWork{State: stateRemoving, Op: opRemove},
			in:   restarted(func(in *podInputs) { in.Exited = false }),
			want: podWork{State: stateRemoving, Op: opRemove},
		},
		{
			name: "back in its source, old life reclaimed, but its goroutine is still returning: not yet",
			w:    podWork{State: stateFinished, Reclaimed: true, ReclaimedAt: t0},
			in:   restarted(func(in *podInputs) { in.Exited = false }),
			want: podWork{State: stateFinished, Reclaimed: true, ReclaimedAt: t0},
		},
		{
			name: "back in its source, runtime still lists the old life: kept until it is gone",
			w:    podWork{State: stateFinished, Reclaimed: true, ReclaimedAt: t0},
			in:   restarted(func(in *podInputs) { in.Now, in.Present = at(time.Second), true }),
			want: podWork{State: stateFinished, Reclaimed: true, ReclaimedAt: t0}, wantActs: []action{{Kind: actRequeue, At: at(leftoverGrace)}},
		},
		{
			name: "back in its source, old life reclaimed and gone, goroutine exited: dropped for a new worker",
			w:    podWork{State: stateFinished, Reclaimed: true, ReclaimedAt: t0},
			in:   restarted(nil),
			want: podWork{State: stateFinished, Reclaimed: true, ReclaimedAt: t0}, wantActs: []action{{Kind: actDrop}},
		},
		{
			name: "the new worker starts from none: it syncs",
			in:   wanted(func(in *podInputs) { in.Running, in.Present = false, false }),
			want: podWork{State: stateSync, Op: opSync}, wantActs: []action{{Kind: actStartSync}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, acts := step(tc.w, tc.in)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("record (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantActs, acts); diff != "" {
				t.Errorf("actions (-want +got):\n%s", diff)
			}
		})
	}
}

// TestStepLifecycle walks a deleted pod through every state, as the runner
// would feed step, and checks the operations come one at a time, in order.
func TestStepLifecycle(t *testing.T) {
	var w podWork
	var ops []actionKind
	pass := func(in podInputs) {
		t.Helper()
		var acts []action
		w, acts = step(w, in)
		for _, a := range acts {
			switch a.Kind {
			case actStartSync, actKill, actTearDownVolumes, actRemovePod, actDrop:
				ops = append(ops, a.Kind)
			}
		}
	}
	pass(wanted(func(in *podInputs) { in.Running, in.Present = false, false }))
	pass(wanted(func(in *podInputs) { in.Exited, in.Done = false, &opResult{Op: opSync, Next: time.Minute} }))
	pass(wanted(func(in *podInputs) { in.Deleted, in.Grace, in.Woken = true, 1, true }))
	pass(wanted(func(in *podInputs) { in.Deleted, in.Grace, in.Exited, in.Done = true, 1, false, &opResult{Op: opKill} }))
	pass(wanted(func(in *podInputs) {
		in.Deleted, in.Running, in.Exited, in.Done = true, false, false, &opResult{Op: opTearDown}
	}))
	pass(gone(func(in *podInputs) { in.Running, in.Exited = false, false }))
	pass(gone(func(in *podInputs) {
		in.Running, in.Present, in.Exited, in.Done = false, false, false, &opResult{Op: opRemove}
	}))
	pass(gone(func(in *podInputs) { in.Running, in.Present = false, false }))
	want := []actionKind{actStartSync, actKill, actTearDownVolumes, actRemovePod, actDrop}
	if diff := cmp.Diff(want, ops); diff != "" {
		t.Errorf("operations (-want +got):\n%s", diff)
	}
}

func TestEffectiveGrace(t *testing.T) {
	for _, tc := range []struct {
		name     string
		spec     *int64
		deletion *int64
		override *int64
		want     int64
	}{
		{name: "default", want: 30},
		{name: "spec", spec: ptr.To[int64](10), want: 10},
		{name: "deletion grace wins over spec", spec: ptr.To[int64](10), deletion: ptr.To[int64](60), want: 60},
		{name: "override shorter than deletion", deletion: ptr.To[int64](60), override: ptr.To[int64](5), want: 5},
		{name: "deletion shorter than override", deletion: ptr.To[int64](2), override: ptr.To[int64](30), want: 2},
		{name: "override over spec", spec: ptr.To[int64](10), override: ptr.To[int64](40), want: 40},
		{name: "force delete: at least 1", deletion: ptr.To[int64](0), want: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &v1.Pod{Spec: v1.PodSpec{TerminationGracePeriodSeconds: tc.spec}}
			pod.DeletionGracePeriodSeconds = tc.deletion
			if got := effectiveGrace(pod, tc.override); got != tc.want {
				t.Errorf("effectiveGrace = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestKillTimeout(t *testing.T) {
	for grace, want := range map[int64]time.Duration{
		0: 10 * time.Second, 1: 10 * time.Second, 6: 10 * time.Second, 7: 10 * time.Second,
		8: 12 * time.Second, 30: 45 * time.Second, 31: 46 * time.Second,
	} {
		if got := killTimeout(grace); got != want {
			t.Errorf("killTimeout(%d) = %s, want %s", grace, got, want)
		}
	}
}
