package node

import (
	"context"
	"errors"
	"net"
	"testing"
)

func TestValidateNodeLabels(t *testing.T) {
	tests := []struct {
		labels  map[string]string
		wantErr bool
	}{
		{labels: nil},
		{labels: map[string]string{"example.com/role": "worker", "plain": "x"}},
		{labels: map[string]string{"node.kubernetes.io/pool": "a", "x.kubelet.kubernetes.io/y": "b", "topology.kubernetes.io/zone": "z"}},
		{labels: map[string]string{"node-role.kubernetes.io/worker": ""}, wantErr: true},
		{labels: map[string]string{"k8s.io/foo": "x"}, wantErr: true},
		{labels: map[string]string{"sub.k8s.io/foo": "x"}, wantErr: true},
		{labels: map[string]string{"notkubernetes.io/foo": "x"}},
	}
	for _, tc := range tests {
		if err := ValidateNodeLabels(tc.labels); (err != nil) != tc.wantErr {
			t.Errorf("ValidateNodeLabels(%v) = %v, wantErr %v", tc.labels, err, tc.wantErr)
		}
	}
}

func TestNodeLabelsOverrideDefaults(t *testing.T) {
	tests := []struct {
		name   string
		labels map[string]string
		want   string // kubernetes.io/hostname
	}{
		{name: "computed", labels: map[string]string{"example.com/a": "b"}, want: "host-a"},
		{name: "overridden by --node-labels", labels: map[string]string{"kubernetes.io/hostname": "custom"}, want: "custom"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(nil, nil, Config{NodeName: "n1", Hostname: "host-a", Labels: tc.labels}, nil, nil, nil, WithMachineInfo(testMachine()))
			if err != nil {
				t.Fatal(err)
			}
			if got := c.defaultLabels()["kubernetes.io/hostname"]; got != tc.want {
				t.Errorf("reconciled hostname label = %q, want %q", got, tc.want)
			}
			c.cfg.NodeIPs = nil
			c.defaultRouteIP = func() (net.IP, error) { return net.ParseIP("10.0.0.1"), nil }
			c.lookupIP = func(string) ([]net.IP, error) { return nil, errors.New("no dns") }
			n, _ := c.initialNode(context.Background())
			if got := n.Labels["kubernetes.io/hostname"]; got != tc.want {
				t.Errorf("initial hostname label = %q, want %q", got, tc.want)
			}
		})
	}
}
