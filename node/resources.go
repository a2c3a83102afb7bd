package node

import (
	"fmt"
	"github.com/nodelet/nodelet/config"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Eviction signals whose hard thresholds are held back from allocatable.
const (
	signalMemoryAvailable = "memory.available"
	signalNodeFsAvailable = "nodefs.available"
)

const hugePagesPrefix = v1.ResourceHugePagesPrefix

// threshold is a hard eviction threshold: an absolute quantity or a percentage of capacity.
type threshold struct {
	quantity *resource.Quantity
	percent  float64
}

func (t threshold) amount(capacity resource.Quantity) resource.Quantity {
	if t.quantity != nil {
		return t.quantity.DeepCopy()
	}
	return *resource.NewQuantity(int64(t.percent/100*float64(capacity.Value())), capacity.Format)
}

func parseThreshold(signal, value string) (threshold, error) {
	value = strings.TrimSpace(value)
	if p, ok := strings.CutSuffix(value, "%"); ok {
		f, err := strconv.ParseFloat(p, 64)
		if err != nil || f < 0 || f > 100 {
			return threshold{}, fmt.Errorf("eviction threshold %s=%q: percentage must be between 0%% and 100%%", signal, value)
		}
		return threshold{percent: f}, nil
	}
	q, err := resource.ParseQuantity(value)
	if err != nil {
		return threshold{}, fmt.Errorf("eviction threshold %s=%q: %w", signal, value, err)
	}
	if q.Sign() < 0 {
		return threshold{}, fmt.Errorf("eviction threshold %s=%q must not be negative", signal, value)
	}
	return threshold{quantity: &q}, nil
}

// parseEvictionHard returns the thresholds that reduce allocatable, keyed by resource.
func parseEvictionHard(m map[string]string) (map[v1.ResourceName]threshold, error) {
	if m == nil {
		m = config.DefaultEvictionHard()
	}
	out := map[v1.ResourceName]threshold{}
	for signal, value := range m {
		var res v1.ResourceName
		switch signal {
		case signalMemoryAvailable:
			res = v1.ResourceMemory
		case signalNodeFsAvailable:
			res = v1.ResourceEphemeralStorage
		default:
			continue
		}
		t, err := parseThreshold(signal, value)
		if err != nil {
			return nil, err
		}
		out[res] = t
	}
	return out, nil
}

// ParseReserved parses kubeReserved/systemReserved ("cpu": "100m", "memory": "1Gi", ...).
func ParseReserved(what string, m map[string]string) (v1.ResourceList, error) {
	out := v1.ResourceList{}
	for k, v := range m {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, fmt.Errorf("parsing %s %s=%q: %w", what, k, v, err)
		}
		if q.Sign() < 0 {
			return nil, fmt.Errorf("%s %s=%q must not be negative", what, k, v)
		}
		out[v1.ResourceName(k)] = q
	}
	return out, nil
}

// ReservedAllocatable is capacity minus kubeReserved and systemReserved, without the
// eviction thresholds: the total the kubepods cgroup may use (eviction is enforced by
// the eviction manager, not the cgroup).
func ReservedAllocatable(capacity v1.ResourceList, kubeReserved, systemReserved map[string]string) (v1.ResourceList, error) {
	kube, err := ParseReserved("kubeReserved", kubeReserved)
	if err != nil {
		return nil, err
	}
	system, err := ParseReserved("systemReserved", systemReserved)
	if err != nil {
		return nil, err
	}
	return computeAllocatable(capacity, computeReservation(capacity, kube, system, nil)), nil
}

// hugePageResourceName is "hugepages-2Mi" for 2048 KiB pages, as upstream names them.
func hugePageResourceName(sizeKiB uint64) v1.ResourceName {
	q := resource.NewQuantity(int64(sizeKiB)*1024, resource.BinarySI)
	return v1.ResourceName(hugePagesPrefix + q.String())
}

// computeCapacity derives the node capacity from the machine facts.
func computeCapacity(mi MachineInfo, maxPods, podsPerCore int32) v1.ResourceList {
	pods := int64(maxPods)
	if podsPerCore > 0 {
		pods = min(pods, int64(podsPerCore)*int64(mi.NumCores))
	}
	c := v1.ResourceList{
		v1.ResourceCPU:              *resource.NewMilliQuantity(int64(mi.NumCores)*1000, resource.DecimalSI),
		v1.ResourceMemory:           *resource.NewQuantity(int64(mi.MemoryCapacity), resource.BinarySI),
		v1.ResourceEphemeralStorage: *resource.NewQuantity(int64(mi.EphemeralStorage), resource.BinarySI),
		v1.ResourcePods:             *resource.NewQuantity(pods, resource.DecimalSI),
	}
	for _, hp := range mi.HugePages {
		c[hugePageResourceName(hp.SizeKiB)] = *resource.NewQuantity(int64(hp.SizeKiB*1024*hp.NumPages), resource.BinarySI)
	}
	return c
}

// computeAllocatable is capacity − reservation for every resource in capacity, floored at
// zero; memory also loses what is preallocated to huge pages, since pods cannot use it as
// ordinary memory.
func computeAllocatable(capacity, reservation v1.ResourceList) v1.ResourceList {
	out := v1.ResourceList{}
	for name, c := range capacity {
		v := c.DeepCopy()
		if r, ok := reservation[name]; ok {
			v.Sub(r)
		}
		if v.Sign() < 0 {
			v.Set(0)
		}
		out[name] = v
	}
	mem, ok := out[v1.ResourceMemory]
	if !ok {
		return out
	}
	for name, c := range capacity {
		if strings.HasPrefix(string(name), hugePagesPrefix) {
			mem.Sub(c)
		}
	}
	if mem.Sign() < 0 {
		mem.Set(0)
	}
	out[v1.ResourceMemory] = mem
	return out
}

// computeReservation sums kubeReserved, systemReserved and the hard eviction thresholds.
func computeReservation(capacity, kubeReserved, systemReserved v1.ResourceList, eviction map[v1.ResourceName]threshold) v1.ResourceList {
	out := v1.ResourceList{}
	add := func(name v1.ResourceName, q resource.Quantity) {
		cur := out[name]
		cur.Add(q)
		out[name] = cur
	}
	for name, q := range kubeReserved {
		add(name, q)
	}
	for name, q := range systemReserved {
		add(name, q)
	}
	for name, t := range eviction {
		if c, ok := capacity[name]; ok {
			add(name, t.amount(c))
		}
	}
	return out
}
