package podruntime

import (
	"fmt"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/cri"
	"github.com/nodelet/nodelet/pleg"
	"github.com/nodelet/nodelet/podstatus"
)

// Actions is what one sync of a pod must do. ComputeActions derives it from the
// spec and the runtime's state alone, so every decision is testable without a runtime.
type Actions struct {
	// KillPod stops every container and sandbox of the pod first.
	KillPod bool
	// CreateSandbox asks for a new sandbox with Attempt.
	CreateSandbox bool
	Attempt       uint32
	// SandboxID is the sandbox to run containers in when none is created.
	SandboxID string
	// NextInit is the index of the init container to start, or -1.
	NextInit int
	// InitFailed means an init container failed for good (restartPolicy Never).
	InitFailed bool
	// StartContainers are indexes into Spec.Containers.
	StartContainers []int
	// KillContainers maps container IDs to the reason they must stop.
	KillContainers map[string]string
	// KillGrace overrides the pod's grace period for some of KillContainers: a
	// failed probe's own terminationGracePeriodSeconds.
	KillGrace map[string]int64
	// Waiting explains containers that are not started this time (back-off).
	Waiting map[string]podstatus.Waiting
	// RequeueAfter asks for another sync when a back-off ends.
	RequeueAfter time.Duration
}

// BackoffChecker answers whether a container is still in its restart back-off.
type BackoffChecker interface {
	IsInBackOffSince(id string, eventTime time.Time) bool
	Get(id string) time.Duration
}

// ComputeActions decides what to do for pod given its runtime status.
func ComputeActions(pod *v1.Pod, st *pleg.PodStatus, backoff BackoffChecker, now time.Time) Actions {
	return ComputeActionsWithProbes(pod, st, backoff, now, nil)
}

// ProbeResults reports probe verdicts of running containers.
type ProbeResults interface {
	// Unhealthy says whether the container failed its liveness or startup probe
	// ("liveness", "startup") and must be killed.
	Unhealthy(containerID string) (probe string, failed bool)
	// Started says whether the container passed its startup probe (or has none).
	Started(podUID types.UID, container, containerID string) bool
}

// ComputeActionsWithProbes is ComputeActions where containers that failed a
// liveness or startup probe are killed (and restarted on a later sync, by the
// restart policy and back-off, once the runtime reports them dead), and an init
// container after a sidecar waits until the sidecar has started. probes may be nil.
func ComputeActionsWithProbes(pod *v1.Pod, st *pleg.PodStatus, backoff BackoffChecker, now time.Time, probes ProbeResults) Actions {
	a := Actions{NextInit: -1, KillContainers: map[string]string{}, KillGrace: map[string]int64{}, Waiting: map[string]podstatus.Waiting{}}
	byName := latestByName(st)

	if changed, attempt, why := sandboxChanged(pod, st); changed {
		a.Attempt = attempt
		if len(st.Sandboxes) > 0 {
			a.KillPod = true
		}
		// A pod that must never restart does not get a second sandbox once containers ran.
		if pod.Spec.RestartPolicy == v1.RestartPolicyNever && attempt > 0 && len(st.Containers) > 0 {
			return a
		}
		a.CreateSandbox = true
		_ = why
		if len(pod.Spec.InitContainers) > 0 {
			a.NextInit = firstInitToRun(pod, byName)
			if a.NextInit >= 0 {
				return a
			}
		}
		for i := range pod.Spec.Containers {
			c := &pod.Spec.Containers[i]
			if prev := byName[c.Name]; prev != nil && !shouldRestart(pod, prev) {
				continue
			}
			a.StartContainers = append(a.StartContainers, i)
		}
		return a
	}
	a.SandboxID = st.Sandboxes[0].Id

	// Init containers, in order; sidecars (restartPolicy Always) stay running.
	initDone := true
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		prev := byName[c.Name]
		if isSidecar(c) {
			if prev == nil {
				a.NextInit = i
				initDone = false
				break
			}
			if prev.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
				if hashChanged(hashOf(prev), c) {
					a.KillContainers[prev.Id] = "Container spec hash changed"
				} else if msg, bad := a.probeKill(pod, c, prev, probes, true); bad {
					a.KillContainers[prev.Id] = msg
				} else if c.StartupProbe != nil && probes != nil && !probes.Started(pod.UID, c.Name, prev.Id) {
					// What follows a sidecar starts once the sidecar has started, as upstream.
					initDone = false
					break
				}
				continue
			}
			// An exited sidecar restarts whatever the pod's restart policy.
			if a.startOrBackoff(pod, c, prev, backoff, now) {
				a.NextInit = i
				initDone = false
				break
			}
			continue
		}
		if prev == nil {
			a.NextInit = i
			initDone = false
			break
		}
		if prev.State == runtimeapi.ContainerState_CONTAINER_RUNNING || prev.State == runtimeapi.ContainerState_CONTAINER_CREATED {
			initDone = false // still running: wait for it
			break
		}
		if prev.State == runtimeapi.ContainerState_CONTAINER_EXITED && prev.ExitCode == 0 {
			continue
		}
		// Failed init container.
		initDone = false
		if pod.Spec.RestartPolicy == v1.RestartPolicyNever {
			a.InitFailed = true
			a.KillPod = true
			return a
		}
		if a.startOrBackoff(pod, c, prev, backoff, now) {
			a.NextInit = i
		}
		break
	}
	if !initDone {
		return a
	}

	keep, wanted := 0, 0
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		prev := byName[c.Name]
		switch {
		case prev == nil:
			a.StartContainers = append(a.StartContainers, i)
			wanted++
		case prev.State == runtimeapi.ContainerState_CONTAINER_RUNNING:
			if hashChanged(hashOf(prev), c) {
				a.KillContainers[prev.Id] = fmt.Sprintf("Container %s definition changed, will be restarted", c.Name)
				a.StartContainers = append(a.StartContainers, i)
				wanted++
				continue
			}
			if msg, bad := a.probeKill(pod, c, prev, probes, false); bad {
				a.KillContainers[prev.Id] = msg
				// It restarts on the next sync through the usual restart policy and back-off.
				if pod.Spec.RestartPolicy != v1.RestartPolicyNever {
					wanted++
				}
				continue
			}
			keep++
		case prev.State == runtimeapi.ContainerState_CONTAINER_CREATED:
			// Created but never started (nodelet stopped in between): replace it.
			a.KillContainers[prev.Id] = "Container was created but never started"
			a.StartContainers = append(a.StartContainers, i)
			wanted++
		default:
			if !shouldRestart(pod, prev) {
				continue
			}
			wanted++
			if a.startOrBackoff(pod, c, prev, backoff, now) {
				a.StartContainers = append(a.StartContainers, i)
			}
		}
	}
	if keep == 0 && wanted == 0 {
		// Nothing runs and nothing will: the pod is done; stop what is left (sidecars, sandbox).
		a.KillPod = true
	}
	return a
}

// probeKill returns the Killing message for a running container that failed its
// liveness or startup probe, worded as upstream.
func (a *Actions) probeKill(pod *v1.Pod, c *v1.Container, prev *runtimeapi.ContainerStatus, probes ProbeResults, sidecar bool) (string, bool) {
	if probes == nil {
		return "", false
	}
	probe, bad := probes.Unhealthy(prev.Id)
	if !bad {
		return "", false
	}
	p := c.LivenessProbe
	if probe == "startup" {
		p = c.StartupProbe
	}
	if p != nil && p.TerminationGracePeriodSeconds != nil {
		a.KillGrace[prev.Id] = *p.TerminationGracePeriodSeconds
	}
	msg := fmt.Sprintf("Container %s failed %s probe", c.Name, probe)
	if sidecar || pod.Spec.RestartPolicy != v1.RestartPolicyNever {
		msg += ", will be restarted"
	}
	return msg, true
}

// startOrBackoff reports whether the dead container prev may be restarted now,
// recording its back-off wait otherwise.
func (a *Actions) startOrBackoff(pod *v1.Pod, c *v1.Container, prev *runtimeapi.ContainerStatus, backoff BackoffChecker, now time.Time) bool {
	if backoff == nil {
		return true
	}
	key := BackoffKey(pod, c)
	finished := time.Unix(0, prev.FinishedAt)
	if prev.FinishedAt == 0 {
		finished = now
	}
	if !backoff.IsInBackOffSince(key, finished) {
		return true
	}
	d := backoff.Get(key)
	remaining := finished.Add(d).Sub(now)
	if remaining < 0 {
		remaining = 0
	}
	a.Waiting[c.Name] = podstatus.Waiting{
		Reason:  "CrashLoopBackOff",
		Message: fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)", d, c.Name, pod.Name, pod.Namespace, pod.UID),
	}
	if a.RequeueAfter == 0 || remaining < a.RequeueAfter {
		a.RequeueAfter = remaining + 100*time.Millisecond
	}
	return false
}

// BackoffKey identifies one container of one pod for the crash-loop back-off.
func BackoffKey(pod *v1.Pod, c *v1.Container) string {
	return fmt.Sprintf("%s_%s_%s_%s_%s", pod.Name, pod.Namespace, pod.UID, c.Name, ContainerHash(c))
}

func isSidecar(c *v1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways
}

// shouldRestart applies the pod's restart policy to a dead container.
func shouldRestart(pod *v1.Pod, prev *runtimeapi.ContainerStatus) bool {
	if prev.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
		return false
	}
	switch pod.Spec.RestartPolicy {
	case v1.RestartPolicyNever:
		return prev.State != runtimeapi.ContainerState_CONTAINER_EXITED
	case v1.RestartPolicyOnFailure:
		return !(prev.State == runtimeapi.ContainerState_CONTAINER_EXITED && prev.ExitCode == 0)
	default:
		return true
	}
}

func firstInitToRun(pod *v1.Pod, byName map[string]*runtimeapi.ContainerStatus) int {
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		prev := byName[c.Name]
		if isSidecar(c) || prev == nil || prev.State != runtimeapi.ContainerState_CONTAINER_EXITED || prev.ExitCode != 0 {
			return i
		}
	}
	return -1
}

// sandboxChanged reports whether the pod needs a new sandbox, the attempt to
// create it with, and why.
func sandboxChanged(pod *v1.Pod, st *pleg.PodStatus) (bool, uint32, string) {
	if len(st.Sandboxes) == 0 {
		return true, 0, "no sandbox"
	}
	sb := st.Sandboxes[0]
	next := sb.GetMetadata().GetAttempt() + 1
	if sb.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		return true, next, "sandbox is not ready"
	}
	hostNet := sb.GetLinux().GetNamespaces().GetOptions().GetNetwork() == runtimeapi.NamespaceMode_NODE
	if hostNet != pod.Spec.HostNetwork {
		return true, next, "sandbox network namespace changed"
	}
	if !pod.Spec.HostNetwork && sb.GetNetwork().GetIp() == "" {
		return true, next, "sandbox has no IP"
	}
	return false, 0, ""
}

// latestByName returns each container name's newest runtime status.
func latestByName(st *pleg.PodStatus) map[string]*runtimeapi.ContainerStatus {
	all := append([]*runtimeapi.ContainerStatus(nil), st.Containers...)
	sort.SliceStable(all, func(i, j int) bool { return all[i].CreatedAt > all[j].CreatedAt })
	m := map[string]*runtimeapi.ContainerStatus{}
	for _, c := range all {
		name := containerName(c)
		if _, ok := m[name]; !ok {
			m[name] = c
		}
	}
	return m
}

func containerName(c *runtimeapi.ContainerStatus) string {
	if n := c.GetLabels()[cri.LabelContainerName]; n != "" {
		return n
	}
	return c.GetMetadata().GetName()
}

func hashOf(c *runtimeapi.ContainerStatus) string {
	return c.GetAnnotations()[cri.AnnotationContainerHash]
}
