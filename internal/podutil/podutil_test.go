package podutil

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func pod(annotations map[string]string, priority *int32, class string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: annotations},
		Spec:       v1.PodSpec{Priority: priority, PriorityClassName: class},
	}
}

func TestPodKinds(t *testing.T) {
	tests := []struct {
		name                                   string
		pod                                    *v1.Pod
		static, mirror, critical, nodeCritical bool
		priority                               int32
	}{
		{name: "plain API pod", pod: pod(nil, nil, "")},
		{name: "source api", pod: pod(map[string]string{AnnotationConfigSource: SourceAPI}, nil, "")},
		{name: "static (file)", pod: pod(map[string]string{AnnotationConfigSource: SourceFile}, nil, ""), static: true, critical: true},
		{name: "static from another source", pod: pod(map[string]string{AnnotationConfigSource: "http"}, nil, ""), static: true, critical: true},
		{name: "empty source is not api", pod: pod(map[string]string{AnnotationConfigSource: ""}, nil, ""), static: true, critical: true},
		{name: "mirror", pod: pod(map[string]string{AnnotationConfigMirror: "abc"}, nil, ""), mirror: true, critical: true},
		{name: "mirror with an empty hash", pod: pod(map[string]string{AnnotationConfigMirror: ""}, nil, ""), mirror: true, critical: true},
		{name: "user priority", pod: pod(nil, ptr.To(HighestUserDefinablePriority), ""), priority: HighestUserDefinablePriority},
		{name: "just below critical", pod: pod(nil, ptr.To(SystemCriticalPriority-1), ""), priority: SystemCriticalPriority - 1},
		{name: "cluster critical", pod: pod(nil, ptr.To(SystemCriticalPriority), SystemClusterCritical), critical: true, priority: 2000000000},
		{name: "node critical", pod: pod(nil, ptr.To(SystemCriticalPriority+1000), SystemNodeCritical), critical: true, nodeCritical: true, priority: 2000001000},
		{name: "node critical class without the priority", pod: pod(nil, nil, SystemNodeCritical)},
		{name: "static pod of the node critical class", pod: pod(map[string]string{AnnotationConfigSource: SourceFile}, nil, SystemNodeCritical), static: true, critical: true, nodeCritical: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsStaticPod(tc.pod); got != tc.static {
				t.Errorf("IsStaticPod = %v, want %v", got, tc.static)
			}
			if got := IsMirrorPod(tc.pod); got != tc.mirror {
				t.Errorf("IsMirrorPod = %v, want %v", got, tc.mirror)
			}
			if got := IsCriticalPod(tc.pod); got != tc.critical {
				t.Errorf("IsCriticalPod = %v, want %v", got, tc.critical)
			}
			if got := IsNodeCriticalPod(tc.pod); got != tc.nodeCritical {
				t.Errorf("IsNodeCriticalPod = %v, want %v", got, tc.nodeCritical)
			}
			if got := Priority(tc.pod); got != tc.priority {
				t.Errorf("Priority = %d, want %d", got, tc.priority)
			}
		})
	}
}

func TestIsTerminal(t *testing.T) {
	for phase, want := range map[v1.PodPhase]bool{
		v1.PodPending: false, v1.PodRunning: false, v1.PodUnknown: false, "": false,
		v1.PodSucceeded: true, v1.PodFailed: true,
	} {
		if got := IsTerminal(phase); got != want {
			t.Errorf("IsTerminal(%q) = %v, want %v", phase, got, want)
		}
	}
}

func TestSidecars(t *testing.T) {
	always, never := ptr.To(v1.ContainerRestartPolicyAlways), ptr.To(v1.ContainerRestartPolicyNever)
	p := &v1.Pod{Spec: v1.PodSpec{
		InitContainers: []v1.Container{{Name: "init"}, {Name: "sidecar", RestartPolicy: always}, {Name: "once", RestartPolicy: never}},
		// An app container may carry its own restartPolicy (container restart rules): no sidecar.
		Containers: []v1.Container{{Name: "app", RestartPolicy: always}},
	}}
	tests := []struct {
		c                    *v1.Container
		restartable, sidecar bool
	}{
		{c: &p.Spec.InitContainers[0]},
		{c: &p.Spec.InitContainers[1], restartable: true, sidecar: true},
		{c: &p.Spec.InitContainers[2]},
		{c: &p.Spec.Containers[0], restartable: true},
	}
	for _, tc := range tests {
		if got := IsRestartableInitContainer(tc.c); got != tc.restartable {
			t.Errorf("IsRestartableInitContainer(%s) = %v, want %v", tc.c.Name, got, tc.restartable)
		}
		if got := IsSidecar(p, tc.c); got != tc.sidecar {
			t.Errorf("IsSidecar(%s) = %v, want %v", tc.c.Name, got, tc.sidecar)
		}
	}
}

func TestPreemptable(t *testing.T) {
	static := pod(map[string]string{AnnotationConfigSource: SourceFile}, nil, SystemNodeCritical)
	critical := pod(nil, ptr.To(SystemCriticalPriority), SystemClusterCritical)
	high := pod(nil, ptr.To[int32](1000), "")
	low := pod(nil, ptr.To[int32](10), "")
	none := pod(nil, nil, "")
	tests := []struct {
		name               string
		preemptor, preempt *v1.Pod
		want               bool
	}{
		{name: "a static pod preempts a pod without priority", preemptor: static, preempt: none, want: true},
		{name: "a static pod preempts a high-priority pod", preemptor: static, preempt: high, want: true},
		{name: "a static pod spares a critical pod", preemptor: static, preempt: critical},
		{name: "a critical pod spares a static pod", preemptor: critical, preempt: static},
		{name: "a critical pod preempts a lower critical one", preemptor: pod(nil, ptr.To(SystemCriticalPriority+1000), ""), preempt: critical, want: true},
		{name: "a higher priority preempts a lower one", preemptor: high, preempt: low, want: true},
		{name: "an equal priority does not", preemptor: low, preempt: pod(nil, ptr.To[int32](10), "")},
		{name: "a lower priority does not", preemptor: low, preempt: high},
		{name: "no priority on the preemptee", preemptor: high, preempt: none},
		{name: "no priority on the preemptor", preemptor: none, preempt: low},
	}
	for _, tc := range tests {
		if got := Preemptable(tc.preemptor, tc.preempt); got != tc.want {
			t.Errorf("%s: Preemptable = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestSetCondition(t *testing.T) {
	t1, t2 := metav1.Unix(100, 0), metav1.Unix(200, 0)
	ready := v1.PodCondition{Type: v1.PodReady, Status: v1.ConditionTrue, LastTransitionTime: t1}
	st := v1.PodStatus{Conditions: []v1.PodCondition{ready}}
	SetCondition(&st, v1.PodCondition{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: "A", LastTransitionTime: t1})
	SetCondition(&st, v1.PodCondition{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: "B", LastTransitionTime: t2})
	if len(st.Conditions) != 2 || st.Conditions[0] != ready {
		t.Fatalf("conditions = %+v", st.Conditions)
	}
	if c := st.Conditions[1]; c.Reason != "B" || !c.LastTransitionTime.Equal(&t1) {
		t.Errorf("same status: condition = %+v, want reason B kept at %v", c, t1)
	}
	SetCondition(&st, v1.PodCondition{Type: v1.DisruptionTarget, Status: v1.ConditionFalse, LastTransitionTime: t2})
	if c := st.Conditions[1]; c.Status != v1.ConditionFalse || !c.LastTransitionTime.Equal(&t2) {
		t.Errorf("changed status: condition = %+v, want False at %v", c, t2)
	}
}
