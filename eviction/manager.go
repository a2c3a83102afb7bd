package eviction

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/periodic"
)

// DefaultMonitoringInterval is upstream's evictionMonitoringPeriod.
const DefaultMonitoringInterval = 10 * time.Second

// StatsProvider returns node and pod stats measured at or after notBefore;
// with a zero notBefore, the last measurement (the agent's is refreshed in
// the background every housekeeping period).
type StatsProvider interface {
	Stats(ctx context.Context, notBefore time.Time) (Stats, error)
}

// NodeReclaimer frees node-level disk resources before pods are evicted.
type NodeReclaimer interface {
	// DeleteUnusedImages removes every image GC may remove.
	DeleteUnusedImages(ctx context.Context) error
	// DeleteAllUnusedContainers removes every dead container GC may remove.
	DeleteAllUnusedContainers(ctx context.Context) error
}

// PodKiller stops a pod and records the given status for it. It should
// return once the pod's containers are stopped: upstream waits for the
// evicted pod's cleanup before the next cycle, and the stats of the next
// cycle must no longer count it.
type PodKiller interface {
	EvictPod(ctx context.Context, pod *v1.Pod, gracePeriodSeconds int64, status v1.PodStatus) error
}

// EventRecorder is the subset of client-go's record.EventRecorder used here.
type EventRecorder interface {
	Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any)
	AnnotatedEventf(object runtime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...any)
}

// Config is the eviction manager's configuration.
type Config struct {
	Thresholds               []Threshold
	PressureTransitionPeriod time.Duration // ≤ 0: 5m
	MaxPodGracePeriodSeconds int64
	MonitoringInterval       time.Duration // ≤ 0: 10s
	// NodeRef is the object node-level events are recorded on.
	NodeRef *v1.ObjectReference
	// LocalStorageCapacityIsolation enforces emptyDir sizeLimits and
	// ephemeral-storage limits each cycle, before node pressure.
	LocalStorageCapacityIsolation bool
}

// Manager runs the eviction cycle every MonitoringInterval and answers
// admission and pressure queries from the last cycle.
type Manager struct {
	cfg        Config
	clock      clock.WithTicker
	stats      StatsProvider
	reclaimer  NodeReclaimer
	killer     PodKiller
	activePods func() []*v1.Pod
	recorder   EventRecorder

	syncMu  sync.Mutex // serialises synchronize; guards tracker and freedAt
	tracker *Tracker
	// freedAt is when the manager last freed resources (reclaimed or
	// evicted): stats measured before it still count what was freed, so a
	// cycle reading them would evict again for pressure already relieved.
	freedAt time.Time

	mu         sync.RWMutex
	conditions []v1.NodeConditionType

	evictions *prometheus.CounterVec // nil without a registerer
	onChanged func([]v1.NodeConditionType)
}

// ManagerOption configures a Manager.
type ManagerOption func(*managerOptions)

type managerOptions struct {
	reg       prometheus.Registerer
	onChanged func(conditions []v1.NodeConditionType)
}

// WithRegisterer registers kubelet_evictions{eviction_signal} on reg.
func WithRegisterer(reg prometheus.Registerer) ManagerOption {
	return func(o *managerOptions) { o.reg = reg }
}

// WithConditionsChanged calls f (outside the manager's locks) after a cycle that
// changed the pressure conditions, so node status can be reported at once.
func WithConditionsChanged(f func(conditions []v1.NodeConditionType)) ManagerOption {
	return func(o *managerOptions) { o.onChanged = f }
}

// NewManager wires a Manager. recorder may be nil.
func NewManager(cfg Config, clk clock.WithTicker, stats StatsProvider, reclaimer NodeReclaimer, killer PodKiller, activePods func() []*v1.Pod, recorder EventRecorder, opts ...ManagerOption) (*Manager, error) {
	if cfg.MonitoringInterval <= 0 {
		cfg.MonitoringInterval = DefaultMonitoringInterval
	}
	var o managerOptions
	for _, opt := range opts {
		opt(&o)
	}
	m := &Manager{
		cfg:        cfg,
		clock:      clk,
		stats:      stats,
		reclaimer:  reclaimer,
		killer:     killer,
		activePods: activePods,
		recorder:   recorder,
		tracker:    NewTracker(clk, cfg.PressureTransitionPeriod),
		onChanged:  o.onChanged,
	}
	if o.reg != nil {
		m.evictions = prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubelet",
			Name:      "evictions",
			Help:      "Cumulative number of pod evictions by eviction signal",
		}, []string{"eviction_signal"})
		if err := o.reg.Register(m.evictions); err != nil {
			return nil, fmt.Errorf("registering eviction metrics: %w", err)
		}
	}
	return m, nil
}

// Run synchronizes every MonitoringInterval until ctx ends.
func (m *Manager) Run(ctx context.Context) {
	periodic.NowAndEvery(ctx, m.clock, m.cfg.MonitoringInterval, func(ctx context.Context) {
		if _, err := m.Synchronize(ctx); err != nil && ctx.Err() == nil {
			klog.ErrorS(err, "Eviction manager: synchronize failed")
		}
	})
}

// Conditions returns the pressure conditions to report on the node.
func (m *Manager) Conditions() []v1.NodeConditionType {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return append([]v1.NodeConditionType(nil), m.conditions...)
}

// HasCondition reports whether c is currently reported.
func (m *Manager) HasCondition(c v1.NodeConditionType) bool {
	for _, have := range m.Conditions() {
		if have == c {
			return true
		}
	}
	return false
}

// Admit applies the admission rule to pod with the current conditions.
func (m *Manager) Admit(pod *v1.Pod) AdmitResult { return Admit(pod, m.Conditions()) }

// Synchronize runs one eviction cycle and returns what it decided.
func (m *Manager) Synchronize(ctx context.Context) (Decision, error) {
	m.syncMu.Lock()
	defer m.syncMu.Unlock()
	if len(m.cfg.Thresholds) == 0 && !m.cfg.LocalStorageCapacityIsolation {
		return Decision{Explanation: "no thresholds configured"}, nil
	}
	stats, err := m.stats.Stats(ctx, m.freedAt)
	if err != nil {
		return Decision{}, fmt.Errorf("getting stats for the eviction cycle: %w", err)
	}
	obs := Observe(stats)
	res := m.tracker.Update(m.cfg.Thresholds, obs)
	m.mu.Lock()
	changed := !slices.Equal(m.conditions, res.Conditions)
	m.conditions = res.Conditions
	m.mu.Unlock()
	if changed {
		klog.InfoS("Eviction manager: node pressure changed", "conditions", res.Conditions)
		if m.onChanged != nil {
			m.onChanged(slices.Clone(res.Conditions))
		}
	}

	pods := m.activePods()
	// As upstream: pods over their own limits go first, and a cycle that evicted
	// any leaves node pressure to the next one, measured without them.
	if vs := DecideLocalStorage(LocalStorageInput{Isolation: m.cfg.LocalStorageCapacityIsolation, Pods: pods, Stats: stats}); len(vs) > 0 {
		if n, err := m.evictOverLimit(ctx, vs); n > 0 {
			return Decision{LocalStorage: vs, Explanation: fmt.Sprintf("%d pod(s) evicted for exceeding local storage limits; node pressure is checked next cycle", n)}, err
		}
	}

	in := DecideInput{
		Active:                   res.Active,
		Observations:             obs,
		Stats:                    stats,
		Pods:                     pods,
		MaxPodGracePeriodSeconds: m.cfg.MaxPodGracePeriodSeconds,
		Now:                      m.clock.Now(),
	}
	d := Decide(in)
	if d.Threshold == nil {
		return d, nil
	}
	res0 := signalResource(d.Threshold.Signal)
	if len(d.Reclaim) > 0 {
		m.nodeEvent(v1.EventTypeWarning, "EvictionThresholdMet", "Attempting to reclaim %s", res0)
		klog.InfoS("Eviction manager: reclaiming node-level resources", "explanation", d.Explanation)
		m.reclaim(ctx, d.Reclaim)
		m.freedAt = m.clock.Now()
		stats, err = m.stats.Stats(ctx, m.freedAt)
		if err != nil {
			return d, fmt.Errorf("getting stats after node-level reclaim: %w", err)
		}
		obs = Observe(stats)
		still := ThresholdsMet(res.Active, obs, true)
		if len(still) == 0 {
			klog.InfoS("Eviction manager: node-level reclaim relieved pressure, no eviction", "signal", d.Threshold.Signal)
			return Decision{Threshold: d.Threshold, Reclaim: d.Reclaim,
				Explanation: d.Explanation + "; node-level reclaim was enough, no pod evicted"}, nil
		}
		in.Active, in.Observations, in.Stats, in.ReclaimAttempted = still, obs, stats, true
		reclaimed := d.Reclaim
		d = Decide(in)
		d.Reclaim = reclaimed
	} else {
		m.nodeEvent(v1.EventTypeWarning, "EvictionThresholdMet", "Attempting to reclaim %s", res0)
	}
	if d.Victim == nil {
		klog.InfoS("Eviction manager: unable to evict any pod", "explanation", d.Explanation)
		return d, nil
	}
	klog.InfoS("Eviction manager: evicting pod", "pod", klog.KObj(d.Victim.Pod), "signal", d.Threshold.Signal,
		"observed", d.Observed.Available.String(), "gracePeriod", d.GracePeriodSeconds, "explanation", d.Explanation)
	// Beyond upstream: the event carries the whole decision, not just the status message.
	return d, m.evict(ctx, d.Victim.Pod, d.GracePeriodSeconds, d.Status, d.Threshold.Signal, d.EventAnnotations,
		d.Status.Message+" Decision: "+d.Explanation)
}

// evictOverLimit evicts every non-critical pod in vs and returns how many it tried.
func (m *Manager) evictOverLimit(ctx context.Context, vs []LocalStorageViolation) (int, error) {
	var errs []error
	n := 0
	for _, v := range vs {
		if v.Critical {
			klog.ErrorS(nil, "Eviction manager: cannot evict a critical pod", "pod", klog.KObj(v.Pod), "signal", v.Signal,
				"name", v.Name, "usage", v.Usage.String(), "limit", v.Limit.String())
			continue
		}
		n++
		klog.InfoS("Eviction manager: evicting pod over its local storage limit", "pod", klog.KObj(v.Pod), "signal", v.Signal,
			"name", v.Name, "usage", v.Usage.String(), "limit", v.Limit.String(), "gracePeriod", v.GracePeriodSeconds)
		// Upstream's event is the status message alone, without annotations.
		if err := m.evict(ctx, v.Pod, v.GracePeriodSeconds, v.Status, v.Signal, nil, v.Status.Message); err != nil {
			errs = append(errs, err)
		}
	}
	return n, errors.Join(errs...)
}

// evict records the Evicted event on pod, stops it with the given grace period and
// status, and counts the eviction under sig. It returns once the pod is stopped.
func (m *Manager) evict(ctx context.Context, pod *v1.Pod, grace int64, status v1.PodStatus, sig Signal, annotations map[string]string, event string) error {
	if m.recorder != nil {
		m.recorder.AnnotatedEventf(pod, annotations, v1.EventTypeWarning, Reason, "%s", event)
	}
	err := m.killer.EvictPod(ctx, pod, grace, status)
	// Even a failed stop may have freed some of what the pod held.
	m.freedAt = m.clock.Now()
	if err != nil {
		return fmt.Errorf("evicting pod %s: %w", podKey(pod), err)
	}
	if m.evictions != nil {
		m.evictions.WithLabelValues(string(sig)).Inc()
	}
	return nil
}

func (m *Manager) reclaim(ctx context.Context, kinds []ReclaimKind) {
	for _, k := range kinds {
		var err error
		switch k {
		case ReclaimContainers:
			err = m.reclaimer.DeleteAllUnusedContainers(ctx)
		case ReclaimImages:
			err = m.reclaimer.DeleteUnusedImages(ctx)
		}
		if err != nil {
			klog.ErrorS(err, "Eviction manager: node-level reclaim failed", "reclaim", k)
		}
	}
}

func (m *Manager) nodeEvent(eventtype, reason, format string, args ...any) {
	if m.recorder != nil && m.cfg.NodeRef != nil {
		m.recorder.Eventf(m.cfg.NodeRef, eventtype, reason, format, args...)
	}
}
