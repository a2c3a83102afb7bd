package memorymanager

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/atomicfile"
	"github.com/nodelet/nodelet/internal/checkpoint/checksum"
	"github.com/nodelet/nodelet/resourcemanager/memorymanager/internal/state"
)

// CheckpointFile is the checkpoint's name under the kubelet root dir.
const CheckpointFile = "memory_manager_state"

var (
	// errCorrupt marks a checkpoint that does not decode or fails its checksum.
	errCorrupt = state.ErrCorrupt
	// errPolicyMismatch marks a checkpoint written under another policy.
	errPolicyMismatch = errors.New("policy mismatch")
)

// legacyCheckpoint is the file nodelet wrote before it took upstream's
// checksums: upstream's v1 JSON, its checksum upstream's checksum of that
// JSON's text with the checksum zero. It is read so that upgrading nodelet
// keeps the assignments; the next write is upstream's format.
type legacyCheckpoint struct {
	PolicyName   string                           `json:"policyName"`
	MachineState state.NUMANodeMap                `json:"machineState"`
	Entries      state.ContainerMemoryAssignments `json:"entries,omitempty"`
	Checksum     checksum.Checksum                `json:"checksum"`
}

func decodeLegacy(b []byte) (state.MemoryManagerCheckpointData, bool) {
	var c legacyCheckpoint
	if json.Unmarshal(b, &c) != nil {
		return state.MemoryManagerCheckpointData{}, false
	}
	sum := c.Checksum
	c.Checksum = 0
	j, err := json.Marshal(c)
	if err != nil || checksum.New(string(j)) != sum {
		return state.MemoryManagerCheckpointData{}, false
	}
	return state.MemoryManagerCheckpointData{PolicyName: c.PolicyName, MachineState: c.MachineState, Entries: c.Entries}, true
}

// readCheckpoint returns the stored state for policy, or ok=false when
// there is none; a checkpoint of another policy is refused. Any format
// kubelet v1.37 reads is read (internal/state); pod-level entries are
// ignored, as upstream does with PodLevelResourceManagers off.
func readCheckpoint(path, policy string) (s State, ok bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return State{}, false, nil
	}
	if err != nil {
		return State{}, false, fmt.Errorf("reading the memory manager checkpoint: %w", err)
	}
	c, err := state.Decode(b)
	if err != nil {
		var legacy bool
		if c, legacy = decodeLegacy(b); !legacy {
			return State{}, false, fmt.Errorf("decoding the memory manager checkpoint: %w", err)
		}
	}
	if c.PolicyName != policy {
		return State{}, false, fmt.Errorf("configured policy %q differs from state checkpoint policy %q: %w", policy, c.PolicyName, errPolicyMismatch)
	}
	s = State{Machine: NodeMap{}, Assignments: map[string]map[string][]Block{}, Reusable: map[string]map[string]map[v1.ResourceName]uint64{}}
	for id, n := range c.MachineState {
		if n == nil {
			// Upstream's state cannot hold one; nodelet's policy would trip on it.
			return State{}, false, fmt.Errorf("decoding the memory manager checkpoint: NUMA node %d has no state: %w", id, errCorrupt)
		}
		ns := &NodeState{NumberOfAssignments: n.NumberOfAssignments, Cells: n.Cells}
		if n.MemoryMap != nil {
			ns.MemoryMap = make(map[v1.ResourceName]*MemoryTable, len(n.MemoryMap))
			for res, t := range n.MemoryMap {
				if t == nil {
					return State{}, false, fmt.Errorf("decoding the memory manager checkpoint: NUMA node %d has no %s table: %w", id, res, errCorrupt)
				}
				mt := *t
				ns.MemoryMap[res] = &mt
			}
		}
		s.Machine[id] = ns
	}
	for pod, cs := range c.Entries {
		s.Assignments[pod] = make(map[string][]Block, len(cs))
		for name, blocks := range cs {
			s.Assignments[pod][name] = append(make([]Block, 0, len(blocks)), blocks...)
		}
	}
	return s, true, nil
}

// encodeCheckpoint renders s for policy as kubelet v1.37 writes it
// (internal/state), so either can read the other's file after a swap.
func encodeCheckpoint(policy string, s State) ([]byte, error) {
	// The state's types are upstream's (state.go); Encode copies what it
	// normalizes.
	d := state.MemoryManagerCheckpointData{PolicyName: policy, MachineState: state.NUMANodeMap(s.Machine), Entries: s.Assignments}
	b, err := state.Encode(d)
	if err != nil {
		return nil, fmt.Errorf("encoding the memory manager checkpoint: %w", err)
	}
	return b, nil
}

// writeCheckpoint replaces the checkpoint atomically (atomicfile) so a crash
// leaves the old or the new state, never half of one.
func writeCheckpoint(path, policy string, s State) error {
	b, err := encodeCheckpoint(policy, s)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("writing the memory manager checkpoint: %w", err)
	}
	return nil
}
