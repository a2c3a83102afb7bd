package userns

import (
	"encoding/json"
	"errors"
	"fmt"
)

// MappingsFile is the name of the file in <root>/pods/<uid>/ that keeps a
// pod's mapping, as the upstream kubelet names it.
const MappingsFile = "userns"

// mappingsJSON is the file's format, upstream's: one UID and one GID mapping,
// identical, of container ID 0.
type mappingsJSON struct {
	UIDMappings []idMapping `json:"uidMappings"`
	GIDMappings []idMapping `json:"gidMappings"`
}

type idMapping struct {
	HostID      uint32 `json:"hostId"`
	ContainerID uint32 `json:"containerId"`
	Length      uint32 `json:"length"`
}

// encodeMappings is the file content for a pod mapped from hostID.
func encodeMappings(hostID, length uint32) []byte {
	m := idMapping{HostID: hostID, ContainerID: 0, Length: length}
	b, _ := json.Marshal(mappingsJSON{UIDMappings: []idMapping{m}, GIDMappings: []idMapping{m}})
	return b
}

// parseMappings reads a pod's file back, accepting only what nodelet (or the
// upstream kubelet) writes: exactly one mapping, the same for UIDs and GIDs,
// mapping container ID 0.
// errUnreadableMappings is a mappings file that is not JSON at all
// (truncated, garbage): corruption, not a file of another meaning.
var errUnreadableMappings = errors.New("not JSON")

func parseMappings(data []byte) (hostID, length uint32, err error) {
	var f mappingsJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return 0, 0, fmt.Errorf("invalid user namespace mappings file: %w: %w", errUnreadableMappings, err)
	}
	switch {
	case len(f.UIDMappings) != 1:
		return 0, 0, errors.New("invalid user namespace configuration: no more than one mapping allowed")
	case len(f.GIDMappings) != len(f.UIDMappings):
		return 0, 0, errors.New("invalid user namespace configuration: GID and UID mappings should be identical")
	case f.UIDMappings[0] != f.GIDMappings[0]:
		return 0, 0, errors.New("invalid user namespace configuration: GID and UID mapping should be identical")
	case f.UIDMappings[0].ContainerID != 0:
		return 0, 0, errors.New("invalid user namespace configuration: UID 0 must be mapped")
	}
	return f.UIDMappings[0].HostID, f.UIDMappings[0].Length, nil
}
