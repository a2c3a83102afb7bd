// Package leakcheck is test support: it finds goroutines that a test or a package's
// tests left running. It is the one home for nodelet's goroutine-leak checks, so the
// goroutines that are not leaks (process-wide daemons of libraries) are listed once.
// It wraps go.uber.org/goleak, whose check retries for a bounded time, so a goroutine
// that is on its way out is not reported.
package leakcheck

import (
	"testing"

	"go.uber.org/goleak"
)

// ignored are goroutines that live for the whole process by design.
func ignored() []goleak.Option {
	return []goleak.Option{
		// klog flushes its buffers every few seconds for the life of the process.
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
	}
}

// VerifyTestMain runs the package's tests and fails the run when goroutines are left
// once they all ended. Call it from TestMain: func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }.
func VerifyTestMain(m *testing.M, opts ...goleak.Option) {
	goleak.VerifyTestMain(m, append(ignored(), opts...)...)
}

// Check notes the goroutines running now; the returned func fails t when others are
// still running when it is called (typically deferred, or after a component's Run
// returned, to show that Run joined everything it started).
func Check(t testing.TB, opts ...goleak.Option) func() {
	t.Helper()
	current := goleak.IgnoreCurrent()
	return func() {
		t.Helper()
		goleak.VerifyNone(t, append(append(ignored(), current), opts...)...)
	}
}
