package podstatus

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pleg"
)

func withEphemeral(p *v1.Pod, names ...string) *v1.Pod {
	for _, n := range names {
		p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, v1.EphemeralContainer{
			EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: n, Image: "debug-img"},
		})
	}
	return p
}

// Ephemeral containers are reported in ephemeralContainerStatuses, by name:
// waiting until the runtime knows them, then running or terminated, never
// ready, with no started flag (upstream's probe manager sets neither for them).
// They change neither the phase nor the pod's readiness.
func TestEphemeralContainerStatuses(t *testing.T) {
	run, exit := runtimeapi.ContainerState_CONTAINER_RUNNING, runtimeapi.ContainerState_CONTAINER_EXITED
	p := withEphemeral(pod(v1.RestartPolicyAlways, "app"), "zdebug", "crashed", "pending", "failing")
	rt := &pleg.PodStatus{UID: "u", Sandboxes: sandbox(), IPs: []string{"10.244.0.7"}, Containers: []*runtimeapi.ContainerStatus{
		cs("app", run, 0, 1, "0"),
		cs("zdebug", run, 0, 2, "0"),
		cs("crashed", exit, 2, 3, "0"),
	}}
	s := Generate(Input{Pod: p, Runtime: rt, Now: now, RuntimeName: "containerd",
		Waiting: map[string]Waiting{"failing": {Reason: "CreateContainerConfigError", Message: "unable to find target container app"}}})

	want := []string{"crashed terminated Error 2", "failing waiting CreateContainerConfigError", "pending waiting ContainerCreating", "zdebug running"}
	if diff := cmp.Diff(want, stateLines(s.EphemeralContainerStatuses)); diff != "" {
		t.Errorf("ephemeral container statuses (-want +got):\n%s", diff)
	}
	for _, c := range s.EphemeralContainerStatuses {
		if c.Ready || c.Started != nil {
			t.Errorf("%s: ready %v, started %v; want not ready, no started flag", c.Name, c.Ready, c.Started)
		}
		if c.Image != "debug-img" {
			t.Errorf("%s: image %q, want the spec's", c.Name, c.Image)
		}
	}
	if got := s.EphemeralContainerStatuses[3].ContainerID; got != "containerd://zdebug-0" {
		t.Errorf("running ephemeral container id = %q", got)
	}
	if got := s.EphemeralContainerStatuses[1].State.Waiting.Message; got != "unable to find target container app" {
		t.Errorf("waiting message = %q", got)
	}
	if s.Phase != v1.PodRunning {
		t.Errorf("phase = %s, want Running: a failed debugger does not fail the pod", s.Phase)
	}
	for _, c := range s.Conditions {
		if (c.Type == v1.PodReady || c.Type == v1.ContainersReady) && c.Status != v1.ConditionTrue {
			t.Errorf("condition %s = %s (%s), want True: ephemeral containers take no part in readiness", c.Type, c.Status, c.Message)
		}
	}
	if len(s.ContainerStatuses) != 1 || len(s.InitContainerStatuses) != 0 {
		t.Errorf("ephemeral containers leaked into the other lists: %v / %v", views(s.ContainerStatuses), views(s.InitContainerStatuses))
	}

	// Without ephemeral containers the list stays empty (omitted in the API).
	if s := Generate(Input{Pod: pod(v1.RestartPolicyAlways, "app"), Runtime: rt, Now: now}); s.EphemeralContainerStatuses != nil {
		t.Errorf("ephemeral statuses without ephemeral containers: %v", s.EphemeralContainerStatuses)
	}
}

// stateLines says each container's name and state in one line.
func stateLines(list []v1.ContainerStatus) []string {
	var out []string
	for _, c := range list {
		switch st := c.State; {
		case st.Running != nil:
			out = append(out, c.Name+" running")
		case st.Terminated != nil:
			out = append(out, fmt.Sprintf("%s terminated %s %d", c.Name, st.Terminated.Reason, st.Terminated.ExitCode))
		case st.Waiting != nil:
			out = append(out, c.Name+" waiting "+st.Waiting.Reason)
		default:
			out = append(out, c.Name+" ?")
		}
	}
	return out
}
