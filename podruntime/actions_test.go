package podruntime

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/flowcontrol"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/cri"
	"github.com/nodelet/nodelet/pleg"
)

var t0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func testPod(policy v1.RestartPolicy, containers ...string) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-1"},
		Spec:       v1.PodSpec{RestartPolicy: policy},
	}
	for _, c := range containers {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: c, Image: "busybox"})
	}
	return p
}

func readySandbox(attempt uint32) *runtimeapi.PodSandboxStatus {
	return &runtimeapi.PodSandboxStatus{
		Id: "sb", State: runtimeapi.PodSandboxState_SANDBOX_READY,
		Metadata: &runtimeapi.PodSandboxMetadata{Attempt: attempt},
		Network:  &runtimeapi.PodSandboxNetworkStatus{Ip: "10.244.0.5"},
	}
}

func ctr(pod *v1.Pod, name string, state runtimeapi.ContainerState, exit int32, created int64) *runtimeapi.ContainerStatus {
	var spec *v1.Container
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			spec = &pod.Spec.Containers[i]
		}
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			spec = &pod.Spec.InitContainers[i]
		}
	}
	return &runtimeapi.ContainerStatus{
		Id: name + "-id", State: state, ExitCode: exit, CreatedAt: created,
		FinishedAt: t0.Add(-time.Second).UnixNano(),
		Labels:     map[string]string{cri.LabelContainerName: name},
		Annotations: map[string]string{
			cri.AnnotationContainerHash: ContainerHash(spec),
		},
	}
}

func TestComputeActions(t *testing.T) {
	always := testPod(v1.RestartPolicyAlways, "app")
	never := testPod(v1.RestartPolicyNever, "app")
	onFailure := testPod(v1.RestartPolicyOnFailure, "app")
	withInit := testPod(v1.RestartPolicyAlways, "app")
	withInit.Spec.InitContainers = []v1.Container{{Name: "init1", Image: "busybox"}, {Name: "init2", Image: "busybox"}}
	changed := testPod(v1.RestartPolicyAlways, "app")
	oldSpec := changed.DeepCopy()
	changed.Spec.Containers[0].Image = "busybox:2"

	tests := []struct {
		name string
		pod  *v1.Pod
		st   *pleg.PodStatus
		want Actions
	}{
		{
			name: "new pod gets a sandbox and its containers",
			pod:  always,
			st:   &pleg.PodStatus{},
			want: Actions{CreateSandbox: true, NextInit: -1, StartContainers: []int{0}},
		},
		{
			name: "running container is kept",
			pod:  always,
			st:   &pleg.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{readySandbox(0)}, Containers: []*runtimeapi.ContainerStatus{ctr(always, "app", runtimeapi.ContainerState_CONTAINER_RUNNING, 0, 1)}},
			want: Actions{SandboxID: "sb", NextInit: -1},
		},
		{
			name: "dead sandbox is replaced with the next attempt",
			pod:  always,
			st: &pleg.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{{Id: "sb", State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY, Metadata: &runtimeapi.PodSandboxMetadata{Attempt: 2}}},
				Containers: []*runtimeapi.ContainerStatus{ctr(always, "app", runtimeapi.ContainerState_CONTAINER_EXITED, 137, 1)}},
			want: Actions{KillPod: true, CreateSandbox: true, Attempt: 3, NextInit: -1, StartContainers: []int{0}},
		},
		{
			name: "restartPolicy Never gets no second sandbox after containers ran",
			pod:  never,
			st: &pleg.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{{Id: "sb", State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY, Metadata: &runtimeapi.PodSandboxMetadata{}}},
				Containers: []*runtimeapi.ContainerStatus{ctr(never, "app", runtimeapi.ContainerState_CONTAINER_EXITED, 0, 1)}},
			want: Actions{KillPod: true, Attempt: 1, NextInit: -1},
		},
		{
			name: "exited container restarts under Always",
			pod:  always,
			st:   &pleg.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{readySandbox(0)}, Containers: []*runtimeapi.ContainerStatus{ctr(always, "app", runtimeapi.ContainerState_CONTAINER_EXITED, 0, 1)}},
			want: Actions{SandboxID: "sb", NextInit: -1, StartContainers: []int{0}},
		},
		{
			name: "succeeded container under OnFailure is done: pod killed",
			pod:  onFailure,
			st:   &pleg.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{readySandbox(0)}, Containers: []*runtimeapi.ContainerStatus{ctr(onFailure, "app", runtimeapi.ContainerState_CONTAINER_EXITED, 0, 1)}},
			want: Actions{SandboxID: "sb", NextInit: -1, KillPod: true},
		},
		{
			name: "failed container under OnFailure restarts",
			pod:  onFailure,
			st:   &pleg.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{readySandbox(0)}, Containers: []*runtimeapi.ContainerStatus{ctr(onFailure, "app", runtimeapi.ContainerState_CONTAINER_EXITED, 1, 1)}},
			want: Actions{SandboxID: "sb", NextInit: -1, StartContainers: []int{0}},
		},
		{
			name: "init containers run first, in order",
			pod:  withInit,
			st:   &pleg.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{readySandbox(0)}, Containers: []*runtimeapi.ContainerStatus{ctr(withInit, "init1", runtimeapi.ContainerState_CONTAINER_EXITED, 0, 1)}},
			want: Actions{SandboxID: "sb", NextInit: 1},
		},
		{
			name: "running init container is waited for",
			pod:  withInit,
			st:   &pleg.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{readySandbox(0)}, Containers: []*runtimeapi.ContainerStatus{ctr(withInit, "init1", runtimeapi.ContainerState_CONTAINER_RUNNING, 0, 1)}},
			want: Actions{SandboxID: "sb", NextInit: -1},
		},
		{
			name: "app containers start after the last init container succeeded",
			pod:  withInit,
			st: &pleg.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{readySandbox(0)}, Containers: []*runtimeapi.ContainerStatus{
				ctr(withInit, "init1", runtimeapi.ContainerState_CONTAINER_EXITED, 0, 1), ctr(withInit, "init2", runtimeapi.ContainerState_CONTAINER_EXITED, 0, 2)}},
			want: Actions{SandboxID: "sb", NextInit: -1, StartContainers: []int{0}},
		},
		{
			name: "spec change restarts a running container",
			pod:  changed,
			st:   &pleg.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{readySandbox(0)}, Containers: []*runtimeapi.ContainerStatus{ctr(oldSpec, "app", runtimeapi.ContainerState_CONTAINER_RUNNING, 0, 1)}},
			want: Actions{SandboxID: "sb", NextInit: -1, StartContainers: []int{0}, KillContainers: map[string]string{"app-id": "Container app definition changed, will be restarted"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ComputeActions(tt.pod, tt.st, nil, t0)
			if got.KillPod != tt.want.KillPod || got.CreateSandbox != tt.want.CreateSandbox || got.Attempt != tt.want.Attempt ||
				got.SandboxID != tt.want.SandboxID || got.NextInit != tt.want.NextInit || !equalInts(got.StartContainers, tt.want.StartContainers) ||
				len(got.KillContainers) != len(tt.want.KillContainers) {
				t.Fatalf("ComputeActions() = %+v, want %+v", got, tt.want)
			}
			for id, why := range tt.want.KillContainers {
				if got.KillContainers[id] != why {
					t.Errorf("KillContainers[%s] = %q, want %q", id, got.KillContainers[id], why)
				}
			}
		})
	}
}

func TestInitFailureUnderNeverFailsPod(t *testing.T) {
	pod := testPod(v1.RestartPolicyNever, "app")
	pod.Spec.InitContainers = []v1.Container{{Name: "init1", Image: "busybox"}}
	st := &pleg.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{readySandbox(0)}, Containers: []*runtimeapi.ContainerStatus{ctr(pod, "init1", runtimeapi.ContainerState_CONTAINER_EXITED, 1, 1)}}
	got := ComputeActions(pod, st, nil, t0)
	if !got.InitFailed || !got.KillPod || len(got.StartContainers) != 0 {
		t.Fatalf("got %+v, want InitFailed and KillPod with nothing started", got)
	}
}

func TestForeignHashIsKept(t *testing.T) {
	pod := testPod(v1.RestartPolicyAlways, "app")
	c := ctr(pod, "app", runtimeapi.ContainerState_CONTAINER_RUNNING, 0, 1)
	c.Annotations[cri.AnnotationContainerHash] = "3c1f4a9e" // written by the upstream kubelet
	st := &pleg.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{readySandbox(0)}, Containers: []*runtimeapi.ContainerStatus{c}}
	if got := ComputeActions(pod, st, nil, t0); len(got.KillContainers) != 0 || len(got.StartContainers) != 0 {
		t.Fatalf("a container started by the kubelet must be adopted, got %+v", got)
	}
}

// TestCrashLoopBackOffGrows checks the restart back-off: immediate first restart,
// then waits of 10s, 20s, 40s ... capped at 5m.
func TestCrashLoopBackOffGrows(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	bo := flowcontrol.NewFakeBackOff(10*time.Second, 5*time.Minute, clk)
	pod := testPod(v1.RestartPolicyAlways, "app")
	key := BackoffKey(pod, &pod.Spec.Containers[0])
	var waits []time.Duration
	for i := 0; i < 7; i++ {
		c := ctr(pod, "app", runtimeapi.ContainerState_CONTAINER_EXITED, 1, int64(i))
		c.FinishedAt = clk.Now().UnixNano()
		st := &pleg.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{readySandbox(0)}, Containers: []*runtimeapi.ContainerStatus{c}}
		waited := time.Duration(0)
		for {
			a := ComputeActions(pod, st, bo, clk.Now())
			if len(a.StartContainers) == 1 {
				break
			}
			if a.Waiting["app"].Reason != "CrashLoopBackOff" || a.RequeueAfter <= 0 {
				t.Fatalf("restart %d: want CrashLoopBackOff with a requeue, got %+v", i, a)
			}
			clk.Step(a.RequeueAfter)
			waited += a.RequeueAfter
		}
		bo.Next(key, clk.Now()) // what startContainer records on a restart
		waits = append(waits, waited.Round(time.Second))
	}
	want := []time.Duration{0, 10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, 300 * time.Second}
	for i := range want {
		if waits[i] != want[i] {
			t.Fatalf("back-off waits = %v, want %v", waits, want)
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
