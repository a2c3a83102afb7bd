// Package state is the kubelet's cpu_manager_state file, so that nodelet and
// kubelet v1.37 read each other's. The checksums upstream writes are taken
// over spew dumps of its Go structs (internal/checkpoint/checksum): this
// package's name, its types' names, their fields' names, types and order are
// upstream's (pkg/kubelet/cm/cpumanager/state) and must stay so.
//
// Upstream writes the v4 format: the v2 fields (policyName, defaultCpuSet,
// entries, checksum) for older kubelets, then data (the JSON of
// CPUManagerCheckpointData) and dataChecksum, which is the one v1.37
// verifies. It still reads v3 and v2 files.
package state

import (
	"encoding/json"
	"errors"
	"fmt"

	"k8s.io/utils/cpuset"

	"github.com/nodelet/nodelet/internal/checkpoint/checksum"
)

// ContainerCPUs is a container's CPUs at admission (in-place resize).
type ContainerCPUs struct {
	Baseline string `json:"baseline"`
}

// PodCPUAssignments are pod-level CPU assignments (PodLevelResourceManagers).
type PodCPUAssignments map[string]PodEntry

// PodEntry is one pod's pod-level CPUs; a cpuset string in the file.
type PodEntry struct {
	CPUSet cpuset.CPUSet `json:"cpuSet,omitempty"`
}

type podEntryJSON struct {
	CPUSet string `json:"cpuSet,omitempty"`
}

// MarshalJSON writes the cpuset as its string.
func (p PodEntry) MarshalJSON() ([]byte, error) {
	return json.Marshal(podEntryJSON{CPUSet: p.CPUSet.String()})
}

// UnmarshalJSON parses the cpuset string.
func (p *PodEntry) UnmarshalJSON(b []byte) error {
	var e podEntryJSON
	if err := json.Unmarshal(b, &e); err != nil {
		return err
	}
	set, err := cpuset.Parse(e.CPUSet)
	if err != nil {
		return fmt.Errorf("failed to parse cpuset: %w", err)
	}
	p.CPUSet = set
	return nil
}

// CPUManagerCheckpointData is the v4 payload (the data string).
type CPUManagerCheckpointData struct {
	PolicyName    string                              `json:"policyName"`
	DefaultCPUSet string                              `json:"defaultCpuSet"`
	Entries       map[string]map[string]string        `json:"entries,omitempty"`
	PodEntries    PodCPUAssignments                   `json:"podEntries,omitempty"`
	Baselines     map[string]map[string]ContainerCPUs `json:"baselines,omitempty"`
}

// CPUManagerCheckpoint is the v4 file: the v2 fields, then data and its checksum.
type CPUManagerCheckpoint struct {
	CPUManagerCheckpointV2 `json:",inline"`

	Data         string            `json:"data"`
	DataChecksum checksum.Checksum `json:"dataChecksum"`

	CheckpointData CPUManagerCheckpointData `json:"-"`
}

// CPUManagerCheckpointV3 is the v3 file.
type CPUManagerCheckpointV3 struct {
	PolicyName    string                       `json:"policyName"`
	DefaultCPUSet string                       `json:"defaultCpuSet"`
	Entries       map[string]map[string]string `json:"entries,omitempty"`
	PodEntries    PodCPUAssignments            `json:"podEntries,omitempty"`
	Checksum      checksum.Checksum            `json:"checksum"`
}

// CPUManagerCheckpointV2 is the v2 file, and the head of the v4 one.
type CPUManagerCheckpointV2 struct {
	PolicyName    string                       `json:"policyName"`
	DefaultCPUSet string                       `json:"defaultCpuSet"`
	Entries       map[string]map[string]string `json:"entries,omitempty"`
	Checksum      checksum.Checksum            `json:"checksum"`
}

// The name older kubelets gave the checkpoint type, which upstream's v2 and
// v3 checksums are taken under.
const legacyName = "CPUManagerCheckpoint"

// Encode renders d as kubelet v1.37 writes it. Entries may be nil: upstream
// always has a map there, and the v2 checksum tells nil from empty.
func Encode(d CPUManagerCheckpointData) ([]byte, error) {
	if d.Entries == nil {
		d.Entries = map[string]map[string]string{}
	}
	data, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("failed to serialize cpu manager checkpoint data: %w", err)
	}
	cp := CPUManagerCheckpoint{
		CPUManagerCheckpointV2: CPUManagerCheckpointV2{PolicyName: d.PolicyName, DefaultCPUSet: d.DefaultCPUSet, Entries: d.Entries},
		Data:                   string(data),
		DataChecksum:           checksum.New(string(data)),
	}
	cp.Checksum = checksum.NewRenamed(&cp.CPUManagerCheckpointV2, "CPUManagerCheckpointV2", legacyName)
	return json.Marshal(cp)
}

// ErrCorrupt marks a file that does not decode or fails its checksum.
var ErrCorrupt = errors.New("corrupt checkpoint")

// Decode reads a v4 file, or else a v3 or v2 one, as kubelet v1.37 does
// with its PodLevelResourceManagers gate off (nodelet refuses the gate). A
// v4 file (one with data or dataChecksum) that fails is not read as an older
// format. Errors wrap ErrCorrupt.
func Decode(blob []byte) (CPUManagerCheckpointData, error) {
	v4, err := decodeV4(blob)
	if err == nil {
		return v4, nil
	}
	var head CPUManagerCheckpoint
	if json.Unmarshal(blob, &head) == nil && (head.Data != "" || head.DataChecksum != 0) {
		return CPUManagerCheckpointData{}, fmt.Errorf("%w: could not load v4 checkpoint: %w", ErrCorrupt, err)
	}
	v3, err := decodeV3(blob)
	if err != nil {
		if v3, err = decodeV2(blob); err != nil {
			return CPUManagerCheckpointData{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
	}
	// What upstream's migration to v4 keeps.
	out := CPUManagerCheckpointData{PolicyName: v3.PolicyName, DefaultCPUSet: v3.DefaultCPUSet}
	if len(v3.Entries) > 0 {
		out.Entries = v3.Entries
	}
	if len(v3.PodEntries) > 0 {
		out.PodEntries = v3.PodEntries
	}
	return out, nil
}

func decodeV4(blob []byte) (CPUManagerCheckpointData, error) {
	var cp CPUManagerCheckpoint
	if err := json.Unmarshal(blob, &cp); err != nil {
		return CPUManagerCheckpointData{}, fmt.Errorf("failed to deserialize cpu manager checkpoint: %w", err)
	}
	if err := json.Unmarshal([]byte(cp.Data), &cp.CheckpointData); err != nil {
		return CPUManagerCheckpointData{}, fmt.Errorf("failed to deserialize cpu manager checkpoint data: %w", err)
	}
	if err := cp.DataChecksum.Verify(cp.Data); err != nil {
		return CPUManagerCheckpointData{}, err
	}
	return cp.CheckpointData, nil
}

// decodeV3 checks the checksum under the type's own name, then under the
// legacy one, as upstream does.
func decodeV3(blob []byte) (CPUManagerCheckpointV3, error) {
	cp := CPUManagerCheckpointV3{Entries: map[string]map[string]string{}, PodEntries: PodCPUAssignments{}}
	if err := json.Unmarshal(blob, &cp); err != nil {
		return cp, err
	}
	ck := cp.Checksum
	cp.Checksum = 0
	if err := ck.Verify(&cp); err != nil {
		if err := ck.VerifyRenamed(&cp, "CPUManagerCheckpointV3", legacyName); err != nil {
			return cp, err
		}
	}
	cp.Checksum = ck
	return cp, nil
}

// decodeV2 returns the v2 file as a v3 one. A zero checksum is accepted, as
// upstream does for files of its old file backend.
func decodeV2(blob []byte) (CPUManagerCheckpointV3, error) {
	cp := CPUManagerCheckpointV2{Entries: map[string]map[string]string{}}
	if err := json.Unmarshal(blob, &cp); err != nil {
		return CPUManagerCheckpointV3{}, err
	}
	if ck := cp.Checksum; ck != 0 {
		cp.Checksum = 0
		if err := ck.Verify(&cp); err != nil {
			if err := ck.VerifyRenamed(&cp, "CPUManagerCheckpointV2", legacyName); err != nil {
				return CPUManagerCheckpointV3{}, err
			}
		}
		cp.Checksum = ck
	}
	return CPUManagerCheckpointV3{PolicyName: cp.PolicyName, DefaultCPUSet: cp.DefaultCPUSet, Entries: cp.Entries}, nil
}
