package podruntime

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/allocation"
	"github.com/nodelet/nodelet/cgroups"
)

// In-place resize (KEP-1287): the pod handed to SyncPod carries its allocated
// resources; a running container whose actuated resources (what the runtime
// was last told) differ is updated in place through UpdateContainerResources,
// or restarted when its resizePolicy says RestartContainer, with the pod
// cgroup resized around the updates in upstream's order.

// Actuated remembers what the runtime was told of each container's resources
// (allocation.State over actuated_pods_state).
type Actuated interface {
	Pod(uid types.UID) (allocation.PodResourceInfo, bool)
	Container(uid types.UID, name string) (v1.ResourceRequirements, bool)
	SetPod(uid types.UID, info allocation.PodResourceInfo) error
	SetContainer(uid types.UID, name string, r v1.ResourceRequirements) error
	RemovePod(uid types.UID)
}

// PodCgroupResizer reads and changes an existing pod cgroup (cgroups.Manager).
type PodCgroupResizer interface {
	PodCgroupConfig(pod *v1.Pod) (cgroups.ResourceConfig, error)
	PodMemoryUsage(pod *v1.Pod) (int64, error)
	SetPodCgroupConfig(ctx context.Context, pod *v1.Pod, rc cgroups.ResourceConfig) error
}

// ActuatedFunc gives a container's actuated resources by name.
type ActuatedFunc func(name string) (v1.ResourceRequirements, bool)

// resizeValues are what a resize compares: milli-cpu and bytes.
type resizeValues struct {
	cpuRequest, cpuLimit, memRequest, memLimit int64
}

func valuesOf(r v1.ResourceRequirements) resizeValues {
	return resizeValues{
		cpuRequest: r.Requests.Cpu().MilliValue(), cpuLimit: r.Limits.Cpu().MilliValue(),
		memRequest: r.Requests.Memory().Value(), memLimit: r.Limits.Memory().Value(),
	}
}

// ContainerResize is one running container updated in place. Current is
// what the runtime has; the executor moves it to Desired resource by resource.
type ContainerResize struct {
	Name string
	ID   string
	// Spec is the container with its allocated resources.
	Spec             *v1.Container
	Desired, Current resizeValues
}

// ResizePlan is the in-place resize part of a sync.
type ResizePlan struct {
	// Memory and CPU are the containers to update for each resource,
	// decreases before increases (upstream's order). A container updating both
	// is in both lists, as the same value.
	Memory, CPU []*ContainerResize
	// UpdatePod: the pod cgroup follows the allocation although no container
	// is updated in place for it (a container restarts or starts with other
	// resources than it last ran with).
	UpdatePod bool
}

// Needed says whether the plan does anything.
func (p ResizePlan) Needed() bool { return len(p.Memory) > 0 || len(p.CPU) > 0 || p.UpdatePod }

func (p *ResizePlan) add(name v1.ResourceName, u *ContainerResize, desired, current int64) {
	list := &p.CPU
	if name == v1.ResourceMemory {
		list = &p.Memory
	}
	if desired < current {
		*list = append([]*ContainerResize{u}, *list...)
	} else {
		*list = append(*list, u)
	}
}

// planContainerResize compares a running container's allocated resources (c)
// with its actuated ones and records the update in a.Resize. It reports
// whether the container must restart instead (a changed resource whose
// resizePolicy is RestartContainer), in which case it is put in
// KillContainers and the caller starts it again; mayRestart false (a regular
// init container, which validation keeps from RestartContainer) never asks it.
func (a *Actions) planContainerResize(c *v1.Container, prev *runtimeapi.ContainerStatus, actuated map[string]v1.ResourceRequirements, mayRestart bool) bool {
	if actuated == nil || prev.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return false
	}
	got := actuated[c.Name]
	desired, current := valuesOf(c.Resources), valuesOf(got)
	if desired == current {
		return false
	}
	differs := func(name v1.ResourceName, d, cur int64) (resize, restart bool) {
		if d == cur {
			return false, false
		}
		return true, allocation.ResizePolicyOf(c, name) == v1.RestartContainer
	}
	resizeMemLim, restartMemLim := differs(v1.ResourceMemory, desired.memLimit, current.memLimit)
	resizeMemReq, restartMemReq := differs(v1.ResourceMemory, desired.memRequest, current.memRequest)
	resizeCPULim, restartCPULim := differs(v1.ResourceCPU, desired.cpuLimit, current.cpuLimit)
	resizeCPUReq, restartCPUReq := differs(v1.ResourceCPU, desired.cpuRequest, current.cpuRequest)
	if restartMemLim || restartMemReq || restartCPULim || restartCPUReq {
		if !mayRestart {
			return false
		}
		a.KillContainers[prev.Id] = fmt.Sprintf("Container %s resize requires restart", c.Name)
		a.Resize.UpdatePod = true
		return true
	}
	u := &ContainerResize{Name: c.Name, ID: prev.Id, Spec: c, Desired: desired, Current: current}
	if resizeMemLim {
		a.Resize.add(v1.ResourceMemory, u, desired.memLimit, current.memLimit)
	} else if resizeMemReq {
		a.Resize.add(v1.ResourceMemory, u, desired.memRequest, current.memRequest)
	}
	if resizeCPULim {
		a.Resize.add(v1.ResourceCPU, u, desired.cpuLimit, current.cpuLimit)
	} else if resizeCPUReq {
		a.Resize.add(v1.ResourceCPU, u, desired.cpuRequest, current.cpuRequest)
	}
	return false
}

// startingResized says whether a container about to (re)start last ran with
// other resources than allocated: the pod cgroup must follow first.
func startingResized(containers []v1.Container, start []int, actuated map[string]v1.ResourceRequirements) bool {
	if actuated == nil {
		return false
	}
	for _, i := range start {
		got := actuated[containers[i].Name]
		if valuesOf(containers[i].Resources) != valuesOf(got) {
			return true
		}
	}
	return false
}

// resizeStep is one step of a resize, in order: a pod cgroup write or a
// container update, for one resource.
type resizeStep struct {
	resource  v1.ResourceName
	pod       *cgroups.ResourceConfig
	container *ContainerResize
}

// resizeSteps orders a resize as upstream: memory, then cpu; for each, the pod
// cgroup's limit (then request) grows before the containers are updated and
// shrinks (request, then limit) after, so the containers always fit in the
// pod cgroup. cur is the pod cgroup now, want what the allocation gives it
// (nil settings: left as they are); havePod false (no pod cgroups) updates
// the containers only.
func resizeSteps(cur, want cgroups.ResourceConfig, plan ResizePlan, havePod bool) []resizeStep {
	var steps []resizeStep
	resize := func(name v1.ResourceName, list []*ContainerResize, curLim, newLim, curReq, newReq int64, lim, req *cgroups.ResourceConfig) {
		if len(list) == 0 && !plan.UpdatePod {
			return
		}
		podStep := func(rc *cgroups.ResourceConfig) {
			if havePod && rc != nil {
				steps = append(steps, resizeStep{resource: name, pod: rc})
			}
		}
		if newLim > curLim {
			podStep(lim)
		}
		if newReq > curReq {
			podStep(req)
		}
		for _, u := range list {
			steps = append(steps, resizeStep{resource: name, container: u})
		}
		if newReq < curReq {
			podStep(req)
		}
		if newLim < curLim {
			podStep(lim)
		}
	}
	val := func(p *int64) int64 {
		if p == nil {
			return 0
		}
		return *p
	}
	shares := func(p *uint64) int64 {
		if p == nil {
			return 0
		}
		return int64(*p)
	}
	// An unset setting keeps the current one (upstream cannot remove limits either).
	if want.Memory == nil {
		want.Memory = cur.Memory
	}
	if want.CPUQuota == nil {
		want.CPUQuota, want.CPUPeriod = cur.CPUQuota, cur.CPUPeriod
	}
	if want.CPUShares == nil {
		want.CPUShares = cur.CPUShares
	}
	resize(v1.ResourceMemory, plan.Memory, val(cur.Memory), val(want.Memory), 0, 0,
		&cgroups.ResourceConfig{Memory: want.Memory}, nil)
	resize(v1.ResourceCPU, plan.CPU, val(cur.CPUQuota), val(want.CPUQuota), shares(cur.CPUShares), shares(want.CPUShares),
		&cgroups.ResourceConfig{CPUQuota: want.CPUQuota, CPUPeriod: want.CPUPeriod}, &cgroups.ResourceConfig{CPUShares: want.CPUShares})
	return steps
}

// memoryUsage is what checkMemoryDecrease compares a lowered limit with; nil
// when it could not be read.
type memoryUsage struct {
	name  string // container; "" for the pod
	limit int64
	usage *int64
}

// checkMemoryDecrease refuses to lower a memory limit (the pod's or a
// container's) to or below what is in use, as upstream's best-effort check
// before a resize: the kernel would OOM-kill (v2) or refuse (v1).
func checkMemoryDecrease(checks []memoryUsage) error {
	var errs []error
	for _, c := range checks {
		switch {
		case c.name == "" && c.usage == nil:
			errs = append(errs, fmt.Errorf("missing pod memory usage"))
		case c.name == "" && *c.usage >= c.limit:
			errs = append(errs, fmt.Errorf("attempting to set pod memory limit (%d) below current usage (%d)", c.limit, *c.usage))
		case c.usage == nil:
			errs = append(errs, fmt.Errorf("missing container %q memory usage", c.name))
		case *c.usage >= c.limit:
			errs = append(errs, fmt.Errorf("attempting to set container %q memory limit (%d) below current usage (%d)", c.name, c.limit, *c.usage))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("cannot decrease memory limits: %w", utilerrors.NewAggregate(errs))
}

// memoryDecreases lists the memory limits the plan lowers (or sets where there
// was none): the pod's, then each container's, with no usage yet.
func memoryDecreases(cur, want cgroups.ResourceConfig, plan ResizePlan, havePod bool) []memoryUsage {
	if len(plan.Memory) == 0 && !plan.UpdatePod {
		return nil
	}
	var out []memoryUsage
	if havePod && want.Memory != nil && (cur.Memory == nil || *want.Memory < *cur.Memory) {
		out = append(out, memoryUsage{limit: *want.Memory})
	}
	for _, u := range plan.Memory {
		if u.Desired.memLimit != 0 && (u.Current.memLimit == 0 || u.Desired.memLimit < u.Current.memLimit) {
			out = append(out, memoryUsage{name: u.Name, limit: u.Desired.memLimit})
		}
	}
	return out
}

// actuatedFor gives the actuated resources of pod's containers.
func (m *Manager) actuatedFor(uid types.UID) ActuatedFunc {
	return func(name string) (v1.ResourceRequirements, bool) { return m.deps.Actuated.Container(uid, name) }
}

// initActuated records the pod's allocation as actuated when nothing is
// recorded for it (a pod nodelet adopts from a runtime it did not tell): as
// upstream, its running containers are taken to run with what was allocated.
func (m *Manager) initActuated(ctx context.Context, pod *v1.Pod) {
	if _, ok := m.deps.Actuated.Pod(pod.UID); ok {
		return
	}
	if err := m.deps.Actuated.SetPod(pod.UID, allocation.ResourceInfoForPod(pod)); err != nil {
		klog.FromContext(ctx).Error(err, "Failed to initialize the actuated resources checkpoint", "pod", klog.KObj(pod))
	}
}

// resizePod carries out plan: it reads the pod cgroup, checks that no memory
// limit goes below usage, then runs the steps, stopping at the first error
// (the next sync tries again from where the runtime is).
func (m *Manager) resizePod(ctx context.Context, pod *v1.Pod, sandboxID string, plan ResizePlan) error {
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(pod))
	pcg := m.deps.PodResize
	var cur, want cgroups.ResourceConfig
	if pcg != nil {
		var err error
		if cur, err = pcg.PodCgroupConfig(pod); err != nil {
			return fmt.Errorf("unable to get pod cgroup config for pod %q: %w", formatPod(pod), err)
		}
		opts := m.cfg.Resources
		want = cgroups.PodResourceConfig(pod, opts.CPUCFSQuota, opts.PeriodMicros(), 0)
		want.PidsLimit = nil
	}
	checks := memoryDecreases(cur, want, plan, pcg != nil)
	for i := range checks {
		if checks[i].name == "" {
			if u, err := pcg.PodMemoryUsage(pod); err == nil {
				checks[i].usage = &u
			}
			continue
		}
		for _, u := range plan.Memory {
			if u.Name != checks[i].name {
				continue
			}
			if st, err := m.deps.Runtime.ContainerStats(ctx, u.ID); err == nil && st.GetMemory().GetUsageBytes() != nil {
				v := int64(st.GetMemory().GetUsageBytes().GetValue())
				checks[i].usage = &v
			}
		}
	}
	if err := checkMemoryDecrease(checks); err != nil {
		return err
	}
	current := cur
	for _, s := range resizeSteps(cur, want, plan, pcg != nil) {
		if s.pod != nil {
			merged := mergeConfig(current, *s.pod)
			if err := m.notifySandbox(ctx, sandboxID, pod, merged); err != nil {
				return fmt.Errorf("failed to notify runtime for UpdatePodSandboxResources (resource=%s); resize rejected: %w", s.resource, err)
			}
			if err := pcg.SetPodCgroupConfig(ctx, pod, *s.pod); err != nil {
				if rerr := m.notifySandbox(ctx, sandboxID, pod, current); rerr != nil {
					logger.Error(rerr, "Failed to notify the runtime to roll back UpdatePodSandboxResources", "resource", s.resource)
				}
				return fmt.Errorf("setting the pod cgroup %s config: %w", s.resource, err)
			}
			current = merged
			logger.V(3).Info("Resized pod cgroup", "resource", s.resource)
			continue
		}
		if err := m.updateContainerResources(ctx, pod, s.resource, s.container); err != nil {
			return err
		}
	}
	return nil
}

// updateContainerResources moves one resource of a running container to its
// desired value, keeping the other at what the runtime has, and records it
// as actuated.
func (m *Manager) updateContainerResources(ctx context.Context, pod *v1.Pod, name v1.ResourceName, u *ContainerResize) error {
	c := u.Spec.DeepCopy()
	cpu, mem := u.Current, u.Current
	if name == v1.ResourceMemory {
		mem = u.Desired
	} else {
		cpu = u.Desired
	}
	c.Resources.Limits = v1.ResourceList{
		v1.ResourceCPU:    *resource.NewMilliQuantity(cpu.cpuLimit, resource.DecimalSI),
		v1.ResourceMemory: *resource.NewQuantity(mem.memLimit, resource.BinarySI),
	}
	c.Resources.Requests = v1.ResourceList{
		v1.ResourceCPU:    *resource.NewMilliQuantity(cpu.cpuRequest, resource.DecimalSI),
		v1.ResourceMemory: *resource.NewQuantity(mem.memRequest, resource.BinarySI),
	}
	res, _ := cgroups.ContainerResources(pod, c, m.memoryCapacity(), m.cfg.Resources)
	if err := m.deps.Runtime.UpdateContainerResources(ctx, u.ID, &runtimeapi.ContainerResources{Linux: res}); err != nil {
		return fmt.Errorf("updating %s of container %s: %w", name, u.Name, err)
	}
	if err := m.deps.Actuated.SetContainer(pod.UID, c.Name, c.Resources); err != nil {
		return fmt.Errorf("recording the actuated resources of container %s: %w", u.Name, err)
	}
	// The runtime took it: the next resource starts from here.
	if name == v1.ResourceMemory {
		u.Current.memLimit, u.Current.memRequest = u.Desired.memLimit, u.Desired.memRequest
	} else {
		u.Current.cpuLimit, u.Current.cpuRequest = u.Desired.cpuLimit, u.Desired.cpuRequest
	}
	klog.FromContext(ctx).V(3).Info("Resized container", "pod", klog.KObj(pod), "container", u.Name, "resource", name)
	return nil
}

// mergeConfig is cur with the settings update holds.
func mergeConfig(cur, update cgroups.ResourceConfig) cgroups.ResourceConfig {
	if update.CPUShares != nil {
		cur.CPUShares = update.CPUShares
	}
	if update.CPUQuota != nil {
		cur.CPUQuota = update.CPUQuota
	}
	if update.CPUPeriod != nil {
		cur.CPUPeriod = update.CPUPeriod
	}
	if update.Memory != nil {
		cur.Memory = update.Memory
	}
	return cur
}

// notifySandbox tells the runtime the pod's new resources before its cgroup
// changes (UpdatePodSandboxResources, for NRI plugins). A runtime without the
// call is fine, as upstream; any other error refuses the resize.
func (m *Manager) notifySandbox(ctx context.Context, sandboxID string, pod *v1.Pod, rc cgroups.ResourceConfig) error {
	if sandboxID == "" {
		return nil
	}
	res := &runtimeapi.LinuxContainerResources{}
	if rc.CPUShares != nil {
		res.CpuShares = int64(*rc.CPUShares)
	}
	if rc.CPUQuota != nil {
		res.CpuQuota = *rc.CPUQuota
	}
	if rc.CPUPeriod != nil {
		res.CpuPeriod = int64(*rc.CPUPeriod)
	}
	if rc.Memory != nil && *rc.Memory != cgroups.Unlimited {
		res.MemoryLimitInBytes = *rc.Memory
	}
	_, overhead := cgroups.SandboxResources(pod, m.cfg.Resources)
	if overhead != nil {
		// The runtime gets the containers' part, as upstream: overhead apart.
		res.MemoryLimitInBytes = max(res.MemoryLimitInBytes-overhead.MemoryLimitInBytes, 0)
		res.CpuShares = max(res.CpuShares-overhead.CpuShares, 0)
		if res.CpuQuota > 0 {
			res.CpuQuota = max(res.CpuQuota-overhead.CpuQuota, 0)
		}
	}
	_, err := m.deps.Runtime.UpdatePodSandboxResources(ctx, &runtimeapi.UpdatePodSandboxResourcesRequest{
		PodSandboxId: sandboxID, Overhead: overhead, Resources: res,
	})
	if err == nil {
		return nil
	}
	st, _ := grpcstatus.FromError(err)
	// containerd 2.2 answers Unknown "not implemented yet" (upstream checks the words too).
	if st.Code() == codes.Unimplemented || (st.Code() == codes.Unknown && strings.Contains(st.Message(), "not implemented")) {
		klog.FromContext(ctx).V(3).Info("UpdatePodSandboxResources is not implemented by the runtime; it is best-effort: proceeding with the resize", "sandboxID", sandboxID)
		return nil
	}
	return err
}
