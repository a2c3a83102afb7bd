package statussync

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/testsupport/leakcheck"
)

func runUntilDone(m *Manager, ctx context.Context, returned *atomic.Bool) chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Run(ctx)
		returned.Store(true)
	}()
	return done
}

func waitDone(t *testing.T, done chan struct{}) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(2 * FinalFlushTimeout):
		t.Fatal("Run did not return after its context ended")
	}
}

// TestRunReturnsAfterItsLastWrite: Run blocks until its sync goroutine is done, so no
// status write is still in flight (or starts) once it returned and nodelet closes the
// API client. Before, Start returned at once and its goroutine was never joined.
func TestRunReturnsAfterItsLastWrite(t *testing.T) {
	defer leakcheck.Check(t)()
	pod := testPod("p", "u1")
	client := fake.NewClientset(pod)
	var returned atomic.Bool
	entered, release, finished := make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	client.PrependReactor("patch", "pods", func(clienttesting.Action) (bool, runtime.Object, error) {
		select {
		case entered <- struct{}{}:
			<-release
			close(finished)
		default:
		}
		return false, nil, nil
	})
	m := NewManager(client, nil, clocktesting.NewFakeClock(t0))
	ctx, cancel := context.WithCancel(context.Background())
	done := runUntilDone(m, ctx, &returned)

	m.SetPodStatus(pod, running(t0))
	<-entered // the write is in flight
	cancel()
	select {
	case <-done:
		t.Error("Run returned while a status write was in flight")
	default:
	}
	close(release)
	waitDone(t, done)
	select {
	case <-finished:
	default:
		t.Error("Run returned before its last status write finished")
	}
}

// TestRunFlushesOnStop: a status set just before the stop still reaches the API server
// (the sync loop stops before the status manager, so its last statuses are in). Before,
// a stop dropped whatever was not synced yet.
func TestRunFlushesOnStop(t *testing.T) {
	defer leakcheck.Check(t)()
	pod := testPod("p", "u1")
	client := fake.NewClientset(pod)
	m := NewManager(client, nil, clocktesting.NewFakeClock(t0))
	ctx, cancel := context.WithCancel(context.Background())
	var returned atomic.Bool
	m.SetPodStatus(pod, running(t0))
	cancel()
	waitDone(t, runUntilDone(m, ctx, &returned))
	if got := apiStatusQuiet(client, "p"); got.Phase != v1.PodRunning {
		t.Errorf("phase in the API after the stop = %q, want Running (the last status flushed)", got.Phase)
	}
}
