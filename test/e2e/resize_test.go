//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

// resizePatch is what `kubectl patch --subresource resize` sends for container
// main: requests equal to limits (the pod stays Guaranteed).
func resizePatch(cpu, mem string) []byte {
	return []byte(fmt.Sprintf(`{"spec":{"containers":[{"name":"main","resources":{"requests":{"cpu":%q,"memory":%q},"limits":{"cpu":%q,"memory":%q}}}]}}`, cpu, mem, cpu, mem))
}

func resize(ctx context.Context, t *testing.T, f *framework.Framework, ns, name, cpu, mem string) *v1.Pod {
	t.Helper()
	p, err := f.Client.CoreV1().Pods(ns).Patch(ctx, name, types.StrategicMergePatchType, resizePatch(cpu, mem), metav1.PatchOptions{}, "resize")
	if err != nil {
		t.Fatalf("resizing pod %s/%s to %s/%s: %v", ns, name, cpu, mem, err)
	}
	return p
}

func guaranteed(cpu, mem string) v1.ResourceRequirements {
	l := v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse(mem)}
	return v1.ResourceRequirements{Requests: l, Limits: l.DeepCopy()}
}

func resizeCondition(p *v1.Pod, t v1.PodConditionType) *v1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// resized: the kubelet reports the pod's generation, allocated and actual
// resources equal to cpu/mem, and no resize pending or in progress.
func resized(cpu, mem string) func(*v1.Pod) bool {
	want := guaranteed(cpu, mem)
	return func(p *v1.Pod) bool {
		if len(p.Status.ContainerStatuses) != 1 || p.Status.ObservedGeneration != p.Generation ||
			resizeCondition(p, v1.PodResizeInProgress) != nil || resizeCondition(p, v1.PodResizePending) != nil {
			return false
		}
		cs := p.Status.ContainerStatuses[0]
		if cs.Resources == nil || cs.State.Running == nil {
			return false
		}
		for _, pair := range [][2]v1.ResourceList{{cs.AllocatedResources, want.Requests}, {cs.Resources.Requests, want.Requests}, {cs.Resources.Limits, want.Limits}} {
			for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
				got, ok := pair[0][name]
				if !ok || !got.Equal(pair[1][name]) {
					return false
				}
			}
		}
		return true
	}
}

// cgroupFiles reads a v1 cgroup's cpu quota, cpu shares and memory limit (the
// rig's host is cgroup v1) at dir below the cpu and memory hierarchies.
func cgroupFiles(t *testing.T, dir string) string {
	t.Helper()
	cpu, mem := filepath.Join("/sys/fs/cgroup/cpu", dir), filepath.Join("/sys/fs/cgroup/memory", dir)
	return fmt.Sprintf("cpu.cfs_quota_us=%s cpu.shares=%s memory.limit_in_bytes=%s",
		readCgroup(t, filepath.Join(cpu, "cpu.cfs_quota_us")), readCgroup(t, filepath.Join(cpu, "cpu.shares")),
		readCgroup(t, filepath.Join(mem, "memory.limit_in_bytes")))
}

// TestInPlacePodResize grows a running Guaranteed pod from 100m/64Mi to
// 200m/128Mi through the resize subresource: the same container (restart
// count 0) gets the new cgroup limits, as does its pod cgroup, and the status
// shows allocatedResources and resources. A resize that does not fit next to
// another pod is Deferred, cgroups untouched, until that pod goes; one beyond
// allocatable is refused by the API server (upstream v1.37). A container
// whose memory resizePolicy is RestartContainer is restarted with the new limit.
func TestInPlacePodResize(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	startNode(t, f, framework.NodeletOptions{})

	pod := f.BusyboxPod(ns, "resize", "sleep", "3600")
	pod.Spec.Containers[0].Resources = guaranteed("100m", "64Mi")
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](1)
	f.CreatePod(ctx, pod)
	running := f.WaitForPod(ctx, ns, "resize", 2*time.Minute, "to run with its resources reported", resized("100m", "64Mi"))
	if running.Status.QOSClass != v1.PodQOSGuaranteed {
		t.Fatalf("QoS class = %s, want Guaranteed", running.Status.QOSClass)
	}
	id := strings.TrimPrefix(running.Status.ContainerStatuses[0].ContainerID, "containerd://")
	podDir := filepath.Join(f.Env.CgroupRoot, "kubepods", "pod"+string(running.UID))
	ctrDir := filepath.Join(podDir, id)
	before := "cpu.cfs_quota_us=10000 cpu.shares=102 memory.limit_in_bytes=67108864"
	if got := cgroupFiles(t, ctrDir); got != before {
		t.Fatalf("container cgroup before the resize: %s, want %s", got, before)
	}

	start := time.Now()
	patched := resize(ctx, t, f, ns, "resize", "200m", "128Mi")
	if patched.Generation <= running.Generation {
		t.Fatalf("the resize did not bump the generation (%d -> %d)", running.Generation, patched.Generation)
	}
	done := f.WaitForPod(ctx, ns, "resize", time.Minute, "to report the resize to 200m/128Mi", resized("200m", "128Mi"))
	t.Logf("resize reported in status after %s", time.Since(start).Round(10*time.Millisecond))
	cs := done.Status.ContainerStatuses[0]
	if cs.RestartCount != 0 || cs.ContainerID != "containerd://"+id {
		t.Fatalf("the container was restarted: restartCount %d, containerID %s (was %s)", cs.RestartCount, cs.ContainerID, id)
	}
	after := "cpu.cfs_quota_us=20000 cpu.shares=204 memory.limit_in_bytes=134217728"
	var err error
	if got := cgroupFiles(t, ctrDir); got != after {
		t.Errorf("container cgroup after the resize: %s, want %s", got, after)
	}
	if got := cgroupFiles(t, podDir); got != after {
		t.Errorf("pod cgroup after the resize: %s, want %s", got, after)
	}
	err = framework.WaitFor(ctx, 30*time.Second, "ResizeStarted and ResizeCompleted events", func(ctx context.Context) (bool, error) {
		reasons := eventReasons(ctx, t, f, ns, "resize")
		return slices.Contains(reasons, "ResizeStarted") && slices.Contains(reasons, "ResizeCompleted"), nil
	})
	if err != nil {
		t.Error(err)
	}

	// A resize that does not fit next to the other pods waits (Deferred, with
	// the admission's words) and goes through once room frees up.
	node, err := f.Client.CoreV1().Nodes().Get(ctx, f.Env.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	allocatable := node.Status.Allocatable.Cpu().MilliValue()
	filler := f.BusyboxPod(ns, "filler", "sleep", "3600")
	filler.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceCPU: *resource.NewMilliQuantity(allocatable-300, resource.DecimalSI)}
	f.CreatePod(ctx, filler)
	f.WaitForPodReady(ctx, ns, "filler", 2*time.Minute)
	resize(ctx, t, f, ns, "resize", "400m", "128Mi")
	pending := f.WaitForPod(ctx, ns, "resize", time.Minute, "to have its resize deferred", func(p *v1.Pod) bool {
		c := resizeCondition(p, v1.PodResizePending)
		return c != nil && c.ObservedGeneration == p.Generation
	})
	c := resizeCondition(pending, v1.PodResizePending)
	t.Logf("resize that does not fit now: PodResizePending %s: %s", c.Reason, c.Message)
	wantMsg := fmt.Sprintf("Node didn't have enough resource: cpu, requested: 400, used: %d, capacity: %d", allocatable-300, allocatable)
	if c.Reason != v1.PodReasonDeferred || c.Message != wantMsg {
		t.Errorf("PodResizePending = %s %q, want Deferred %q", c.Reason, c.Message, wantMsg)
	}
	if got := pending.Status.ContainerStatuses[0].AllocatedResources[v1.ResourceCPU]; got.MilliValue() != 200 {
		t.Errorf("allocatedResources cpu = %s while the resize is deferred, want 200m", got.String())
	}
	if got := cgroupFiles(t, ctrDir); got != after {
		t.Errorf("container cgroup changed by a deferred resize: %s", got)
	}
	f.DeletePod(ctx, ns, "filler", nil)
	f.WaitForPodGone(ctx, ns, "filler", time.Minute)
	f.WaitForPod(ctx, ns, "resize", time.Minute, "to be resized once the filler is gone", resized("400m", "128Mi"))
	if got := cgroupFiles(t, ctrDir); got != "cpu.cfs_quota_us=40000 cpu.shares=409 memory.limit_in_bytes=134217728" {
		t.Errorf("container cgroup after the deferred resize: %s", got)
	}

	// More than the node has at all: the API server refuses it (upstream v1.37's
	// PodResize admission), the kubelet never sees it.
	_, err = f.Client.CoreV1().Pods(ns).Patch(ctx, "resize", types.StrategicMergePatchType,
		resizePatch(fmt.Sprintf("%dm", 2*allocatable), "128Mi"), metav1.PatchOptions{}, "resize")
	if err == nil || !strings.Contains(err.Error(), "node didn't have enough allocatable resources") {
		t.Errorf("a resize beyond allocatable: err = %v, want the API server's refusal", err)
	}

	// RestartContainer on memory: the container restarts with the new limit.
	rp := f.BusyboxPod(ns, "resize-restart", "sleep", "3600")
	rp.Spec.Containers[0].Resources = guaranteed("100m", "64Mi")
	rp.Spec.Containers[0].ResizePolicy = []v1.ContainerResizePolicy{
		{ResourceName: v1.ResourceCPU, RestartPolicy: v1.NotRequired},
		{ResourceName: v1.ResourceMemory, RestartPolicy: v1.RestartContainer},
	}
	rp.Spec.TerminationGracePeriodSeconds = ptr.To[int64](1)
	f.CreatePod(ctx, rp)
	first := f.WaitForPod(ctx, ns, "resize-restart", 2*time.Minute, "to run", resized("100m", "64Mi"))
	oldID := first.Status.ContainerStatuses[0].ContainerID
	resize(ctx, t, f, ns, "resize-restart", "100m", "128Mi")
	restarted := f.WaitForPod(ctx, ns, "resize-restart", time.Minute, "to run again with 128Mi", func(p *v1.Pod) bool {
		return resized("100m", "128Mi")(p) && p.Status.ContainerStatuses[0].RestartCount == 1
	})
	newID := restarted.Status.ContainerStatuses[0].ContainerID
	if newID == oldID {
		t.Fatalf("restartCount is 1 but the container ID is the old one %s", oldID)
	}
	rDir := filepath.Join(f.Env.CgroupRoot, "kubepods", "pod"+string(restarted.UID), strings.TrimPrefix(newID, "containerd://"))
	if got := cgroupFiles(t, rDir); got != "cpu.cfs_quota_us=10000 cpu.shares=102 memory.limit_in_bytes=134217728" {
		t.Errorf("restarted container cgroup: %s", got)
	}
	t.Logf("restart for the resize: %s -> %s", oldID, newID)
}
