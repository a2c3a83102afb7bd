package node

import (
	"context"
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
)

// TestAdmissionNode: before registration admission judges by the Node this agent
// would register (labels and taints, no status); then by the last Node seen; and
// with fresh by one read from the API server now, with what others changed on it.
func TestAdmissionNode(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, nil)
	local, err := h.c.AdmissionNode(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if local.Name != "n1" || local.Labels["kubernetes.io/hostname"] != "n1.example" || local.Labels["example.com/role"] != "worker" {
		t.Errorf("local node meta = %v %v", local.Name, local.Labels)
	}
	if want := []v1.Taint{{Key: "example.com/dedicated", Value: "x", Effect: v1.TaintEffectNoSchedule}}; !reflect.DeepEqual(local.Spec.Taints, want) {
		t.Errorf("local node taints = %v, want %v", local.Spec.Taints, want)
	}
	if len(h.actions()) != 0 {
		t.Error("the local node was read from the API server")
	}

	if err := h.c.Register(ctx); err != nil {
		t.Fatal(err)
	}
	h.actions()
	// Someone labels and taints the Node behind the agent's back.
	n := h.node(t).DeepCopy()
	n.Labels["example.com/zone"] = "b"
	n.Spec.Taints = append(n.Spec.Taints, v1.Taint{Key: "example.com/drain", Effect: v1.TaintEffectNoExecute})
	if _, err := h.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.actions()
	cached, err := h.c.AdmissionNode(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cached.Labels["example.com/zone"]; ok || len(h.actions()) != 0 {
		t.Errorf("the cached node is read anew: labels %v", cached.Labels)
	}
	fresh, err := h.c.AdmissionNode(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if fresh.Labels["example.com/zone"] != "b" || len(fresh.Spec.Taints) != 2 {
		t.Errorf("fresh node = labels %v taints %v", fresh.Labels, fresh.Spec.Taints)
	}
	if got, want := h.actions(), []string{"get nodes"}; !reflect.DeepEqual(got, want) {
		t.Errorf("actions = %v, want %v", got, want)
	}
}

// TestAdmissionNodeStandalone: without an API server the Node admission sees
// carries the runtime's features, so supplementalGroupsPolicy Strict is judged
// as upstream's initial Node would let it be.
func TestAdmissionNodeStandalone(t *testing.T) {
	st := &fakeStatuser{resp: &runtimeapi.StatusResponse{Features: &runtimeapi.RuntimeFeatures{SupplementalGroupsPolicy: true}}}
	c, err := New(nil, nil, Config{NodeName: "n1"}, nil, nil, nil, WithMachineInfo(testMachine()), WithRuntimeStatus(st))
	if err != nil {
		t.Fatal(err)
	}
	for _, fresh := range []bool{false, true} {
		n, err := c.AdmissionNode(context.Background(), fresh)
		if err != nil {
			t.Fatal(err)
		}
		if n.Name != "n1" || n.Status.Features == nil || !ptr.Deref(n.Status.Features.SupplementalGroupsPolicy, false) {
			t.Errorf("fresh=%v: node %s features %+v", fresh, n.Name, n.Status.Features)
		}
	}
}
