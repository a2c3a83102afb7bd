package nodeshutdown

import (
	"context"

	"k8s.io/klog/v2"
)

// Lock is what Run needs from logind: the Inhibitor.
type Lock interface {
	Events() <-chan bool
	Acquire(ctx context.Context) error
	Release()
}

// NotReadyReasons is a node readiness source: the node is not Ready while shutting down.
func (m *Manager) NotReadyReasons() []string {
	if m.ShuttingDown() {
		return []string{NodeNotReadyMessage}
	}
	return nil
}

func (m *Manager) beginShutdown() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.shuttingDown = true
}

// Run takes the inhibitor lock and follows logind until ctx is done. On a shutdown it marks
// the node shutting down, calls onChange(true) (to push node status at once), stops the pods
// and then releases the lock so logind may go on. On a cancelled shutdown it stops what is
// left of the pod killing, marks the node back, calls onChange(false) and takes the lock
// again. onChange may be nil. It returns once every pod kill it started has returned
// (kills past their group's grace end with the shutdown run they belong to).
func (m *Manager) Run(ctx context.Context, lock Lock, onChange func(shuttingDown bool)) {
	notify := func(v bool) {
		if onChange != nil {
			onChange(v)
		}
	}
	if err := lock.Acquire(ctx); err != nil {
		// The Inhibitor keeps trying when logind appears; say loudly that we have no delay now.
		klog.ErrorS(err, "Graceful node shutdown: no inhibitor lock, a shutdown now would not wait for pods")
	}
	type running struct {
		cancel context.CancelFunc
		done   chan struct{}
	}
	var cur *running // nil while no shutdown runs
	stopRunning := func() {
		if cur != nil {
			cur.cancel()
			<-cur.done
			cur = nil
		}
	}
	// After stopRunning (deferred later, run earlier): no ProcessShutdown adds kills then.
	defer m.kills.Wait()
	defer stopRunning()
	for {
		var finished chan struct{}
		if cur != nil {
			finished = cur.done
		}
		select {
		case <-ctx.Done():
			return
		case <-finished:
			stopRunning()
		case active, ok := <-lock.Events():
			if !ok {
				return
			}
			if active {
				if cur != nil {
					continue // logind said it twice
				}
				klog.InfoS("Graceful node shutdown: shutdown announced, stopping pods", "totalGrace", TotalGrace(m.groups))
				m.beginShutdown()
				notify(true)
				sctx, cancel := context.WithCancel(ctx)
				cur = &running{cancel: cancel, done: make(chan struct{})}
				go func(done chan struct{}) {
					defer close(done)
					if err := m.ProcessShutdown(sctx); err != nil {
						klog.ErrorS(err, "Graceful node shutdown did not finish")
					}
					// Pods are down (or out of time): let the shutdown go on.
					lock.Release()
				}(cur.done)
				continue
			}
			if !m.ShuttingDown() && cur == nil {
				continue
			}
			klog.InfoS("Graceful node shutdown: shutdown cancelled")
			stopRunning()
			m.CancelShutdown()
			notify(false)
			if err := lock.Acquire(ctx); err != nil {
				klog.ErrorS(err, "Graceful node shutdown: could not take the inhibitor lock again after a cancelled shutdown")
			}
		}
	}
}
