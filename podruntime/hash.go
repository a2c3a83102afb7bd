package podruntime

import (
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/podutil"
)

// ContainerHash is the io.kubernetes.container.hash nodelet writes: the upstream
// kubelet's own value (name and image), so either agent recognises the other's
// containers.
func ContainerHash(c *v1.Container) string { return podutil.ContainerHash(c) }

// legacyHashPrefix marks a hash written by an older nodelet, which covered the
// whole spec but the resources. It cannot be compared with today's hash, so
// such a container is adopted as it runs; it gets today's hash when it next
// restarts for any other reason.
const legacyHashPrefix = "n"

// hashChanged reports whether a running container no longer matches its spec:
// its recorded hash, whichever agent wrote it, differs from the spec's. A
// container without a hash or with a legacy nodelet hash is kept.
func hashChanged(recorded string, c *v1.Container) bool {
	if recorded == "" || strings.HasPrefix(recorded, legacyHashPrefix) {
		return false
	}
	// Compared as numbers, as upstream parses it; one that does not parse is
	// upstream's 0, a mismatch.
	got, err := strconv.ParseUint(recorded, 16, 64)
	want, _ := strconv.ParseUint(ContainerHash(c), 16, 64)
	return err != nil || got != want
}
