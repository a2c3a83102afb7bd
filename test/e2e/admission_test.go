//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/test/e2e/framework"
)

// allocatableMemory is the memory the node advertises for pods (what admission counts against).
func allocatableMemory(ctx context.Context, t *testing.T, f *framework.Framework) resource.Quantity {
	t.Helper()
	node, err := f.Client.CoreV1().Nodes().Get(ctx, f.Env.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting node: %v", err)
	}
	q, ok := node.Status.Allocatable[v1.ResourceMemory]
	if !ok || q.IsZero() {
		t.Fatalf("node allocatable has no memory: %v", node.Status.Allocatable)
	}
	return q
}

// TestAdmissionPredicates (issue 17, admission): the node refuses, with
// upstream's reason, message and event, a pod asking for more memory than it
// has allocatable (OutOfmemory), a pod whose host port a running pod holds
// (NodePorts) and a pod whose required node affinity names another node
// (NodeAffinity); each ends Failed without running.
func TestAdmissionPredicates(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	l := &lifecycle{f: f, ns: f.NewNamespace(), dir: t.TempDir()}
	startNode(t, f, framework.NodeletOptions{})
	alloc := allocatableMemory(ctx, t, f)

	t.Run("MoreMemoryThanAllocatable", func(t *testing.T) {
		t.Parallel()
		p := f.BusyboxPod(l.ns, "too-much-memory", "sleep", "3600")
		want := alloc.DeepCopy()
		want.Add(resource.MustParse("1Gi"))
		p.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceMemory: want}
		// The other subtests' pods request no memory.
		l.rejected(ctx, t, p, "OutOfmemory",
			fmt.Sprintf("Node didn't have enough resource: memory, requested: %d, used: 0, capacity: %d", want.Value(), alloc.Value()))
	})

	t.Run("HostPortTaken", func(t *testing.T) {
		t.Parallel()
		withPort := func(name string) *v1.Pod {
			p := f.BusyboxPod(l.ns, name, "sleep", "3600")
			p.Spec.NodeName = f.Env.NodeName
			p.Spec.Containers[0].Ports = []v1.ContainerPort{{ContainerPort: 8080, HostPort: 31080, Protocol: v1.ProtocolTCP}}
			return p
		}
		first := withPort("host-port-first")
		l.create(ctx, t, first)
		l.wait(ctx, t, first.Name, 2*time.Minute, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
		l.rejected(ctx, t, withPort("host-port-second"), "NodePorts",
			"Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports")
		// The first pod is untouched.
		got := l.wait(ctx, t, first.Name, time.Second, "", func(*v1.Pod) bool { return true })
		if got.Status.Phase != v1.PodRunning {
			t.Errorf("the pod holding the port: %s", framework.DescribePod(got))
		}
	})

	t.Run("RequiredAffinityToAnotherNode", func(t *testing.T) {
		t.Parallel()
		p := f.BusyboxPod(l.ns, "affinity-elsewhere", "sleep", "3600")
		p.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
				MatchExpressions: []v1.NodeSelectorRequirement{{Key: v1.LabelHostname, Operator: v1.NodeSelectorOpIn, Values: []string{"not-" + f.Env.NodeName}}},
			}}},
		}}
		l.rejected(ctx, t, p, "NodeAffinity", "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector")
	})
}

// TestCriticalStaticPodPreemptsOnAdmission (issue 17, admission): a static pod
// of priority class system-node-critical that does not fit next to a running
// pod gets it preempted, as upstream's kubelet does: the running pod ends
// Failed with reason Preempting, a DisruptionTarget condition and a Preempting
// event, and the static pod runs.
func TestCriticalStaticPodPreemptsOnAdmission(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	l := &lifecycle{f: f, ns: f.NewNamespace(), dir: t.TempDir()}
	n := startNode(t, f, framework.NodeletOptions{})
	alloc := allocatableMemory(ctx, t, f)

	// The victim requests all but 150Mi of the node's memory (it uses next to none).
	victim := f.BusyboxPod(l.ns, "low-priority", "sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait")
	victim.Spec.NodeName = f.Env.NodeName
	victim.Spec.TerminationGracePeriodSeconds = ptr.To[int64](5)
	request := alloc.DeepCopy()
	request.Sub(resource.MustParse("150Mi"))
	victim.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceMemory: request}
	l.create(ctx, t, victim)
	l.wait(ctx, t, victim.Name, 2*time.Minute, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })

	static := f.BusyboxPod("kube-system", "critical-static", "sleep", "3600")
	static.Spec.PriorityClassName = podutil.SystemNodeCritical
	static.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceMemory: resource.MustParse("200Mi")}
	start := time.Now()
	n.WriteStaticPod(static)

	got := l.wait(ctx, t, victim.Name, 2*time.Minute, "preempted", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
	if got.Status.Reason != "Preempting" || got.Status.Message != "Preempted in order to admit critical pod" {
		t.Errorf("victim status reason %q message %q, want Preempting %q", got.Status.Reason, got.Status.Message, "Preempted in order to admit critical pod")
	}
	i := slices.IndexFunc(got.Status.Conditions, func(c v1.PodCondition) bool { return c.Type == v1.DisruptionTarget })
	if i < 0 || got.Status.Conditions[i].Status != v1.ConditionTrue || got.Status.Conditions[i].Reason != v1.PodReasonTerminationByKubelet ||
		got.Status.Conditions[i].Message != "Pod was preempted by Kubelet to accommodate a critical pod." {
		t.Errorf("victim conditions = %+v, want DisruptionTarget True TerminationByKubelet", got.Status.Conditions)
	}
	for _, cs := range got.Status.ContainerStatuses {
		if cs.State.Running != nil {
			t.Errorf("the preempted pod still runs: %s", framework.DescribePod(got))
		}
	}
	l.waitEvent(ctx, t, victim.Name, "Preempting", "Preempted in order to admit critical pod")

	mirror := f.WaitForPod(ctx, "kube-system", static.Name+"-"+f.Env.NodeName, 2*time.Minute, "a Running mirror pod",
		func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	t.Logf("victim preempted and the critical static pod running %.1fs after its manifest was written; mirror priority %v",
		time.Since(start).Seconds(), ptr.Deref(mirror.Spec.Priority, -1))
}
