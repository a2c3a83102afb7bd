package allocation

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/cgroups"
	"github.com/nodelet/nodelet/internal/testsupport/resourcetest"
)

func podWith(containers ...v1.Container) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-p", Generation: 2}, Spec: v1.PodSpec{Containers: containers}}
}

func TestUpdatePodFromAllocation(t *testing.T) {
	desired := podWith(v1.Container{Name: "a", Resources: res("200m", "128Mi", "200m", "128Mi")}, v1.Container{Name: "b", Resources: res("50m", "", "", "")})
	desired.Spec.InitContainers = []v1.Container{{Name: "side", Resources: res("10m", "", "", "")}}
	admitted := desired.DeepCopy()
	admitted.Spec.Containers[0].Resources = res("100m", "64Mi", "100m", "64Mi")
	alloc := ResourceInfoForPod(admitted)

	got, differs := UpdatePodFromAllocation(desired, alloc)
	if !differs || got == desired {
		t.Fatalf("differs = %v, copied = %v", differs, got != desired)
	}
	if c := got.Spec.Containers[0].Resources.Limits.Memory(); c.String() != "64Mi" {
		t.Errorf("a's memory limit = %s, want the allocated 64Mi", c)
	}
	if desired.Spec.Containers[0].Resources.Limits.Memory().String() != "128Mi" {
		t.Error("the desired pod was modified")
	}
	same, differs := UpdatePodFromAllocation(admitted, alloc)
	if differs || same != admitted {
		t.Errorf("an allocated pod came back changed (%v) or copied (%v)", differs, same != admitted)
	}
	// A container the allocation does not know keeps its spec.
	extra := admitted.DeepCopy()
	extra.Spec.Containers = append(extra.Spec.Containers, v1.Container{Name: "new", Resources: res("1", "", "", "")})
	if _, differs := UpdatePodFromAllocation(extra, alloc); differs {
		t.Error("an unknown container counted as resized")
	}
	// Pod-level resources are allocated too.
	withPod := admitted.DeepCopy()
	withPod.Spec.Resources = &v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")}}
	if back, differs := UpdatePodFromAllocation(withPod, alloc); !differs || back.Spec.Resources != nil {
		t.Errorf("pod-level resources not taken from the allocation: differs = %v, resources = %v", differs, back.Spec.Resources)
	}
}

func TestResizeInfeasible(t *testing.T) {
	limited := cgroups.ResourceOptions{SwapBehavior: cgroups.LimitedSwap, SwapControllerAvailable: true, CgroupV2: true}
	restartMem := []v1.ContainerResizePolicy{{ResourceName: v1.ResourceMemory, RestartPolicy: v1.RestartContainer}}
	for _, tc := range []struct {
		name               string
		allocated, desired v1.ResourceRequirements
		policy             []v1.ContainerResizePolicy
		podLevel           bool
		opts               cgroups.ResourceOptions
		static             StaticManagers
		want               string
	}{
		{name: "cpu and memory, no swap", allocated: res("100m", "64Mi", "", "128Mi"), desired: res("200m", "128Mi", "", "256Mi"), want: ""},
		{name: "memory request of a swapping container", allocated: res("100m", "64Mi", "", "128Mi"), desired: res("100m", "96Mi", "", "128Mi"), opts: limited, want: MessageSwap},
		{name: "swapping container restarted on memory resize", allocated: res("100m", "64Mi", "", "128Mi"), desired: res("100m", "96Mi", "", "128Mi"), opts: limited, policy: restartMem, want: ""},
		{name: "cpu of a swapping container", allocated: res("100m", "64Mi", "", "128Mi"), desired: res("300m", "64Mi", "", "128Mi"), opts: limited, want: ""},
		{name: "guaranteed never swaps", allocated: res("100m", "64Mi", "100m", "64Mi"), desired: res("100m", "96Mi", "100m", "96Mi"), opts: limited, want: ""},
		{name: "pod-level resources", allocated: res("100m", "", "", ""), desired: res("100m", "", "", ""), podLevel: true, want: MessagePodLevel},
		{name: "guaranteed under the static CPU manager", allocated: res("1", "64Mi", "1", "64Mi"), desired: res("2", "64Mi", "2", "64Mi"), static: StaticManagers{CPU: true}, want: MessageCPUManager},
		{name: "guaranteed under the static memory manager", allocated: res("1", "64Mi", "1", "64Mi"), desired: res("1", "96Mi", "1", "96Mi"), static: StaticManagers{Memory: true}, want: MessageMemoryManager},
		{name: "burstable under both static managers", allocated: res("100m", "64Mi", "", "128Mi"), desired: res("200m", "64Mi", "", "128Mi"), static: StaticManagers{CPU: true, Memory: true}, want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			allocated := podWith(v1.Container{Name: "c", Resources: tc.allocated, ResizePolicy: tc.policy})
			desired := podWith(v1.Container{Name: "c", Resources: tc.desired, ResizePolicy: tc.policy})
			if tc.podLevel {
				desired.Spec.Resources = &v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceCPU: resource.MustParse("2")}}
			}
			if got := ResizeInfeasible(desired, allocated, tc.opts, tc.static); got != tc.want {
				t.Errorf("ResizeInfeasible = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestIsResizeInProgress(t *testing.T) {
	always := v1.ContainerRestartPolicyAlways
	pod := podWith(v1.Container{Name: "app", Resources: res("200m", "128Mi", "200m", "128Mi")})
	pod.Spec.InitContainers = []v1.Container{
		{Name: "init", Resources: res("1", "", "", "")},
		{Name: "side", RestartPolicy: &always, Resources: res("50m", "", "", "")},
	}
	actuated := map[string]v1.ResourceRequirements{
		"app":  res("200m", "128Mi", "200m", "128Mi"),
		"init": res("500m", "", "", ""),
		"side": res("50m", "", "", ""),
	}
	for _, tc := range []struct {
		name    string
		running []string
		change  func(map[string]v1.ResourceRequirements)
		want    bool
	}{
		{name: "all actuated", running: []string{"app", "side"}, want: false},
		{name: "app memory limit pending", running: []string{"app"}, change: func(m map[string]v1.ResourceRequirements) { m["app"] = res("200m", "128Mi", "200m", "64Mi") }, want: true},
		{name: "app not running", running: nil, change: func(m map[string]v1.ResourceRequirements) { m["app"] = res("100m", "", "", "") }, want: false},
		{name: "sidecar pending", running: []string{"app", "side"}, change: func(m map[string]v1.ResourceRequirements) { m["side"] = res("20m", "", "", "") }, want: true},
		// Upstream's check leaves regular init containers out.
		{name: "regular init container differs", running: []string{"app", "init"}, want: false},
		{name: "no actuated record", running: []string{"app"}, change: func(m map[string]v1.ResourceRequirements) { delete(m, "app") }, want: true},
		// Equal quantities in other forms are equal.
		{name: "same values other units", running: []string{"app"}, change: func(m map[string]v1.ResourceRequirements) { m["app"] = res("0.2", "131072Ki", "0.2", "0.125Gi") }, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			act := map[string]v1.ResourceRequirements{}
			for k, v := range actuated {
				act[k] = v
			}
			if tc.change != nil {
				tc.change(act)
			}
			running := map[string]bool{}
			for _, n := range tc.running {
				running[n] = true
			}
			got := IsResizeInProgress(pod, func(n string) bool { return running[n] }, func(n string) (v1.ResourceRequirements, bool) {
				r, ok := act[n]
				return r, ok
			})
			if got != tc.want {
				t.Errorf("IsResizeInProgress = %v, want %v", got, tc.want)
			}
		})
	}
}

// The event messages, against upstream's own expectations.
func TestResizeMessages(t *testing.T) {
	pod := podWith(v1.Container{Name: "c0", Resources: res("100m", "100", "100m", "100")})
	if got, want := ResizeCompletedMessage(pod, 1), `Pod resize completed: {"containers":[{"name":"c0","resources":{"limits":{"cpu":"100m","memory":"100"},"requests":{"cpu":"100m","memory":"100"}}}],"generation":1}`; got != want {
		t.Errorf("completed =\n%s\nwant\n%s", got, want)
	}
	always := v1.ContainerRestartPolicyAlways
	several := podWith(v1.Container{Name: "c1", Resources: res("", "100", "", "200")}, v1.Container{Name: "c2", Resources: res("200m", "100", "", "")})
	several.Spec.InitContainers = []v1.Container{{Name: "c0", RestartPolicy: &always, Resources: res("100m", "", "200m", "")}}
	if got, want := ResizeStartedMessage(several, 2), `Pod resize started: {"initContainers":[{"name":"c0","resources":{"limits":{"cpu":"200m"},"requests":{"cpu":"100m"}}}],"containers":[{"name":"c1","resources":{"limits":{"memory":"200"},"requests":{"memory":"100"}}},{"name":"c2","resources":{"requests":{"cpu":"200m","memory":"100"}}}],"generation":2}`; got != want {
		t.Errorf("started =\n%s\nwant\n%s", got, want)
	}
	empty := podWith(v1.Container{Name: "c0"})
	if got, want := ResizeCompletedMessage(empty, 3), `Pod resize completed: {"containers":[{"name":"c0","resources":{}}],"generation":3}`; got != want {
		t.Errorf("best-effort =\n%s\nwant\n%s", got, want)
	}
	cpu5 := podWith(v1.Container{Name: "c1", Resources: res("5", "4500Mi", "", "")})
	msg := "Node didn't have enough resource: cpu, requested: 5000, used: 0, capacity: 4000"
	if got, want := ResizePendingMessage(cpu5, "OutOfcpu", msg, 2), `Pod resize OutOfcpu: {"containers":[{"name":"c1","resources":{"requests":{"cpu":"5","memory":"4500Mi"}}}],"generation":2,"error":"Node didn't have enough resource: cpu, requested: 5000, used: 0, capacity: 4000"}`; got != want {
		t.Errorf("pending =\n%s\nwant\n%s", got, want)
	}
	if got := ResizeErrorMessage(pod, 4, "boom"); got != `Pod resize error: {"containers":[{"name":"c0","resources":{"limits":{"cpu":"100m","memory":"100"},"requests":{"cpu":"100m","memory":"100"}}}],"generation":4,"error":"boom"}` {
		t.Errorf("error = %s", got)
	}
}

var res = resourcetest.Requirements
