package memorymanager

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/atomicfile"
	"github.com/nodelet/nodelet/internal/checkpoint"
)

// CheckpointFile is the checkpoint's name under the kubelet root dir.
const CheckpointFile = "memory_manager_state"

// stateCheckpoint is upstream's memory_manager_state JSON shape.
type stateCheckpoint struct {
	PolicyName   string                        `json:"policyName"`
	MachineState NodeMap                       `json:"machineState"`
	Entries      map[string]map[string][]Block `json:"entries,omitempty"`
	Checksum     uint64                        `json:"checksum"`
}

// sum is internal/checkpoint's checksum over the JSON with the checksum
// zeroed: upstream's shape, nodelet's own checksum (as the CPU manager's).
func (c stateCheckpoint) sum() (uint64, error) {
	c.Checksum = 0
	b, err := json.Marshal(c)
	if err != nil {
		return 0, fmt.Errorf("encoding the memory manager checkpoint: %w", err)
	}
	return checkpoint.Checksum(string(b)), nil
}

var (
	// errCorrupt marks a checkpoint that does not decode or fails its checksum.
	errCorrupt = errors.New("corrupt checkpoint")
	// errPolicyMismatch marks a checkpoint written under another policy.
	errPolicyMismatch = errors.New("policy mismatch")
)

// readCheckpoint returns the stored state for policy, or ok=false when
// there is none; a checkpoint of another policy is refused.
func readCheckpoint(path, policy string) (s State, ok bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return State{}, false, nil
	}
	if err != nil {
		return State{}, false, fmt.Errorf("reading the memory manager checkpoint: %w", err)
	}
	var c stateCheckpoint
	if err := json.Unmarshal(b, &c); err != nil {
		return State{}, false, fmt.Errorf("decoding the memory manager checkpoint: %w: %w", errCorrupt, err)
	}
	if c.PolicyName != policy {
		return State{}, false, fmt.Errorf("configured policy %q differs from state checkpoint policy %q: %w", policy, c.PolicyName, errPolicyMismatch)
	}
	want, err := c.sum()
	if err != nil {
		return State{}, false, err
	}
	if c.Checksum != want {
		return State{}, false, fmt.Errorf("memory manager checkpoint is corrupted: checksum %d, want %d: %w", c.Checksum, want, errCorrupt)
	}
	s = State{Machine: c.MachineState, Assignments: c.Entries, Reusable: map[string]map[string]map[v1.ResourceName]uint64{}}
	if s.Machine == nil {
		s.Machine = NodeMap{}
	}
	if s.Assignments == nil {
		s.Assignments = map[string]map[string][]Block{}
	}
	return s, true, nil
}

// writeCheckpoint replaces the checkpoint atomically (atomicfile) so a crash
// leaves the old or the new state, never half of one.
func writeCheckpoint(path, policy string, s State) error {
	c := stateCheckpoint{PolicyName: policy, MachineState: s.Machine, Entries: s.Assignments}
	if len(c.Entries) == 0 {
		c.Entries = nil
	}
	sum, err := c.sum()
	if err != nil {
		return err
	}
	c.Checksum = sum
	b, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("encoding the memory manager checkpoint: %w", err)
	}
	if err := atomicfile.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("writing the memory manager checkpoint: %w", err)
	}
	return nil
}
