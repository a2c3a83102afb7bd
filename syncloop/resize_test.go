package syncloop

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/allocation"
	"github.com/nodelet/nodelet/internal/testsupport/eventually"
	"github.com/nodelet/nodelet/podconfig"
	"github.com/nodelet/nodelet/podruntime"
)

// withActuated shares one actuated record between the runtime and the loop,
// as the agent wires them.
func withActuated() rigOption {
	act := allocation.NewMemoryState()
	return func(_ context.Context, _ *rig, rt *podruntime.Deps, deps *Deps) {
		rt.Actuated, deps.Actuated = act, act
	}
}

func sized(uid, name string, gen int64, cpuReq, memReq, cpuLim, memLim string) *v1.Pod {
	p := newPod(uid, name)
	p.Generation = gen
	r := v1.ResourceRequirements{Requests: v1.ResourceList{}, Limits: v1.ResourceList{}}
	for l, kv := range map[*v1.ResourceList][2]string{&r.Requests: {cpuReq, memReq}, &r.Limits: {cpuLim, memLim}} {
		if kv[0] != "" {
			(*l)[v1.ResourceCPU] = resource.MustParse(kv[0])
		}
		if kv[1] != "" {
			(*l)[v1.ResourceMemory] = resource.MustParse(kv[1])
		}
	}
	p.Spec.Containers[0].Resources = r
	return p
}

func (r *rig) send(op podconfig.Op, pods ...*v1.Pod) {
	r.sources.ch <- podconfig.Update{Op: op, Pods: pods, Source: "api"}
}

func (r *rig) condition(uid types.UID, t v1.PodConditionType) *v1.PodCondition {
	s, _ := r.status.GetPodStatus(uid)
	for i := range s.Conditions {
		if s.Conditions[i].Type == t {
			return &s.Conditions[i]
		}
	}
	return nil
}

func (r *rig) containerStatus(uid types.UID) v1.ContainerStatus {
	s, _ := r.status.GetPodStatus(uid)
	if len(s.ContainerStatuses) == 0 {
		return v1.ContainerStatus{}
	}
	return s.ContainerStatuses[0]
}

// eventLog gathers a rig's events, so several expectations can look at them.
type eventLog struct {
	r    *rig
	seen []string
}

// saw returns a condition: an event starting with prefix was recorded.
func (l *eventLog) saw(prefix string) func() bool {
	return func() bool {
		for {
			select {
			case e := <-l.r.rec.Events:
				l.seen = append(l.seen, e)
				continue
			default:
			}
			break
		}
		for _, e := range l.seen {
			if strings.HasPrefix(e, prefix) {
				return true
			}
		}
		return false
	}
}

// allocatedCPU is the milli-cpu status.containerStatuses[0].allocatedResources reports.
func (r *rig) allocatedCPU(uid types.UID) int64 {
	l := r.containerStatus(uid).AllocatedResources
	return l.Cpu().MilliValue()
}

func (r *rig) runningContainer(t *testing.T, uid string) *runtimeapi.Container {
	t.Helper()
	for _, c := range r.containers(t, uid) {
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			return c
		}
	}
	return nil
}

// startedGuaranteed runs a loop with one running Guaranteed 100m/64Mi pod.
func startedGuaranteed(t *testing.T, uid, name string, opts ...rigOption) (*rig, *v1.Pod) {
	t.Helper()
	r := newRig(t, nil, append([]rigOption{withActuated()}, opts...)...)
	r.ready()
	pod := sized(uid, name, 1, "100m", "64Mi", "100m", "64Mi")
	r.send(podconfig.OpAdd, pod)
	eventually.True(t, "the pod to run", func() bool { return r.runningContainer(t, uid) != nil })
	return r, pod
}

// A pod grown from 100m/64Mi to 200m/128Mi through an update: admitted at
// once, actuated on the running container, reported in its status, and the
// conditions and events come and go as upstream's.
func TestResizeInPlaceThroughTheLoop(t *testing.T) {
	reg := prometheus.NewRegistry()
	r, pod := startedGuaranteed(t, "uid-r", "resize", func(_ context.Context, _ *rig, _ *podruntime.Deps, deps *Deps) { deps.Registerer = reg })
	id := r.runningContainer(t, "uid-r").Id

	events := &eventLog{r: r}
	started, completed := events.saw("Normal ResizeStarted Pod resize started: "), events.saw("Normal ResizeCompleted Pod resize completed: ")
	r.send(podconfig.OpUpdate, sized("uid-r", "resize", 2, "200m", "128Mi", "200m", "128Mi"))
	eventually.True(t, "the runtime to get the new resources", func() bool {
		res := r.fake.ContainerConfig(id).GetLinux().GetResources()
		return res.GetMemoryLimitInBytes() == 128<<20 && res.GetCpuShares() == 204
	})
	eventually.True(t, "the status to report the resize done", func() bool {
		cs := r.containerStatus(pod.UID)
		s, _ := r.status.GetPodStatus(pod.UID)
		return cs.AllocatedResources.Cpu().MilliValue() == 200 && cs.Resources != nil &&
			cs.Resources.Limits.Memory().Value() == 128<<20 && cs.Resources.Requests.Cpu().MilliValue() == 200 &&
			r.condition(pod.UID, v1.PodResizeInProgress) == nil && s.ObservedGeneration == 2
	})
	eventually.True(t, "a ResizeStarted event", started)
	eventually.True(t, "a ResizeCompleted event", completed)
	cs := r.containerStatus(pod.UID)
	if cs.RestartCount != 0 || cs.ContainerID != "containerd://"+id {
		t.Errorf("the container restarted: restartCount %d, id %s (was %s)", cs.RestartCount, cs.ContainerID, id)
	}

	// Upstream's resize metrics: four requested changes, one successful
	// actuation, nothing in progress any more.
	want := `
# HELP kubelet_container_requested_resizes_total Number of requested resizes, counted at the container level. Different resources on the same container are counted separately. The 'requirement' label refers to 'memory' or 'limits'; the 'operation' label can be one of 'add', 'remove', 'increase' or 'decrease'.
# TYPE kubelet_container_requested_resizes_total counter
kubelet_container_requested_resizes_total{operation="increase",requirement="limits",resource="cpu"} 1
kubelet_container_requested_resizes_total{operation="increase",requirement="limits",resource="memory"} 1
kubelet_container_requested_resizes_total{operation="increase",requirement="requests",resource="cpu"} 1
kubelet_container_requested_resizes_total{operation="increase",requirement="requests",resource="memory"} 1
# HELP kubelet_pod_in_progress_resizes Number of in-progress resizes for pods.
# TYPE kubelet_pod_in_progress_resizes gauge
kubelet_pod_in_progress_resizes 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kubelet_container_requested_resizes_total", "kubelet_pod_in_progress_resizes"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(r.loop.metrics.resizeDuration, "kubelet_pod_resize_duration_milliseconds"); n != 1 {
		t.Errorf("pod_resize_duration_milliseconds series = %d, want 1 (success=true)", n)
	}
}

func TestRequestedResizes(t *testing.T) {
	always := v1.ContainerRestartPolicyAlways
	old := sized("u", "p", 1, "100m", "64Mi", "", "128Mi")
	old.Spec.InitContainers = []v1.Container{{Name: "side", RestartPolicy: &always, Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("10m")}}}}
	cur := old.DeepCopy()
	cur.Spec.Containers[0].Resources.Requests[v1.ResourceCPU] = resource.MustParse("50m")
	cur.Spec.Containers[0].Resources.Limits[v1.ResourceCPU] = resource.MustParse("1")
	delete(cur.Spec.Containers[0].Resources.Limits, v1.ResourceMemory)
	cur.Spec.InitContainers[0].Resources.Requests[v1.ResourceCPU] = resource.MustParse("20m")
	got := fmt.Sprint(requestedResizes(old, cur))
	if want := "[{cpu requests increase} {memory limits remove} {cpu requests decrease} {cpu limits add}]"; got != want {
		t.Errorf("requestedResizes = %s\nwant %s", got, want)
	}
	if ops := requestedResizes(old, old.DeepCopy()); len(ops) != 0 {
		t.Errorf("no change gave %v", ops)
	}
}

// A resize that does not fit waits (Deferred, with the admission's words)
// and goes through once another pod leaves.
func TestResizeDeferredUntilRoomFreesUp(t *testing.T) {
	r := newRig(t, nil, withActuated())
	r.ready()
	big := sized("uid-big", "big", 1, "1500m", "", "", "")
	small := sized("uid-small", "small", 1, "300m", "", "", "")
	r.send(podconfig.OpAdd, big, small)
	eventually.True(t, "both pods to run", func() bool {
		return r.runningContainer(t, "uid-big") != nil && r.runningContainer(t, "uid-small") != nil
	})
	deferred := (&eventLog{r: r}).saw("Warning ResizeDeferred Pod resize OutOfcpu: ")
	r.send(podconfig.OpUpdate, sized("uid-small", "small", 2, "800m", "", "", ""))
	eventually.True(t, "PodResizePending Deferred", func() bool {
		c := r.condition(small.UID, v1.PodResizePending)
		return c != nil && c.Reason == v1.PodReasonDeferred && c.ObservedGeneration == 2 &&
			c.Message == "Node didn't have enough resource: cpu, requested: 800, used: 1500, capacity: 2000"
	})
	eventually.True(t, "a ResizeDeferred event", deferred)
	if got := r.allocatedCPU(small.UID); got != 300 {
		t.Fatalf("a deferred resize changed allocatedResources to %dm", got)
	}

	// Admission counts the deferred pod at its allocation (300m), not its spec
	// (800m): 1500m + 300m + 150m fit in 2 cpus.
	r.send(podconfig.OpAdd, sized("uid-third", "third", 1, "150m", "", "", ""))
	eventually.True(t, "a third pod admitted next to the deferred one", func() bool { return r.runningContainer(t, "uid-third") != nil })

	r.send(podconfig.OpRemove, big)
	eventually.True(t, "the resize to go through", func() bool {
		return r.condition(small.UID, v1.PodResizePending) == nil && r.allocatedCPU(small.UID) == 800
	})
}

// More than the node has is Deferred as well in upstream v1.37 (its own
// reason, OutOfcpu, is in the event); a pod-level resize, which nodelet lacks,
// is Infeasible and never retried.
func TestResizeBeyondAllocatableAndInfeasible(t *testing.T) {
	r, pod := startedGuaranteed(t, "uid-x", "x")

	r.send(podconfig.OpUpdate, sized("uid-x", "x", 2, "3", "64Mi", "3", "64Mi"))
	eventually.True(t, "Deferred beyond allocatable", func() bool {
		c := r.condition(pod.UID, v1.PodResizePending)
		return c != nil && c.Reason == v1.PodReasonDeferred &&
			c.Message == "Node didn't have enough resource: cpu, requested: 3000, used: 0, capacity: 2000"
	})

	infeasible := (&eventLog{r: r}).saw("Warning ResizeInfeasible Pod resize Infeasible: ")
	podLevel := sized("uid-x", "x", 3, "100m", "64Mi", "100m", "64Mi")
	podLevel.Spec.Resources = &v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")}}
	r.send(podconfig.OpUpdate, podLevel)
	eventually.True(t, "Infeasible pod-level resize", func() bool {
		c := r.condition(pod.UID, v1.PodResizePending)
		return c != nil && c.Reason == v1.PodReasonInfeasible && c.Message == allocation.MessagePodLevel && c.ObservedGeneration == 3
	})
	eventually.True(t, "a ResizeInfeasible event", infeasible)

	// Reverted to what was allocated: nothing pends any more.
	r.send(podconfig.OpUpdate, sized("uid-x", "x", 4, "100m", "64Mi", "100m", "64Mi"))
	eventually.True(t, "the pending condition to go", func() bool { return r.condition(pod.UID, v1.PodResizePending) == nil })
}
