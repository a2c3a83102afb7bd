package podutil

import (
	"fmt"

	"github.com/distribution/reference"
	v1 "k8s.io/api/core/v1"
)

// ParseImage parses a container image field with the docker reference grammar
// (github.com/distribution/reference, the library the kubelet and containerd
// use), normalized: "busybox" is docker.io/library/busybox. The error is
// worded as upstream's, the text of an InvalidImageName waiting container.
func ParseImage(image string) (reference.Named, error) {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return nil, fmt.Errorf("couldn't parse image name %q: %w", image, err)
	}
	return named, nil
}

// DefaultPullPolicy is the API server's default for an image (a container's
// imagePullPolicy, an image volume's pullPolicy): Always when the tag is
// "latest", which a reference without tag and without digest also has,
// IfNotPresent otherwise (a digest without tag included, and an image that
// does not parse, which then fails as InvalidImageName whatever its policy).
func DefaultPullPolicy(image string) v1.PullPolicy {
	named, err := ParseImage(image)
	if err != nil {
		return v1.PullIfNotPresent
	}
	tagged, hasTag := named.(reference.Tagged)
	_, hasDigest := named.(reference.Digested)
	if (hasTag && tagged.Tag() == "latest") || (!hasTag && !hasDigest) {
		return v1.PullAlways
	}
	return v1.PullIfNotPresent
}
