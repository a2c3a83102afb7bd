package node

import "testing"

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
