package podruntime

import (
	"errors"
	"fmt"
	"testing"

	"k8s.io/client-go/tools/record"
)

// TestConfigFailed: a container config error becomes CreateContainerConfigError
// with the cause as its message and one Failed event; the sync's error keeps
// what was being done and the cause. Any other error passes with no waiting
// state and no event.
func TestConfigFailed(t *testing.T) {
	rec := record.NewFakeRecorder(10)
	m := &Manager{deps: Deps{Recorder: rec}}
	pod := testPod("Always", "app")
	cause := errors.New(`secret "s" not found`)
	w, err := m.configFailed(pod, fmt.Errorf("syncing: %w", configErrorf(cause, "computing env of container %s", "app")))
	if w == nil || w.Reason != "CreateContainerConfigError" || w.Message != cause.Error() {
		t.Errorf("waiting = %+v, want CreateContainerConfigError with %q", w, cause)
	}
	if want := `syncing: computing env of container app: secret "s" not found`; err == nil || err.Error() != want || !errors.Is(err, cause) {
		t.Errorf("error = %v, want %q wrapping the cause", err, want)
	}
	if got := <-rec.Events; got != `Warning Failed Error: secret "s" not found` {
		t.Errorf("event = %q", got)
	}
	other := errLeftoverBusy
	if w, err := m.configFailed(pod, other); w != nil || err != other {
		t.Errorf("other error: waiting %+v, error %v; want none and the error as is", w, err)
	}
	select {
	case e := <-rec.Events:
		t.Errorf("unexpected event %q", e)
	default:
	}
}
