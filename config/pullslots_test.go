package config

import (
	"testing"

	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

// TestImagePullSlots: serializeImagePulls and maxParallelImagePulls decide how
// many pulls the runtime manager runs at once (its pull slots), resolved
// from a configuration that was not defaulted first.
func TestImagePullSlots(t *testing.T) {
	tests := []struct {
		name      string
		serialize *bool
		max       *int32
		want      int
	}{
		{"defaults: serialized", nil, nil, 1},
		{"serialized", ptr.To(true), nil, 1},
		{"parallel without a bound", ptr.To(false), nil, 64},
		{"parallel, bounded", ptr.To(false), ptr.To[int32](3), 3},
		{"maxParallelImagePulls alone turns serialization off, as upstream's defaulting", nil, ptr.To[int32](4), 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kc := &kubeletconfigv1beta1.KubeletConfiguration{SerializeImagePulls: tc.serialize, MaxParallelImagePulls: tc.max}
			if got := Resolve(kc).Runtime.MaxParallelImagePulls; got != tc.want {
				t.Errorf("MaxParallelImagePulls = %d, want %d", got, tc.want)
			}
		})
	}
}
