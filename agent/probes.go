package agent

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/prober"
)

// probeWiring holds the probe manager and the hook runner the runtime uses.
type probeWiring struct {
	mgr   *prober.Manager
	hooks *prober.Handler
	// registry holds prober_probe_total and prober_probe_duration_seconds apart
	// from the main registry: upstream serves them on /metrics/probes.
	registry *prometheus.Registry
}

func newProbes(exec prober.Execer, status prober.StatusGetter, recorder record.EventRecorder, clk clock.WithTicker) *probeWiring {
	reg := prometheus.NewRegistry()
	return &probeWiring{
		mgr:   prober.NewManager(exec, status, recorder, clk, prober.WithMetrics(reg)),
		hooks: prober.NewHandler(exec), registry: reg,
	}
}
