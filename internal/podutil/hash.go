package podutil

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strconv"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/dump"
)

// ContainerHash is the value of a container's io.kubernetes.container.hash
// annotation, computed exactly as the upstream kubelet computes it: FNV-32a over
// the spew dump of the JSON of the container's name and image, written in hex.
// Being the same number lets either agent judge the containers the other
// started: a change of image restarts them, nothing else does.
func ContainerHash(c *v1.Container) string {
	// A map of two strings always marshals; json sorts its keys.
	b, _ := json.Marshal(map[string]string{"name": c.Name, "image": c.Image})
	h := fnv.New32a()
	// The dump of a []byte, not the bytes themselves: that is what upstream hashes.
	fmt.Fprintf(h, "%v", dump.ForHash(b))
	return strconv.FormatUint(uint64(h.Sum32()), 16)
}
