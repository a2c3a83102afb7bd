package podruntime

import (
	"encoding/json"
	"hash/fnv"
	"strconv"

	v1 "k8s.io/api/core/v1"
)

// ContainerHash fingerprints the parts of a container spec that require a restart
// when they change. Resources are left out (they are resized in place upstream) so
// a pod is not restarted by an unrelated change. JSON gives a stable encoding:
// struct fields in order, map keys sorted.
func ContainerHash(c *v1.Container) string {
	cp := c.DeepCopy()
	cp.Resources = v1.ResourceRequirements{}
	b, err := json.Marshal(cp)
	if err != nil {
		// A v1.Container always marshals; fall back to the name so behaviour stays defined.
		b = []byte(c.Name)
	}
	h := fnv.New32a()
	_, _ = h.Write(b)
	return hashPrefix + strconv.FormatUint(uint64(h.Sum32()), 16)
}

// hashPrefix marks hashes nodelet computed. The upstream kubelet stores its own
// hash under the same annotation; a running container carrying a foreign hash is
// kept as is, so switching a node from the kubelet to nodelet restarts nothing.
const hashPrefix = "n"

// hashChanged reports whether a running container no longer matches its spec.
func hashChanged(recorded string, c *v1.Container) bool {
	if len(recorded) == 0 || recorded[0:1] != hashPrefix {
		return false
	}
	return recorded != ContainerHash(c)
}
