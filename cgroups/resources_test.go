package cgroups

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/podutil"
)

const nodeMem = 16 * gi

func TestContainerResourcesCPUAndMemory(t *testing.T) {
	tests := []struct {
		name                  string
		r                     v1.ResourceRequirements
		opts                  ResourceOptions
		shares, quota, period int64
		memory                int64
	}{
		{"besteffort no quota", bestEffortRes, ResourceOptions{}, 2, 0, 0, 0},
		{"besteffort quota on", bestEffortRes, ResourceOptions{CPUCFSQuota: true}, 2, 0, 100000, 0},
		{"request and limit", burstableRes, ResourceOptions{CPUCFSQuota: true}, 256, 100000, 100000, gi},
		{"limit only gives shares from limit", res("", "", "500m", "256Mi"), ResourceOptions{CPUCFSQuota: true}, 512, 50000, 100000, 256 << 20},
		{"custom period", guaranteedRes, ResourceOptions{CPUCFSQuota: true, Period: 50 * time.Millisecond}, 512, 25000, 50000, gi},
		{"quota disabled", guaranteedRes, ResourceOptions{CPUCFSQuota: false}, 512, 0, 0, gi},
		{"tiny limit gets min quota", res("1m", "", "1m", ""), ResourceOptions{CPUCFSQuota: true}, 2, 1000, 100000, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := podWith("u", tt.r)
			got, warns := ContainerResources(pod, &pod.Spec.Containers[0], nodeMem, tt.opts)
			if len(warns) != 0 {
				t.Errorf("warnings: %v", warns)
			}
			if got.CpuShares != tt.shares || got.CpuQuota != tt.quota || got.CpuPeriod != tt.period || got.MemoryLimitInBytes != tt.memory {
				t.Errorf("got shares=%d quota=%d period=%d mem=%d, want %d %d %d %d",
					got.CpuShares, got.CpuQuota, got.CpuPeriod, got.MemoryLimitInBytes, tt.shares, tt.quota, tt.period, tt.memory)
			}
			if got.Unified != nil {
				t.Errorf("v1 without swap controller: Unified = %v, want nil", got.Unified)
			}
		})
	}
}

func TestOOMScoreAdj(t *testing.T) {
	always := v1.ContainerRestartPolicyAlways
	static := func(p *v1.Pod) *v1.Pod {
		p.Annotations = map[string]string{podutil.AnnotationConfigSource: podutil.SourceFile}
		return p
	}
	tests := []struct {
		name string
		pod  *v1.Pod
		c    int // index into containers; -1 = first init container
		cap  int64
		want int
	}{
		{"guaranteed", podWith("u", guaranteedRes), 0, nodeMem, -997},
		{"besteffort", podWith("u", bestEffortRes), 0, nodeMem, 1000},
		{"burstable 1/16 of memory", podWith("u", res("", "1Gi", "", "2Gi")), 0, nodeMem, 1000 - 1000/16},
		{"burstable request 0", podWith("u", res("100m", "", "", "")), 0, nodeMem, 999},
		{"burstable request = capacity", podWith("u", res("", "16Gi", "", "")), 0, nodeMem, 3},
		{"burstable request > capacity", podWith("u", res("", "32Gi", "", "")), 0, nodeMem, 3},
		{"burstable unknown capacity", podWith("u", res("", "1Gi", "", "")), 0, 0, 999},
		{"node-critical burstable", func() *v1.Pod {
			p := static(podWith("u", burstableRes))
			p.Spec.PriorityClassName = podutil.SystemNodeCritical
			return p
		}(), 0, nodeMem, -997},
		{"node-critical besteffort", func() *v1.Pod {
			p := podWith("u", bestEffortRes)
			p.Spec.Priority = ptr.To(int32(2000001000))
			p.Spec.PriorityClassName = podutil.SystemNodeCritical
			return p
		}(), 0, nodeMem, -997},
		{"critical but not node-critical keeps QoS score", func() *v1.Pod {
			p := podWith("u", bestEffortRes)
			p.Spec.Priority = ptr.To(podutil.SystemCriticalPriority)
			p.Spec.PriorityClassName = podutil.SystemClusterCritical
			return p
		}(), 0, nodeMem, 1000},
		{"sidecar capped by smallest app container", func() *v1.Pod {
			p := podWith("u", res("", "4Gi", "", ""))
			p.Spec.InitContainers = []v1.Container{{Name: "side", RestartPolicy: &always, Resources: res("", "1Gi", "", "")}}
			return p
		}(), -1, nodeMem, 750},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &tt.pod.Spec.Containers[0]
			if tt.c < 0 {
				c = &tt.pod.Spec.InitContainers[0]
			}
			if got := OOMScoreAdj(tt.pod, c, tt.cap); got != tt.want {
				t.Errorf("OOMScoreAdj = %d, want %d", got, tt.want)
			}
			r, _ := ContainerResources(tt.pod, c, tt.cap, ResourceOptions{})
			if r.OomScoreAdj != int64(tt.want) {
				t.Errorf("ContainerResources OomScoreAdj = %d, want %d", r.OomScoreAdj, tt.want)
			}
		})
	}
}

func TestBurstableSwapLimit(t *testing.T) {
	tests := []struct {
		req, total, swap, want int64
		wantErr                bool
	}{
		{1 * gi, 16 * gi, 4 * gi, gi / 4, false},
		{0, 16 * gi, 4 * gi, 0, false},
		{16 * gi, 16 * gi, 4 * gi, 4 * gi, false},
		{1 * gi, 16 * gi, 0, 0, false},
		{3, 10, 100, 30, false},
		{1, 3, 10, 3, false}, // truncated, not rounded
		{1 * gi, 0, 4 * gi, 0, true},
		{32 * gi, 16 * gi, 4 * gi, 0, true},
	}
	for _, tt := range tests {
		got, err := BurstableSwapLimit(tt.req, tt.total, tt.swap)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("BurstableSwapLimit(%d, %d, %d) = %d, %v; want %d, err %v", tt.req, tt.total, tt.swap, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestContainerResourcesSwap(t *testing.T) {
	v2Limited := ResourceOptions{CgroupV2: true, SwapBehavior: LimitedSwap, NodeSwapCapacity: 4 * gi, SwapControllerAvailable: true}
	v2NoSwap := ResourceOptions{CgroupV2: true, SwapBehavior: NoSwap, NodeSwapCapacity: 4 * gi, SwapControllerAvailable: true}
	v2Default := ResourceOptions{CgroupV2: true, NodeSwapCapacity: 4 * gi, SwapControllerAvailable: true}
	v1Limited := ResourceOptions{SwapBehavior: LimitedSwap, NodeSwapCapacity: 4 * gi, SwapControllerAvailable: true}
	v1NoSwap := ResourceOptions{SwapBehavior: NoSwap, SwapControllerAvailable: true}
	critical := func(p *v1.Pod) *v1.Pod { p.Spec.Priority = ptr.To(podutil.SystemCriticalPriority); return p }

	const absent = "absent"
	tests := []struct {
		name        string
		pod         *v1.Pod
		opts        ResourceOptions
		wantSwapMax string // Unified["memory.swap.max"], or absent
		wantMemSw   int64  // MemorySwapLimitInBytes
		wantWarn    string
	}{
		{"v2 limited burstable request<limit", podWith("u", res("", "1Gi", "", "2Gi")), v2Limited, "268435456", 0, ""},
		{"v2 limited burstable request only", podWith("u", res("", "2Gi", "", "")), v2Limited, "536870912", 0, ""},
		{"v2 limited burstable request 0 limit set", podWith("u", res("100m", "", "", "1Gi")), v2Limited, "0", 0, ""},
		{"v2 limited burstable request = limit", podWith("u", res("100m", "1Gi", "", "1Gi")), v2Limited, "0", 0, ""},
		{"v2 limited burstable no memory at all", podWith("u", res("100m", "", "1", "")), v2Limited, "0", 0, ""},
		{"v2 limited guaranteed", podWith("u", guaranteedRes), v2Limited, "0", 0, ""},
		{"v2 limited besteffort", podWith("u", bestEffortRes), v2Limited, "0", 0, ""},
		{"v2 limited critical burstable", critical(podWith("u", res("", "1Gi", "", "2Gi"))), v2Limited, "0", 0, ""},
		{"v2 limited no swap on node", podWith("u", res("", "1Gi", "", "2Gi")),
			ResourceOptions{CgroupV2: true, SwapBehavior: LimitedSwap, SwapControllerAvailable: true}, "0", 0, ""},
		{"v2 limited request above node memory", podWith("u", res("", "32Gi", "", "64Gi")), v2Limited, "0", 0, "disallowing swap"},
		{"v2 noswap burstable", podWith("u", res("", "1Gi", "", "2Gi")), v2NoSwap, "0", 0, ""},
		{"v2 default behaviour is noswap", podWith("u", res("", "1Gi", "", "2Gi")), v2Default, "0", 0, ""},
		{"v2 no swap controller", podWith("u", res("", "1Gi", "", "2Gi")),
			ResourceOptions{CgroupV2: true, SwapBehavior: LimitedSwap, NodeSwapCapacity: 4 * gi}, absent, 0, ""},
		{"v1 limited is downgraded", podWith("u", res("", "1Gi", "", "2Gi")), v1Limited, absent, 2 * gi, "not supported with cgroup v1"},
		{"v1 limited without memsw still warns", podWith("u", res("", "1Gi", "", "2Gi")),
			ResourceOptions{SwapBehavior: LimitedSwap}, absent, 0, "not supported with cgroup v1"},
		{"v1 noswap memsw = limit", podWith("u", res("", "1Gi", "", "2Gi")), v1NoSwap, absent, 2 * gi, ""},
		{"v1 noswap no limit", podWith("u", res("", "1Gi", "", "")), v1NoSwap, absent, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &tt.pod.Spec.Containers[0]
			got, warns := ContainerResources(tt.pod, c, nodeMem, tt.opts)
			v, ok := got.Unified[Cgroup2MaxSwapFilename]
			if !ok {
				v = absent
			}
			if v != tt.wantSwapMax {
				t.Errorf("memory.swap.max = %q, want %q", v, tt.wantSwapMax)
			}
			if got.MemorySwapLimitInBytes != tt.wantMemSw {
				t.Errorf("MemorySwapLimitInBytes = %d, want %d", got.MemorySwapLimitInBytes, tt.wantMemSw)
			}
			joined := strings.Join(warns, "; ")
			if (tt.wantWarn == "") != (joined == "") || !strings.Contains(joined, tt.wantWarn) {
				t.Errorf("warnings = %q, want containing %q", joined, tt.wantWarn)
			}
			if tt.opts.CgroupV2 && got.Unified["memory.oom.group"] != "1" {
				t.Errorf("v2: memory.oom.group = %q, want 1", got.Unified["memory.oom.group"])
			}
		})
	}
}

func TestContainerSwapBehaviorSingleProcessOOMKill(t *testing.T) {
	pod := podWith("u", guaranteedRes)
	got, _ := ContainerResources(pod, &pod.Spec.Containers[0], nodeMem, ResourceOptions{CgroupV2: true, SingleProcessOOMKill: true})
	if _, ok := got.Unified["memory.oom.group"]; ok {
		t.Errorf("singleProcessOOMKill: Unified = %v, want no memory.oom.group", got.Unified)
	}
}

func TestContainerResourcesExplicitZeroCPURequest(t *testing.T) {
	// Upstream takes an explicit request over the limit, even when it is 0.
	pod := podWith("u", res("0", "", "2", ""))
	got, _ := ContainerResources(pod, &pod.Spec.Containers[0], nodeMem, ResourceOptions{CPUCFSQuota: true})
	if got.CpuShares != 2 || got.CpuQuota != 200000 {
		t.Errorf("shares=%d quota=%d, want 2 and 200000", got.CpuShares, got.CpuQuota)
	}
}

func TestSandboxResources(t *testing.T) {
	pod := podWith("u", res("250m", "", "500m", "512Mi"), res("250m", "", "1", "1Gi"))
	res, over := SandboxResources(pod, ResourceOptions{CPUCFSQuota: true})
	if res.CpuShares != 512 || res.CpuQuota != 150000 || res.CpuPeriod != 100000 || res.MemoryLimitInBytes != 1536<<20 {
		t.Errorf("resources = %+v", res)
	}
	if over != nil {
		t.Errorf("overhead without pod overhead = %+v, want nil", over)
	}
	pod.Spec.Overhead = v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("64Mi")}
	res, over = SandboxResources(pod, ResourceOptions{CPUCFSQuota: true})
	if res.CpuShares != 512 || res.MemoryLimitInBytes != 1536<<20 {
		t.Errorf("resources must exclude overhead: %+v", res)
	}
	if over == nil || over.CpuShares != 102 || over.CpuQuota != 10000 || over.MemoryLimitInBytes != 64<<20 {
		t.Errorf("overhead = %+v", over)
	}
	be := podWith("u", bestEffortRes)
	res, _ = SandboxResources(be, ResourceOptions{})
	if res.CpuShares != 2 || res.MemoryLimitInBytes != 0 {
		t.Errorf("besteffort sandbox = %+v", res)
	}
}
