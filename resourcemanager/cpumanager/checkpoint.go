package cpumanager

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"

	"k8s.io/utils/cpuset"

	"github.com/nodelet/nodelet/internal/atomicfile"
	"github.com/nodelet/nodelet/resourcemanager/cpumanager/internal/state"
)

// CheckpointFile is the checkpoint's name under the kubelet root dir.
const CheckpointFile = "cpu_manager_state"

// encodeCheckpoint renders a state for policy as kubelet v1.37 writes it
// (internal/state), so either can read the other's file after a swap.
func encodeCheckpoint(policy string, s State) ([]byte, error) {
	d := state.CPUManagerCheckpointData{PolicyName: policy, DefaultCPUSet: s.DefaultCPUSet.String(), Entries: map[string]map[string]string{}}
	for pod, cs := range s.Assignments {
		d.Entries[pod] = make(map[string]string, len(cs))
		for name, set := range cs {
			d.Entries[pod][name] = set.String()
		}
	}
	b, err := state.Encode(d)
	if err != nil {
		return nil, fmt.Errorf("encoding CPU manager checkpoint: %w", err)
	}
	return b, nil
}

var (
	// errPolicyMismatch marks a checkpoint written under another policy.
	errPolicyMismatch = errors.New("policy mismatch")
	// errCorrupt marks a checkpoint that does not decode or fails its checksum.
	errCorrupt = state.ErrCorrupt
)

// decodeCheckpoint parses a checkpoint written for policy (any format
// kubelet v1.37 reads). A different policy is refused: the assignments
// cannot be carried across policies. Pod-level entries and in-place resize
// baselines are ignored, as upstream does with their gates off.
func decodeCheckpoint(policy string, b []byte) (State, error) {
	c, err := state.Decode(b)
	if err != nil {
		var ok bool
		if c, ok = decodeLegacy(b); !ok {
			return State{}, fmt.Errorf("decoding CPU manager checkpoint: %w", err)
		}
	}
	if c.PolicyName != policy {
		return State{}, fmt.Errorf("configured policy %q differs from state checkpoint policy %q: %w", policy, c.PolicyName, errPolicyMismatch)
	}
	def, err := cpuset.Parse(c.DefaultCPUSet)
	if err != nil {
		return State{}, fmt.Errorf("parsing defaultCpuSet %q: %w", c.DefaultCPUSet, err)
	}
	s := State{DefaultCPUSet: def, Assignments: map[string]map[string]cpuset.CPUSet{}}
	for pod, cs := range c.Entries {
		s.Assignments[pod] = map[string]cpuset.CPUSet{}
		for name, str := range cs {
			set, err := cpuset.Parse(str)
			if err != nil {
				return State{}, fmt.Errorf("parsing cpuset %q of pod %s container %s: %w", str, pod, name, err)
			}
			s.Assignments[pod][name] = set
		}
	}
	return s, nil
}

// legacyCheckpoint is the file nodelet wrote before it took upstream's
// checksums: upstream's v2 JSON, its checksum FNV-32a over that JSON with
// the checksum zero. It is read so that upgrading nodelet keeps the
// assignments; the next write is upstream's format.
type legacyCheckpoint struct {
	PolicyName    string                       `json:"policyName"`
	DefaultCPUSet string                       `json:"defaultCpuSet"`
	Entries       map[string]map[string]string `json:"entries,omitempty"`
	Checksum      uint32                       `json:"checksum"`
}

func decodeLegacy(b []byte) (state.CPUManagerCheckpointData, bool) {
	var c legacyCheckpoint
	if json.Unmarshal(b, &c) != nil {
		return state.CPUManagerCheckpointData{}, false
	}
	sum := c.Checksum
	c.Checksum = 0
	j, err := json.Marshal(c)
	if err != nil {
		return state.CPUManagerCheckpointData{}, false
	}
	h := fnv.New32a()
	_, _ = h.Write(j)
	if h.Sum32() != sum {
		return state.CPUManagerCheckpointData{}, false
	}
	return state.CPUManagerCheckpointData{PolicyName: c.PolicyName, DefaultCPUSet: c.DefaultCPUSet, Entries: c.Entries}, true
}

// readCheckpoint returns the stored state, or ok=false when there is none.
func readCheckpoint(path, policy string) (s State, ok bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return State{}, false, nil
	}
	if err != nil {
		return State{}, false, fmt.Errorf("reading CPU manager checkpoint: %w", err)
	}
	s, err = decodeCheckpoint(policy, b)
	if err != nil {
		return State{}, false, err
	}
	return s, true, nil
}

// writeCheckpoint replaces the checkpoint atomically so a crash leaves the
// old or the new state, never half of one.
func writeCheckpoint(path, policy string, s State) error {
	b, err := encodeCheckpoint(policy, s)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("writing CPU manager checkpoint: %w", err)
	}
	return nil
}
