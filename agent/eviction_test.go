package agent

import (
	"context"
	"testing"
	"time"

	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

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

// localStorageCapacityIsolation (default true) keeps the eviction manager running
// without thresholds, since it enforces emptyDir sizeLimits and ephemeral-storage
// limits; with it off and no thresholds there is no manager.
func TestEvictionConfigLocalStorageCapacityIsolation(t *testing.T) {
	noThresholds := map[string]string{"memory.available": "0%"}
	tests := []struct {
		name          string
		hard          map[string]string
		isolation     *bool
		wantManager   bool
		wantIsolation bool
	}{
		{name: "defaults", wantManager: true, wantIsolation: true},
		{name: "no thresholds, isolation defaulted on", hard: noThresholds, wantManager: true, wantIsolation: true},
		{name: "no thresholds, isolation off", hard: noThresholds, isolation: ptr.To(false)},
		{name: "thresholds, isolation off", isolation: ptr.To(false), wantManager: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kc := &kubeletconfigv1beta1.KubeletConfiguration{EvictionHard: tt.hard, LocalStorageCapacityIsolation: tt.isolation}
			config.SetDefaults(kc)
			cfg, err := evictionConfig(kc, config.Resolve(kc).LocalStorageCapacityIsolation, "n1")
			if err != nil {
				t.Fatal(err)
			}
			if (cfg != nil) != tt.wantManager {
				t.Fatalf("config = %+v, want a manager: %v", cfg, tt.wantManager)
			}
			if cfg != nil && cfg.LocalStorageCapacityIsolation != tt.wantIsolation {
				t.Errorf("LocalStorageCapacityIsolation = %v, want %v", cfg.LocalStorageCapacityIsolation, tt.wantIsolation)
			}
		})
	}
}

func TestRunAfterSynced(t *testing.T) {
	closed := make(chan struct{})
	close(closed)
	fired := make(chan time.Time, 1)
	fired <- time.Time{}
	tests := []struct {
		name    string
		synced  chan struct{}
		timeout chan time.Time
		cancel  bool
		wantRun bool
	}{
		{name: "sources synced", synced: closed, timeout: make(chan time.Time), wantRun: true},
		{name: "sources never sync: runs after the bound", synced: make(chan struct{}), timeout: fired, wantRun: true},
		{name: "stopped before either", synced: make(chan struct{}), timeout: make(chan time.Time), cancel: true, wantRun: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.cancel {
				cancel()
			}
			ran := false
			runAfterSynced(ctx, tt.synced, tt.timeout, func(context.Context) { ran = true })
			if ran != tt.wantRun {
				t.Errorf("ran = %v, want %v", ran, tt.wantRun)
			}
		})
	}
}

// Until the sources sync (or the bound passes) the eviction manager does not run: a fake
// clock holds the bound.
func TestRunAfterSyncedWaitsForTheSources(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	synced := make(chan struct{})
	started := make(chan struct{})
	done := make(chan struct{})
	go func() {
		runAfterSynced(context.Background(), synced, clk.After(evictionStartWait), func(context.Context) { close(started) })
		close(done)
	}()
	select {
	case <-started:
		t.Fatal("ran before the sources synced and before the bound")
	case <-time.After(50 * time.Millisecond):
	}
	close(synced)
	<-done
	select {
	case <-started:
	default:
		t.Fatal("did not run once the sources synced")
	}
}
