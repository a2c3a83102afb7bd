package podutil

import (
	"strings"

	v1 "k8s.io/api/core/v1"
)

// DefaultPullPolicy is the API server's default for an image (a container's
// imagePullPolicy, an image volume's pullPolicy): Always when the tag is
// "latest", which a reference without tag and without digest also has,
// IfNotPresent otherwise (a digest without tag included).
func DefaultPullPolicy(image string) v1.PullPolicy {
	name, digested := image, false
	if i := strings.Index(name, "@"); i >= 0 {
		name, digested = name[:i], true
	}
	tag := ""
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		tag = name[i+1:]
	}
	if tag == "latest" || (tag == "" && !digested) {
		return v1.PullAlways
	}
	return v1.PullIfNotPresent
}
