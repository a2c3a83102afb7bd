package agent

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nodelet/nodelet/cpumanager"
)

// A resource manager's allocation error becomes upstream's admission rejection: the SMT
// alignment error by its own type and message (unwrapped), any other as unexpected.
func TestAllocationRejection(t *testing.T) {
	smt := cpumanager.SMTAlignmentError{RequestedCPUs: 1, CPUsPerCore: 2}
	for _, tc := range []struct {
		err                 error
		reason, wantMessage string
	}{
		{fmt.Errorf("allocating CPUs for container app: %w", smt), "SMTAlignmentError", "SMT Alignment Error: requested 1 cpus not multiple cpus per core = 2"},
		{errors.New("not enough cpus available to satisfy request: requested=2, available=1"), "UnexpectedAdmissionError",
			"Allocate failed due to not enough cpus available to satisfy request: requested=2, available=1, which is unexpected"},
	} {
		r := allocationRejection(tc.err)
		if r.Reason != tc.reason || r.Message != tc.wantMessage {
			t.Errorf("allocationRejection(%v) = %q %q, want %q %q", tc.err, r.Reason, r.Message, tc.reason, tc.wantMessage)
		}
	}
}
