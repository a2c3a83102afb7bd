package agent

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/config"
	"github.com/nodelet/nodelet/cri"
	"github.com/nodelet/nodelet/internal/testsupport/fakecri"
	"github.com/nodelet/nodelet/node"
)

func countCalls(calls []string, method string) int {
	n := 0
	for _, c := range calls {
		if c == method {
			n++
		}
	}
	return n
}

// podCIDR reaches the runtime with CRI UpdateRuntimeConfig: the config's value
// at start (standalone), and the Node's spec.podCIDRs once the control plane sets
// them (joined for dual-stack); an unchanged value is not sent again, and a
// failed update is retried.
func TestPodCIDRToRuntime(t *testing.T) {
	ctx := context.Background()
	rt := fakecri.New(t)
	client, err := cri.New(ctx, rt.Endpoint(), "", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close(context.Background()) })

	t.Run("standalone: the config's podCIDR", func(t *testing.T) {
		rt.ResetCalls()
		p := &podCIDR{rt: client}
		if changed, err := p.update(ctx, ""); changed || err != nil {
			t.Fatalf("empty podCIDR: changed %v err %v, want nothing sent", changed, err)
		}
		if changed, err := p.update(ctx, "10.88.0.0/16"); !changed || err != nil {
			t.Fatalf("podCIDR 10.88.0.0/16: changed %v err %v", changed, err)
		}
		if changed, _ := p.update(ctx, "10.88.0.0/16"); changed {
			t.Fatal("the same CIDR again reported a change")
		}
		if got := rt.PodCIDR(); got != "10.88.0.0/16" {
			t.Fatalf("runtime pod CIDR %q, want 10.88.0.0/16", got)
		}
		if n := countCalls(rt.Calls(), "UpdateRuntimeConfig"); n != 1 {
			t.Fatalf("UpdateRuntimeConfig called %d times, want 1", n)
		}
	})

	t.Run("a failed update is retried", func(t *testing.T) {
		p := &podCIDR{rt: client}
		rt.InjectError("UpdateRuntimeConfig", status.Error(codes.Unavailable, "runtime busy"))
		changed, err := p.update(ctx, "10.0.1.0/24")
		if !changed || err == nil {
			t.Fatalf("failed update: changed %v err %v, want a change and an error", changed, err)
		}
		if changed, err := p.update(ctx, "10.0.1.0/24"); !changed || err != nil {
			t.Fatalf("retry: changed %v err %v", changed, err)
		}
		if got := rt.PodCIDR(); got != "10.0.1.0/24" {
			t.Fatalf("runtime pod CIDR %q after the retry", got)
		}
	})

	t.Run("the Node's spec.podCIDRs", func(t *testing.T) {
		rt.ResetCalls()
		p := &podCIDR{rt: client}
		n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
			Spec: v1.NodeSpec{PodCIDR: "10.244.1.0/24", PodCIDRs: []string{"10.244.1.0/24", "fd00:10:244:1::/64"}}}
		api := fake.NewClientset(n)
		kc := &kubeletconfigv1beta1.KubeletConfiguration{
			NodeStatusUpdateFrequency: metav1.Duration{Duration: time.Hour},
			NodeStatusReportFrequency: metav1.Duration{Duration: time.Hour},
		}
		ctl, err := node.New(api, api, node.Config{NodeName: "n1", Settings: config.Resolve(kc).Node, NodeIPs: nil}, versionOnly{}, nil, clock.RealClock{},
			node.WithMachineInfo(node.MachineInfo{NumCores: 1, MemoryCapacity: 1 << 30}), node.WithPodCIDRUpdater(p.update))
		if err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); ctl.Run(runCtx) }()
		defer func() { cancel(); <-done }()
		want := "10.244.1.0/24,fd00:10:244:1::/64"
		deadline := time.Now().Add(10 * time.Second)
		for rt.PodCIDR() != want {
			if time.Now().After(deadline) {
				t.Fatalf("runtime pod CIDR %q, want %q from the Node's spec.podCIDRs", rt.PodCIDR(), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if !slices.Contains(rt.Calls(), "UpdateRuntimeConfig") {
			t.Fatal("no UpdateRuntimeConfig call")
		}
	})

}
