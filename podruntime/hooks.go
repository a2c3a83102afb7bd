package podruntime

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/prober"
)

// Hooks runs lifecycle handlers (prober.Handler).
type Hooks interface {
	RunHook(ctx context.Context, clk clock.Clock, pod *v1.Pod, t prober.Target, hook *v1.LifecycleHandler) (string, error)
}

// minimumGracePeriod is the least a container gets between SIGTERM and SIGKILL,
// also after a preStop hook used up most of the grace period.
const minimumGracePeriod = 2

// specByName finds a container (app, init, sidecar or ephemeral) of the pod.
func specByName(pod *v1.Pod, name string) *v1.Container {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return &pod.Spec.InitContainers[i]
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		if pod.Spec.EphemeralContainers[i].Name == name {
			c := v1.Container(pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)
			return &c
		}
	}
	return nil
}

// killContainer stops one container: event Killing with message (or the default
// "Stopping container X"), the preStop hook inside the grace period, then
// StopContainer with what is left of the grace.
func (m *Manager) killContainer(ctx context.Context, pod *v1.Pod, c *runtimeapi.ContainerStatus, podIP string, grace int64, message string) error {
	name := containerName(c)
	spec := specByName(pod, name)
	if spec == nil && len(pod.Spec.Containers) == 0 && len(pod.Spec.InitContainers) == 0 {
		// The pod is gone (an orphan, killed from its name and UID alone): its
		// preStop hook comes from the container's annotations, as upstream, so a
		// container either agent created runs it.
		spec = restoredSpec(c)
	}
	if message == "" {
		message = fmt.Sprintf("Stopping container %s", name)
	}
	if pod.Name != "" {
		m.deps.Recorder.Eventf(pod, v1.EventTypeNormal, "Killing", "%s", message)
	}
	if spec != nil && spec.Lifecycle != nil && spec.Lifecycle.PreStop != nil && m.deps.Hooks != nil &&
		c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
		grace -= m.runPreStop(ctx, pod, spec, c.Id, podIP, grace)
		if grace < minimumGracePeriod {
			grace = minimumGracePeriod
		}
	}
	klog.FromContext(ctx).V(2).Info("Killing container", "pod", klog.KObj(pod), "container", name, "containerID", c.Id, "gracePeriod", grace)
	if err := m.deps.Runtime.StopContainer(ctx, c.Id, grace); err != nil && !isNotFound(err) {
		return fmt.Errorf("stopping container %s: %w", name, err)
	}
	return nil
}

// runPreStop runs the preStop hook for at most grace seconds and returns the
// whole seconds it took, which the caller takes off the grace period.
func (m *Manager) runPreStop(ctx context.Context, pod *v1.Pod, spec *v1.Container, id, podIP string, grace int64) int64 {
	start := m.deps.Clock.Now()
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		msg, err := m.deps.Hooks.RunHook(hctx, m.deps.Clock, pod, prober.Target{PodIP: podIP, Container: spec, ContainerID: id}, spec.Lifecycle.PreStop)
		if err != nil && hctx.Err() == nil {
			klog.FromContext(ctx).Info("PreStop hook failed", "pod", klog.KObj(pod), "container", spec.Name, "err", err)
			m.deps.Recorder.Eventf(pod, v1.EventTypeWarning, "FailedPreStopHook", "%s", msg)
		}
	}()
	select {
	case <-done:
	case <-m.deps.Clock.After(time.Duration(grace) * time.Second):
		klog.FromContext(ctx).Info("PreStop hook did not finish within the grace period", "pod", klog.KObj(pod), "container", spec.Name, "gracePeriod", grace)
		cancel()
	case <-ctx.Done():
	}
	// The hook runs through the runtime client (exec) or the network: it is over
	// before the kill goes on, so nothing outlives the worker that started it.
	cancel()
	<-done
	return int64(m.deps.Clock.Since(start).Seconds())
}

// runPostStart runs the postStart hook of a just started container. On failure
// the container is killed and the returned Waiting explains it.
func (m *Manager) runPostStart(ctx context.Context, pod *v1.Pod, c *v1.Container, id, podIP string) error {
	if c.Lifecycle == nil || c.Lifecycle.PostStart == nil || m.deps.Hooks == nil {
		return nil
	}
	// No timeout of its own, as upstream: the hook runs until it ends or the
	// sync is cancelled (the pod is stopping).
	msg, err := m.deps.Hooks.RunHook(ctx, m.deps.Clock, pod, prober.Target{PodIP: podIP, Container: c, ContainerID: id}, c.Lifecycle.PostStart)
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		// Cut short, not failed: the pod's kill stops the container, with its grace period.
		return fmt.Errorf("postStart hook of container %s cut short: %w", c.Name, context.Cause(ctx))
	}
	// Upstream keeps the hook's output out of the event, which anyone reading
	// events sees, as it may hold secrets: it goes to the log and the error.
	klog.FromContext(ctx).Error(err, "Failed to execute PostStartHook", "pod", klog.KObj(pod), "container", c.Name, "message", msg)
	m.deps.Recorder.Eventf(pod, v1.EventTypeWarning, "FailedPostStartHook", "PostStartHook failed")
	st := &runtimeapi.ContainerStatus{
		Id: id, State: runtimeapi.ContainerState_CONTAINER_RUNNING,
		Metadata: &runtimeapi.ContainerMetadata{Name: c.Name},
	}
	if kerr := m.killContainer(ctx, pod, st, podIP, gracePeriod(pod, nil), "FailedPostStartHook"); kerr != nil {
		klog.FromContext(ctx).Error(kerr, "Killing container after its postStart hook failed", "pod", klog.KObj(pod), "container", c.Name)
	}
	return fmt.Errorf("postStart hook of container %s: %s: %w", c.Name, msg, err)
}
