package syncloop

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nodelet/nodelet/resourcemanager/topologymanager"
)

type smtError struct{}

func (smtError) Error() string {
	return "SMT Alignment Error: requested 1 cpus not multiple cpus per core = 2"
}
func (smtError) Type() string { return "SMTAlignmentError" }

// A resource manager's allocation error becomes upstream's admission rejection: the SMT
// alignment and topology affinity errors by their own reason and message (unwrapped), any
// other as unexpected.
func TestAllocationRejection(t *testing.T) {
	for _, tc := range []struct {
		err             error
		reason, message string
	}{
		{fmt.Errorf("allocating CPUs for container app: %w", smtError{}), "SMTAlignmentError", "SMT Alignment Error: requested 1 cpus not multiple cpus per core = 2"},
		{topologymanager.AffinityError{}, "TopologyAffinityError", "Resources cannot be allocated with Topology locality"},
		{errors.New("requested number of devices unavailable for example.com/dev. Requested: 2, Available: 1"), "UnexpectedAdmissionError",
			"Allocate failed due to requested number of devices unavailable for example.com/dev. Requested: 2, Available: 1, which is unexpected"},
	} {
		r := AllocationRejection(tc.err)
		if r.Reason != tc.reason || r.Message != tc.message {
			t.Errorf("AllocationRejection(%v) = %q %q, want %q %q", tc.err, r.Reason, r.Message, tc.reason, tc.message)
		}
	}
}
