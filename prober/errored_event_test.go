package prober

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/testsupport/eventually"
)

// brokenExec fails every exec the way a runtime does, not as a command's exit.
type brokenExec struct{}

func (brokenExec) ExecSync(context.Context, string, []string, time.Duration) ([]byte, []byte, error) {
	return nil, nil, errors.New("container is stopping")
}

// A probe that errors (not one that fails) gets upstream's Unhealthy wording,
// which users grep for: "<Type> probe errored and resulted in unknown state: <err>".
func TestErroredProbeEvent(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC))
	rec := record.NewFakeRecorder(100)
	status := &fakeStatus{s: map[types.UID]v1.PodStatus{}}
	m := NewManager(brokenExec{}, status, rec, clk)
	clk.Step(time.Hour) // past the start-up jitter
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); m.Wait() }()
	pod := podWith(v1.Container{Name: "app", ReadinessProbe: execProbe("ready", 1, 1)})
	status.set(pod.UID, runningStatus(true, clk.Now()))
	m.AddPod(ctx, pod)
	want := "Warning Unhealthy Readiness probe errored and resulted in unknown state: "
	var got string
	eventually.True(t, "an Unhealthy event", func() bool {
		select {
		case got = <-rec.Events:
			return true
		default:
			return false
		}
	})
	if !strings.HasPrefix(got, want) || !strings.Contains(got, "container is stopping") {
		t.Errorf("event = %q, want %q<error>", got, want)
	}
}
