package cgroups

import (
	v1 "k8s.io/api/core/v1"
)

// ResourceConfig is what nodelet sets on a QoS or pod cgroup; nil leaves a setting
// alone.
type ResourceConfig struct {
	// CPUShares in v1 units; written as cpu.weight on v2.
	CPUShares *uint64
	// CPUQuota in µs per CPUPeriod; -1 is unlimited.
	CPUQuota  *int64
	CPUPeriod *uint64
	// Memory limit in bytes.
	Memory *int64
	// PidsLimit; -1 is unlimited.
	PidsLimit *int64
}

// PodResourceConfig is the pod cgroup's configuration, as the upstream kubelet
// derives it: cpu shares from the summed requests (2 for BestEffort); for
// Guaranteed pods the summed cpu limit as quota (-1 when cpuCFSQuota is off) and
// the summed memory limit; for Burstable pods quota and memory only when every
// container declares that limit. podPidsLimit > 0 sets pids.max.
func PodResourceConfig(pod *v1.Pod, cpuCFSQuota bool, periodMicros int64, podPidsLimit int64) ResourceConfig {
	cpuReq, _ := podAggregate(pod, requestsOf, v1.ResourceCPU, false)
	cpuLim, cpuDeclared := podAggregate(pod, limitsOf, v1.ResourceCPU, true)
	memLim, memDeclared := podAggregate(pod, limitsOf, v1.ResourceMemory, true)

	shares := MilliCPUToShares(cpuReq.MilliValue())
	quota := MilliCPUToQuota(cpuLim.MilliValue(), periodMicros)
	if !cpuCFSQuota {
		quota = -1
	}
	period := uint64(periodMicros)
	mem := memLim.Value()

	var rc ResourceConfig
	switch QOSClass(pod) {
	case v1.PodQOSGuaranteed:
		rc.CPUShares, rc.CPUQuota, rc.CPUPeriod, rc.Memory = &shares, &quota, &period, &mem
	case v1.PodQOSBurstable:
		rc.CPUShares = &shares
		if cpuDeclared {
			rc.CPUQuota, rc.CPUPeriod = &quota, &period
		}
		if memDeclared {
			rc.Memory = &mem
		}
	default:
		min := uint64(MinShares)
		rc.CPUShares = &min
	}
	if podPidsLimit > 0 {
		rc.PidsLimit = &podPidsLimit
	}
	return rc
}

// NodeResourceConfig is the kubepods cgroup's configuration from a resource list
// (capacity, or allocatable when enforced): memory limit, cpu shares, pids limit
// (the "pids" resource) for whichever are present.
func NodeResourceConfig(rl v1.ResourceList) ResourceConfig {
	var rc ResourceConfig
	if q, ok := rl[v1.ResourceMemory]; ok {
		v := q.Value()
		rc.Memory = &v
	}
	if q, ok := rl[v1.ResourceCPU]; ok {
		v := MilliCPUToShares(q.MilliValue())
		rc.CPUShares = &v
	}
	if q, ok := rl[ResourcePIDs]; ok {
		v := q.Value()
		rc.PidsLimit = &v
	}
	return rc
}

// ResourcePIDs is the resource name of the node's process ids (systemReserved/
// kubeReserved "pid" keys reduce it).
const ResourcePIDs v1.ResourceName = "pid"
