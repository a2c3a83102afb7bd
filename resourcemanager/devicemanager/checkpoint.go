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
	"github.com/nodelet/nodelet/internal/checkpoint/checksum"
	"github.com/nodelet/nodelet/resourcemanager/devicemanager/internal/checkpoint"
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

// podDeviceEntryJSON is podDeviceEntry as nodelet's former files have it.
type podDeviceEntryJSON struct {
	PodUID        string
	ContainerName string
	ResourceName  string
	DeviceIDs     json.RawMessage
	AllocResp     []byte
}

// UnmarshalJSON reads an entry of nodelet's former files (readLegacy).
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

// writeCheckpoint writes d as kubelet v1.37 does (internal/checkpoint), so
// either reads the other's file after a swap.
func writeCheckpoint(path string, d checkpointData) error {
	var entries []checkpoint.PodDevicesEntry
	for _, e := range d.PodDeviceEntries {
		entries = append(entries, checkpoint.PodDevicesEntry{
			PodUID: e.PodUID, ContainerName: e.ContainerName, ResourceName: e.ResourceName,
			DeviceIDs: devicesPerNUMA(e.DeviceIDs, e.NUMA), AllocResp: e.AllocResp,
		})
	}
	blob, err := checkpoint.Encode(entries, d.RegisteredDevices)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(path, blob, 0o600); err != nil {
		return fmt.Errorf("writing the device checkpoint %s: %w", path, err)
	}
	return nil
}

// errCorrupt marks a checkpoint that does not decode or fails its checksum.
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
	entries, registered, err := checkpoint.Decode(blob)
	if err != nil {
		if d, ok := readLegacy(blob); ok {
			return d, nil
		}
		var ce *checksum.CorruptError
		if errors.As(err, &ce) {
			return checkpointData{}, fmt.Errorf("%w: %s is corrupted: checksum %d, expected %d", errCorrupt, path, ce.Actual, ce.Expected)
		}
		return checkpointData{}, fmt.Errorf("%w: %s: %w", errCorrupt, path, err)
	}
	d := checkpointData{RegisteredDevices: registered}
	for _, e := range entries {
		ids, numa := fromDevicesPerNUMA(e.DeviceIDs)
		d.PodDeviceEntries = append(d.PodDeviceEntries, podDeviceEntry{
			PodUID: e.PodUID, ContainerName: e.ContainerName, ResourceName: e.ResourceName,
			DeviceIDs: ids, NUMA: numa, AllocResp: e.AllocResp,
		})
	}
	return d, nil
}

// readLegacy reads a file of nodelet before it took upstream's checksum:
// the same JSON, with a checksum of the data's JSON text. Its next write
// is upstream's.
func readLegacy(blob []byte) (checkpointData, bool) {
	var f struct {
		Data     json.RawMessage
		Checksum checksum.Checksum
	}
	if json.Unmarshal(blob, &f) != nil || checksum.New(string(f.Data)) != f.Checksum {
		return checkpointData{}, false
	}
	var d checkpointData
	if json.Unmarshal(f.Data, &d) != nil {
		return checkpointData{}, false
	}
	return d, true
}
