package agent

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"k8s.io/klog/v2"
)

// agent is nodelet built: what runs, in stop order, and what is closed after.
type agent struct {
	stages  []stage
	closers []closer
	// synced is closed once the pod sources synced (the sync loop's Synced).
	synced <-chan struct{}
	// metrics is the registry /metrics serves.
	metrics *prometheus.Registry
}

// component is one part of nodelet in the run phase. run blocks until ctx ends and
// every goroutine the part started has returned.
type component struct {
	name string
	run  func(ctx context.Context)
}

// stage is components that stop together.
type stage struct {
	name       string
	components []component
}

// closer releases a resource once nothing runs that uses it.
type closer struct {
	name  string
	close func() error
}

// addCloser registers a closer; closers run last added first, like defers.
func (a *agent) addCloser(name string, f func() error) {
	a.closers = append(a.closers, closer{name: name, close: f})
}

// run starts every component of every stage at once and returns when ctx has ended
// and everything stopped. The stop goes stage by stage, each stage's context ending
// only once every component of the stages before it has returned:
//
//  1. intake: the kubelet API and healthz servers, the pod sources, the systemd
//     notifier, and the eviction and graceful shutdown managers (they hand the loop
//     pods to kill): no new work.
//  2. the sync loop, its pod workers and the probe workers, and the QoS cgroups
//     updater: pods keep running, nodelet never kills pods on its own stop.
//  3. the status manager, after one last bounded flush of what the loop reported.
//  4. the rest: PLEG, runtime health, node status and Lease, GC, certificates, the
//     services informer, and the loop's query server (last, as stages 2 and 3 ask it).
//
// Then, with no goroutine of nodelet's left, the closers run (last added first): the
// kubelet API ports, the D-Bus connections, the event broadcaster, the API client
// connections and the runtime client.
func (a *agent) run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	type running struct {
		cancel context.CancelFunc
		wg     sync.WaitGroup
	}
	rs := make([]*running, len(a.stages))
	for i, s := range a.stages {
		// Not cancelled with ctx: the stages end one after another, not at once.
		sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		r := &running{cancel: cancel}
		rs[i] = r
		for _, c := range s.components {
			r.wg.Go(func() {
				c.run(sctx)
				logger.V(4).Info("Stopped", "component", c.name)
			})
		}
	}
	<-ctx.Done()
	for i, s := range a.stages {
		logger.V(2).Info("Stopping", "stage", s.name)
		rs[i].cancel()
		rs[i].wg.Wait()
	}
	a.close(ctx)
}

// close runs the closers, last added first.
func (a *agent) close(ctx context.Context) {
	for i := len(a.closers) - 1; i >= 0; i-- {
		c := a.closers[i]
		if err := c.close(); err != nil {
			klog.FromContext(ctx).Error(err, "Closing", "what", c.name)
		}
	}
	a.closers = nil
}
