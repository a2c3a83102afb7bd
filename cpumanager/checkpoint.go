package cpumanager

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/nodelet/nodelet/internal/atomicfile"
	"hash/fnv"
	"io/fs"
	"os"

	"k8s.io/utils/cpuset"
)

// CheckpointFile is the checkpoint's name under the kubelet root dir.
const CheckpointFile = "cpu_manager_state"

// checkpoint is upstream's cpu_manager_state (v2) JSON shape.
type checkpoint struct {
	PolicyName    string                       `json:"policyName"`
	DefaultCPUSet string                       `json:"defaultCpuSet"`
	Entries       map[string]map[string]string `json:"entries,omitempty"`
	Checksum      uint32                       `json:"checksum"`
}

// sum is FNV-32a over the checkpoint's JSON with the checksum zeroed. The
// shape is upstream's; the checksum is nodelet's own (upstream hashes a dump
// of its Go struct), so a file written by one is not verified by the other.
func (c checkpoint) sum() (uint32, error) {
	c.Checksum = 0
	b, err := json.Marshal(c)
	if err != nil {
		return 0, fmt.Errorf("encoding CPU manager checkpoint: %w", err)
	}
	h := fnv.New32a()
	h.Write(b)
	return h.Sum32(), nil
}

// encodeCheckpoint renders a state for policy.
func encodeCheckpoint(policy string, s State) ([]byte, error) {
	c := checkpoint{PolicyName: policy, DefaultCPUSet: s.DefaultCPUSet.String()}
	for pod, cs := range s.Assignments {
		for name, set := range cs {
			if c.Entries == nil {
				c.Entries = map[string]map[string]string{}
			}
			if c.Entries[pod] == nil {
				c.Entries[pod] = map[string]string{}
			}
			c.Entries[pod][name] = set.String()
		}
	}
	sum, err := c.sum()
	if err != nil {
		return nil, err
	}
	c.Checksum = sum
	return json.Marshal(c)
}

// errPolicyMismatch marks a checkpoint written under another policy.
var errPolicyMismatch = errors.New("policy mismatch")

// decodeCheckpoint parses a checkpoint written for policy. A different
// policy is refused: the assignments cannot be carried across policies.
// errCorrupt marks a checkpoint that does not decode or fails its checksum.
var errCorrupt = errors.New("corrupt checkpoint")

func decodeCheckpoint(policy string, b []byte) (State, error) {
	var c checkpoint
	if err := json.Unmarshal(b, &c); err != nil {
		return State{}, fmt.Errorf("decoding CPU manager checkpoint: %w: %w", errCorrupt, err)
	}
	if c.PolicyName != policy {
		return State{}, fmt.Errorf("configured policy %q differs from state checkpoint policy %q: %w", policy, c.PolicyName, errPolicyMismatch)
	}
	want, err := c.sum()
	if err != nil {
		return State{}, err
	}
	if c.Checksum != want {
		return State{}, fmt.Errorf("checkpoint is corrupted: checksum %d, want %d: %w", c.Checksum, want, errCorrupt)
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
