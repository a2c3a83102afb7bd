package syncloop

import (
	"context"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/allocation"
	"github.com/nodelet/nodelet/cri"
	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/pleg"
)

// In-place pod resize (KEP-1287), the loop's part, as the upstream kubelet's
// allocation manager and SyncPod do it: a pod is admitted at its allocated
// resources (checkpointed); a change of its spec resources is a resize,
// decided at once (accepted, Deferred, Infeasible) and retried while
// Deferred when room may have freed up (a pod removed or leaving the node's
// active pods, and every few minutes); the sync works on the pod with its
// allocated resources and reports PodResizeInProgress until they are actuated.

// Allocations keeps admitted pods' allocated resources, their resize
// conditions and the pending resizes (allocation.Manager).
type Allocations interface {
	UpdatePodFromAllocation(pod *v1.Pod) (*v1.Pod, bool)
	HasAllocation(uid types.UID) bool
	SetAllocated(pod *v1.Pod) error
	RemovePod(uid types.UID)
	RemoveOrphanedPods(keep map[types.UID]bool)
	PushPendingResize(uid types.UID)
	HasPendingResizes() bool
	RetryPendingResizes(ctx context.Context, pods allocation.Pods) []types.UID
	Conditions(uid types.UID) []v1.PodCondition
	SetInProgress(uid types.UID, reason, message string, generation int64) (int64, bool)
	ClearInProgress(uid types.UID) (int64, bool)
	ClearPending(uid types.UID)
	ClearConditions(uid types.UID)
	BackfillConditions(pod *v1.Pod)
	ResizesInProgress() int
}

// ActuatedResources says what the runtime was last told of a pod's
// containers' resources (allocation.State of actuated_pods_state).
type ActuatedResources interface {
	Pod(uid types.UID) (allocation.PodResourceInfo, bool)
	Container(uid types.UID, name string) (v1.ResourceRequirements, bool)
}

// resizePods answers the allocation manager's questions for a resize.
type resizePods struct{ l *Loop }

func (r resizePods) DesiredPod(uid types.UID) (*v1.Pod, bool) {
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	p, ok := r.l.pods[uid]
	return p, ok
}

// AdmitResize runs the whole admission, as upstream does for a resize, with
// the pod at its new resources against the others at their allocated ones.
func (r resizePods) AdmitResize(ctx context.Context, pod *v1.Pod) (string, string) {
	l := r.l
	for _, a := range l.deps.Admitters {
		if rej := a(pod); rej != nil {
			return rej.Reason, rej.Message
		}
	}
	rej := Admit(pod, l.admittedPods(pod.UID), l.admitNode(ctx, false))
	if rej != nil {
		return rej.Reason, rej.Message
	}
	return "", ""
}

func (resizePods) PodRequests(pod *v1.Pod) v1.ResourceList { return podutil.PodRequests(pod) }

// noteResize handles an update of an admitted pod whose resources changed
// from old: a resize to decide now (or a reverted one, which pends no more).
func (l *Loop) noteResize(ctx context.Context, old, pod *v1.Pod) {
	if old == nil || !l.deps.Allocations.HasAllocation(pod.UID) {
		return
	}
	ops := requestedResizes(old, pod)
	for _, op := range ops {
		l.metrics.requestedResizes.WithLabelValues(op.resource, op.requirement, op.operation).Inc()
	}
	if len(ops) == 0 && apiequality.Semantic.DeepEqual(old.Spec.Resources, pod.Spec.Resources) {
		return
	}
	if _, differs := l.deps.Allocations.UpdatePodFromAllocation(pod); !differs {
		l.deps.Allocations.ClearPending(pod.UID)
		return
	}
	klog.FromContext(ctx).V(2).Info("Pod resize requested", "pod", klog.KObj(pod), "generation", pod.Generation)
	l.deps.Allocations.PushPendingResize(pod.UID)
	l.retryResizes(ctx)
}

// resizeOp is one requested change of a container's cpu or memory request or
// limit (kubelet_container_requested_resizes_total's labels).
type resizeOp struct{ resource, requirement, operation string }

// requestedResizes lists what an update changes of the containers' cpu and
// memory requests and limits, as upstream counts them: add, remove, increase
// or decrease, per container, resource and requirement.
func requestedResizes(old, pod *v1.Pod) []resizeOp {
	var out []resizeOp
	for _, lists := range [][2][]v1.Container{{old.Spec.InitContainers, pod.Spec.InitContainers}, {old.Spec.Containers, pod.Spec.Containers}} {
		was := map[string]v1.ResourceRequirements{}
		for _, c := range lists[0] {
			was[c.Name] = c.Resources
		}
		for _, c := range lists[1] {
			before, ok := was[c.Name]
			if !ok {
				continue
			}
			for _, name := range []v1.ResourceName{v1.ResourceMemory, v1.ResourceCPU} {
				for _, req := range []struct {
					label     string
					now, then v1.ResourceList
				}{{"requests", c.Resources.Requests, before.Requests}, {"limits", c.Resources.Limits, before.Limits}} {
					now, then := req.now[name], req.then[name]
					if op := resizeOperation(now, then); op != "" {
						out = append(out, resizeOp{string(name), req.label, op})
					}
				}
			}
		}
	}
	return out
}

func resizeOperation(now, then resource.Quantity) string {
	switch {
	case now.IsZero() && !then.IsZero():
		return "remove"
	case then.IsZero() && !now.IsZero():
		return "add"
	case now.Cmp(then) < 0:
		return "decrease"
	case now.Cmp(then) > 0:
		return "increase"
	}
	return ""
}

// retryResizes decides the pending resizes (once every pod source is ready,
// as upstream: until then the pods they fit next to are not all known) and
// syncs the pods whose allocation or conditions changed.
func (l *Loop) retryResizes(ctx context.Context) {
	if !l.deps.Allocations.HasPendingResizes() || !l.deps.Sources.SourcesReady() {
		return
	}
	for _, uid := range l.deps.Allocations.RetryPendingResizes(ctx, resizePods{l}) {
		l.wakePod(uid)
	}
}

// requestResizeRetry asks the loop for a retry of pending resizes soon (a pod
// left the active pods); requests coalesce.
func (l *Loop) requestResizeRetry() {
	select {
	case l.resizeRetry <- struct{}{}:
	default:
	}
}

// updateResizeInProgress sets PodResizeInProgress while a running container
// runs with other resources than allocated, and clears it (event
// ResizeCompleted) once they are actuated, as upstream at the start of each
// sync. A pod with nothing recorded as actuated (adopted from a runtime
// nodelet did not tell) is taken to run with its allocation.
func (l *Loop) updateResizeInProgress(ctx context.Context, allocated *v1.Pod, st *pleg.PodStatus) {
	if l.deps.Actuated == nil {
		return
	}
	if _, ok := l.deps.Actuated.Pod(allocated.UID); !ok {
		return
	}
	newest := map[string]*runtimeapi.ContainerStatus{}
	for _, c := range st.Containers {
		name := cri.ContainerName(c)
		if cur, ok := newest[name]; !ok || c.CreatedAt > cur.CreatedAt {
			newest[name] = c
		}
	}
	running := func(name string) bool {
		c := newest[name]
		return c != nil && c.State == runtimeapi.ContainerState_CONTAINER_RUNNING
	}
	actuated := func(name string) (v1.ResourceRequirements, bool) {
		return l.deps.Actuated.Container(allocated.UID, name)
	}
	if allocation.IsResizeInProgress(allocated, running, actuated) {
		l.deps.Allocations.SetInProgress(allocated.UID, "", "", allocated.Generation)
		return
	}
	if gen, cleared := l.deps.Allocations.ClearInProgress(allocated.UID); cleared {
		klog.FromContext(ctx).V(2).Info("Pod resize completed", "pod", klog.KObj(allocated), "generation", gen)
		l.deps.Recorder.Eventf(allocated, v1.EventTypeNormal, allocation.EventResizeCompleted, "%s", allocation.ResizeCompletedMessage(allocated, gen))
	}
}

// resizeFailed records an actuation error on PodResizeInProgress (reason
// Error), with a ResizeError event when the condition changed.
func (l *Loop) resizeFailed(allocated *v1.Pod, err error) {
	msg := err.Error()
	if gen, changed := l.deps.Allocations.SetInProgress(allocated.UID, v1.PodReasonError, msg, allocated.Generation); changed {
		l.deps.Recorder.Eventf(allocated, v1.EventTypeWarning, allocation.EventResizeError, "%s", allocation.ResizeErrorMessage(allocated, gen, msg))
	}
}
