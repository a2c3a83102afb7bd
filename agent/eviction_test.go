package agent

import (
	"testing"

	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodelet/nodelet/config"
	"github.com/nodelet/nodelet/eviction"
)

// The thresholds config accepts and defaults must be ones the eviction manager parses:
// a mismatch would only show when nodelet starts.
func TestDefaultedThresholdsParse(t *testing.T) {
	tests := []struct {
		name    string
		hard    map[string]string
		soft    map[string]string
		grace   map[string]string
		wantLen int
	}{
		{name: "upstream defaults", hard: nil, wantLen: 5},
		{name: "file form", hard: map[string]string{"memory.available": "300Mi", "nodefs.available": "1Gi"}, wantLen: 2},
		{name: "soft with grace", hard: map[string]string{"memory.available": "100Mi"}, soft: map[string]string{"memory.available": "500Mi"}, grace: map[string]string{"memory.available": "30s"}, wantLen: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kc := &kubeletconfigv1beta1.KubeletConfiguration{EvictionHard: tt.hard, EvictionSoft: tt.soft, EvictionSoftGracePeriod: tt.grace}
			config.SetDefaults(kc)
			if err := config.Validate(kc); err != nil {
				t.Fatalf("config rejects it: %v", err)
			}
			ths, err := eviction.ParseThresholds(kc.EvictionHard, kc.EvictionSoft, kc.EvictionSoftGracePeriod, kc.EvictionMinimumReclaim)
			if err != nil {
				t.Fatalf("eviction cannot parse what config accepted: %v", err)
			}
			if len(ths) != tt.wantLen {
				t.Errorf("got %d thresholds %v, want %d", len(ths), ths, tt.wantLen)
			}
		})
	}
}
