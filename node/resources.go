package node

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/eviction"
)

const hugePagesPrefix = v1.ResourceHugePagesPrefix

// parseEvictionHard returns the hard thresholds that reduce allocatable, keyed by
// resource (config.Resolve has given an unset evictionHard its defaults).
func parseEvictionHard(m map[string]string) (map[v1.ResourceName]eviction.ThresholdValue, error) {
	out := map[v1.ResourceName]eviction.ThresholdValue{}
	for signal, value := range m {
		var res v1.ResourceName
		switch eviction.Signal(signal) {
		case eviction.SignalMemoryAvailable:
			res = v1.ResourceMemory
		case eviction.SignalNodeFsAvailable:
			res = v1.ResourceEphemeralStorage
		default:
			continue
		}
		t, ok, err := eviction.ParseThreshold(signal, value)
		if err != nil {
			return nil, fmt.Errorf("evictionHard[%s]: %w", signal, err)
		}
		if ok {
			out[res] = t.Value
		}
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
func computeReservation(capacity, kubeReserved, systemReserved v1.ResourceList, thresholds map[v1.ResourceName]eviction.ThresholdValue) v1.ResourceList {
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
	for name, t := range thresholds {
		if c, ok := capacity[name]; ok {
			add(name, *t.Resolve(&c))
		}
	}
	return out
}
