package podutil

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestNeedsAppArmor: any profile but Unconfined, in a field at any level or
// in a deprecated annotation, needs AppArmor on the host (upstream's
// AppArmor admission asks the same).
func TestNeedsAppArmor(t *testing.T) {
	prof := func(typ v1.AppArmorProfileType) *v1.AppArmorProfile { return &v1.AppArmorProfile{Type: typ} }
	tests := []struct {
		name string
		pod  func(*v1.Pod)
		want bool
	}{
		{name: "none"},
		{name: "pod Unconfined", pod: func(p *v1.Pod) {
			p.Spec.SecurityContext = &v1.PodSecurityContext{AppArmorProfile: prof(v1.AppArmorProfileTypeUnconfined)}
		}},
		{name: "pod RuntimeDefault", want: true, pod: func(p *v1.Pod) {
			p.Spec.SecurityContext = &v1.PodSecurityContext{AppArmorProfile: prof(v1.AppArmorProfileTypeRuntimeDefault)}
		}},
		{name: "init container Localhost", want: true, pod: func(p *v1.Pod) {
			p.Spec.InitContainers = []v1.Container{{Name: "i", SecurityContext: &v1.SecurityContext{AppArmorProfile: prof(v1.AppArmorProfileTypeLocalhost)}}}
		}},
		{name: "ephemeral container RuntimeDefault", want: true, pod: func(p *v1.Pod) {
			p.Spec.EphemeralContainers = []v1.EphemeralContainer{{EphemeralContainerCommon: v1.EphemeralContainerCommon{
				Name: "d", SecurityContext: &v1.SecurityContext{AppArmorProfile: prof(v1.AppArmorProfileTypeRuntimeDefault)}}}}
		}},
		{name: "container Unconfined", pod: func(p *v1.Pod) {
			p.Spec.Containers[0].SecurityContext = &v1.SecurityContext{AppArmorProfile: prof(v1.AppArmorProfileTypeUnconfined)}
		}},
		{name: "annotation unconfined", pod: func(p *v1.Pod) {
			p.Annotations = map[string]string{"container.apparmor.security.beta.kubernetes.io/c": "unconfined"}
		}},
		{name: "annotation runtime/default", want: true, pod: func(p *v1.Pod) {
			p.Annotations = map[string]string{"container.apparmor.security.beta.kubernetes.io/c": "runtime/default"}
		}},
		{name: "other annotations", pod: func(p *v1.Pod) {
			p.Annotations = map[string]string{"seccomp.security.alpha.kubernetes.io/pod": "runtime/default"}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c"}}}}
			if tt.pod != nil {
				tt.pod(pod)
			}
			if got := NeedsAppArmor(pod); got != tt.want {
				t.Errorf("NeedsAppArmor = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestAppArmorProfile: the container's field, then its deprecated annotation,
// then the pod's field.
func TestAppArmorProfile(t *testing.T) {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
			"container.apparmor.security.beta.kubernetes.io/annotated": "localhost/",
			"container.apparmor.security.beta.kubernetes.io/invalid":   "something",
		}},
		Spec: v1.PodSpec{SecurityContext: &v1.PodSecurityContext{AppArmorProfile: &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeRuntimeDefault}}},
	}
	own := &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeUnconfined}
	tests := []struct {
		c    v1.Container
		want *v1.AppArmorProfile
	}{
		{v1.Container{Name: "annotated", SecurityContext: &v1.SecurityContext{AppArmorProfile: own}}, own},
		// An empty localhost name stays Localhost: admission refuses it.
		{v1.Container{Name: "annotated"}, &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeLocalhost, LocalhostProfile: ptr.To("")}},
		{v1.Container{Name: "invalid"}, pod.Spec.SecurityContext.AppArmorProfile},
		{v1.Container{Name: "plain"}, pod.Spec.SecurityContext.AppArmorProfile},
	}
	for _, tt := range tests {
		got := AppArmorProfile(pod, &tt.c)
		if (got == nil) != (tt.want == nil) || got != nil && (got.Type != tt.want.Type || ptr.Deref(got.LocalhostProfile, "-") != ptr.Deref(tt.want.LocalhostProfile, "-")) {
			t.Errorf("%s: profile %+v, want %+v", tt.c.Name, got, tt.want)
		}
	}
}
