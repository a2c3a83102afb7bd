package podutil

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

func TestPodRequests(t *testing.T) {
	mem := func(q string) v1.ResourceRequirements {
		return v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceMemory: resource.MustParse(q)}}
	}
	limitOnly := v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("30Mi")}}
	always := ptr.To(v1.ContainerRestartPolicyAlways)
	tests := []struct {
		name string
		spec v1.PodSpec
		want string
	}{
		{name: "app containers add up", spec: v1.PodSpec{Containers: []v1.Container{{Resources: mem("10Mi")}, {Resources: mem("20Mi")}}}, want: "30Mi"},
		{name: "a request defaults from its limit", spec: v1.PodSpec{Containers: []v1.Container{{Resources: limitOnly}}}, want: "30Mi"},
		{name: "the largest init container wins", spec: v1.PodSpec{
			InitContainers: []v1.Container{{Resources: mem("100Mi")}},
			Containers:     []v1.Container{{Resources: mem("10Mi")}},
		}, want: "100Mi"},
		{name: "a sidecar runs beside the app and the later init containers", spec: v1.PodSpec{
			InitContainers: []v1.Container{{Resources: mem("5Mi"), RestartPolicy: always}, {Resources: mem("100Mi")}},
			Containers:     []v1.Container{{Resources: mem("10Mi")}},
		}, want: "105Mi"},
		{name: "overhead adds", spec: v1.PodSpec{
			Containers: []v1.Container{{Resources: mem("10Mi")}},
			Overhead:   v1.ResourceList{v1.ResourceMemory: resource.MustParse("1Mi")},
		}, want: "11Mi"},
		{name: "pod-level requests replace the containers'", spec: v1.PodSpec{
			Containers: []v1.Container{{Resources: mem("10Mi")}},
			Resources:  &v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceMemory: resource.MustParse("64Mi")}},
		}, want: "64Mi"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := PodRequests(&v1.Pod{Spec: tt.spec})[v1.ResourceMemory]
			if want := resource.MustParse(tt.want); got.Cmp(want) != 0 {
				t.Errorf("memory request %s, want %s", got.String(), tt.want)
			}
		})
	}
}
