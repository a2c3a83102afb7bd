package podutil

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestDefaultPullPolicy(t *testing.T) {
	digest := "sha256:" + strings.Repeat("ab", 32)
	for image, want := range map[string]v1.PullPolicy{
		"busybox":                          v1.PullAlways,
		"busybox:latest":                   v1.PullAlways,
		"busybox:1.36":                     v1.PullIfNotPresent,
		"localhost:5000/busybox":           v1.PullAlways,
		"localhost:5000/busybox:1":         v1.PullIfNotPresent,
		"localhost:5000/busybox:latest":    v1.PullAlways,
		"busybox@" + digest:                v1.PullIfNotPresent,
		"localhost:5000/busybox@" + digest: v1.PullIfNotPresent,
		// The tag decides even beside a digest, as the API server parses it.
		"busybox:latest@" + digest: v1.PullAlways,
		"busybox:1@" + digest:      v1.PullIfNotPresent,
		// An image that does not parse: the API server ignores the error and
		// defaults to IfNotPresent (the container then fails as InvalidImageName).
		"busybox@sha256:abc": v1.PullIfNotPresent,
		"BusyBox":            v1.PullIfNotPresent,
	} {
		if got := DefaultPullPolicy(image); got != want {
			t.Errorf("DefaultPullPolicy(%q) = %s, want %s", image, got, want)
		}
	}
}

func TestParseImage(t *testing.T) {
	for _, tc := range []struct {
		image, name, wantErr string
	}{
		{image: "busybox", name: "docker.io/library/busybox"},
		{image: "busybox:1.36", name: "docker.io/library/busybox"},
		{image: "index.docker.io/user/app:v1", name: "docker.io/user/app"},
		{image: "reg.example.com:5000/team/app@sha256:" + strings.Repeat("0a", 32), name: "reg.example.com:5000/team/app"},
		{image: "localhost/app", name: "localhost/app"},
		// Upstream's words, the message of an InvalidImageName container.
		{image: "BusyBox", wantErr: `couldn't parse image name "BusyBox": invalid reference format: repository name (library/BusyBox) must be lowercase`},
		{image: "", wantErr: `couldn't parse image name "": invalid reference format`},
		{image: "busybox:", wantErr: `couldn't parse image name "busybox:": invalid reference format`},
		{image: "https://reg.example.com/app", wantErr: `couldn't parse image name "https://reg.example.com/app": invalid reference format`},
		{image: "reg.example.com//app", wantErr: `couldn't parse image name "reg.example.com//app": invalid reference format`},
		{image: "app@sha256:abc", wantErr: `couldn't parse image name "app@sha256:abc": invalid reference format`},
	} {
		named, err := ParseImage(tc.image)
		switch {
		case tc.wantErr != "":
			if err == nil || err.Error() != tc.wantErr {
				t.Errorf("ParseImage(%q) error = %v, want %q", tc.image, err, tc.wantErr)
			}
		case err != nil:
			t.Errorf("ParseImage(%q): %v", tc.image, err)
		case named.Name() != tc.name:
			t.Errorf("ParseImage(%q).Name() = %q, want %q", tc.image, named.Name(), tc.name)
		}
	}
}
