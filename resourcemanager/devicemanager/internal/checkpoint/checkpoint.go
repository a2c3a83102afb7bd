// Package checkpoint is the kubelet's device-plugins/kubelet_internal_checkpoint
// file, so that nodelet and kubelet v1.37 read each other's. Its checksum is
// taken over a spew dump of upstream's checkpointData struct
// (internal/checkpoint/checksum): this package's name, its types' names
// (checkpointData, PodDevicesEntry, DevicesPerNUMA), their fields' names,
// types and order are upstream's (pkg/kubelet/cm/devicemanager/checkpoint)
// and must stay so.
package checkpoint

import (
	"encoding/json"
	"fmt"

	"github.com/nodelet/nodelet/internal/checkpoint/checksum"
)

// DevicesPerNUMA is a container's device IDs by NUMA node (-1: none).
type DevicesPerNUMA map[int64][]string

// PodDevicesEntry is one container's devices of one resource, with the
// plugin's Allocate answer (protobuf).
type PodDevicesEntry struct {
	PodUID        string
	ContainerName string
	ResourceName  string
	DeviceIDs     DevicesPerNUMA
	AllocResp     []byte
}

type checkpointData struct {
	PodDeviceEntries  []PodDevicesEntry
	RegisteredDevices map[string][]string
}

// Data is the file: the data and the checksum of its Go value.
type Data struct {
	Data     checkpointData
	Checksum checksum.Checksum
}

// newData is what upstream decodes a file into: a key the file lacks
// leaves an empty slice or map, which the checksum tells from nil.
func newData() Data {
	return Data{Data: checkpointData{PodDeviceEntries: []PodDevicesEntry{}, RegisteredDevices: map[string][]string{}}}
}

// Encode renders the entries and the registered devices (resource → IDs) as
// kubelet v1.37 writes them. The checksum is taken over what a reader
// decodes from the JSON, so that nil and empty slices (which spew tells
// apart) cannot make a file its reader refuses.
func Encode(entries []PodDevicesEntry, registered map[string][]string) ([]byte, error) {
	cp := Data{Data: checkpointData{PodDeviceEntries: entries, RegisteredDevices: registered}}
	data, err := json.Marshal(cp.Data)
	if err != nil {
		return nil, fmt.Errorf("serializing the device checkpoint: %w", err)
	}
	read := newData()
	if err := json.Unmarshal(data, &read.Data); err != nil {
		return nil, fmt.Errorf("serializing the device checkpoint: %w", err)
	}
	cp.Checksum = checksum.New(read.Data)
	b, err := json.Marshal(cp)
	if err != nil {
		return nil, fmt.Errorf("serializing the device checkpoint: %w", err)
	}
	return b, nil
}

// Decode returns the file's entries and registered devices. The error is a
// *checksum.CorruptError when the checksum fails, a JSON error when the file
// does not decode.
func Decode(blob []byte) ([]PodDevicesEntry, map[string][]string, error) {
	cp := newData()
	if err := json.Unmarshal(blob, &cp); err != nil {
		return nil, nil, err
	}
	if err := cp.Checksum.Verify(cp.Data); err != nil {
		return nil, nil, err
	}
	return cp.Data.PodDeviceEntries, cp.Data.RegisteredDevices, nil
}
