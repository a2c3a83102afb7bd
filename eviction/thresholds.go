// Package eviction decides node-pressure evictions: it parses thresholds,
// computes signals from node stats, tracks pressure conditions with
// anti-flap, ranks pods and picks at most one victim per cycle. The pure
// decision functions are separate from Manager, the thin loop that feeds them.
package eviction

import (
	"fmt"
	"maps"
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
// thresholds. Values are "<quantity" or "<N%"; "0%" and "100%" disable a
// threshold as upstream (tests use them to switch a default off). Every soft
// threshold needs a grace period.
func ParseThresholds(hard, soft, softGrace, minReclaim map[string]string) ([]Threshold, error) {
	var out []Threshold
	for _, sig := range slices.Sorted(maps.Keys(hard)) {
		t, ok, err := parseOne(sig, hard[sig])
		if err != nil {
			return nil, fmt.Errorf("parsing evictionHard[%s]: %w", sig, err)
		}
		if !ok {
			continue
		}
		t.Hard = true
		out = append(out, t)
	}
	for _, sig := range slices.Sorted(maps.Keys(soft)) {
		t, ok, err := parseOne(sig, soft[sig])
		if err != nil {
			return nil, fmt.Errorf("parsing evictionSoft[%s]: %w", sig, err)
		}
		g, found := softGrace[sig]
		if !found {
			return nil, fmt.Errorf("evictionSoft[%s] has no grace period in evictionSoftGracePeriod", sig)
		}
		d, err := time.ParseDuration(g)
		if err != nil {
			return nil, fmt.Errorf("parsing evictionSoftGracePeriod[%s]=%q: %w", sig, g, err)
		}
		if d < 0 {
			return nil, fmt.Errorf("evictionSoftGracePeriod[%s]=%q is negative", sig, g)
		}
		if !ok {
			continue
		}
		t.GracePeriod = d
		out = append(out, t)
	}
	for _, sig := range slices.Sorted(maps.Keys(softGrace)) {
		if _, ok := soft[sig]; !ok {
			if !isKnown(Signal(sig)) {
				return nil, fmt.Errorf("evictionSoftGracePeriod: unknown eviction signal %q", sig)
			}
		}
	}
	for _, sig := range slices.Sorted(maps.Keys(minReclaim)) {
		if !isKnown(Signal(sig)) {
			return nil, fmt.Errorf("evictionMinimumReclaim: unknown eviction signal %q", sig)
		}
		v, err := parseValue(minReclaim[sig])
		if err != nil {
			return nil, fmt.Errorf("parsing evictionMinimumReclaim[%s]: %w", sig, err)
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

func isKnown(s Signal) bool { return slices.Contains(knownSignals(), s) }

// parseOne parses "value" or "<value"; ok=false means the threshold is disabled.
func parseOne(sig, expr string) (Threshold, bool, error) {
	if !isKnown(Signal(sig)) {
		return Threshold{}, false, fmt.Errorf("unknown eviction signal %q", sig)
	}
	// The config file's maps hold the bare value ("100Mi"); the flag form puts the
	// operator in front ("<100Mi"). Every signal's operator is "<".
	expr = strings.TrimSpace(expr)
	raw := strings.TrimSpace(strings.TrimPrefix(expr, "<"))
	if strings.ContainsAny(raw[:min(1, len(raw))], "<>=!") {
		return Threshold{}, false, fmt.Errorf("threshold %q: only the operator < is supported", expr)
	}
	if raw == "0%" || raw == "100%" {
		return Threshold{}, false, nil
	}
	v, err := parseValue(raw)
	if err != nil {
		return Threshold{}, false, err
	}
	return Threshold{Signal: Signal(sig), Operator: OpLessThan, Value: v}, true, nil
}

func parseValue(raw string) (ThresholdValue, error) {
	raw = strings.TrimSpace(raw)
	if p, ok := strings.CutSuffix(raw, "%"); ok {
		f, err := strconv.ParseFloat(p, 32)
		if err != nil {
			return ThresholdValue{}, fmt.Errorf("invalid percentage %q: %w", raw, err)
		}
		if f < 0 || f > 100 {
			return ThresholdValue{}, fmt.Errorf("percentage %q must be within 0%%-100%%", raw)
		}
		return ThresholdValue{Percentage: float32(f / 100)}, nil
	}
	q, err := resource.ParseQuantity(raw)
	if err != nil {
		return ThresholdValue{}, fmt.Errorf("invalid quantity %q: %w", raw, err)
	}
	if q.Sign() < 0 {
		return ThresholdValue{}, fmt.Errorf("quantity %q must not be negative", raw)
	}
	return ThresholdValue{Quantity: &q}, nil
}
