package dra

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sort"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/atomicfile"
)

// StateFileName is upstream's checkpoint file name under the root directory.
const StateFileName = "dra_manager_state"

// Upstream's checkpoint type, so the files are interchangeable.
const (
	checkpointKind       = "DRACheckpoint"
	checkpointAPIVersion = "checkpoint.dra.kubelet.k8s.io/v1"
)

// ClaimState is one prepared (or being prepared) claim, upstream's
// ClaimInfoState with the same JSON.
type ClaimState struct {
	ClaimUID  types.UID
	ClaimName string
	Namespace string
	// PodUIDs are the pods on this node using the claim (upstream's
	// sets.Set, a JSON object of empty values).
	PodUIDs map[string]struct{}
	// DriverState holds every driver with allocation results in the claim.
	DriverState map[string]DriverState
}

// DriverState is one driver's part of a claim.
type DriverState struct {
	Devices            []Device
	SkipNodeOperations []resourceapi.SkipNodeOperation `json:"skipNodeOperations,omitempty"`
}

// Device is a device a driver prepared, with its CDI device IDs.
type Device struct {
	PoolName     string
	DeviceName   string
	ShareID      *types.UID
	RequestNames []string
	CDIDeviceIDs []string
}

// skips tells whether the driver's node operation op is skipped.
func (s DriverState) skips(op resourceapi.SkipNodeOperation) bool {
	for _, o := range s.SkipNodeOperations {
		if o == op || o == resourceapi.SkipNodeOperationAll {
			return true
		}
	}
	return false
}

type checkpointData struct {
	metav1.TypeMeta
	ClaimInfoStateList []ClaimState
}

// checkpointFile is upstream's envelope: Data is the JSON of checkpointData,
// Checksum its CRC-32 (IEEE).
type checkpointFile struct {
	Data     string
	Checksum uint32
}

// errCorrupt marks a checkpoint that does not decode or whose checksum fails.
var errCorrupt = errors.New("DRA checkpoint is corrupt")

func writeState(path string, claims []ClaimState) error {
	sort.Slice(claims, func(i, j int) bool { return claims[i].ClaimUID < claims[j].ClaimUID })
	data, err := json.Marshal(checkpointData{
		TypeMeta:           metav1.TypeMeta{Kind: checkpointKind, APIVersion: checkpointAPIVersion},
		ClaimInfoStateList: claims,
	})
	if err != nil {
		return fmt.Errorf("serializing the DRA checkpoint: %w", err)
	}
	blob, err := json.Marshal(checkpointFile{Data: string(data), Checksum: crc32.ChecksumIEEE(data)})
	if err != nil {
		return fmt.Errorf("serializing the DRA checkpoint: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return fmt.Errorf("creating the directory of the DRA checkpoint: %w", err)
	}
	if err := atomicfile.WriteFile(path, blob, 0o600); err != nil {
		return fmt.Errorf("writing the DRA checkpoint %s: %w", path, err)
	}
	return nil
}

// readState returns no claims when the file does not exist.
func readState(path string) ([]ClaimState, error) {
	blob, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the DRA checkpoint: %w", err)
	}
	var f checkpointFile
	if err := json.Unmarshal(blob, &f); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errCorrupt, path, err)
	}
	if got := crc32.ChecksumIEEE([]byte(f.Data)); got != f.Checksum {
		return nil, fmt.Errorf("%w: %s: checksum %d, expected %d", errCorrupt, path, got, f.Checksum)
	}
	var d checkpointData
	if err := json.Unmarshal([]byte(f.Data), &d); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errCorrupt, path, err)
	}
	if d.Kind != checkpointKind || d.APIVersion != checkpointAPIVersion {
		return nil, fmt.Errorf("%w: %s is of kind %q version %q, want %q %q", errCorrupt, path, d.Kind, d.APIVersion, checkpointKind, checkpointAPIVersion)
	}
	return d.ClaimInfoStateList, nil
}
