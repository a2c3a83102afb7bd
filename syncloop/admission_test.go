package syncloop

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/internal/testsupport/eventually"
	"github.com/nodelet/nodelet/podconfig"
	"github.com/nodelet/nodelet/podruntime"
)

// add hands pods to the loop as a source's additions.
func (r *rig) add(source string, pods ...*v1.Pod) {
	r.sources.ch <- podconfig.Update{Op: podconfig.OpAdd, Pods: pods, Source: source}
}

// waitRejected waits for pod to be refused at admission with reason.
func (r *rig) waitRejected(t *testing.T, pod *v1.Pod, reason string) v1.PodStatus {
	t.Helper()
	var s v1.PodStatus
	eventually.True(t, pod.Name+" to be rejected with "+reason, func() bool {
		var ok bool
		s, ok = r.status.GetPodStatus(pod.UID)
		return ok && s.Phase == v1.PodFailed && s.Reason == reason
	})
	return s
}

// drainEvents returns the events the recorder holds.
func (r *rig) drainEvents() []string {
	var out []string
	for {
		select {
		case e := <-r.rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// TestCriticalPodPreemptsOnAdmission: a static pod short of memory stops the
// running pod whose request frees it (Failed, Preempting, DisruptionTarget, a
// Warning event, kubelet_preemptions counted) and then runs.
func TestCriticalPodPreemptsOnAdmission(t *testing.T) {
	r := newRig(t, nil)
	r.ready()
	victim := newPod("uid-victim", "victim")
	victim.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceMemory: resource.MustParse("3Gi")}
	r.add("api", victim)
	eventually.True(t, "the victim to run", func() bool { return running(r.containers(t, "uid-victim")) == 1 })

	critical := newPod("uid-critical", "critical")
	critical.Annotations = map[string]string{podutil.AnnotationConfigSource: podutil.SourceFile}
	critical.Spec.PriorityClassName = podutil.SystemNodeCritical
	critical.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceMemory: resource.MustParse("2Gi")}
	r.add("file", critical)

	eventually.True(t, "the critical pod to run", func() bool { return running(r.containers(t, "uid-critical")) == 1 })
	if n := running(r.containers(t, "uid-victim")); n != 0 {
		t.Fatalf("the preempted pod still runs %d containers", n)
	}
	s, _ := r.status.GetPodStatus(victim.UID)
	if s.Phase != v1.PodFailed || s.Reason != "Preempting" || s.Message != "Preempted in order to admit critical pod" {
		t.Errorf("victim status = %s/%s %q, want Failed/Preempting", s.Phase, s.Reason, s.Message)
	}
	i := slices.IndexFunc(s.Conditions, func(c v1.PodCondition) bool { return c.Type == v1.DisruptionTarget })
	if i < 0 || s.Conditions[i].Status != v1.ConditionTrue || s.Conditions[i].Reason != v1.PodReasonTerminationByKubelet ||
		s.Conditions[i].Message != "Pod was preempted by Kubelet to accommodate a critical pod." {
		t.Errorf("victim conditions = %+v, want DisruptionTarget by the kubelet", s.Conditions)
	}
	if cs, ok := r.status.GetPodStatus(critical.UID); ok && cs.Phase == v1.PodFailed {
		t.Errorf("the critical pod was rejected: %s %s", cs.Reason, cs.Message)
	}
	if !slices.Contains(r.drainEvents(), "Warning Preempting Preempted in order to admit critical pod") {
		t.Error("no Preempting event")
	}
	if got := testutil.ToFloat64(r.loop.metrics.preemptions.WithLabelValues("memory")); got != 1 {
		t.Errorf("kubelet_preemptions{preemption_signal=memory} = %v, want 1", got)
	}
}

// TestCriticalPodWithoutVictimsIsRejected: when no lower-priority pod frees
// enough, the critical pod is refused as upstream does and nothing is stopped.
func TestCriticalPodWithoutVictimsIsRejected(t *testing.T) {
	r := newRig(t, nil)
	r.ready()
	other := newPod("uid-other", "other")
	r.add("api", other)
	eventually.True(t, "the other pod to run", func() bool { return running(r.containers(t, "uid-other")) == 1 })
	critical := newPod("uid-critical", "critical")
	critical.Annotations = map[string]string{podutil.AnnotationConfigSource: podutil.SourceFile}
	critical.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceMemory: resource.MustParse("5Gi")}
	r.add("file", critical)
	if s := r.waitRejected(t, critical, "UnexpectedAdmissionError"); !strings.Contains(s.Message, "no set of running pods found to reclaim resources: [(res: memory, q: 1073741824), ]") {
		t.Errorf("message = %q", s.Message)
	}
	if running(r.containers(t, "uid-other")) != 1 {
		t.Error("a pod was stopped although stopping it could not make room")
	}
	if got := testutil.ToFloat64(r.loop.metrics.admissionRejections.WithLabelValues("UnexpectedAdmissionError")); got != 1 {
		t.Errorf("kubelet_admission_rejections_total{reason=UnexpectedAdmissionError} = %v, want 1", got)
	}
}

// nodeObjects serves a stale Node from its cache and the current one on a fresh read.
type nodeObjects struct {
	mu            sync.Mutex
	cached, fresh *v1.Node
	freshReads    int
}

func (n *nodeObjects) get(_ context.Context, fresh bool) (*v1.Node, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if fresh {
		n.freshReads++
		return n.fresh.DeepCopy(), nil
	}
	return n.cached.DeepCopy(), nil
}

// TestAdmissionReadsTheNodeAgainForNodeAffinity: a pod whose only unfit is its
// node selector is judged again on a Node read now (its labels just changed).
func TestAdmissionReadsTheNodeAgainForNodeAffinity(t *testing.T) {
	nodes := &nodeObjects{cached: &v1.Node{}, fresh: &v1.Node{}}
	nodes.cached.Name, nodes.cached.Labels = "node1", map[string]string{"disk": "hdd"}
	nodes.fresh.Name, nodes.fresh.Labels = "node1", map[string]string{"disk": "ssd"}
	r := newRig(t, nil, func(_ context.Context, _ *rig, _ *podruntime.Deps, d *Deps) { d.NodeObject = nodes.get })
	r.ready()
	pod := newPod("uid-ssd", "ssd")
	pod.Spec.NodeSelector = map[string]string{"disk": "ssd"}
	r.add("api", pod)
	eventually.True(t, "the pod to run", func() bool { return running(r.containers(t, "uid-ssd")) == 1 })

	other := newPod("uid-nvme", "nvme")
	other.Spec.NodeSelector = map[string]string{"disk": "nvme"}
	r.add("api", other)
	r.waitRejected(t, other, "NodeAffinity")
	nodes.mu.Lock()
	defer nodes.mu.Unlock()
	if nodes.freshReads != 2 {
		t.Errorf("fresh Node reads = %d, want one for each pod failing only its node affinity", nodes.freshReads)
	}
}

// TestAdmittersOrder: Admitters run before the node's own checks (pressure),
// AdmittersAfter after them (shutdown), as upstream's handlers.
func TestAdmittersOrder(t *testing.T) {
	r := newRig(t, nil, func(_ context.Context, _ *rig, _ *podruntime.Deps, d *Deps) {
		d.Admitters = []func(*v1.Pod) *Rejection{func(p *v1.Pod) *Rejection {
			if p.Name == "pressure" {
				return &Rejection{Reason: "Evicted", Message: "The node had condition: [MemoryPressure]. "}
			}
			return nil
		}}
		d.AdmittersAfter = []func(*v1.Pod) *Rejection{func(*v1.Pod) *Rejection {
			return &Rejection{Reason: "NodeShutdown", Message: "Pod was rejected as the node is shutting down."}
		}}
	})
	r.ready()
	huge := func(uid, name string) *v1.Pod {
		p := newPod(uid, name)
		p.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse("3")}
		return p
	}
	want := map[*v1.Pod]string{huge("uid-p", "pressure"): "Evicted", huge("uid-h", "huge"): "OutOfcpu", newPod("uid-s", "small"): "NodeShutdown"}
	for p := range want {
		r.add("api", p)
	}
	for p, reason := range want {
		r.waitRejected(t, p, reason)
	}
	for label, n := range map[string]float64{"Evicted": 1, "OutOfcpu": 1, "NodeShutdown": 1} {
		if got := testutil.ToFloat64(r.loop.metrics.admissionRejections.WithLabelValues(label)); got != n {
			t.Errorf("kubelet_admission_rejections_total{reason=%s} = %v, want %v", label, got, n)
		}
	}
}

func TestAdmissionRejectionLabel(t *testing.T) {
	m := newMetrics(nil, func() int { return 0 })
	for _, r := range []string{"OutOfmemory", "OutOfexample.com/dongle", "NodeAffinity", "TaintToleration", "SysctlForbidden", "OutOfhugepages-2Mi"} {
		m.admissionRejected(r)
	}
	for label, n := range map[string]float64{"OutOfmemory": 1, "OutOfExtendedResources": 2, "Other": 2, "SysctlForbidden": 1} {
		if got := testutil.ToFloat64(m.admissionRejections.WithLabelValues(label)); got != n {
			t.Errorf("%s = %v, want %v", label, got, n)
		}
	}
}

// fakeDeviceAllocator refuses pods named "greedy" with the device manager's
// words and records the active pods it was given.
type fakeDeviceAllocator struct {
	mu     sync.Mutex
	active map[string][]string
}

func (f *fakeDeviceAllocator) Allocate(_ context.Context, pod *v1.Pod, active []*v1.Pod, _ bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range active {
		f.active[pod.Name] = append(f.active[pod.Name], p.Name)
	}
	if pod.Name == "greedy" {
		return errors.New("requested number of devices unavailable for example.com/gpu. Requested: 2, Available: 1")
	}
	return nil
}

// TestDeviceAllocationFailureRejects: a pod whose devices cannot be allocated
// fails with upstream's UnexpectedAdmissionError and message; others are
// allocated knowing the pods already admitted.
func TestDeviceAllocationFailureRejects(t *testing.T) {
	devs := &fakeDeviceAllocator{active: map[string][]string{}}
	r := newRig(t, nil, func(_ context.Context, _ *rig, _ *podruntime.Deps, d *Deps) { d.Resources = devs })
	r.ready()
	first := newPod("uid-a", "first")
	r.add("api", first)
	eventually.True(t, "first to run", func() bool {
		s, ok := r.status.GetPodStatus(first.UID)
		return ok && s.Phase == v1.PodRunning
	})
	greedy := newPod("uid-g", "greedy")
	r.add("api", greedy)
	s := r.waitRejected(t, greedy, "UnexpectedAdmissionError")
	if want := "Pod was rejected: Allocate failed due to requested number of devices unavailable for example.com/gpu. Requested: 2, Available: 1, which is unexpected"; s.Message != want {
		t.Errorf("message %q, want %q", s.Message, want)
	}
	devs.mu.Lock()
	defer devs.mu.Unlock()
	if got := devs.active["greedy"]; len(got) != 1 || got[0] != "first" {
		t.Errorf("active pods given for greedy = %v, want [first]", got)
	}
}
