package periodic

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestEvery(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	ctx, cancel := context.WithCancel(context.Background())
	calls := make(chan int64)
	var n atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		Every(ctx, clk, time.Minute, func(context.Context) { calls <- n.Add(1) })
	}()
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	if got := n.Load(); got != 0 {
		t.Fatalf("fn ran %d times before the first period", got)
	}
	for want := int64(1); want <= 3; want++ {
		clk.Step(time.Minute)
		if got := <-calls; got != want {
			t.Fatalf("call %d, want %d", got, want)
		}
	}
	cancel()
	<-done
	if got := n.Load(); got != 3 {
		t.Fatalf("fn ran %d times, want 3", got)
	}
}
