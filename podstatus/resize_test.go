package podstatus

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/testsupport/resourcetest"
	"github.com/nodelet/nodelet/pleg"
)

func withLinux(c *runtimeapi.ContainerStatus, shares, quota, period, mem int64) *runtimeapi.ContainerStatus {
	c.Resources = &runtimeapi.ContainerResources{Linux: &runtimeapi.LinuxContainerResources{CpuShares: shares, CpuQuota: quota, CpuPeriod: period, MemoryLimitInBytes: mem}}
	return c
}

func render(r *v1.ResourceRequirements) string {
	if r == nil {
		return "<nil>"
	}
	q := func(l v1.ResourceList, n v1.ResourceName) string {
		if v, ok := l[n]; ok {
			return v.String()
		}
		return "-"
	}
	return "req cpu=" + q(r.Requests, v1.ResourceCPU) + " mem=" + q(r.Requests, v1.ResourceMemory) +
		" lim cpu=" + q(r.Limits, v1.ResourceCPU) + " mem=" + q(r.Limits, v1.ResourceMemory)
}

// status.containerStatuses[].resources and .allocatedResources, as upstream
// fills them: what the runtime reports for a running container over the
// allocation, the memory request from the actuated record.
func TestStatusResources(t *testing.T) {
	run, exit := runtimeapi.ContainerState_CONTAINER_RUNNING, runtimeapi.ContainerState_CONTAINER_EXITED
	for _, tc := range []struct {
		name     string
		alloc    v1.ResourceRequirements
		ctr      *runtimeapi.ContainerStatus
		actuated *v1.ResourceRequirements
		prev     *v1.ResourceRequirements
		want     string
	}{
		{
			name: "resize actuated: runtime values", alloc: requirements("200m", "128Mi", "200m", "128Mi"),
			ctr:      withLinux(cs("a", run, 0, 1, "0"), 204, 20000, 100000, 128<<20),
			actuated: &v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceMemory: resource.MustParse("128Mi")}},
			want:     "req cpu=200m mem=128Mi lim cpu=200m mem=128Mi",
		},
		{
			name: "resize allocated, runtime still old", alloc: requirements("200m", "128Mi", "200m", "128Mi"),
			ctr:      withLinux(cs("a", run, 0, 1, "0"), 102, 10000, 100000, 64<<20),
			actuated: &v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceMemory: resource.MustParse("64Mi")}},
			want:     "req cpu=100m mem=64Mi lim cpu=100m mem=64Mi",
		},
		{
			name: "not running: the allocation", alloc: requirements("200m", "128Mi", "200m", "128Mi"),
			ctr:  withLinux(cs("a", exit, 0, 1, "0"), 102, 10000, 100000, 64<<20),
			want: "req cpu=200m mem=128Mi lim cpu=200m mem=128Mi",
		},
		{
			name: "minimum shares kept as allocated", alloc: requirements("1m", "", "", ""),
			ctr:  withLinux(cs("a", run, 0, 1, "0"), 2, 0, 100000, 0),
			want: "req cpu=1m mem=- lim cpu=- mem=-",
		},
		{
			name: "runtime reports nothing: the actuated record", alloc: requirements("200m", "128Mi", "200m", "128Mi"),
			ctr:      cs("a", run, 0, 1, "0"),
			actuated: &v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("64Mi")}, Limits: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("64Mi")}},
			want:     "req cpu=100m mem=64Mi lim cpu=100m mem=64Mi",
		},
		{
			name: "runtime reports nothing, no record: last status kept", alloc: requirements("200m", "128Mi", "200m", "128Mi"),
			ctr:  cs("a", run, 0, 1, "0"),
			prev: &v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("150m"), v1.ResourceMemory: resource.MustParse("96Mi")}, Limits: v1.ResourceList{v1.ResourceCPU: resource.MustParse("150m"), v1.ResourceMemory: resource.MustParse("96Mi")}},
			want: "req cpu=150m mem=96Mi lim cpu=150m mem=96Mi",
		},
		{
			name: "best effort", alloc: v1.ResourceRequirements{},
			ctr:  withLinux(cs("a", run, 0, 1, "0"), 2, 0, 100000, 0),
			want: "req cpu=- mem=- lim cpu=- mem=-",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pod(v1.RestartPolicyAlways, "a")
			p.Spec.Containers[0].Resources = tc.alloc
			in := Input{Pod: p, Runtime: &pleg.PodStatus{UID: "u", Sandboxes: sandbox(), IPs: []string{"10.0.0.2"}, Containers: []*runtimeapi.ContainerStatus{tc.ctr}},
				Now: now, RuntimeName: "containerd"}
			if tc.actuated != nil {
				in.Actuated = func(string) (v1.ResourceRequirements, bool) { return *tc.actuated, true }
			}
			if tc.prev != nil {
				in.Previous.ContainerStatuses = []v1.ContainerStatus{{Name: "a", ContainerID: "containerd://" + tc.ctr.Id,
					State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}, Resources: tc.prev}}
			}
			s := Generate(in)
			got := s.ContainerStatuses[0]
			if r := render(got.Resources); r != tc.want {
				t.Errorf("resources = %s\nwant        %s", r, tc.want)
			}
			if !v1ListEqual(got.AllocatedResources, tc.alloc.Requests) {
				t.Errorf("allocatedResources = %v, want %v", got.AllocatedResources, tc.alloc.Requests)
			}
		})
	}
}

func v1ListEqual(a, b v1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !v.Equal(w) {
			return false
		}
	}
	return true
}

// The resize conditions are reported as given, replace earlier ones, go with
// a terminal phase; every condition and the status carry the generation.
func TestResizeConditionsAndGeneration(t *testing.T) {
	p := pod(v1.RestartPolicyAlways, "a")
	p.Generation = 5
	rt := &pleg.PodStatus{UID: "u", Sandboxes: sandbox(), IPs: []string{"10.0.0.2"}, Containers: []*runtimeapi.ContainerStatus{cs("a", runtimeapi.ContainerState_CONTAINER_RUNNING, 0, 1, "0")}}
	inProgress := v1.PodCondition{Type: v1.PodResizeInProgress, Status: v1.ConditionTrue, ObservedGeneration: 4}
	stale := v1.PodCondition{Type: v1.PodResizePending, Status: v1.ConditionTrue, Reason: v1.PodReasonDeferred}
	other := v1.PodCondition{Type: "example.com/gate", Status: v1.ConditionTrue}
	s := Generate(Input{Pod: p, Runtime: rt, Now: now, ResizeConditions: []v1.PodCondition{inProgress},
		Previous: v1.PodStatus{Conditions: []v1.PodCondition{stale, other}}})
	if s.ObservedGeneration != 5 {
		t.Errorf("status observedGeneration = %d, want 5", s.ObservedGeneration)
	}
	seen := map[v1.PodConditionType]v1.PodCondition{}
	for _, c := range s.Conditions {
		seen[c.Type] = c
	}
	if _, ok := seen[v1.PodResizePending]; ok {
		t.Error("a stale PodResizePending survived")
	}
	if c, ok := seen[v1.PodResizeInProgress]; !ok || c.ObservedGeneration != 4 {
		t.Errorf("PodResizeInProgress = %+v (present %v), want generation 4 kept", c, ok)
	}
	if _, ok := seen["example.com/gate"]; !ok {
		t.Error("a condition owned by others was dropped")
	}
	if c := seen[v1.PodReady]; c.ObservedGeneration != 5 {
		t.Errorf("Ready observedGeneration = %d, want 5", c.ObservedGeneration)
	}

	done := Generate(Input{Pod: p, Runtime: rt, Now: now, ResizeConditions: []v1.PodCondition{inProgress},
		Previous: v1.PodStatus{Phase: v1.PodSucceeded}})
	for _, c := range done.Conditions {
		if c.Type == v1.PodResizeInProgress {
			t.Error("a finished pod reports a resize in progress")
		}
	}
}

var requirements = resourcetest.Requirements
