package periodic

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestEvery(t *testing.T) {
	tests := []struct {
		name string
		run  func(context.Context, *clocktesting.FakeClock, time.Duration, func(context.Context))
		// atStart is how many times fn has run before the first period.
		atStart int64
	}{
		{name: "Every", run: func(ctx context.Context, clk *clocktesting.FakeClock, d time.Duration, fn func(context.Context)) {
			Every(ctx, clk, d, fn)
		}},
		{name: "NowAndEvery", atStart: 1, run: func(ctx context.Context, clk *clocktesting.FakeClock, d time.Duration, fn func(context.Context)) {
			NowAndEvery(ctx, clk, d, fn)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Unix(0, 0))
			ctx, cancel := context.WithCancel(context.Background())
			calls := make(chan int64)
			var n atomic.Int64
			done := make(chan struct{})
			go func() {
				defer close(done)
				tt.run(ctx, clk, time.Minute, func(context.Context) { calls <- n.Add(1) })
			}()
			for want := int64(1); want <= tt.atStart; want++ {
				if got := <-calls; got != want {
					t.Fatalf("call %d at start, want %d", got, want)
				}
			}
			for !clk.HasWaiters() {
				time.Sleep(time.Millisecond)
			}
			if got := n.Load(); got != tt.atStart {
				t.Fatalf("fn ran %d times before the first period, want %d", got, tt.atStart)
			}
			for want := tt.atStart + 1; want <= tt.atStart+3; want++ {
				clk.Step(time.Minute)
				if got := <-calls; got != want {
					t.Fatalf("call %d, want %d", got, want)
				}
			}
			cancel()
			<-done
			if got := n.Load(); got != tt.atStart+3 {
				t.Fatalf("fn ran %d times, want %d", got, tt.atStart+3)
			}
		})
	}
}

// A tick pending when ctx ends does not call fn again: the end wins.
func TestEveryEndWinsOverPendingTick(t *testing.T) {
	for range 20 {
		clk := clocktesting.NewFakeClock(time.Unix(0, 0))
		ctx, cancel := context.WithCancel(context.Background())
		var n atomic.Int64
		done := make(chan struct{})
		go func() {
			defer close(done)
			Every(ctx, clk, time.Minute, func(context.Context) {
				if n.Add(1) == 1 {
					// While the first call runs, the next tick comes and ctx ends.
					clk.Step(time.Minute)
					cancel()
				}
			})
		}()
		for !clk.HasWaiters() {
			time.Sleep(time.Millisecond)
		}
		clk.Step(time.Minute)
		<-done
		if got := n.Load(); got != 1 {
			t.Fatalf("fn ran %d times, want 1", got)
		}
	}
}
