package podutil

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestDefaultPullPolicy(t *testing.T) {
	for image, want := range map[string]v1.PullPolicy{
		"busybox":                         v1.PullAlways,
		"busybox:latest":                  v1.PullAlways,
		"busybox:1.36":                    v1.PullIfNotPresent,
		"localhost:5000/busybox":          v1.PullAlways,
		"localhost:5000/busybox:1":        v1.PullIfNotPresent,
		"localhost:5000/busybox:latest":   v1.PullAlways,
		"busybox@sha256:abc":              v1.PullIfNotPresent,
		"localhost:5000/busybox@sha256:a": v1.PullIfNotPresent,
		// The tag decides even beside a digest, as the API server parses it.
		"busybox:latest@sha256:abc": v1.PullAlways,
		"busybox:1@sha256:abc":      v1.PullIfNotPresent,
	} {
		if got := DefaultPullPolicy(image); got != want {
			t.Errorf("DefaultPullPolicy(%q) = %s, want %s", image, got, want)
		}
	}
}
