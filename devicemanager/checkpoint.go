package devicemanager

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"

	"github.com/nodelet/nodelet/internal/atomicfile"
	"github.com/nodelet/nodelet/internal/checkpoint"
)

// CheckpointName is the checkpoint's file name in the device plugin
// directory, upstream's, so plugins' cleanup of that directory spares it.
const CheckpointName = "kubelet_internal_checkpoint"

// podDeviceEntry is one container's devices of one resource, with the
// plugin's Allocate answer (protobuf) so the container can be created again
// after a restart without asking the plugin, and the devices' NUMA nodes so
// the pod resources API and topology hints have them before the plugin
// reports again.
//
// On disk DeviceIDs is upstream's DevicesPerNUMA: NUMA node → device IDs,
// a device without topology under -1 (a device on two nodes is under both).
// Files written before NUMA was kept have a plain list of IDs; they still
// load, with the NUMA nodes unknown (NUMA nil).
type podDeviceEntry struct {
	PodUID        string
	ContainerName string
	ResourceName  string
	DeviceIDs     []string
	// NUMA are the devices' NUMA nodes (a device without topology has an
	// empty entry); nil when the checkpoint did not say.
	NUMA      map[string][]int
	AllocResp []byte
}

// nodeWithoutTopology is upstream's NUMA key for devices without topology.
const nodeWithoutTopology = -1

// podDeviceEntryJSON is podDeviceEntry as the file has it.
type podDeviceEntryJSON struct {
	PodUID        string
	ContainerName string
	ResourceName  string
	DeviceIDs     json.RawMessage
	AllocResp     []byte
}

func (e podDeviceEntry) MarshalJSON() ([]byte, error) {
	ids, err := json.Marshal(devicesPerNUMA(e.DeviceIDs, e.NUMA))
	if err != nil {
		return nil, err
	}
	return json.Marshal(podDeviceEntryJSON{PodUID: e.PodUID, ContainerName: e.ContainerName, ResourceName: e.ResourceName, DeviceIDs: ids, AllocResp: e.AllocResp})
}

func (e *podDeviceEntry) UnmarshalJSON(b []byte) error {
	var w podDeviceEntryJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*e = podDeviceEntry{PodUID: w.PodUID, ContainerName: w.ContainerName, ResourceName: w.ResourceName, AllocResp: w.AllocResp}
	raw := bytes.TrimSpace(w.DeviceIDs)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	if raw[0] == '[' {
		// The format before NUMA nodes were kept.
		return json.Unmarshal(raw, &e.DeviceIDs)
	}
	var perNUMA map[int64][]string
	if err := json.Unmarshal(raw, &perNUMA); err != nil {
		return fmt.Errorf("DeviceIDs of pod %s container %s: %w", w.PodUID, w.ContainerName, err)
	}
	e.DeviceIDs, e.NUMA = fromDevicesPerNUMA(perNUMA)
	return nil
}

// devicesPerNUMA groups ids by NUMA node as upstream's checkpoint does;
// devices whose nodes are unknown or none go under nodeWithoutTopology.
func devicesPerNUMA(ids []string, numa map[string][]int) map[int64][]string {
	out := map[int64][]string{}
	for _, d := range ids {
		if len(numa[d]) == 0 {
			out[nodeWithoutTopology] = append(out[nodeWithoutTopology], d)
			continue
		}
		for _, n := range numa[d] {
			out[int64(n)] = append(out[int64(n)], d)
		}
	}
	return out
}

// fromDevicesPerNUMA is devicesPerNUMA's inverse: the sorted device IDs and
// each one's sorted NUMA nodes.
func fromDevicesPerNUMA(perNUMA map[int64][]string) ([]string, map[string][]int) {
	numa := map[string][]int{}
	for _, n := range slices.Sorted(maps.Keys(perNUMA)) {
		for _, d := range perNUMA[n] {
			if _, ok := numa[d]; !ok {
				numa[d] = nil
			}
			if n != nodeWithoutTopology && !slices.Contains(numa[d], int(n)) {
				numa[d] = append(numa[d], int(n))
			}
		}
	}
	return slices.Sorted(maps.Keys(numa)), numa
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
