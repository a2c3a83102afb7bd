package cgroups

import (
	"fmt"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/podutil"
)

// Swap behaviours (memorySwap.swapBehavior).
const (
	NoSwap      = "NoSwap"
	LimitedSwap = "LimitedSwap"
)

const (
	guaranteedOOMScoreAdj = -997
	besteffortOOMScoreAdj = 1000

	// Cgroup2MaxSwapFilename is the cgroup v2 swap limit, set through CRI Unified.
	Cgroup2MaxSwapFilename  = "memory.swap.max"
	cgroup2OOMGroupFilename = "memory.oom.group"
)

// ResourceOptions are the node-wide inputs of ContainerResources.
type ResourceOptions struct {
	// CPUCFSQuota enforces cpu limits with CFS quota (cpuCFSQuota).
	CPUCFSQuota bool
	// Period is cpuCFSQuotaPeriod; 0 means the kernel default 100ms.
	Period time.Duration
	// SwapBehavior is memorySwap.swapBehavior: "", NoSwap or LimitedSwap.
	SwapBehavior string
	// CgroupV2 is true on a unified (v2) host; hybrid counts as v1.
	CgroupV2 bool
	// NodeSwapCapacity is the node's swap in bytes (SwapTotal).
	NodeSwapCapacity int64
	// SwapControllerAvailable: see SwapControllerAvailable. Without it no swap
	// setting is made at all (the runtime could not apply it).
	SwapControllerAvailable bool
	// SingleProcessOOMKill (singleProcessOOMKill) keeps the v1-style OOM kill of one
	// process on cgroup v2; when false, memory.oom.group=1 kills the whole container.
	SingleProcessOOMKill bool
}

// PeriodMicros is the CFS period in µs.
func (o ResourceOptions) PeriodMicros() int64 {
	if o.Period <= 0 {
		return DefaultCFSPeriod
	}
	return o.Period.Microseconds()
}

// ContainerResources computes the CRI Linux resources of one container of pod:
// cpu shares (the runtime converts them to cpu.weight on v2), CFS quota/period,
// memory limit, oom_score_adj by QoS class, and the swap limit. nodeMemoryCapacity
// is the node's total memory in bytes. The returned warnings say where a setting
// could not be honoured (LimitedSwap on v1, a swap computation failure).
func ContainerResources(pod *v1.Pod, c *v1.Container, nodeMemoryCapacity int64, opts ResourceOptions) (*runtimeapi.LinuxContainerResources, []string) {
	_, hasCPUReq := c.Resources.Requests[v1.ResourceCPU]
	res := linuxResources(c.Resources.Requests.Cpu().MilliValue(), hasCPUReq, c.Resources.Limits.Cpu().MilliValue(),
		c.Resources.Limits.Memory().Value(), opts)
	if opts.CgroupV2 && !opts.SingleProcessOOMKill {
		res.Unified = map[string]string{cgroup2OOMGroupFilename: "1"}
	}
	res.OomScoreAdj = int64(OOMScoreAdj(pod, c, nodeMemoryCapacity))
	warnings := configureSwap(res, pod, c, nodeMemoryCapacity, opts)
	return res, warnings
}

// OOMScoreAdj is the container's oom_score_adj: -997 for node-critical and
// Guaranteed pods, 1000 for BestEffort, and for Burstable
// 1000 - 1000*memoryRequest/capacity kept within [3, 999]. (The floor is
// 1000+guaranteedOOMScoreAdj = 3 in the kubelet's code; the kubernetes.io page
// says 2.) A sidecar never scores above the app container with the least memory.
func OOMScoreAdj(pod *v1.Pod, c *v1.Container, memoryCapacity int64) int {
	if podutil.IsNodeCriticalPod(pod) {
		return guaranteedOOMScoreAdj
	}
	switch QOSClass(pod) {
	case v1.PodQOSGuaranteed:
		return guaranteedOOMScoreAdj
	case v1.PodQOSBestEffort:
		return besteffortOOMScoreAdj
	}
	if memoryCapacity <= 0 {
		// Unknown capacity: the weakest Burstable score rather than a division by zero.
		return besteffortOOMScoreAdj - 1
	}
	adj := 1000 - (1000*c.Resources.Requests.Memory().Value())/memoryCapacity
	if podutil.IsSidecar(pod, c) {
		if minAdj := 1000 - (1000*minAppMemoryRequest(pod))/memoryCapacity; adj > minAdj {
			adj = minAdj
		}
	}
	if adj < 1000+guaranteedOOMScoreAdj {
		return 1000 + guaranteedOOMScoreAdj
	}
	if adj == besteffortOOMScoreAdj {
		return int(adj - 1)
	}
	return int(adj)
}

func minAppMemoryRequest(pod *v1.Pod) int64 {
	var min int64 = -1
	for i := range pod.Spec.Containers {
		v := pod.Spec.Containers[i].Resources.Requests.Memory().Value()
		if min < 0 || v < min {
			min = v
		}
	}
	if min < 0 {
		return 0
	}
	return min
}

// ContainerSwapBehavior says whether the container gets LimitedSwap or NoSwap:
// LimitedSwap only when configured, on cgroup v2 with a swap controller, for a
// non-critical Burstable pod whose container sets a memory request or limit that
// differ.
func ContainerSwapBehavior(pod *v1.Pod, c *v1.Container, opts ResourceOptions) string {
	if opts.SwapBehavior != LimitedSwap || !opts.SwapControllerAvailable || !opts.CgroupV2 {
		return NoSwap
	}
	if podutil.IsCriticalPod(pod) || QOSClass(pod) != v1.PodQOSBurstable {
		return NoSwap
	}
	req, lim := c.Resources.Requests.Memory(), c.Resources.Limits.Memory()
	if req.IsZero() && lim.IsZero() {
		return NoSwap
	}
	if req.Cmp(*lim) == 0 {
		return NoSwap
	}
	return LimitedSwap
}

// BurstableSwapLimit is the LimitedSwap formula:
// int64(containerMemoryRequest/nodeTotalMemory * swapCapacity).
func BurstableSwapLimit(containerMemoryRequest, nodeTotalMemory, swapCapacity int64) (int64, error) {
	if nodeTotalMemory <= 0 {
		return 0, fmt.Errorf("total node memory is 0")
	}
	if containerMemoryRequest > nodeTotalMemory {
		return 0, fmt.Errorf("container request %d is larger than total node memory %d", containerMemoryRequest, nodeTotalMemory)
	}
	return int64(float64(containerMemoryRequest) / float64(nodeTotalMemory) * float64(swapCapacity)), nil
}

func configureSwap(res *runtimeapi.LinuxContainerResources, pod *v1.Pod, c *v1.Container, nodeMemory int64, opts ResourceOptions) []string {
	var warnings []string
	if !opts.CgroupV2 && opts.SwapBehavior == LimitedSwap {
		warnings = append(warnings, fmt.Sprintf("memorySwap.swapBehavior %s is not supported with cgroup v1; container %s runs with NoSwap", LimitedSwap, c.Name))
	}
	if !opts.SwapControllerAvailable {
		return warnings
	}
	if !opts.CgroupV2 {
		// memory+swap equal to memory: no swap beyond the memory limit (no effect
		// without a memory limit).
		res.MemorySwapLimitInBytes = res.MemoryLimitInBytes
		return warnings
	}
	var swap int64
	if ContainerSwapBehavior(pod, c, opts) == LimitedSwap {
		v, err := BurstableSwapLimit(c.Resources.Requests.Memory().Value(), nodeMemory, opts.NodeSwapCapacity)
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("cannot compute swap for container %s, disallowing swap: %v", c.Name, err))
		} else {
			swap = v
		}
	}
	if res.Unified == nil {
		res.Unified = map[string]string{}
	}
	res.Unified[Cgroup2MaxSwapFilename] = strconv.FormatInt(swap, 10)
	return warnings
}

// linuxResources maps cpu request/limit (milli-cpu) and memory limit (bytes) to CRI
// resources. A cpu limit without a request gives shares from the limit, as the API
// server would have defaulted the request to it; an explicit request wins, even 0.
func linuxResources(cpuReqMilli int64, hasCPUReq bool, cpuLimMilli, memLim int64, opts ResourceOptions) *runtimeapi.LinuxContainerResources {
	res := &runtimeapi.LinuxContainerResources{}
	if !hasCPUReq {
		res.CpuShares = int64(MilliCPUToShares(cpuLimMilli))
	} else {
		res.CpuShares = int64(MilliCPUToShares(cpuReqMilli))
	}
	if memLim != 0 {
		res.MemoryLimitInBytes = memLim
	}
	if opts.CPUCFSQuota {
		period := opts.PeriodMicros()
		res.CpuPeriod = period
		res.CpuQuota = MilliCPUToQuota(cpuLimMilli, period)
	}
	return res
}

// SandboxResources are the pod-level resources for PodSandboxConfig.Linux.Resources
// (summed requests and limits of the containers, without overhead) and
// PodSandboxConfig.Linux.Overhead (the pod overhead alone; nil without one), which
// the runtime may use to size the sandbox.
func SandboxResources(pod *v1.Pod, opts ResourceOptions) (resources, overhead *runtimeapi.LinuxContainerResources) {
	noOverhead := pod.DeepCopy()
	noOverhead.Spec.Overhead = nil
	cpuReq, _ := podAggregate(noOverhead, requestsOf, v1.ResourceCPU, false)
	hasCPUReq := !cpuReq.IsZero()
	cpuLim, _ := podAggregate(noOverhead, limitsOf, v1.ResourceCPU, true)
	memLim, _ := podAggregate(noOverhead, limitsOf, v1.ResourceMemory, true)
	resources = linuxResources(cpuReq.MilliValue(), hasCPUReq, cpuLim.MilliValue(), memLim.Value(), opts)
	if pod.Spec.Overhead != nil {
		cpu := pod.Spec.Overhead.Cpu().MilliValue()
		overhead = linuxResources(cpu, true, cpu, pod.Spec.Overhead.Memory().Value(), opts)
	}
	return resources, overhead
}
