// Package periodic runs a function on a clock's ticker: the one ticker loop
// of nodelet (the CPU manager's reconcile, QoS cgroup updates, user namespace
// cleanup, the allocation checkpoint flusher, image and container GC, the
// plugin watcher's scan, the stats cache, eviction, log rotation, certificate
// reloads, the runtime health check, the systemd watchdog). A loop that waits
// on more than its ticker (the sync loop, a probe worker's manual trigger)
// keeps its own select.
package periodic

import (
	"context"
	"time"

	"k8s.io/utils/clock"
)

// Every calls fn once per period, the first time one period from now, until
// ctx ends. fn runs on the caller's goroutine, so Every returns only after
// the last call has.
func Every(ctx context.Context, clk clock.WithTicker, period time.Duration, fn func(context.Context)) {
	loop(ctx, clk, period, false, fn)
}

// NowAndEvery calls fn at once and then once per period, until ctx ends. The
// periods count from the call of NowAndEvery, not from the end of the first
// call. Like Every, it returns only after the last call has.
func NowAndEvery(ctx context.Context, clk clock.WithTicker, period time.Duration, fn func(context.Context)) {
	loop(ctx, clk, period, true, fn)
}

func loop(ctx context.Context, clk clock.WithTicker, period time.Duration, now bool, fn func(context.Context)) {
	t := clk.NewTicker(period)
	defer t.Stop()
	if now {
		fn(ctx)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			if ctx.Err() != nil {
				return // a tick and the end at once: the end wins
			}
			fn(ctx)
		}
	}
}
