package syncloop

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/testsupport/eventually"
)

// countingPLEG counts the relists asked of the PLEG.
type countingPLEG struct {
	PLEG
	relists atomic.Int64
}

func (c *countingPLEG) Relist(ctx context.Context) {
	c.relists.Add(1)
	c.PLEG.Relist(ctx)
}

// While the evented PLEG follows the runtime's events, a pod's kill asks for
// no relist (the events bring the change, as upstream's); with the generic
// PLEG, or the evented one fallen back to relisting, it does. Issue 20: in
// evented mode nodelet relisted 5x as often as the kubelet.
func TestRelistRequestsFollowPLEGMode(t *testing.T) {
	for name, tc := range map[string]struct {
		eventsInUse func() bool
		want        bool
	}{
		"generic":          {nil, true},
		"evented fallback": {func() bool { return false }, true},
		"evented":          {func() bool { return true }, false},
	} {
		t.Run(name, func(t *testing.T) {
			s := newStepLoop(t)
			counter := &countingPLEG{PLEG: s.deps.PLEG}
			s.deps.PLEG = counter
			s.deps.EventsInUse = tc.eventsInUse
			if tc.want {
				// The loop's relister, so the requests become relists.
				ctx, cancel := context.WithCancel(s.ctx)
				var wg sync.WaitGroup
				wg.Go(func() { s.fastRelists(ctx) })
				defer func() { cancel(); wg.Wait() }()
			}

			pod := newPod("uid-relist", "relist")
			s.addSynced(t, pod)
			g := s.holdRemovePod(t)
			s.remove(pod)
			// The kill is done once RemovePod runs: every relist it asked for is queued.
			waitClosed(t, g.entered, "RemovePod")
			if tc.want {
				eventually.True(t, "a relist after the kill", func() bool {
					s.clk.Step(50 * time.Millisecond)
					return counter.relists.Load() > 0
				})
				return
			}
			// Nothing drains the queue here: a request would still be in it.
			if len(s.relistNow) != 0 {
				t.Fatal("a relist is queued in evented mode")
			}
			if n := counter.relists.Load(); n != 0 {
				t.Fatalf("%d relists asked for in evented mode, want 0", n)
			}
		})
	}
}
