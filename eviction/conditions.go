package eviction

import (
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
)

// DefaultPressureTransitionPeriod is evictionPressureTransitionPeriod's default.
const DefaultPressureTransitionPeriod = 5 * time.Minute

// Tracker holds the state that spans cycles: when each met threshold was
// first observed (for soft grace periods), when each pressure condition was
// last observed (for anti-flap) and which thresholds are still awaiting their
// minimum reclaim. It is not safe for concurrent use; Manager serialises it.
type Tracker struct {
	clock            clock.PassiveClock
	transitionPeriod time.Duration

	firstObserved map[string]time.Time
	lastObserved  map[v1.NodeConditionType]time.Time
	prevMet       []Threshold
	lastObsTime   map[Signal]time.Time
}

// NewTracker returns a Tracker; transitionPeriod ≤ 0 means the default 5m.
func NewTracker(clk clock.PassiveClock, transitionPeriod time.Duration) *Tracker {
	if transitionPeriod <= 0 {
		transitionPeriod = DefaultPressureTransitionPeriod
	}
	return &Tracker{
		clock:            clk,
		transitionPeriod: transitionPeriod,
		firstObserved:    map[string]time.Time{},
		lastObserved:     map[v1.NodeConditionType]time.Time{},
		lastObsTime:      map[Signal]time.Time{},
	}
}

// TrackResult is the outcome of one Tracker.Update.
type TrackResult struct {
	// Met are thresholds met now, ignoring grace periods (including those
	// kept by min-reclaim hysteresis).
	Met []Threshold
	// Active are the met thresholds whose grace period has elapsed and whose
	// stats are newer than last cycle's: these may cause reclaim and eviction.
	// Acting on stale stats would evict a second pod for pressure the first
	// eviction already relieved.
	Active []Threshold
	// Conditions are the pressure conditions to report, kept for the
	// transition period after they were last observed.
	Conditions []v1.NodeConditionType
}

// Update runs one cycle's bookkeeping for the given thresholds and observations.
func (t *Tracker) Update(thresholds []Threshold, obs Observations) TrackResult {
	now := t.clock.Now()
	met := ThresholdsMet(thresholds, obs, false)
	// A threshold met last cycle stays met until min-reclaim is satisfied.
	if len(t.prevMet) > 0 {
		for _, th := range ThresholdsMet(t.prevMet, obs, true) {
			if !slices.ContainsFunc(met, func(m Threshold) bool { return m.key() == th.key() }) {
				met = append(met, th)
			}
		}
	}
	t.prevMet = met

	first := map[string]time.Time{}
	for _, th := range met {
		if at, ok := t.firstObserved[th.key()]; ok {
			first[th.key()] = at
		} else {
			first[th.key()] = now
		}
	}
	t.firstObserved = first

	var active []Threshold
	for _, th := range met {
		if now.Sub(first[th.key()]) < th.GracePeriod {
			continue
		}
		o := obs[th.Signal]
		if last, ok := t.lastObsTime[th.Signal]; ok && !o.Time.IsZero() && !o.Time.After(last) {
			continue
		}
		active = append(active, th)
	}
	for sig, o := range obs {
		t.lastObsTime[sig] = o.Time
	}

	// Conditions come from met thresholds, ignoring grace periods, as upstream.
	for _, th := range met {
		if c := signalCondition(th.Signal); c != "" {
			t.lastObserved[c] = now
		}
	}
	var conds []v1.NodeConditionType
	for c, at := range t.lastObserved {
		if now.Sub(at) < t.transitionPeriod {
			conds = append(conds, c)
		} else {
			delete(t.lastObserved, c)
		}
	}
	slices.Sort(conds)
	return TrackResult{Met: met, Active: active, Conditions: conds}
}

// WithAllocatableThresholds adds, for every hard memory.available
// threshold, the same threshold on allocatableMemory.available, as upstream
// does when enforceNodeAllocatable contains "pods". An explicit
// allocatableMemory.available threshold is kept as is.
func WithAllocatableThresholds(ts []Threshold) []Threshold {
	out := slices.Clone(ts)
	for _, t := range ts {
		if t.Signal != SignalMemoryAvailable || !t.Hard {
			continue
		}
		if slices.ContainsFunc(ts, func(o Threshold) bool { return o.Signal == SignalAllocatableMemoryAvailable && o.Hard }) {
			continue
		}
		a := t
		a.Signal = SignalAllocatableMemoryAvailable
		out = append(out, a)
	}
	return out
}

// Taint keys for the pressure conditions (upstream names).
const (
	TaintNodeMemoryPressure = "node.kubernetes.io/memory-pressure"
	TaintNodeDiskPressure   = "node.kubernetes.io/disk-pressure"
	TaintNodePIDPressure    = "node.kubernetes.io/pid-pressure"
)

// Taints returns the NoSchedule taints matching the pressure conditions.
func Taints(conditions []v1.NodeConditionType) []v1.Taint {
	var out []v1.Taint
	for _, c := range []v1.NodeConditionType{v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure} {
		if !slices.Contains(conditions, c) {
			continue
		}
		out = append(out, v1.Taint{Key: taintKey(c), Effect: v1.TaintEffectNoSchedule})
	}
	return out
}

func taintKey(c v1.NodeConditionType) string {
	switch c {
	case v1.NodeMemoryPressure:
		return TaintNodeMemoryPressure
	case v1.NodeDiskPressure:
		return TaintNodeDiskPressure
	case v1.NodePIDPressure:
		return TaintNodePIDPressure
	}
	return ""
}
