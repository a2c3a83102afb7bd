// Package calls is the format of the test CSI driver's calls file (test/csidriver): one JSON
// line per CSI call, which the driver appends and the e2e framework reads back to count
// stage and publish calls.
package calls

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"
)

// Call is one CSI call the driver served.
type Call struct {
	Time        time.Time `json:"time"`
	Method      string    `json:"method"` // e.g. NodeStageVolume
	VolumeID    string    `json:"volumeID,omitempty"`
	Name        string    `json:"name,omitempty"`
	NodeID      string    `json:"nodeID,omitempty"`
	StagingPath string    `json:"stagingPath,omitempty"`
	TargetPath  string    `json:"targetPath,omitempty"`
	VolumePath  string    `json:"volumePath,omitempty"`
	ReadOnly    bool      `json:"readOnly,omitempty"`
	// RequiredBytes is capacity_range.required_bytes (CreateVolume, NodeExpandVolume...).
	RequiredBytes int64             `json:"requiredBytes,omitempty"`
	VolumeContext map[string]string `json:"volumeContext,omitempty"`
	Error         string            `json:"error,omitempty"` // "" when the call succeeded
}

// ReadFile reads a calls file; a missing file is no calls.
func ReadFile(path string) ([]Call, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading CSI calls: %w", err)
	}
	var out []Call
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var c Call
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			return nil, fmt.Errorf("parsing CSI calls %s line %d: %w", path, n, err)
		}
		out = append(out, c)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading CSI calls %s: %w", path, err)
	}
	return out, nil
}

// Count is how many calls of method on volume (any volume when "") succeeded.
func Count(cs []Call, method, volumeID string) int {
	n := 0
	for _, c := range cs {
		if c.Method == method && c.Error == "" && (volumeID == "" || c.VolumeID == volumeID) {
			n++
		}
	}
	return n
}
