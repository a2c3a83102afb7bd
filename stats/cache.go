package stats

import (
	"context"
	"sync"
	"time"

	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/periodic"
)

// DefaultHousekeepingPeriod is how often the Cache measures: upstream's
// cAdvisor housekeeping interval (the kubelet overrides cAdvisor's
// housekeeping_interval to 10s), which the eviction monitoring period (10s)
// is kept in sync with.
const DefaultHousekeepingPeriod = 10 * time.Second

// snapshotSource measures once; *Provider is one.
type snapshotSource interface {
	Snapshot(ctx context.Context) (*Snapshot, error)
}

// Cache holds the last Snapshot, measured in the background every period by
// Run, so /stats/summary, /metrics/resource and eviction read it instead of
// walking logs and asking the runtime on each request.
//
// A read before the first measurement (the API server and the eviction
// manager may start before Run's first pass ends) measures once, shared by
// every reader that arrives meanwhile, rather than waiting for Run: a reader
// never depends on Run having been started, and the first measurement is not
// made twice. A snapshot older than two periods (Run not running or stuck
// behind a hung runtime) is measured again on read, so readers never get
// stale data silently.
type Cache struct {
	src    snapshotSource
	period time.Duration
	clock  clock.WithTicker

	// measuring is a one-slot semaphore: one measurement at a time, taken
	// with the reader's context so a waiting reader can give up.
	measuring chan struct{}

	mu   sync.Mutex
	last result
}

// result is one measurement: its snapshot or error and when it started.
type result struct {
	snap *Snapshot
	err  error
	at   time.Time // zero: nothing measured yet
}

// NewCache returns a Cache measuring src every period (≤ 0: DefaultHousekeepingPeriod).
func NewCache(src snapshotSource, period time.Duration, clk clock.WithTicker) *Cache {
	if period <= 0 {
		period = DefaultHousekeepingPeriod
	}
	return &Cache{src: src, period: period, clock: clk, measuring: make(chan struct{}, 1)}
}

// Run measures at once and then every period until ctx ends; it returns once
// its last measurement has finished.
func (c *Cache) Run(ctx context.Context) {
	periodic.NowAndEvery(ctx, c.clock, c.period, func(ctx context.Context) {
		// Newer than now: a measurement a reader started just before is
		// not repeated, one started earlier is.
		if _, err := c.NewerThan(ctx, c.clock.Now()); err != nil && ctx.Err() == nil {
			klog.ErrorS(err, "Measuring node and pod stats")
		}
	})
}

// Snapshot returns the last measurement (measuring now when there is none,
// or it is older than two periods).
func (c *Cache) Snapshot(ctx context.Context) (*Snapshot, error) {
	return c.NewerThan(ctx, time.Time{})
}

// Summary returns the last measurement's Summary (see Snapshot).
func (c *Cache) Summary(ctx context.Context) (*statsapi.Summary, error) {
	s, err := c.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	return s.Summary, nil
}

// NewerThan returns a measurement started at or after t and at most two
// periods old, measuring now if the last one is older. The eviction manager
// asks so after it freed resources: a measurement from before would still
// count them.
func (c *Cache) NewerThan(ctx context.Context, t time.Time) (*Snapshot, error) {
	if floor := c.clock.Now().Add(-2 * c.period); t.Before(floor) {
		t = floor
	}
	if r, ok := c.lastIfNewer(t); ok {
		return r.snap, r.err
	}
	select {
	case c.measuring <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-c.measuring }()
	// Another reader may have measured while this one waited.
	if r, ok := c.lastIfNewer(t); ok {
		return r.snap, r.err
	}
	at := c.clock.Now()
	snap, err := c.src.Snapshot(ctx)
	if err != nil && ctx.Err() != nil {
		// This reader gave up: not a result for the others.
		return nil, err
	}
	c.mu.Lock()
	c.last = result{snap: snap, err: err, at: at}
	c.mu.Unlock()
	return snap, err
}

func (c *Cache) lastIfNewer(t time.Time) (result, bool) {
	c.mu.Lock()
	r := c.last
	c.mu.Unlock()
	return r, !r.at.IsZero() && !r.at.Before(t)
}
