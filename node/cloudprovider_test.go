package node

import (
	"context"
	"net"
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// --cloud-provider=external, as upstream: the Node registers with the
// uninitialized taint (beside registerWithTaints) and its providerID; an
// explicit --node-ip goes to the cloud controller manager in the
// provided-node-ip annotation (comma-joined when dual-stack); the agent reports
// its own addresses only until something else set them, then leaves them alone.
// Without an external provider a stale annotation is removed.
func TestCloudProviderExternal(t *testing.T) {
	ctx := context.Background()
	uninitialized := v1.Taint{Key: "node.cloudprovider.kubernetes.io/uninitialized", Value: "true", Effect: v1.TaintEffectNoSchedule}

	t.Run("registration", func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.ExternalCloudProvider = true })
		if err := h.c.Register(ctx); err != nil {
			t.Fatal(err)
		}
		n := h.node(t)
		wantTaints := []v1.Taint{{Key: "example.com/dedicated", Value: "x", Effect: v1.TaintEffectNoSchedule}, uninitialized}
		if !reflect.DeepEqual(n.Spec.Taints, wantTaints) {
			t.Errorf("taints = %+v, want %+v", n.Spec.Taints, wantTaints)
		}
		if n.Spec.ProviderID != "nodelet://n1" {
			t.Errorf("providerID = %q, want the configured nodelet://n1", n.Spec.ProviderID)
		}
		if got := n.Annotations["alpha.kubernetes.io/provided-node-ip"]; got != "10.0.0.5" {
			t.Errorf("provided-node-ip = %q, want 10.0.0.5", got)
		}
		// Before the cloud controller manager sets them, the agent's own (upstream
		// reports them so a new Node is reachable).
		want := []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.5"}, {Type: v1.NodeHostName, Address: "n1.example"}}
		if !reflect.DeepEqual(n.Status.Addresses, want) {
			t.Errorf("addresses = %+v, want %+v", n.Status.Addresses, want)
		}

		// The cloud controller manager initialises the Node: its addresses, no taint.
		ccm := n.DeepCopy()
		ccm.Spec.Taints = wantTaints[:1]
		ccm.Status.Addresses = []v1.NodeAddress{
			{Type: v1.NodeInternalIP, Address: "10.0.0.5"}, {Type: v1.NodeExternalIP, Address: "203.0.113.7"},
			{Type: v1.NodeInternalDNS, Address: "ip-10-0-0-5.ec2.internal"}, {Type: v1.NodeHostName, Address: "ip-10-0-0-5"},
		}
		if err := h.client.Tracker().Update(v1.SchemeGroupVersion.WithResource("nodes"), ccm, ""); err != nil {
			t.Fatal(err)
		}
		h.clk.Step(h.c.reportFrequency) // force a patch
		if err := h.c.updateNodeStatus(ctx); err != nil {
			t.Fatal(err)
		}
		n = h.node(t)
		if !reflect.DeepEqual(n.Status.Addresses, ccm.Status.Addresses) {
			t.Errorf("addresses after the CCM = %+v, want the CCM's %+v", n.Status.Addresses, ccm.Status.Addresses)
		}
		if !reflect.DeepEqual(n.Spec.Taints, wantTaints[:1]) {
			t.Errorf("taints after the CCM = %+v, want the uninitialized taint gone", n.Spec.Taints)
		}
	})

	for _, tc := range []struct {
		name     string
		external bool
		ips      []net.IP
		stale    bool
		want     string // "" = no annotation
	}{
		{name: "dual-stack --node-ip", external: true, ips: []net.IP{net.ParseIP("10.0.0.5"), net.ParseIP("fd00::5")}, want: "10.0.0.5,fd00::5"},
		{name: "no --node-ip: nothing to provide", external: true, ips: nil},
		{name: "--node-ip=0.0.0.0 picks a family, provides no address", external: true, ips: []net.IP{net.IPv4zero}},
		{name: "no external provider: a stale annotation goes", external: false, ips: []net.IP{net.ParseIP("10.0.0.5")}, stale: true},
		{name: "no external provider: no taint", external: false, ips: []net.IP{net.ParseIP("10.0.0.5")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var objs []*v1.Node
			if tc.stale {
				objs = append(objs, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1",
					Annotations: map[string]string{"alpha.kubernetes.io/provided-node-ip": "10.9.9.9"}}})
			}
			h := newHarness(t, func(c *Config) { c.ExternalCloudProvider = tc.external; c.NodeIPs = tc.ips })
			for _, o := range objs {
				if err := h.client.Tracker().Add(o); err != nil {
					t.Fatal(err)
				}
			}
			h.c.defaultRouteIP = func() (net.IP, error) { return net.ParseIP("10.0.0.77"), nil }
			h.c.lookupIP = func(string) ([]net.IP, error) { return nil, &net.DNSError{Err: "no such host", IsNotFound: true} }
			if err := h.c.Register(ctx); err != nil {
				t.Fatal(err)
			}
			n := h.node(t)
			got, ok := n.Annotations["alpha.kubernetes.io/provided-node-ip"]
			if got != tc.want || ok != (tc.want != "") {
				t.Errorf("provided-node-ip = %q (present %v), want %q", got, ok, tc.want)
			}
			hasTaint := false
			for _, tt := range n.Spec.Taints {
				if tt.Key == uninitialized.Key {
					hasTaint = true
				}
			}
			if hasTaint != (tc.external && !tc.stale) {
				t.Errorf("uninitialized taint present = %v, want %v", hasTaint, tc.external)
			}
		})
	}
}
