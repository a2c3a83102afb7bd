// Package eviction decides node-pressure evictions: it parses thresholds,
// computes signals from node stats (the Summary), tracks pressure conditions
// with anti-flap, ranks pods and picks at most one victim per cycle, and
// admits pods under pressure. Before those, it enforces local ephemeral
// storage limits (emptyDir sizeLimit, pod and container ephemeral-storage
// limits) when localStorageCapacityIsolation is on. The pure decision
// functions (Decide, DecideLocalStorage, Admit, the rankings) are separate
// from Manager, the thin loop that feeds them; the agent runs it every 10 s.
// This is the one parser of evictionHard, evictionSoft and related values,
// which config and node use too.
package eviction

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Signal is an eviction signal name as written in KubeletConfiguration.
type Signal string

// The signals nodelet understands (upstream names).
const (
	SignalMemoryAvailable            Signal = "memory.available"
	SignalAllocatableMemoryAvailable Signal = "allocatableMemory.available"
	SignalNodeFsAvailable            Signal = "nodefs.available"
	SignalNodeFsInodesFree           Signal = "nodefs.inodesFree"
	SignalImageFsAvailable           Signal = "imagefs.available"
	SignalImageFsInodesFree          Signal = "imagefs.inodesFree"
	SignalContainerFsAvailable       Signal = "containerfs.available"
	SignalContainerFsInodesFree      Signal = "containerfs.inodesFree"
	SignalPIDAvailable               Signal = "pid.available"
)

// knownSignals is a function, not a package variable, so no mutable state is shared.
func knownSignals() []Signal {
	return []Signal{
		SignalMemoryAvailable, SignalAllocatableMemoryAvailable,
		SignalNodeFsAvailable, SignalNodeFsInodesFree,
		SignalImageFsAvailable, SignalImageFsInodesFree,
		SignalContainerFsAvailable, SignalContainerFsInodesFree,
		SignalPIDAvailable,
	}
}

// OpLessThan is the only operator upstream supports.
const OpLessThan = "LessThan"

// ThresholdValue is either an absolute quantity or a fraction of capacity.
type ThresholdValue struct {
	Quantity   *resource.Quantity
	Percentage float32 // 0 < p < 1 when Quantity is nil
}

// String renders the value as it was configured.
func (v ThresholdValue) String() string {
	if v.Quantity != nil {
		return v.Quantity.String()
	}
	// float32 percentages are not exact: print at most 4 decimals.
	p := strconv.FormatFloat(float64(v.Percentage)*100, 'f', 4, 64)
	p = strings.TrimRight(strings.TrimRight(p, "0"), ".")
	return p + "%"
}

// Resolve returns the value as a quantity for the given capacity.
func (v ThresholdValue) Resolve(capacity *resource.Quantity) *resource.Quantity {
	if v.Quantity != nil {
		q := v.Quantity.DeepCopy()
		return &q
	}
	if capacity == nil {
		return resource.NewQuantity(0, resource.BinarySI)
	}
	return resource.NewQuantity(int64(float64(capacity.Value())*float64(v.Percentage)), resource.BinarySI)
}

// Threshold is one configured eviction threshold.
type Threshold struct {
	Signal   Signal
	Operator string
	Value    ThresholdValue
	// GracePeriod is 0 for hard thresholds.
	GracePeriod time.Duration
	// MinReclaim, if set, must be reclaimed beyond the threshold before it is
	// considered resolved.
	MinReclaim *ThresholdValue
	Hard       bool
}

// String is a short description for logs: "memory.available<100Mi".
func (t Threshold) String() string {
	s := string(t.Signal) + "<" + t.Value.String()
	if !t.Hard {
		s += " (soft, grace " + t.GracePeriod.String() + ")"
	}
	return s
}

func (t Threshold) key() string {
	return fmt.Sprintf("%s/%t", t.Signal, t.Hard)
}

// ParseThresholds turns the KubeletConfiguration eviction maps into
// thresholds, entry by entry with ParseThreshold, ParseGracePeriod and
// ParseMinimumReclaim. Every soft threshold needs a grace period.
func ParseThresholds(hard, soft, softGrace, minReclaim map[string]string) ([]Threshold, error) {
	var out []Threshold
	for _, sig := range slices.Sorted(maps.Keys(hard)) {
		t, ok, err := ParseThreshold(sig, hard[sig])
		if err != nil {
			return nil, fmt.Errorf("evictionHard[%s]: %w", sig, err)
		}
		if !ok {
			continue
		}
		t.Hard = true
		out = append(out, t)
	}
	for _, sig := range slices.Sorted(maps.Keys(soft)) {
		t, ok, err := ParseThreshold(sig, soft[sig])
		if err != nil {
			return nil, fmt.Errorf("evictionSoft[%s]: %w", sig, err)
		}
		g, found := softGrace[sig]
		if !found {
			return nil, fmt.Errorf("evictionSoft[%s] has no grace period in evictionSoftGracePeriod", sig)
		}
		d, err := ParseGracePeriod(sig, g)
		if err != nil {
			return nil, fmt.Errorf("evictionSoftGracePeriod[%s]: %w", sig, err)
		}
		if !ok {
			continue
		}
		t.GracePeriod = d
		out = append(out, t)
	}
	for _, sig := range slices.Sorted(maps.Keys(softGrace)) {
		if _, err := ParseGracePeriod(sig, softGrace[sig]); err != nil {
			return nil, fmt.Errorf("evictionSoftGracePeriod[%s]: %w", sig, err)
		}
	}
	for _, sig := range slices.Sorted(maps.Keys(minReclaim)) {
		v, err := ParseMinimumReclaim(sig, minReclaim[sig])
		if err != nil {
			return nil, fmt.Errorf("evictionMinimumReclaim[%s]: %w", sig, err)
		}
		for i := range out {
			if out[i].Signal == Signal(sig) {
				mr := v
				out[i].MinReclaim = &mr
			}
		}
	}
	return out, nil
}

// Signals are the eviction signals nodelet understands, in a fixed order.
func Signals() []Signal { return knownSignals() }

func isKnown(s Signal) bool { return slices.Contains(knownSignals(), s) }

func checkSignal(sig string) error {
	if isKnown(Signal(sig)) {
		return nil
	}
	known := make([]string, 0, len(knownSignals()))
	for _, s := range knownSignals() {
		known = append(known, string(s))
	}
	return fmt.Errorf("unknown eviction signal %q (known: %s)", sig, strings.Join(known, ", "))
}

// ParseThreshold parses one evictionHard or evictionSoft entry as upstream reads
// the configuration file: the value as written, a quantity ("100Mi") or a
// percentage of capacity ("10%"). No operator: every signal's is "<", which
// only upstream's --eviction-hard flag spells out (and that flag's parser, not
// this one, trims spaces). "0%" and "100%", exactly, disable the threshold
// (ok=false); a quantity must be above zero and a percentage within 0%-100%.
func ParseThreshold(signal, value string) (t Threshold, ok bool, err error) {
	if err := checkSignal(signal); err != nil {
		return Threshold{}, false, err
	}
	if strings.HasSuffix(value, "%") {
		if value == "0%" || value == "100%" {
			return Threshold{}, false, nil
		}
		p, err := parsePercentage(value)
		if err != nil {
			return Threshold{}, false, err
		}
		if p < 0 || p > 1 {
			return Threshold{}, false, fmt.Errorf("percentage %q must be within 0%%-100%%", value)
		}
		return Threshold{Signal: Signal(signal), Operator: OpLessThan, Value: ThresholdValue{Percentage: p}}, true, nil
	}
	q, err := resource.ParseQuantity(value)
	if err != nil {
		return Threshold{}, false, fmt.Errorf("invalid quantity %q: %w", value, err)
	}
	if q.Sign() <= 0 {
		return Threshold{}, false, fmt.Errorf("threshold %q must be above zero (use \"0%%\" to disable it)", value)
	}
	return Threshold{Signal: Signal(signal), Operator: OpLessThan, Value: ThresholdValue{Quantity: &q}}, true, nil
}

// ParseMinimumReclaim parses one evictionMinimumReclaim entry as upstream: a
// quantity of at least zero, or a percentage above 0%.
func ParseMinimumReclaim(signal, value string) (ThresholdValue, error) {
	if err := checkSignal(signal); err != nil {
		return ThresholdValue{}, err
	}
	if strings.HasSuffix(value, "%") {
		p, err := parsePercentage(value)
		if err != nil {
			return ThresholdValue{}, err
		}
		if p <= 0 {
			return ThresholdValue{}, fmt.Errorf("percentage %q must be above 0%%", value)
		}
		return ThresholdValue{Percentage: p}, nil
	}
	q, err := resource.ParseQuantity(value)
	if err != nil {
		return ThresholdValue{}, fmt.Errorf("invalid quantity %q: %w", value, err)
	}
	if q.Sign() < 0 {
		return ThresholdValue{}, fmt.Errorf("quantity %q must not be negative", value)
	}
	return ThresholdValue{Quantity: &q}, nil
}

// ParseGracePeriod parses one evictionSoftGracePeriod entry: a duration of at least zero.
func ParseGracePeriod(signal, value string) (time.Duration, error) {
	if err := checkSignal(signal); err != nil {
		return 0, err
	}
	d, err := time.ParseDuration(value)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: %w", value, err)
	}
	if d < 0 {
		return 0, fmt.Errorf("duration %q must not be negative", value)
	}
	return d, nil
}

// parsePercentage turns "10%" into 0.1 (float32, as upstream stores it, so a
// threshold resolves to the same bytes).
func parsePercentage(value string) (float32, error) {
	f, err := strconv.ParseFloat(strings.TrimRight(value, "%"), 32)
	if err != nil {
		return 0, fmt.Errorf("invalid percentage %q: %w", value, err)
	}
	if math.IsNaN(f) {
		return 0, fmt.Errorf("invalid percentage %q", value)
	}
	return float32(f) / 100, nil
}
