package devicemanager

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/nodelet/nodelet/internal/checkpoint"
	"os"

	"github.com/nodelet/nodelet/internal/atomicfile"
)

// CheckpointName is the checkpoint's file name in the device plugin
// directory, upstream's, so plugins' cleanup of that directory spares it.
const CheckpointName = "kubelet_internal_checkpoint"

// podDeviceEntry is one container's devices of one resource, with the
// plugin's Allocate answer (protobuf) so the container can be created again
// after a restart without asking the plugin.
type podDeviceEntry struct {
	PodUID        string
	ContainerName string
	ResourceName  string
	DeviceIDs     []string
	AllocResp     []byte
}

type checkpointData struct {
	PodDeviceEntries  []podDeviceEntry
	RegisteredDevices map[string][]string
}

// checkpointFile is the envelope: Checksum covers Data's JSON.
type checkpointFile struct {
	Data     json.RawMessage
	Checksum uint64
}

func writeCheckpoint(path string, d checkpointData) error {
	data, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("serializing the device checkpoint: %w", err)
	}
	blob, err := json.Marshal(checkpointFile{Data: data, Checksum: checkpoint.Checksum(string(data))})
	if err != nil {
		return fmt.Errorf("serializing the device checkpoint: %w", err)
	}
	if err := atomicfile.WriteFile(path, blob, 0o600); err != nil {
		return fmt.Errorf("writing the device checkpoint %s: %w", path, err)
	}
	return nil
}

// errCorrupt marks a checkpoint that does not decode.
var errCorrupt = errors.New("device checkpoint does not decode")

// readCheckpoint returns an empty checkpoint when the file does not exist.
func readCheckpoint(path string) (checkpointData, error) {
	blob, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return checkpointData{}, nil
	}
	if err != nil {
		return checkpointData{}, fmt.Errorf("reading the device checkpoint: %w", err)
	}
	var f checkpointFile
	if err := json.Unmarshal(blob, &f); err != nil {
		return checkpointData{}, fmt.Errorf("%w: %s: %w", errCorrupt, path, err)
	}
	if got := checkpoint.Checksum(string(f.Data)); got != f.Checksum {
		return checkpointData{}, fmt.Errorf("%w: %s is corrupted: checksum %d, expected %d", errCorrupt, path, got, f.Checksum)
	}
	var d checkpointData
	if err := json.Unmarshal(f.Data, &d); err != nil {
		return checkpointData{}, fmt.Errorf("%w: %s: %w", errCorrupt, path, err)
	}
	return d, nil
}
