package podstatus

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pleg"
)

type fakeProbes struct{ started, ready map[string]bool }

func (f fakeProbes) Started(_ types.UID, _, id string) bool { return f.started[id] }
func (f fakeProbes) Ready(_ types.UID, _, id string) bool   { return f.ready[id] }

func TestProbesDriveReadyAndStarted(t *testing.T) {
	run, exit := runtimeapi.ContainerState_CONTAINER_RUNNING, runtimeapi.ContainerState_CONTAINER_EXITED
	withInit := func() *v1.Pod {
		p := pod(v1.RestartPolicyAlways, "a")
		p.Spec.InitContainers = []v1.Container{{Name: "init", Image: "img"}, {Name: "side", Image: "img", RestartPolicy: ptr.To(v1.ContainerRestartPolicyAlways)}}
		return p
	}
	tests := []struct {
		name        string
		pod         *v1.Pod
		ctrs        []*runtimeapi.ContainerStatus
		probes      fakeProbes
		wantStarted bool
		wantReady   bool
		wantPodCond v1.ConditionStatus
		initReady   []bool
	}{
		{"started and ready", pod(v1.RestartPolicyAlways, "a"), []*runtimeapi.ContainerStatus{cs("a", run, 0, 1, "0")},
			fakeProbes{started: map[string]bool{"a-0": true}, ready: map[string]bool{"a-0": true}}, true, true, v1.ConditionTrue, nil},
		{"readiness failing", pod(v1.RestartPolicyAlways, "a"), []*runtimeapi.ContainerStatus{cs("a", run, 0, 1, "0")},
			fakeProbes{started: map[string]bool{"a-0": true}, ready: map[string]bool{}}, true, false, v1.ConditionFalse, nil},
		{"not started is never ready", pod(v1.RestartPolicyAlways, "a"), []*runtimeapi.ContainerStatus{cs("a", run, 0, 1, "0")},
			fakeProbes{started: map[string]bool{}, ready: map[string]bool{"a-0": true}}, false, false, v1.ConditionFalse, nil},
		// A sidecar's readiness counts for the pod's, as upstream (ContainersReady
		// names restartable init containers too).
		{"completed init is ready, unready sidecar keeps the pod unready", withInit(), []*runtimeapi.ContainerStatus{
			cs("init", exit, 0, 1, "0"), cs("side", run, 0, 2, "0"), cs("a", run, 0, 3, "0")},
			fakeProbes{started: map[string]bool{"side-0": true, "a-0": true}, ready: map[string]bool{"a-0": true}}, true, true, v1.ConditionFalse, []bool{true, false}},
		{"ready sidecar and app container make the pod ready", withInit(), []*runtimeapi.ContainerStatus{
			cs("init", exit, 0, 1, "0"), cs("side", run, 0, 2, "0"), cs("a", run, 0, 3, "0")},
			fakeProbes{started: map[string]bool{"side-0": true, "a-0": true}, ready: map[string]bool{"a-0": true, "side-0": true}}, true, true, v1.ConditionTrue, []bool{true, true}},
		{"sidecar not started is not ready", withInit(), []*runtimeapi.ContainerStatus{
			cs("init", exit, 0, 1, "0"), cs("side", run, 0, 2, "0"), cs("a", run, 0, 3, "0")},
			fakeProbes{started: map[string]bool{"a-0": true}, ready: map[string]bool{"a-0": true, "side-0": true}}, true, true, v1.ConditionFalse, []bool{true, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Generate(Input{Pod: tt.pod, Runtime: &pleg.PodStatus{UID: "u", Sandboxes: sandbox(), IPs: []string{"10.0.0.1"}, Containers: tt.ctrs},
				Probes: tt.probes, Now: now})
			c := s.ContainerStatuses[0]
			if c.Started == nil || *c.Started != tt.wantStarted || c.Ready != tt.wantReady {
				t.Errorf("started %v ready %v; want %v %v", c.Started, c.Ready, tt.wantStarted, tt.wantReady)
			}
			for _, cond := range s.Conditions {
				if (cond.Type == v1.PodReady || cond.Type == v1.ContainersReady) && cond.Status != tt.wantPodCond {
					t.Errorf("%s = %s, want %s", cond.Type, cond.Status, tt.wantPodCond)
				}
				if cond.Type == v1.PodReady && tt.wantPodCond == v1.ConditionFalse && len(tt.initReady) > 1 && !tt.initReady[1] &&
					cond.Message != "containers with unready status: [side]" {
					t.Errorf("Ready message = %q, want the sidecar named", cond.Message)
				}
			}
			for i, want := range tt.initReady {
				if s.InitContainerStatuses[i].Ready != want {
					t.Errorf("init container %s ready = %v, want %v", s.InitContainerStatuses[i].Name, s.InitContainerStatuses[i].Ready, want)
				}
			}
		})
	}
}

// Every app and init container status carries a started flag, false while it waits
// to be created: the e2e framework's WaitForPodContainerStarted dereferences it
// unchecked and panicked on a pod whose sidecar's startup probe held the app
// container back.
func TestStartedFlagSetWhileWaiting(t *testing.T) {
	run := runtimeapi.ContainerState_CONTAINER_RUNNING
	p := pod(v1.RestartPolicyAlways, "main")
	p.Spec.InitContainers = []v1.Container{{Name: "side", Image: "img", RestartPolicy: ptr.To(v1.ContainerRestartPolicyAlways)}}
	for _, tt := range []struct {
		name string
		rt   *pleg.PodStatus
	}{
		{"nothing created yet", nil},
		{"sidecar running, not started", &pleg.PodStatus{UID: "u", Sandboxes: sandbox(), IPs: []string{"10.0.0.1"},
			Containers: []*runtimeapi.ContainerStatus{cs("side", run, 0, 1, "0")}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := Generate(Input{Pod: p, Runtime: tt.rt, Probes: fakeProbes{}, Now: now})
			for _, c := range append(append([]v1.ContainerStatus{}, s.InitContainerStatuses...), s.ContainerStatuses...) {
				if c.Started == nil || *c.Started {
					t.Errorf("%s: started = %v, want a false flag", c.Name, c.Started)
				}
			}
		})
	}
}
