package pleg

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

const (
	// EventedRelistPeriod and EventedRelistThreshold are upstream's relist
	// period and health threshold of the generic PLEG while the evented one
	// is in use (eventedPlegRelistPeriod, eventedPlegRelistThreshold).
	EventedRelistPeriod    = 300 * time.Second
	EventedRelistThreshold = 10 * time.Minute
	// EventedMaxStreamRetries is upstream's eventedPlegMaxStreamRetries:
	// after this many failed streams in a row the PLEG relists every
	// DefaultRelistPeriod.
	EventedMaxStreamRetries = 5

	// globalCacheUpdatePeriod is upstream's: while the stream is up the
	// cache is declared fresh this often, so a pod worker waiting for a
	// status newer than its last sync is not held up to a relist period.
	globalCacheUpdatePeriod = 2 * time.Second
	// settleDelay: a stream open this long without failing is established
	// (the client's stream opens before the runtime has accepted it).
	settleDelay = time.Second
)

// defaultStreamPolicy retries at once-ish and backs off to 10 s, so a
// restarted runtime is followed again within seconds; a stream up for a
// minute was working.
var defaultStreamPolicy = streamPolicy{
	maxFailures: EventedMaxStreamRetries,
	stableAfter: time.Minute,
	backoffBase: 100 * time.Millisecond,
	backoffMax:  10 * time.Second,
}

// EventSource is the runtime's container event stream (cri.Client).
type EventSource interface {
	GetContainerEvents(ctx context.Context, ch chan *runtimeapi.ContainerEventResponse, connected func(runtimeapi.RuntimeService_GetContainerEventsClient)) error
}

// EventedOption configures an Evented PLEG.
type EventedOption func(*Evented)

// WithEventedMetrics registers the kubelet_evented_pleg_* metrics on reg.
// Registration errors are logged and the metrics left off.
func WithEventedMetrics(reg prometheus.Registerer) EventedOption {
	return func(e *Evented) {
		m, err := newEventedMetrics(reg)
		if err != nil {
			klog.ErrorS(err, "Registering evented PLEG metrics; continuing without them")
			return
		}
		e.metrics = m
	}
}

// Evented is the evented PLEG (upstream's EventedPLEG feature): it follows
// the runtime's container event stream and turns each event into lifecycle
// events and a cache update from the statuses the event carries, through the
// Generic PLEG it drives, whose relist stays the safety net at
// EventedRelistPeriod. When the stream fails EventedMaxStreamRetries times
// in a row the Generic relists every DefaultRelistPeriod until a stream is
// established again.
type Evented struct {
	g       *Generic
	src     EventSource
	clock   clock.Clock
	policy  streamPolicy
	metrics *eventedMetrics // nil when off

	mu        sync.Mutex
	mode      streamMode
	connected bool // a stream is established now
}

// NewEvented returns an evented PLEG driving g, which should have been made
// with EventedRelistPeriod and EventedRelistThreshold.
func NewEvented(g *Generic, src EventSource, clk clock.Clock, opts ...EventedOption) *Evented {
	e := &Evented{g: g, src: src, clock: clk, policy: defaultStreamPolicy}
	for _, o := range opts {
		o(e)
	}
	return e
}

// InUse reports whether the stream is followed (false while relisting
// instead).
func (e *Evented) InUse() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.mode == modeEvented
}

// Healthy returns an error when the event channel is full, as upstream's
// EventedPLEG health check; the relist's own check (Generic.Healthy) covers
// the rest.
func (e *Evented) Healthy() error {
	if n := len(e.g.events); n == cap(e.g.events) {
		return fmt.Errorf("EventedPLEG: pleg event channel capacity is full with %v events", n)
	}
	return nil
}

// Start follows the event stream until ctx is done, re-establishing it with
// back-off. It blocks; every goroutine it starts has returned when it does.
func (e *Evented) Start(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		e.refreshCache(ctx)
	}()
	e.watch(ctx)
	wg.Wait()
}

// refreshCache declares the cache fresh every globalCacheUpdatePeriod while
// a stream is established: every change since has come as an event.
func (e *Evented) refreshCache(ctx context.Context) {
	for {
		t := e.clock.NewTimer(globalCacheUpdatePeriod)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
			e.mu.Lock()
			up := e.connected && e.mode == modeEvented
			e.mu.Unlock()
			if up {
				e.g.cache.UpdateTime(e.clock.Now())
			}
		}
	}
}

// watch runs streams one after the other until ctx is done or the runtime
// turns out not to have the stream.
func (e *Evented) watch(ctx context.Context) {
	st := streamState{mode: modeEvented}
	for {
		var openedAt time.Time
		err := e.stream(ctx, func() {
			openedAt = e.clock.Now()
			if e.metrics != nil {
				e.metrics.connSuccess.Inc()
			}
		}, func() {
			e.switchMode(st.mode, st.connected().mode, nil)
			st = st.connected()
			e.setConnected(true)
			// Catch up with what changed while no stream was open.
			e.g.Relist(ctx)
		})
		e.setConnected(false)
		if ctx.Err() != nil {
			return
		}
		var uptime time.Duration
		if !openedAt.IsZero() {
			uptime = e.clock.Since(openedAt)
		}
		next, wait := st.ended(e.policy, err, uptime)
		if e.metrics != nil {
			e.metrics.connErr.Inc()
		}
		klog.V(2).InfoS("Evented PLEG: Failed to get container events, retrying", "err", err, "failures", next.failures, "retryIn", wait)
		e.switchMode(st.mode, next.mode, err)
		st = next
		// As upstream, relist at once after a failed stream: what it missed.
		e.g.Relist(ctx)
		if st.gaveUp {
			klog.InfoS("Evented PLEG: the container runtime does not stream container events; relisting only", "err", err)
			return
		}
		t := e.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

// switchMode logs and applies a change of mode: the relist period follows.
func (e *Evented) switchMode(from, to streamMode, err error) {
	if from == to {
		return
	}
	e.mu.Lock()
	e.mode = to
	e.mu.Unlock()
	if to == modeFallback {
		klog.InfoS("Fall back to Generic PLEG relisting since Evented PLEG is not working", "relistPeriod", DefaultRelistPeriod, "err", err)
		e.g.SetRelistPeriod(DefaultRelistPeriod, DefaultRelistThreshold)
		return
	}
	klog.InfoS("Evented PLEG in use again: the container event stream is re-established", "relistPeriod", EventedRelistPeriod)
	e.g.SetRelistPeriod(EventedRelistPeriod, EventedRelistThreshold)
}

func (e *Evented) setConnected(up bool) {
	e.mu.Lock()
	e.connected = up
	e.mu.Unlock()
}

// stream runs one event stream until it ends, applying its events in order.
// onOpened runs once the client has the stream; onEstablished once it is
// known to work: its first event came, or it stayed open for settleDelay (a
// client-side stream opens before the runtime accepted or refused it). Both
// run on this goroutine. The reader goroutine has returned when stream does.
func (e *Evented) stream(ctx context.Context, onOpened, onEstablished func()) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := make(chan *runtimeapi.ContainerEventResponse, cap(e.g.events))
	opened := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- e.src.GetContainerEvents(sctx, ch, func(runtimeapi.RuntimeService_GetContainerEventsClient) { close(opened) })
	}()
	var settle <-chan time.Time
	established := false
	establish := func() {
		if !established {
			established, settle = true, nil
			onEstablished()
		}
	}
	relist := false // an event named no pod: relist once the queue is empty
	for {
		select {
		case <-opened:
			opened = nil
			onOpened()
			settle = e.clock.After(settleDelay)
		case <-settle:
			establish()
		case ev := <-ch:
			establish()
			relist = e.handle(ev) || relist
			if relist && len(ch) == 0 {
				relist = false
				e.g.Relist(ctx)
			}
		case err := <-done:
			// The reader has returned: what it queued came before the end.
			for {
				select {
				case ev := <-ch:
					relist = e.handle(ev) || relist
				default:
					if relist {
						e.g.Relist(ctx)
					}
					return err
				}
			}
		}
	}
}

// handle applies one event and reports whether a relist must find out what
// it was about.
func (e *Evented) handle(ev *runtimeapi.ContainerEventResponse) bool {
	if e.metrics != nil {
		e.metrics.latency.Observe(e.clock.Since(time.Unix(0, ev.GetCreatedAt())).Seconds())
	}
	switch e.g.applyEvent(ev) {
	case eventUnknownPod:
		klog.V(4).InfoS("Evented PLEG: event without a pod sandbox status; relisting", "containerID", ev.GetContainerId(), "type", ev.GetContainerEventType())
		return true
	case eventApplied:
		klog.V(4).InfoS("Evented PLEG: applied container event", "containerID", ev.GetContainerId(), "type", ev.GetContainerEventType())
	}
	return false
}
