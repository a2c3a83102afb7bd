// Package checksum is the kubelet's checkpoint checksum (upstream's
// pkg/kubelet/checkpointmanager/checksum): FNV-32a over the spew dump of a Go
// value (k8s.io/utils/dump.ForHash). The dump holds the value's type names as
// reflect prints them ("checksum.Checksum", "state.CPUManagerCheckpoint"), so
// this package's name and Checksum's name are part of every checksum that
// covers a struct with a Checksum field: do not rename them.
package checksum

import (
	"fmt"
	"hash/fnv"
	"strings"

	"k8s.io/utils/dump"
)

// Checksum is a checkpoint's checksum, as it is stored in the file.
type Checksum uint64

// New returns the checksum of data (a string, or a checkpoint struct whose
// package, type and field names are upstream's).
func New(data any) Checksum {
	return sum(dump.ForHash(data))
}

// NewRenamed is New with the first occurrence of from in the dump replaced by
// to: upstream's versioned checkpoints (CPUManagerCheckpointV2...) hash under
// the name older kubelets gave the type (CPUManagerCheckpoint), so that those
// kubelets verify them.
func NewRenamed(data any, from, to string) Checksum {
	return sum(strings.Replace(dump.ForHash(data), from, to, 1))
}

func sum(dumped string) Checksum {
	h := fnv.New32a()
	_, _ = fmt.Fprintf(h, "%v", dumped)
	return Checksum(h.Sum32())
}

// Verify returns a *CorruptError when data's checksum is not cs.
func (cs Checksum) Verify(data any) error {
	return cs.check(New(data))
}

// VerifyRenamed is Verify against NewRenamed's checksum.
func (cs Checksum) VerifyRenamed(data any, from, to string) error {
	return cs.check(NewRenamed(data, from, to))
}

func (cs Checksum) check(actual Checksum) error {
	if actual != cs {
		return &CorruptError{Actual: actual, Expected: cs}
	}
	return nil
}

// CorruptError is a checkpoint whose content does not have its checksum.
type CorruptError struct {
	// Actual is the content's checksum, Expected the file's.
	Actual, Expected Checksum
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("checkpoint is corrupted: checksum %d, expected %d", e.Actual, e.Expected)
}
