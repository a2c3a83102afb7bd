package node

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// Condition reasons and messages, as the upstream kubelet reports them (clients match on them).
const (
	reasonReady               = "KubeletReady"
	reasonNotReady            = "KubeletNotReady"
	messageReady              = "kubelet is posting ready status"
	reasonSufficientMemory    = "KubeletHasSufficientMemory"
	reasonInsufficientMemory  = "KubeletHasInsufficientMemory"
	messageSufficientMemory   = "kubelet has sufficient memory available"
	messageInsufficientMemory = "kubelet has insufficient memory available"
	reasonNoDiskPressure      = "KubeletHasNoDiskPressure"
	reasonDiskPressure        = "KubeletHasDiskPressure"
	messageNoDiskPressure     = "kubelet has no disk pressure"
	messageDiskPressure       = "kubelet has disk pressure"
	reasonSufficientPID       = "KubeletHasSufficientPID"
	reasonInsufficientPID     = "KubeletHasInsufficientPID"
	messageSufficientPID      = "kubelet has sufficient PID available"
	messageInsufficientPID    = "kubelet has insufficient PID available"
)

func jitter(d time.Duration) time.Duration { return wait.Jitter(d, jitterFactor) }

func newCPUQuantity(cores int) *resource.Quantity {
	return resource.NewMilliQuantity(int64(cores)*1000, resource.DecimalSI)
}

// conditionEvent is a condition transition to record once the status is stored.
type conditionEvent struct{ reason string }

// setNodeStatus fills node.Status from the machine, the runtime and the readiness/pressure
// sources; fields it does not own (other conditions, extended resources) are kept.
func (c *Controller) setNodeStatus(ctx context.Context, node *v1.Node) []conditionEvent {
	now := metav1.NewTime(c.clk.Now())
	st := &node.Status

	c.setCloudProviderMeta(node)
	// With --cloud-provider=external, addresses once set are the cloud controller manager's.
	if !c.addressesFromCloud(st) {
		if addrs, err := c.nodeAddresses(); err != nil {
			klog.ErrorS(err, "Unable to determine node addresses; keeping the previous ones", "node", c.cfg.NodeName)
		} else {
			st.Addresses = addrs
		}
	}

	c.setResources(st)

	st.NodeInfo.MachineID = c.machine.MachineID
	st.NodeInfo.SystemUUID = c.machine.SystemUUID
	st.NodeInfo.BootID = c.machine.BootID
	st.NodeInfo.KernelVersion = c.machine.KernelVersion
	st.NodeInfo.OSImage = c.machine.OSImage
	st.NodeInfo.ContainerRuntimeVersion = c.containerRuntimeVersion(ctx)
	st.NodeInfo.KubeletVersion = c.cfg.Version
	st.NodeInfo.KubeProxyVersion = ""
	st.NodeInfo.OperatingSystem = runtime.GOOS
	st.NodeInfo.Architecture = runtime.GOARCH
	// The API refuses a zero swap capacity: report swap only when the node has some.
	st.NodeInfo.Swap = nil
	if c.machine.SwapCapacity > 0 {
		swap := int64(c.machine.SwapCapacity)
		st.NodeInfo.Swap = &v1.NodeSwapStatus{Capacity: &swap}
	}

	st.DaemonEndpoints.KubeletEndpoint.Port = c.port

	if c.images != nil {
		if images, err := c.nodeImages(ctx); err != nil {
			klog.ErrorS(err, "Unable to list images for node status; keeping the previous list", "node", c.cfg.NodeName)
		} else {
			st.Images = images
		}
	}

	if c.runtimeStatus != nil {
		c.setRuntimeFeatures(ctx, st)
	}
	if c.volumesInUse != nil {
		// nil, not empty, so the patch drops the field once nothing is in use.
		st.VolumesInUse = nil
		if v := c.volumesInUse(); len(v) > 0 {
			st.VolumesInUse = v
		}
	}

	var p Pressure
	if c.pressure != nil {
		p = c.pressure()
	}
	var events []conditionEvent
	set := func(cond v1.NodeCondition, trueEvent, falseEvent string) {
		if transitioned := setCondition(st, cond, now); transitioned {
			ev := falseEvent
			if cond.Status == v1.ConditionTrue {
				ev = trueEvent
			}
			events = append(events, conditionEvent{reason: ev})
		}
	}
	set(pressureCondition(v1.NodeMemoryPressure, p.Memory, reasonInsufficientMemory, messageInsufficientMemory, reasonSufficientMemory, messageSufficientMemory),
		"NodeHasInsufficientMemory", "NodeHasSufficientMemory")
	set(pressureCondition(v1.NodeDiskPressure, p.Disk, reasonDiskPressure, messageDiskPressure, reasonNoDiskPressure, messageNoDiskPressure),
		"NodeHasDiskPressure", "NodeHasNoDiskPressure")
	set(pressureCondition(v1.NodePIDPressure, p.PID, reasonInsufficientPID, messageInsufficientPID, reasonSufficientPID, messageSufficientPID),
		"NodeHasInsufficientPID", "NodeHasSufficientPID")
	set(c.readyCondition(), "NodeReady", "NodeNotReady")
	return events
}

func pressureCondition(t v1.NodeConditionType, pressure bool, trueReason, trueMsg, falseReason, falseMsg string) v1.NodeCondition {
	if pressure {
		return v1.NodeCondition{Type: t, Status: v1.ConditionTrue, Reason: trueReason, Message: trueMsg}
	}
	return v1.NodeCondition{Type: t, Status: v1.ConditionFalse, Reason: falseReason, Message: falseMsg}
}

func (c *Controller) readyCondition() v1.NodeCondition {
	var reasons []string
	if c.ready != nil {
		reasons = c.ready()
	}
	if len(reasons) == 0 {
		msg := messageReady
		if c.cfg.AppArmorEnabled {
			msg += ". AppArmor enabled"
		}
		return v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: reasonReady, Message: msg}
	}
	return v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionFalse, Reason: reasonNotReady, Message: aggregateMessage(reasons)}
}

// aggregateMessage joins reasons as upstream's errors.NewAggregate prints them, which
// is how its Ready message reads: one reason alone, several as "[a, b]", each once.
func aggregateMessage(reasons []string) string {
	var uniq []string
	for _, r := range reasons {
		if !slices.Contains(uniq, r) {
			uniq = append(uniq, r)
		}
	}
	if len(uniq) == 1 {
		return uniq[0]
	}
	return "[" + strings.Join(uniq, ", ") + "]"
}

// setCondition stores cond in st (replacing one of the same type), with the heartbeat at
// now and the transition time moved only when the status changes. It reports a transition.
func setCondition(st *v1.NodeStatus, cond v1.NodeCondition, now metav1.Time) bool {
	cond.LastHeartbeatTime = now
	for i := range st.Conditions {
		old := &st.Conditions[i]
		if old.Type != cond.Type {
			continue
		}
		if old.Status == cond.Status {
			cond.LastTransitionTime = old.LastTransitionTime
			*old = cond
			return false
		}
		cond.LastTransitionTime = now
		*old = cond
		return true
	}
	cond.LastTransitionTime = now
	st.Conditions = append(st.Conditions, cond)
	return true
}

// setResources writes our capacity/allocatable into the status maps, keeping extended
// resources someone else advertised and dropping huge page sizes this machine lacks.
func (c *Controller) setResources(st *v1.NodeStatus) {
	if st.Capacity == nil {
		st.Capacity = v1.ResourceList{}
	}
	for name := range st.Capacity {
		if _, ours := c.capacity[name]; !ours && strings.HasPrefix(string(name), hugePagesPrefix) {
			delete(st.Capacity, name)
		}
	}
	for name, q := range c.capacity {
		st.Capacity[name] = q.DeepCopy()
	}
	var devAllocatable v1.ResourceList
	if c.devices != nil {
		var devCapacity v1.ResourceList
		var deleted []string
		devCapacity, devAllocatable, deleted = c.devices.Capacity()
		for name, q := range devCapacity {
			st.Capacity[name] = q.DeepCopy()
		}
		// A resource whose plugin is gone for good drops to zero, as upstream.
		for _, name := range deleted {
			st.Capacity[v1.ResourceName(name)] = *resource.NewQuantity(0, resource.DecimalSI)
		}
	}
	// Extended resources advertised by others are allocatable at their full capacity.
	st.Allocatable = v1.ResourceList{}
	for name, q := range st.Capacity {
		if a, ok := c.allocatable[name]; ok {
			q = a
		} else if a, ok := devAllocatable[name]; ok {
			q = a
		}
		st.Allocatable[name] = q.DeepCopy()
	}
}

func (c *Controller) containerRuntimeVersion(ctx context.Context) string {
	c.mu.Lock()
	last := c.runtimeVersion
	c.mu.Unlock()
	if c.rt == nil {
		return last
	}
	v, err := c.rt.Version(ctx, runtimeAPIVersion)
	if err != nil {
		klog.ErrorS(err, "Unable to get the container runtime version; keeping the previous one", "node", c.cfg.NodeName)
		return last
	}
	s := fmt.Sprintf("%s://%s", v.GetRuntimeName(), v.GetRuntimeVersion())
	c.mu.Lock()
	c.runtimeVersion = s
	c.mu.Unlock()
	return s
}

func (c *Controller) nodeImages(ctx context.Context) ([]v1.ContainerImage, error) {
	if c.maxImages == 0 {
		return nil, nil
	}
	list, err := c.images.ListImages(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("listing images: %w", err)
	}
	sort.SliceStable(list, func(i, j int) bool { return list[i].GetSize() > list[j].GetSize() })
	if c.maxImages > 0 && len(list) > int(c.maxImages) {
		list = list[:c.maxImages]
	}
	out := make([]v1.ContainerImage, 0, len(list))
	for _, img := range list {
		names := append(append([]string{}, img.GetRepoDigests()...), img.GetRepoTags()...)
		if len(names) > maxNamesPerImageInNodeStatus {
			names = names[:maxNamesPerImageInNodeStatus]
		}
		out = append(out, v1.ContainerImage{Names: names, SizeBytes: int64(img.GetSize())})
	}
	return out, nil
}

// setRuntimeFeatures copies the runtime handlers and features from CRI Status; on error the
// previous values stay.
func (c *Controller) setRuntimeFeatures(ctx context.Context, st *v1.NodeStatus) {
	resp, err := c.runtimeStatus.Status(ctx, false)
	if err != nil {
		klog.ErrorS(err, "Unable to get the runtime status for node status; keeping the previous handlers", "node", c.cfg.NodeName)
		return
	}
	var handlers []v1.NodeRuntimeHandler
	for _, h := range resp.GetRuntimeHandlers() {
		rro := h.GetFeatures().GetRecursiveReadOnlyMounts()
		userns := h.GetFeatures().GetUserNamespaces()
		handlers = append(handlers, v1.NodeRuntimeHandler{
			Name:     h.GetName(),
			Features: &v1.NodeRuntimeHandlerFeatures{RecursiveReadOnlyMounts: &rro, UserNamespaces: &userns},
		})
	}
	st.RuntimeHandlers = handlers
	sgp := resp.GetFeatures().GetSupplementalGroupsPolicy()
	st.Features = &v1.NodeFeatures{SupplementalGroupsPolicy: &sgp}
}

// statusChanged compares two statuses ignoring the conditions' heartbeat times.
func statusChanged(a, b *v1.NodeStatus) bool {
	strip := func(s *v1.NodeStatus) *v1.NodeStatus {
		s = s.DeepCopy()
		for i := range s.Conditions {
			s.Conditions[i].LastHeartbeatTime = metav1.Time{}
		}
		return s
	}
	return !equality.Semantic.DeepEqual(strip(a), strip(b))
}

// updateNodeStatus runs one status update, retrying nodeStatusUpdateRetry times.
func (c *Controller) updateNodeStatus(ctx context.Context) error {
	var err error
	for i := range nodeStatusUpdateRetry {
		if err = c.tryUpdateNodeStatus(ctx, i); err == nil {
			return nil
		}
		if !c.isRegistered() && c.registerNode {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("updating node status: %w", ctx.Err())
		}
		if i > 0 && c.onHeartbeatFailure != nil {
			c.onHeartbeatFailure()
		}
		klog.ErrorS(err, "Error updating node status, will retry", "node", c.cfg.NodeName, "attempt", i+1)
	}
	return fmt.Errorf("updating node status: %d attempts failed, last: %w", nodeStatusUpdateRetry, err)
}

func (c *Controller) tryUpdateNodeStatus(ctx context.Context, try int) error {
	opts := metav1.GetOptions{}
	if try == 0 {
		// The first try may be served from the apiserver's watch cache; retries read quorum.
		opts.ResourceVersion = "0"
	}
	// Status updates are heartbeats too: upstream sends them on the unthrottled client.
	existing, err := c.heartbeat.CoreV1().Nodes().Get(ctx, c.cfg.NodeName, opts)
	if err != nil {
		if apierrors.IsNotFound(err) && c.registerNode && try > 0 {
			// Deleted behind our back: register again on the next loop (upstream needs a restart).
			c.mu.Lock()
			c.registered = false
			c.mu.Unlock()
		}
		return fmt.Errorf("getting node %q: %w", c.cfg.NodeName, err)
	}
	podCIDRChanged := false
	if c.podCIDRs != nil && len(existing.Spec.PodCIDRs) > 0 {
		if podCIDRChanged, err = c.podCIDRs(ctx, strings.Join(existing.Spec.PodCIDRs, ",")); err != nil {
			klog.ErrorS(err, "Error updating pod CIDR", "node", c.cfg.NodeName)
		}
	}
	updated := existing.DeepCopy()
	events := c.setNodeStatus(ctx, updated)

	c.mu.Lock()
	sinceReport := c.clk.Since(c.lastReport)
	c.mu.Unlock()
	metaChanged := existing.Annotations[AnnotationProvidedNodeIP] != updated.Annotations[AnnotationProvidedNodeIP]
	if !podCIDRChanged && !metaChanged && !statusChanged(&existing.Status, &updated.Status) && sinceReport < c.reportFrequency {
		c.setNode(existing)
		return nil
	}
	stored, err := c.patchNodeStatus(ctx, c.heartbeat, existing, updated)
	if err != nil {
		return err
	}
	c.reported(stored, events)
	return nil
}

func (c *Controller) recordEvents(events []conditionEvent) {
	if c.recorder == nil {
		return
	}
	// Upstream refers to the node with its name as UID, so events match across agents.
	ref := &v1.ObjectReference{Kind: "Node", Name: c.cfg.NodeName, UID: types.UID(c.cfg.NodeName)}
	for _, ev := range events {
		c.recorder.Eventf(ref, v1.EventTypeNormal, ev.reason, "Node %s status is now: %s", c.cfg.NodeName, ev.reason)
	}
}

// patchNodeStatus sends a strategic merge patch from old to updated on the status subresource.
func (c *Controller) patchNodeStatus(ctx context.Context, client kubernetes.Interface, old, updated *v1.Node) (*v1.Node, error) {
	patch, err := nodeStatusPatch(old, updated)
	if err != nil {
		return nil, err
	}
	n, err := client.CoreV1().Nodes().Patch(ctx, c.cfg.NodeName, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return nil, fmt.Errorf("patching status of node %q: %w", c.cfg.NodeName, err)
	}
	return n, nil
}

// nodeStatusPatch builds the strategic merge patch from old to updated (metadata and status).
// status.addresses is declared as merged by type, which cannot express two InternalIPs
// (dual-stack) or a removed address; when it changed, the whole list is replaced instead.
func nodeStatusPatch(old, updated *v1.Node) ([]byte, error) {
	updated = updated.DeepCopy()
	updated.Spec = old.Spec // the status subresource ignores spec anyway
	addrs := updated.Status.Addresses
	replaceAddrs := !equality.Semantic.DeepEqual(old.Status.Addresses, addrs)
	if replaceAddrs {
		updated.Status.Addresses = old.Status.Addresses
	}
	oldJSON, err := json.Marshal(old)
	if err != nil {
		return nil, fmt.Errorf("encoding node %q: %w", old.Name, err)
	}
	newJSON, err := json.Marshal(updated)
	if err != nil {
		return nil, fmt.Errorf("encoding node %q: %w", updated.Name, err)
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(oldJSON, newJSON, v1.Node{})
	if err != nil {
		return nil, fmt.Errorf("computing status patch for node %q: %w", old.Name, err)
	}
	if !replaceAddrs {
		return patch, nil
	}
	var m map[string]any
	if err := json.Unmarshal(patch, &m); err != nil {
		return nil, fmt.Errorf("decoding status patch for node %q: %w", old.Name, err)
	}
	status, _ := m["status"].(map[string]any)
	if status == nil {
		status = map[string]any{}
		m["status"] = status
	}
	list := make([]any, 0, len(addrs)+1)
	for _, a := range addrs {
		list = append(list, map[string]any{"type": string(a.Type), "address": a.Address})
	}
	list = append(list, map[string]any{"$patch": "replace"})
	status["addresses"] = list
	delete(status, "$setElementOrder/addresses")
	out, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encoding status patch for node %q: %w", old.Name, err)
	}
	return out, nil
}
