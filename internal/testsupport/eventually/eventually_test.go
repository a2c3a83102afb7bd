package eventually

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

func TestTrueReturnsOnceTheConditionHolds(t *testing.T) {
	var n atomic.Int32
	go func() {
		for range 3 {
			time.Sleep(time.Millisecond)
			n.Add(1)
		}
	}()
	calls := 0
	True(t, "three increments", func() bool { calls++; return n.Load() == 3 })
	if calls < 1 {
		t.Errorf("cond called %d times", calls)
	}
	True(t, "a condition that already holds", func() bool { return true })
}

// fatalTB records Fatalf and ends the goroutine, as testing.T does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestTrueFailsNamingWhatItWaitedFor(t *testing.T) {
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		poll(f, 20*time.Millisecond, "the pod to run", func() bool { return false })
	}()
	<-done
	if want := "timed out after 20ms waiting for the pod to run"; f.msg != want {
		t.Errorf("failure = %q, want %q", f.msg, want)
	}
}
