package allocation

import (
	"encoding/json"
	"fmt"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"

	"github.com/nodelet/nodelet/cgroups"
	"github.com/nodelet/nodelet/internal/podutil"
)

// Upstream's event reasons for resizes.
const (
	EventResizeStarted    = "ResizeStarted"
	EventResizeCompleted  = "ResizeCompleted"
	EventResizeDeferred   = "ResizeDeferred"
	EventResizeInfeasible = "ResizeInfeasible"
	EventResizeError      = "ResizeError"
)

// Messages of the resizes refused for good (PodResizePending, Infeasible).
const (
	// MessageSwap is upstream's: a container that may swap keeps its memory request.
	MessageSwap = "In-place resize of containers with swap is not supported."
	// MessagePodLevel: nodelet does not resize pod-level resources
	// (spec.resources), which upstream does behind InPlacePodLevelResourcesVerticalScaling.
	MessagePodLevel = "In-place resize of pod-level resources (InPlacePodLevelResourcesVerticalScaling) is not supported by nodelet"
	// MessageCPUManager and MessageMemoryManager are upstream's: a
	// Guaranteed pod's exclusive CPUs or NUMA memory are not resized
	// (InPlacePodVerticalScalingExclusiveCPUs/-Memory, which nodelet lacks).
	MessageCPUManager    = "Resize is infeasible for Guaranteed Pods alongside CPU Manager static policy"
	MessageMemoryManager = "Resize is infeasible for Guaranteed Pods alongside Memory Manager static policy"
)

// StaticManagers says which resource managers place a Guaranteed pod's
// resources for good: cpuManagerPolicy static, memoryManagerPolicy Static.
type StaticManagers struct {
	CPU, Memory bool
}

// ResizeInfeasible says why the resize from allocated to desired can never be
// actuated on this node, "" when it can: a Guaranteed pod under a static CPU
// or memory manager, or a memory request change of a container that may swap
// (unless its memory resize policy restarts it), as upstream; a change of
// pod-level resources, which nodelet lacks. Whether it fits the node now is
// the admission's question, asked after this one.
func ResizeInfeasible(desired, allocated *v1.Pod, opts cgroups.ResourceOptions, static StaticManagers) string {
	if cgroups.QOSClass(desired) == v1.PodQOSGuaranteed {
		switch {
		case static.CPU:
			return MessageCPUManager
		case static.Memory:
			return MessageMemoryManager
		}
	}
	alloc := map[string]*v1.Container{}
	for _, list := range [][]v1.Container{allocated.Spec.Containers, allocated.Spec.InitContainers} {
		for i := range list {
			alloc[list[i].Name] = &list[i]
		}
	}
	for _, list := range [][]v1.Container{desired.Spec.Containers, desired.Spec.InitContainers} {
		for i := range list {
			want := &list[i]
			have, ok := alloc[want.Name]
			if !ok {
				continue
			}
			if want.Resources.Requests.Memory().Equal(*have.Resources.Requests.Memory()) || restartsOnMemoryResize(have) {
				continue
			}
			if cgroups.ContainerSwapBehavior(desired, want, opts) != cgroups.NoSwap ||
				cgroups.ContainerSwapBehavior(allocated, have, opts) != cgroups.NoSwap {
				return MessageSwap
			}
		}
	}
	if !apiequality.Semantic.DeepEqual(desired.Spec.Resources, allocated.Spec.Resources) {
		return MessagePodLevel
	}
	return ""
}

func restartsOnMemoryResize(c *v1.Container) bool {
	return ResizePolicyOf(c, v1.ResourceMemory) == v1.RestartContainer
}

// ResizePolicyOf is the container's resize restart policy for a resource:
// NotRequired unless it says otherwise.
func ResizePolicyOf(c *v1.Container, name v1.ResourceName) v1.ResourceResizeRestartPolicy {
	for _, p := range c.ResizePolicy {
		if p.ResourceName == name {
			return p.RestartPolicy
		}
	}
	return v1.NotRequired
}

// IsResizeInProgress says whether a running container that can be resized in
// place (app containers and sidecars, as upstream's check) runs with other
// cpu or memory requests or limits than allocated: actuated gives what the
// runtime was last told for a container. Containers not running take their
// allocation when they start.
func IsResizeInProgress(allocated *v1.Pod, running func(name string) bool, actuated func(name string) (v1.ResourceRequirements, bool)) bool {
	check := func(c *v1.Container) bool {
		if !running(c.Name) {
			return false
		}
		got, _ := actuated(c.Name)
		return !SameCPUMemory(c.Resources, got)
	}
	for i := range allocated.Spec.InitContainers {
		if c := &allocated.Spec.InitContainers[i]; podutil.IsRestartableInitContainer(c) && check(c) {
			return true
		}
	}
	for i := range allocated.Spec.Containers {
		if check(&allocated.Spec.Containers[i]) {
			return true
		}
	}
	return false
}

// SameCPUMemory compares the cpu and memory requests and limits of a and b.
func SameCPUMemory(a, b v1.ResourceRequirements) bool {
	for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
		if !a.Requests[name].Equal(b.Requests[name]) || !a.Limits[name].Equal(b.Limits[name]) {
			return false
		}
	}
	return true
}

type containerAllocation struct {
	Name      string                  `json:"name"`
	Resources v1.ResourceRequirements `json:"resources,omitempty"`
}

type podResourceSummary struct {
	InitContainers []containerAllocation `json:"initContainers,omitempty"`
	Containers     []containerAllocation `json:"containers,omitempty"`
	Generation     int64                 `json:"generation"`
	Error          string                `json:"error,omitempty"`
}

// ResizeStartedMessage, ResizeCompletedMessage, ResizeErrorMessage and
// ResizePendingMessage are upstream's event messages: a prefix, then the
// pod's container resources, the generation and an error as JSON.
func ResizeStartedMessage(pod *v1.Pod, generation int64) string {
	return resizeMessage(pod, generation, "", "Pod resize started")
}

func ResizeCompletedMessage(pod *v1.Pod, generation int64) string {
	return resizeMessage(pod, generation, "", "Pod resize completed")
}

func ResizeErrorMessage(pod *v1.Pod, generation int64, errMsg string) string {
	return resizeMessage(pod, generation, errMsg, "Pod resize error")
}

// ResizePendingMessage names the admission's own reason (OutOfcpu, ...), not
// the condition's Deferred, as upstream.
func ResizePendingMessage(pod *v1.Pod, reason, message string, generation int64) string {
	return resizeMessage(pod, generation, message, "Pod resize "+reason)
}

func resizeMessage(pod *v1.Pod, generation int64, errMsg, prefix string) string {
	s := podResourceSummary{Generation: generation, Error: errMsg}
	for _, c := range pod.Spec.InitContainers {
		s.InitContainers = append(s.InitContainers, containerAllocation{Name: c.Name, Resources: c.Resources})
	}
	for _, c := range pod.Spec.Containers {
		s.Containers = append(s.Containers, containerAllocation{Name: c.Name, Resources: c.Resources})
	}
	b, err := json.Marshal(s)
	if err != nil {
		return prefix
	}
	return fmt.Sprintf("%s: %s", prefix, b)
}
