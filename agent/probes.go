package agent

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/prober"
)

// lateStatus lets the prober read pod statuses from a status manager that is
// built after it (the runtime manager, which needs the prober, comes first).
type lateStatus struct {
	getter atomic.Pointer[prober.StatusGetter]
}

func (l *lateStatus) set(g prober.StatusGetter) { l.getter.Store(&g) }

func (l *lateStatus) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	g := l.getter.Load()
	if g == nil {
		return v1.PodStatus{}, false
	}
	return (*g).GetPodStatus(uid)
}

// probeWiring holds the probe manager and the hook runner the runtime uses.
type probeWiring struct {
	mgr    *prober.Manager
	hooks  *prober.Handler
	status *lateStatus
	// registry holds prober_probe_total and prober_probe_duration_seconds apart
	// from the main registry: upstream serves them on /metrics/probes.
	registry *prometheus.Registry
}

func newProbes(exec prober.Execer, recorder record.EventRecorder, clk clock.WithTicker) *probeWiring {
	st := &lateStatus{}
	reg := prometheus.NewRegistry()
	return &probeWiring{
		mgr:   prober.NewManager(exec, st, recorder, clk, prober.WithMetrics(reg)),
		hooks: prober.NewHandler(exec), status: st, registry: reg,
	}
}
