package podutil

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

// TestContainerHashMatchesUpstream pins ContainerHash to the upstream kubelet's
// value. The wanted values were printed by a throwaway program (not kept) that
// called k8s.io/kubernetes v1.37.2 pkg/kubelet/container.HashContainer and
// formatted it with strconv.FormatUint(h, 16), as the kubelet writes
// io.kubernetes.container.hash. Only the name and the image count.
func TestContainerHashMatchesUpstream(t *testing.T) {
	for _, tc := range []struct {
		name, image, want string
	}{
		{"app", "busybox", "3ada567e"},
		{"app", "busybox:1.36", "395745"}, // no leading zeros, as FormatUint
		{"web", "registry.k8s.io/e2e-test-images/agnhost:2.66.1", "c130154f"},
		{"hello", "nodelet.local/busybox:latest", "33becebe"},
		{"", "", "edd67cc4"},
		{"c", "img@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "5fd64a79"},
		{"x<>&", "a\"b", "119267f4"}, // json.Marshal escapes <>&: so does upstream
	} {
		c := &v1.Container{Name: tc.name, Image: tc.image}
		if got := ContainerHash(c); got != tc.want {
			t.Errorf("ContainerHash(%q, %q) = %q, want upstream's %q", tc.name, tc.image, got, tc.want)
		}
	}
	// Everything else is left out, as upstream: a new command restarts nothing.
	c := &v1.Container{Name: "hello", Image: "nodelet.local/busybox:latest", Command: []string{"sleep", "3600"},
		Env: []v1.EnvVar{{Name: "A", Value: "b"}}, TerminationMessagePath: "/dev/termination-log"}
	if got := ContainerHash(c); got != "33becebe" {
		t.Errorf("ContainerHash with command and env = %q, want upstream's 33becebe", got)
	}
}
