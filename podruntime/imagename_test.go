package podruntime

import (
	"context"
	"errors"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestInvalidImageName(t *testing.T) {
	for _, tc := range []struct {
		image   string
		message string // "": the image parses
	}{
		{image: "busybox"},
		{image: "busybox:1.36"},
		{image: "reg.example.com:5000/team/app:v1"},
		{image: "127.0.0.1:5000/busybox:e2e"},
		{image: "reg.example.com/app@sha256:0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a"},
		// Upstream's words, as kubectl describe shows them.
		{image: "busyBOX", message: `Failed to apply default image tag "busyBOX": couldn't parse image name "busyBOX": invalid reference format: repository name (library/busyBOX) must be lowercase`},
		{image: "reg.example.com/library//nginx:latest", message: `Failed to apply default image tag "reg.example.com/library//nginx:latest": couldn't parse image name "reg.example.com/library//nginx:latest": invalid reference format`},
		{image: ":sha-0b293ab", message: `Failed to apply default image tag ":sha-0b293ab": couldn't parse image name ":sha-0b293ab": invalid reference format`},
		{image: "", message: `Failed to apply default image tag "": couldn't parse image name "": invalid reference format`},
		{image: "https://reg.example.com/app", message: `Failed to apply default image tag "https://reg.example.com/app": couldn't parse image name "https://reg.example.com/app": invalid reference format`},
	} {
		w, err := invalidImageName(tc.image)
		if tc.message == "" {
			if w != nil || err != nil {
				t.Errorf("invalidImageName(%q) = %+v, %v; want it to parse", tc.image, w, err)
			}
			continue
		}
		if w == nil || w.Reason != "InvalidImageName" || w.Message != tc.message || !errors.Is(err, errInvalidImageName) {
			t.Errorf("invalidImageName(%q) = %+v, %v;\nwant InvalidImageName %q", tc.image, w, err, tc.message)
		}
	}
}

// A container whose image does not parse waits in InvalidImageName with
// upstream's message and events; the runtime is not asked for the image.
func TestSyncRefusesAnInvalidImageName(t *testing.T) {
	r := newSyncRig(t)
	m, rec := r.managerWithEvents()
	pod := syncPod("bad-image", v1.RestartPolicyAlways, nil, "app")
	pod.Spec.Containers[0].Image = "busyBOX"
	res, err := m.SyncPod(context.Background(), pod, r.status(pod))
	if !errors.Is(err, errInvalidImageName) {
		t.Errorf("sync error %v, want InvalidImageName", err)
	}
	const msg = `Failed to apply default image tag "busyBOX": couldn't parse image name "busyBOX": invalid reference format: repository name (library/busyBOX) must be lowercase`
	if w := res.Waiting["app"]; w.Reason != "InvalidImageName" || w.Message != msg {
		t.Errorf("app waiting %+v, want InvalidImageName %q", w, msg)
	}
	events := drain(rec)
	for _, want := range []string{"Warning InspectFailed " + msg, "Warning Failed Error: InvalidImageName"} {
		if !slices.Contains(events, want) {
			t.Errorf("events %q: missing %q", events, want)
		}
	}
	if calls := r.fake.Calls(); slices.Contains(calls, "PullImage") || slices.Contains(calls, "ImageStatus") {
		t.Errorf("runtime asked about an invalid image: %v", calls)
	}
	if got := r.containers(pod, "app"); len(got) != 0 {
		t.Errorf("app containers %v, want none", got)
	}
}
