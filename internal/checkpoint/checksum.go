// Package checkpoint holds what nodelet's state files share with upstream's checkpoints.
package checkpoint

import (
	"fmt"
	"hash/fnv"

	"k8s.io/utils/dump"
)

// Checksum is upstream's checkpoint checksum: FNV-32a over the spew dump of the data
// string (k8s.io/utils/dump.ForHash), so files stay interchangeable with the kubelet's.
func Checksum(data string) uint64 {
	h := fnv.New32a()
	_, _ = fmt.Fprintf(h, "%v", dump.ForHash(data))
	return uint64(h.Sum32())
}
