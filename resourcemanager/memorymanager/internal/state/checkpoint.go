// Package state is the kubelet's memory_manager_state file, so that nodelet
// and kubelet v1.37 read each other's. The checksums upstream writes are
// taken over spew dumps of its Go structs (internal/checkpoint/checksum):
// this package's name, its types' names (NUMANodeMap, Block...), their
// fields' names, types and order are upstream's
// (pkg/kubelet/cm/memorymanager/state) and must stay so.
//
// Upstream writes the v3 format: the v1 fields (policyName, machineState,
// entries, checksum) for older kubelets, then data (the JSON of
// MemoryManagerCheckpointData) and dataChecksum, which is the one v1.37
// verifies. It still reads v2 and v1 files.
package state

import (
	"encoding/json"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/checkpoint/checksum"
)

// MemoryTable is one resource's memory on a NUMA node.
type MemoryTable struct {
	TotalMemSize   uint64 `json:"total"`
	SystemReserved uint64 `json:"systemReserved"`
	Allocatable    uint64 `json:"allocatable"`
	Reserved       uint64 `json:"reserved"`
	Free           uint64 `json:"free"`
}

// NUMANodeState is one NUMA node's memory.
type NUMANodeState struct {
	NumberOfAssignments int                              `json:"numberOfAssignments"`
	MemoryMap           map[v1.ResourceName]*MemoryTable `json:"memoryMap"`
	Cells               []int                            `json:"cells"`
}

// NUMANodeMap is the machine's NUMA nodes by ID.
type NUMANodeMap map[int]*NUMANodeState

// Block is memory of one resource on a set of NUMA nodes.
type Block struct {
	NUMAAffinity []int           `json:"numaAffinity"`
	Type         v1.ResourceName `json:"type"`
	Size         uint64          `json:"size"`
}

// ContainerMemoryAssignments are the blocks by pod UID and container name.
type ContainerMemoryAssignments map[string]map[string][]Block

// PodMemoryAssignments are pod-level blocks (PodLevelResourceManagers).
type PodMemoryAssignments map[string]PodEntry

// PodEntry is one pod's pod-level blocks.
type PodEntry struct {
	MemoryBlocks []Block `json:"memoryBlocks,omitempty"`
}

// MemoryManagerCheckpointData is the v3 payload (the data string).
type MemoryManagerCheckpointData struct {
	PolicyName   string                     `json:"policyName"`
	MachineState NUMANodeMap                `json:"machineState"`
	Entries      ContainerMemoryAssignments `json:"entries,omitempty"`
	PodEntries   PodMemoryAssignments       `json:"podEntries,omitempty"`
}

// MemoryManagerCheckpoint is the v3 file: the v1 fields, then data and its checksum.
type MemoryManagerCheckpoint struct {
	MemoryManagerCheckpointV1 `json:",inline"`

	Data         string            `json:"data"`
	DataChecksum checksum.Checksum `json:"dataChecksum"`

	CheckpointData MemoryManagerCheckpointData `json:"-"`
}

// MemoryManagerCheckpointV2 is the v2 file.
type MemoryManagerCheckpointV2 struct {
	PolicyName   string                     `json:"policyName"`
	MachineState NUMANodeMap                `json:"machineState"`
	Entries      ContainerMemoryAssignments `json:"entries,omitempty"`
	PodEntries   PodMemoryAssignments       `json:"podEntries,omitempty"`
	Checksum     checksum.Checksum          `json:"checksum"`
}

// MemoryManagerCheckpointV1 is the v1 file, and the head of the v3 one.
type MemoryManagerCheckpointV1 struct {
	PolicyName   string                     `json:"policyName"`
	MachineState NUMANodeMap                `json:"machineState"`
	Entries      ContainerMemoryAssignments `json:"entries,omitempty"`
	Checksum     checksum.Checksum          `json:"checksum"`
}

// The name older kubelets gave the checkpoint type, which upstream's v1 and
// v2 checksums are taken under.
const legacyName = "MemoryManagerCheckpoint"

// Encode renders d as kubelet v1.37 writes it. Upstream writes copies of
// its state whose maps and slices are never nil (cells, blocks, the
// machine and the entries), and the v1 checksum tells nil from empty: so
// does Encode.
func Encode(d MemoryManagerCheckpointData) ([]byte, error) {
	d.MachineState = normalizeMachine(d.MachineState)
	d.Entries = normalizeEntries(d.Entries)
	data, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("failed to serialize memory manager checkpoint data: %w", err)
	}
	cp := MemoryManagerCheckpoint{
		MemoryManagerCheckpointV1: MemoryManagerCheckpointV1{PolicyName: d.PolicyName, MachineState: d.MachineState, Entries: d.Entries},
		Data:                      string(data),
		DataChecksum:              checksum.New(string(data)),
	}
	cp.Checksum = checksum.NewRenamed(&cp.MemoryManagerCheckpointV1, "MemoryManagerCheckpointV1", legacyName)
	return json.Marshal(cp)
}

func normalizeMachine(m NUMANodeMap) NUMANodeMap {
	out := make(NUMANodeMap, len(m))
	for id, n := range m {
		if n == nil {
			out[id] = nil
			continue
		}
		c := *n
		c.Cells = append([]int{}, n.Cells...)
		out[id] = &c
	}
	return out
}

func normalizeEntries(e ContainerMemoryAssignments) ContainerMemoryAssignments {
	out := make(ContainerMemoryAssignments, len(e))
	for pod, cs := range e {
		out[pod] = make(map[string][]Block, len(cs))
		for name, blocks := range cs {
			out[pod][name] = append([]Block{}, blocks...)
		}
	}
	return out
}

// ErrCorrupt marks a file that does not decode or fails its checksum.
var ErrCorrupt = errors.New("corrupt checkpoint")

// Decode reads a v3 file, or else a v2 or v1 one, as kubelet v1.37 does. A
// v3 file (one with data or dataChecksum) that fails is not read as an older
// format. Errors wrap ErrCorrupt.
func Decode(blob []byte) (MemoryManagerCheckpointData, error) {
	v3, err := decodeV3(blob)
	if err == nil {
		return v3, nil
	}
	var head MemoryManagerCheckpoint
	if json.Unmarshal(blob, &head) == nil && (head.Data != "" || head.DataChecksum != 0) {
		return MemoryManagerCheckpointData{}, fmt.Errorf("%w: could not load v3 checkpoint: %w", ErrCorrupt, err)
	}
	v2, err := decodeV2(blob)
	if err != nil {
		if v2, err = decodeV1(blob); err != nil {
			return MemoryManagerCheckpointData{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
	}
	return MemoryManagerCheckpointData{PolicyName: v2.PolicyName, MachineState: v2.MachineState, Entries: v2.Entries, PodEntries: v2.PodEntries}, nil
}

func decodeV3(blob []byte) (MemoryManagerCheckpointData, error) {
	cp := MemoryManagerCheckpoint{CheckpointData: MemoryManagerCheckpointData{MachineState: NUMANodeMap{}, Entries: ContainerMemoryAssignments{}}}
	if err := json.Unmarshal(blob, &cp); err != nil {
		return MemoryManagerCheckpointData{}, fmt.Errorf("failed to deserialize memory manager checkpoint: %w", err)
	}
	if err := json.Unmarshal([]byte(cp.Data), &cp.CheckpointData); err != nil {
		return MemoryManagerCheckpointData{}, fmt.Errorf("failed to deserialize memory manager checkpoint data: %w", err)
	}
	if err := cp.DataChecksum.Verify(cp.Data); err != nil {
		return MemoryManagerCheckpointData{}, err
	}
	return cp.CheckpointData, nil
}

func decodeV2(blob []byte) (MemoryManagerCheckpointV2, error) {
	cp := MemoryManagerCheckpointV2{MachineState: NUMANodeMap{}, Entries: ContainerMemoryAssignments{}, PodEntries: PodMemoryAssignments{}}
	if err := json.Unmarshal(blob, &cp); err != nil {
		return cp, err
	}
	ck := cp.Checksum
	cp.Checksum = 0
	if err := ck.VerifyRenamed(&cp, "MemoryManagerCheckpointV2", legacyName); err != nil {
		return cp, err
	}
	cp.Checksum = ck
	return cp, nil
}

// decodeV1 returns the v1 file as a v2 one. A zero checksum is accepted, as
// upstream does for files of its old file backend.
func decodeV1(blob []byte) (MemoryManagerCheckpointV2, error) {
	cp := MemoryManagerCheckpointV1{MachineState: NUMANodeMap{}, Entries: ContainerMemoryAssignments{}}
	if err := json.Unmarshal(blob, &cp); err != nil {
		return MemoryManagerCheckpointV2{}, err
	}
	if ck := cp.Checksum; ck != 0 {
		cp.Checksum = 0
		if err := ck.VerifyRenamed(&cp, "MemoryManagerCheckpointV1", legacyName); err != nil {
			return MemoryManagerCheckpointV2{}, err
		}
		cp.Checksum = ck
	}
	return MemoryManagerCheckpointV2{PolicyName: cp.PolicyName, MachineState: cp.MachineState, Entries: cp.Entries}, nil
}
