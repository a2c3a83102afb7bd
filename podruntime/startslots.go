package podruntime

import (
	"context"
	"slices"
	"sync"
)

// startSlots bounds the runtime's sandbox and container creations at once. Waiting
// container creations go before waiting sandbox creations: a pod whose sandbox exists
// finishes starting before another pod's sandbox is begun, so under a burst pods come
// up one after another, as a CRI client starting them in turns would, instead of all
// sandboxes first and every container last.
type startSlots struct {
	mu        sync.Mutex
	free      int
	unbounded bool
	// Waiters in arrival order; a waiter's channel is closed when it gets its slot.
	containers, sandboxes []chan struct{}
}

func newStartSlots(n int) *startSlots {
	return &startSlots{free: n, unbounded: n <= 0}
}

// acquire waits for a slot; container says the caller creates a container (first in
// line) rather than a sandbox. It returns the slot's release, or ctx's error.
func (s *startSlots) acquire(ctx context.Context, container bool) (release func(), err error) {
	if s.unbounded {
		return func() {}, nil
	}
	s.mu.Lock()
	if s.free > 0 && len(s.containers) == 0 && (container || len(s.sandboxes) == 0) {
		s.free--
		s.mu.Unlock()
		return s.release, nil
	}
	ch := make(chan struct{})
	if container {
		s.containers = append(s.containers, ch)
	} else {
		s.sandboxes = append(s.sandboxes, ch)
	}
	s.mu.Unlock()
	select {
	case <-ch:
		return s.release, nil
	case <-ctx.Done():
		s.mu.Lock()
		defer s.mu.Unlock()
		if i := slices.Index(s.containers, ch); i >= 0 {
			s.containers = slices.Delete(s.containers, i, i+1)
			return nil, ctx.Err()
		}
		if i := slices.Index(s.sandboxes, ch); i >= 0 {
			s.sandboxes = slices.Delete(s.sandboxes, i, i+1)
			return nil, ctx.Err()
		}
		// Granted as ctx ended: hand the slot on.
		s.releaseLocked()
		return nil, ctx.Err()
	}
}

func (s *startSlots) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releaseLocked()
}

func (s *startSlots) releaseLocked() {
	switch {
	case len(s.containers) > 0:
		close(s.containers[0])
		s.containers = s.containers[1:]
	case len(s.sandboxes) > 0:
		close(s.sandboxes[0])
		s.sandboxes = s.sandboxes[1:]
	default:
		s.free++
	}
}
