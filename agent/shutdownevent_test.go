package agent

import (
	"testing"

	"k8s.io/client-go/tools/record"
)

// Upstream's node event for a shutdown and its cancellation: reason Shutdown.
func TestRecordShutdown(t *testing.T) {
	rec := record.NewFakeRecorder(2)
	recordShutdown(rec, "node1", true)
	recordShutdown(rec, "node1", false)
	for _, want := range []string{
		"Normal Shutdown Shutdown manager detected shutdown event",
		"Normal Shutdown Shutdown manager detected shutdown cancellation",
	} {
		if got := <-rec.Events; got != want {
			t.Errorf("event = %q, want %q", got, want)
		}
	}
}
