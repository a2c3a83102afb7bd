package syncloop

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/podutil"
)

const mi = 1 << 20

// preemptPod is a pod named name with requests (and limits equal to them when
// guaranteed); "cpu"/"memory" values in the usual units.
func preemptPod(name string, qos v1.PodQOSClass, cpu, memory string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name)},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "img"}}}}
	if qos == v1.PodQOSBestEffort {
		return p
	}
	r := v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse(memory)}
	p.Spec.Containers[0].Resources.Requests = r
	if qos == v1.PodQOSGuaranteed {
		p.Spec.Containers[0].Resources.Limits = r.DeepCopy()
	}
	return p
}

func withPriority(p *v1.Pod, prio int32) *v1.Pod { p.Spec.Priority = ptr.To(prio); return p }

func staticCritical(name, memory string) *v1.Pod {
	p := preemptPod(name, v1.PodQOSBurstable, "100m", memory)
	p.Annotations = map[string]string{podutil.AnnotationConfigSource: podutil.SourceFile}
	p.Spec.PriorityClassName = podutil.SystemNodeCritical
	return p
}

func names(pods []*v1.Pod) string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return strings.Join(out, ",")
}

func TestPodsToPreempt(t *testing.T) {
	bestEffort := preemptPod("bestEffort", v1.PodQOSBestEffort, "", "")
	burstable := preemptPod("burstable", v1.PodQOSBurstable, "100m", "100Mi")
	bigBurstable := preemptPod("big-burstable", v1.PodQOSBurstable, "300m", "300Mi")
	guaranteed := preemptPod("guaranteed", v1.PodQOSGuaranteed, "100m", "100Mi")
	bigGuaranteed := preemptPod("big-guaranteed", v1.PodQOSGuaranteed, "300m", "300Mi")
	clusterCritical := withPriority(preemptPod("cluster-critical", v1.PodQOSBurstable, "1", "1Gi"), podutil.SystemCriticalPriority)
	all := []*v1.Pod{bestEffort, burstable, bigBurstable, guaranteed, bigGuaranteed, clusterCritical}
	memory := func(q int64) []Shortfall { return []Shortfall{{Resource: v1.ResourceMemory, Quantity: q}} }

	tests := []struct {
		name      string
		preemptor *v1.Pod
		pods      []*v1.Pod
		need      []Shortfall
		want      string // victims in order
		err       string
	}{
		{name: "BestEffort first when it frees enough (a pod)", preemptor: staticCritical("s", "1Mi"), pods: all,
			need: []Shortfall{{Resource: v1.ResourcePods, Quantity: 1}}, want: "bestEffort"},
		{name: "the smaller of two Burstable pods that both cover it", preemptor: staticCritical("s", "1Mi"), pods: all,
			need: memory(50 * mi), want: "burstable"},
		{name: "the nearest Burstable pod first, then what is still missing", preemptor: staticCritical("s", "1Mi"), pods: all,
			need: memory(350 * mi), want: "big-burstable,burstable"},
		{name: "Guaranteed only past what BestEffort and Burstable pods free", preemptor: staticCritical("s", "1Mi"), pods: all,
			need: memory(550 * mi), want: "big-burstable,big-guaranteed"},
		{name: "every class needed", preemptor: staticCritical("s", "1Mi"), pods: all,
			need: []Shortfall{{Resource: v1.ResourceMemory, Quantity: 750 * mi}, {Resource: v1.ResourcePods, Quantity: 5}},
			want: "bestEffort,big-burstable,burstable,big-guaranteed,guaranteed"},
		{name: "cpu and memory weigh the same whatever their units", preemptor: staticCritical("s", "1Mi"),
			pods: []*v1.Pod{preemptPod("cpu-heavy", v1.PodQOSBurstable, "2", "10Mi"), preemptPod("balanced", v1.PodQOSBurstable, "500m", "200Mi")},
			need: []Shortfall{{Resource: v1.ResourceCPU, Quantity: 500}, {Resource: v1.ResourceMemory, Quantity: 200 * mi}}, want: "balanced"},
		{name: "critical pods are spared", preemptor: staticCritical("s", "1Mi"), pods: []*v1.Pod{clusterCritical, burstable},
			need: memory(200 * mi), err: "no set of running pods found to reclaim resources: [(res: memory, q: 104857600), ]"},
		{name: "a critical pod preempts a lower critical one by priority",
			preemptor: withPriority(preemptPod("node-critical", v1.PodQOSBurstable, "100m", "1Mi"), podutil.SystemCriticalPriority+1000),
			pods:      []*v1.Pod{clusterCritical}, need: memory(200 * mi), want: "cluster-critical"},
		{name: "nothing to preempt", preemptor: staticCritical("s", "1Mi"), need: memory(1),
			err: "no set of running pods found to reclaim resources: [(res: memory, q: 1), ]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := podsToPreempt(tt.preemptor, tt.pods, tt.need)
			if tt.err != "" {
				if err == nil || err.Error() != tt.err {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if names(got) != tt.want {
				t.Errorf("victims = %s, want %s", names(got), tt.want)
			}
		})
	}
}

func TestDecideAdmission(t *testing.T) {
	node := AdmitNode{
		Name:        "node1",
		Allocatable: v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("1Gi"), v1.ResourcePods: resource.MustParse("10")},
		Labels:      map[string]string{"disk": "ssd"},
		OS:          "linux",
	}
	victim := preemptPod("victim", v1.PodQOSBurstable, "100m", "900Mi")
	small := preemptPod("small", v1.PodQOSBestEffort, "", "")
	hdd := func(p *v1.Pod) *v1.Pod { p.Spec.NodeSelector = map[string]string{"disk": "hdd"}; return p }
	tests := []struct {
		name     string
		pod      *v1.Pod
		admitted []*v1.Pod
		reason   string // "": admitted
		message  string
		preempt  string
		recheck  bool
	}{
		{name: "a critical pod that fits", pod: staticCritical("s", "100Mi"), admitted: []*v1.Pod{victim}},
		{name: "a critical pod short of memory preempts", pod: staticCritical("s", "200Mi"), admitted: []*v1.Pod{small, victim}, preempt: "victim"},
		{name: "a pod of a system-critical priority preempts too",
			pod:      withPriority(preemptPod("c", v1.PodQOSBurstable, "100m", "200Mi"), podutil.SystemCriticalPriority),
			admitted: []*v1.Pod{victim}, preempt: "victim"},
		{name: "a non-critical pod is refused", pod: preemptPod("p", v1.PodQOSBurstable, "100m", "200Mi"), admitted: []*v1.Pod{victim},
			reason: "OutOfmemory", message: "Node didn't have enough resource: memory, requested: 209715200, used: 943718400, capacity: 1073741824"},
		{name: "a critical pod short of memory that also fails node affinity", pod: hdd(staticCritical("s", "200Mi")), admitted: []*v1.Pod{victim},
			reason: "NodeAffinity", message: "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"},
		{name: "no pod to free it", pod: staticCritical("s", "2Gi"), admitted: []*v1.Pod{victim},
			reason: "UnexpectedAdmissionError",
			message: "Unexpected error while attempting to recover from admission failure: preemption: error finding a set of pods to preempt: " +
				"no set of running pods found to reclaim resources: [(res: memory, q: 1073741824), ]"},
		{name: "only node affinity failed: the node is read again", pod: hdd(preemptPod("p", v1.PodQOSBestEffort, "", "")),
			reason: "NodeAffinity", message: "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector", recheck: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := DecideAdmission(tt.pod, tt.admitted, node)
			checkRejection(t, a.Rejection, tt.reason, tt.message)
			if names(a.Preempt) != tt.preempt {
				t.Errorf("preempt = %q, want %q", names(a.Preempt), tt.preempt)
			}
			if a.RecheckNode != tt.recheck {
				t.Errorf("RecheckNode = %v, want %v", a.RecheckNode, tt.recheck)
			}
			if len(a.Preempt) > 0 && (len(a.Shortfalls) == 0 || a.Shortfalls[0].Resource != v1.ResourceMemory) {
				t.Errorf("shortfalls = %+v, want memory first", a.Shortfalls)
			}
		})
	}
}
