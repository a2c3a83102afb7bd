// Package periodic runs a function on a clock's ticker: Every calls it once
// per period until the context ends. It is the shared ticker loop (the CPU
// manager's reconcile, QoS cgroup updates, user namespace cleanup, the
// allocation checkpoint flusher, container GC, the plugin watcher's scan use
// it).
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
	t := clk.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			fn(ctx)
		}
	}
}
