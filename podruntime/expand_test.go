package podruntime

import (
	"context"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// $(VAR) in command and args reaches the runtime expanded from the
// container's env; what cannot be resolved is passed as written.
func TestCommandAndArgsExpanded(t *testing.T) {
	r := newSyncRig(t)
	ctx := context.Background()
	pod := syncPod("expand", v1.RestartPolicyNever, nil, "app")
	c := &pod.Spec.Containers[0]
	c.Env = []v1.EnvVar{{Name: "TEST_VAR", Value: "test-value"}, {Name: "DERIVED", Value: "x-$(TEST_VAR)"}}
	c.Command = []string{"sh", "-c", "echo $(TEST_VAR)"}
	c.Args = []string{"$(DERIVED)", "$$(TEST_VAR)", "$(UNSET)"}
	if _, err := r.manager().SyncPod(ctx, pod, r.status(pod)); err != nil {
		t.Fatal(err)
	}
	cfg := r.fake.ContainerConfig(r.containerID(pod, "app", runtimeapi.ContainerState_CONTAINER_RUNNING))
	if want := []string{"sh", "-c", "echo test-value"}; !slices.Equal(cfg.GetCommand(), want) {
		t.Errorf("command = %q, want %q", cfg.GetCommand(), want)
	}
	if want := []string{"x-test-value", "$(TEST_VAR)", "$(UNSET)"}; !slices.Equal(cfg.GetArgs(), want) {
		t.Errorf("args = %q, want %q", cfg.GetArgs(), want)
	}
	if c.Command[2] != "echo $(TEST_VAR)" {
		t.Errorf("the pod's spec was changed: %q", c.Command)
	}
}
