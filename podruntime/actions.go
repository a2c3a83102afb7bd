package podruntime

import (
	"fmt"
	"slices"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/cri"
	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/pleg"
	"github.com/nodelet/nodelet/podstatus"
)

// Actions is the plan of one sync of a pod: what it must do. ComputeActions
// derives it from Facts alone, so every decision is testable without a runtime.
type Actions struct {
	// KillPod stops every container and sandbox of the pod first.
	KillPod bool
	// CreateSandbox asks for a new sandbox with Attempt.
	CreateSandbox bool
	Attempt       uint32
	// SandboxID is the sandbox to run containers in when none is created.
	SandboxID string
	// StartInit are indexes into Spec.InitContainers to start, in spec order: at
	// most one regular init container, and sidecars (restartPolicy Always) to
	// (re)start.
	StartInit []int
	// InitFailed means an init container failed for good (restartPolicy Never).
	InitFailed bool
	// StartContainers are indexes into Spec.Containers.
	StartContainers []int
	// StartEphemeral are indexes into Spec.EphemeralContainers: those that never
	// ran. An ephemeral container starts once and is never restarted.
	StartEphemeral []int
	// KillContainers maps container IDs to the reason they must stop.
	KillContainers map[string]string
	// KillGrace overrides the pod's grace period for some of KillContainers: a
	// failed probe's own terminationGracePeriodSeconds.
	KillGrace map[string]int64
	// Waiting explains containers that are not started this time (back-off).
	Waiting map[string]podstatus.Waiting
	// RequeueAfter asks for another sync when a back-off ends.
	RequeueAfter time.Duration
	// Resize is the in-place resize of running containers and of the pod cgroup.
	Resize ResizePlan
}

// Facts are what one sync decides from, gathered from the runtime, the
// back-off, the prober and the actuated resources before ComputeActions runs
// (gatherFacts). Plain values: the decision calls nothing out.
type Facts struct {
	Pod    *v1.Pod
	Status *pleg.PodStatus
	Now    time.Time
	// Backoff holds, by container name, the crash-loop back-off period of each
	// exited container still in its back-off since it finished; absent: none.
	Backoff map[string]time.Duration
	// Probes are the prober's verdicts on running containers, by container ID;
	// absent: healthy and started (or no prober).
	Probes map[string]ProbeVerdict
	// Actuated are the resources the runtime was told of each container, by
	// name (in-place resize); nil resizes nothing.
	Actuated map[string]v1.ResourceRequirements
}

// ProbeVerdict is what the prober says of one running container.
type ProbeVerdict struct {
	// Failed names the probe it failed and must be killed for ("liveness",
	// "startup"); "" when none.
	Failed string
	// NotStarted means its startup probe has not passed yet.
	NotStarted bool
}

// BackoffChecker answers whether a container is still in its restart back-off.
type BackoffChecker interface {
	IsInBackOffSince(id string, eventTime time.Time) bool
	Get(id string) time.Duration
}

// ProbeResults reports probe verdicts of running containers.
type ProbeResults interface {
	// Unhealthy says whether the container failed its liveness or startup probe
	// ("liveness", "startup") and must be killed.
	Unhealthy(containerID string) (probe string, failed bool)
	// Started says whether the container passed its startup probe (or has none).
	Started(podUID types.UID, container, containerID string) bool
}

// gatherFacts reads what ComputeActions decides from: the back-off of the
// pod's exited containers, the probe verdicts of its running ones and their
// actuated resources. backoff, probes and actuated may each be nil (no
// back-off, no prober, no resize).
func gatherFacts(pod *v1.Pod, st *pleg.PodStatus, now time.Time, backoff BackoffChecker, probes ProbeResults, actuated ActuatedFunc) Facts {
	f := Facts{Pod: pod, Status: st, Now: now}
	byName := latestByName(st)
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			c := &list[i]
			if actuated != nil {
				if f.Actuated == nil {
					f.Actuated = map[string]v1.ResourceRequirements{}
				}
				if r, ok := actuated(c.Name); ok {
					f.Actuated[c.Name] = r
				}
			}
			prev := byName[c.Name]
			if prev == nil {
				continue
			}
			if backoff != nil && prev.State == runtimeapi.ContainerState_CONTAINER_EXITED {
				key := BackoffKey(pod, c)
				if backoff.IsInBackOffSince(key, finishedAt(prev, now)) {
					if f.Backoff == nil {
						f.Backoff = map[string]time.Duration{}
					}
					f.Backoff[c.Name] = backoff.Get(key)
				}
			}
			if probes != nil && prev.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
				var v ProbeVerdict
				if probe, bad := probes.Unhealthy(prev.Id); bad {
					v.Failed = probe
				}
				v.NotStarted = !probes.Started(pod.UID, c.Name, prev.Id)
				if v != (ProbeVerdict{}) {
					if f.Probes == nil {
						f.Probes = map[string]ProbeVerdict{}
					}
					f.Probes[prev.Id] = v
				}
			}
		}
	}
	if actuated != nil && f.Actuated == nil {
		f.Actuated = map[string]v1.ResourceRequirements{} // a pod without containers
	}
	return f
}

// unknownState is how upstream names CONTAINER_UNKNOWN in its kill messages.
const unknownState = "unknown"

// ComputeActions decides what one sync of f.Pod does given its runtime status:
// a new sandbox, or the init and app containers to start and kill within the
// existing one. Containers that failed a liveness or startup probe are killed
// (and restarted on a later sync, by the restart policy and back-off, once the
// runtime reports them dead), and an init container after a sidecar waits
// until the sidecar has started. With f.Actuated, a running container whose
// actuated resources (what the runtime was told) differ from its allocated
// ones is resized in place (Actions.Resize), or killed and started again when
// its resizePolicy asks (a restart counts as the container being wanted).
func ComputeActions(f Facts) Actions {
	pod, st := f.Pod, f.Status
	a := Actions{KillContainers: map[string]string{}, KillGrace: map[string]int64{}, Waiting: map[string]podstatus.Waiting{}}
	byName := latestByName(st)
	if changed, attempt := sandboxChanged(pod, st); changed {
		a.newSandbox(pod, st, byName, attempt)
		return a
	}
	a.SandboxID = st.Sandboxes[0].Id
	if initialized := a.initActions(f, byName); initialized && !a.KillPod {
		a.appActions(f, byName)
	}
	if !a.KillPod && !a.Resize.UpdatePod {
		// A container (re)starting with other resources than it ran with needs the
		// pod cgroup resized first.
		a.Resize.UpdatePod = startingResized(pod.Spec.InitContainers, a.StartInit, f.Actuated) ||
			startingResized(pod.Spec.Containers, a.StartContainers, f.Actuated)
	}
	if a.KillPod {
		a.Resize = ResizePlan{}
	}
	if !a.KillPod {
		// Also before the pod is initialized, as upstream: a debug container is
		// how one looks at a pod stuck in its init containers.
		a.StartEphemeral = ephemeralToStart(pod, byName)
	}
	return a
}

// ephemeralToStart returns the ephemeral containers that never ran: none of
// their instances is known to the runtime, and the pod's API status names no
// container for them (an instance garbage collected since must not come back:
// ephemeral containers are never restarted).
func ephemeralToStart(pod *v1.Pod, byName map[string]*runtimeapi.ContainerStatus) []int {
	ran := map[string]bool{}
	for _, s := range pod.Status.EphemeralContainerStatuses {
		if s.ContainerID != "" || s.State.Running != nil || s.State.Terminated != nil {
			ran[s.Name] = true
		}
	}
	var start []int
	for i := range pod.Spec.EphemeralContainers {
		name := pod.Spec.EphemeralContainers[i].Name
		if byName[name] == nil && !ran[name] {
			start = append(start, i)
		}
	}
	return start
}

// EphemeralTarget returns the ID of the running container whose process
// namespace the ephemeral container ec joins ("" when it names none). A target
// that is not running is an error: the ephemeral container waits for it
// (CreateContainerConfigError) and is tried again on a later sync.
func EphemeralTarget(ec *v1.EphemeralContainer, st *pleg.PodStatus) (string, error) {
	if ec.TargetContainerName == "" {
		return "", nil
	}
	t := latestByName(st)[ec.TargetContainerName]
	if t == nil || t.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return "", fmt.Errorf("unable to find target container %s", ec.TargetContainerName)
	}
	return t.Id, nil
}

// newSandbox decides a sync that must (re)create the sandbox: what ran in the old
// one stops, and init containers run again from the first, as upstream. No
// sandbox is created when nothing would run in it: the pod is only killed.
func (a *Actions) newSandbox(pod *v1.Pod, st *pleg.PodStatus, byName map[string]*runtimeapi.ContainerStatus, attempt uint32) {
	a.Attempt = attempt
	// Upstream sets KillPod for a new pod too, where it stops nothing.
	a.KillPod = len(st.Sandboxes) > 0 || len(st.Containers) > 0
	// A pod that must never restart (no container may) does not get a second
	// sandbox once containers ran.
	if !anyRestartable(pod) && attempt > 0 && len(st.Containers) > 0 {
		return
	}
	var start []int
	for i := range pod.Spec.Containers {
		if prev := byName[pod.Spec.Containers[i].Name]; prev != nil && finishedForGood(pod, &pod.Spec.Containers[i], prev) {
			continue
		}
		start = append(start, i)
	}
	if len(start) == 0 {
		// Every app container is done for good: init containers would run for nothing.
		return
	}
	a.CreateSandbox = true
	if len(pod.Spec.InitContainers) > 0 {
		a.StartInit = []int{0}
		return
	}
	a.StartContainers = start
}

// initActions decides the init containers' part of a sync in a ready sandbox and
// reports whether the pod is initialized, so that app containers may run. Like
// upstream it walks the init containers from the last one: completed ones may
// have been garbage collected, so the last one with a status tells how far
// initialization got.
func (a *Actions) initActions(f Facts, byName map[string]*runtimeapi.ContainerStatus) bool {
	pod := f.Pod
	inits := pod.Spec.InitContainers
	if len(inits) == 0 {
		return true
	}
	// A created or running app container means initialization completed once, even
	// if init containers were removed since. Exited ones do not: they may be left
	// from a sandbox that died with the node.
	initialized := false
	for i := range pod.Spec.Containers {
		if prev := byName[pod.Spec.Containers[i].Name]; prev != nil &&
			(prev.State == runtimeapi.ContainerState_CONTAINER_CREATED || prev.State == runtimeapi.ContainerState_CONTAINER_RUNNING) {
			initialized = true
			break
		}
	}
	// reached: a later init container has run, or the pod initialized.
	reached := initialized
	var start []int
	for i := len(inits) - 1; i >= 0; i-- {
		c := &inits[i]
		prev := byName[c.Name]
		sidecar := podutil.IsRestartableInitContainer(c)
		if prev == nil {
			if reached && sidecar {
				start = append(start, i) // its container was removed: it must run again
			}
			continue
		}
		if reached && !sidecar {
			continue // done once; after that only sidecars are kept running
		}
		switch {
		case cri.StartWasCut(prev):
			// Created but never started (nodelet stopped in between), or its start
			// cut off by a nodelet or runtime crash: start a new instance whatever
			// the restart policy; the start removes the stale one first and reuses
			// its attempt (startContainer).
			start = append(start, i)
		case prev.State == runtimeapi.ContainerState_CONTAINER_RUNNING:
			if !sidecar {
				// Wait for it to finish; its resources may change meanwhile, in place.
				a.planContainerResize(c, prev, f.Actuated, false)
				break
			}
			if c.StartupProbe != nil && f.Probes[prev.Id].NotStarted {
				if msg, bad := a.probeKill(f, c, prev, true); bad {
					a.KillContainers[prev.Id] = msg
				}
				break // what follows a sidecar starts once the sidecar has started
			}
			if i == len(inits)-1 {
				initialized = true
			} else if !reached {
				start = append(start, i+1)
			}
			if hashChanged(hashOf(prev), c) {
				a.KillContainers[prev.Id] = fmt.Sprintf("Init container %s definition changed", c.Name)
				start = append(start, i)
			} else if msg, bad := a.probeKill(f, c, prev, true); bad {
				a.KillContainers[prev.Id] = msg
			} else if a.planContainerResize(c, prev, f.Actuated, true) {
				start = append(start, i)
			}
		case prev.State == runtimeapi.ContainerState_CONTAINER_EXITED:
			if sidecar {
				// An exited sidecar restarts whatever the pod's restart policy.
				if a.startOrBackoff(f, c, prev) {
					start = append(start, i)
				}
				break
			}
			if prev.ExitCode != 0 {
				if !podutil.ContainerShouldRestart(c, &pod.Spec, prev.ExitCode) {
					a.failInit()
					return false
				}
				if a.startOrBackoff(f, c, prev) {
					start = append(start, i)
				}
				break
			}
			if i == len(inits)-1 {
				initialized = true
			} else {
				start = append(start, i+1)
			}
		default:
			// Unknown: it may still run, so it is stopped before a new one starts.
			if !sidecar && !podutil.RestartsAfterKill(&pod.Spec, c) {
				a.failInit()
				return false
			}
			a.KillContainers[prev.Id] = fmt.Sprintf("Init container is in %q state, try killing it before restart", unknownState)
			start = append(start, i)
		}
		reached = true
	}
	if !reached {
		start = append(start, 0)
	}
	slices.Reverse(start)
	a.StartInit = start
	return initialized
}

// failInit ends the pod: an init container failed and may not run again.
func (a *Actions) failInit() {
	a.InitFailed = true
	a.KillPod = true
	a.StartInit = nil
}

// appActions decides the app containers' part of a sync of an initialized pod.
func (a *Actions) appActions(f Facts, byName map[string]*runtimeapi.ContainerStatus) {
	pod := f.Pod
	keep, wanted := 0, 0
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		prev := byName[c.Name]
		switch {
		case prev == nil || cri.StartWasCut(prev):
			// Never started, created but not started (nodelet stopped in between), or
			// its start cut off by a nodelet or runtime crash: start a new instance
			// whatever the restart policy, as upstream does for the first two; the
			// start removes the stale one first and reuses its attempt.
			a.StartContainers = append(a.StartContainers, i)
			wanted++
		case prev.State == runtimeapi.ContainerState_CONTAINER_RUNNING:
			if hashChanged(hashOf(prev), c) {
				a.KillContainers[prev.Id] = fmt.Sprintf("Container %s definition changed, will be restarted", c.Name)
				a.StartContainers = append(a.StartContainers, i)
				wanted++
				continue
			}
			if msg, bad := a.probeKill(f, c, prev, false); bad {
				a.KillContainers[prev.Id] = msg
				// It restarts on the next sync through the usual restart policy and back-off.
				if podutil.RestartsAfterKill(&pod.Spec, c) {
					wanted++
				}
				continue
			}
			if a.planContainerResize(c, prev, f.Actuated, true) {
				a.StartContainers = append(a.StartContainers, i)
				wanted++
				continue
			}
			keep++
		case prev.State == runtimeapi.ContainerState_CONTAINER_EXITED:
			if finishedForGood(pod, c, prev) {
				continue
			}
			wanted++
			if a.startOrBackoff(f, c, prev) {
				a.StartContainers = append(a.StartContainers, i)
			}
		default:
			// Unknown: it may still run; stop it so that two never run at once.
			a.KillContainers[prev.Id] = fmt.Sprintf("Container is in %q state, try killing it before restart", unknownState)
			a.StartContainers = append(a.StartContainers, i)
			wanted++
		}
	}
	if keep == 0 && wanted == 0 {
		// Nothing runs and nothing will: the pod is done; stop what is left (sidecars,
		// sandbox), and restart no sidecar, which would keep a finished pod alive.
		a.KillPod = true
		a.StartInit = nil
	}
}

// probeKill returns the Killing message for a running container that failed its
// liveness or startup probe, worded as upstream.
func (a *Actions) probeKill(f Facts, c *v1.Container, prev *runtimeapi.ContainerStatus, sidecar bool) (string, bool) {
	probe := f.Probes[prev.Id].Failed
	if probe == "" {
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
	if sidecar || podutil.RestartsAfterKill(&f.Pod.Spec, c) {
		msg += ", will be restarted"
	}
	return msg, true
}

// startOrBackoff reports whether the dead container prev may be restarted now,
// recording its back-off wait otherwise.
func (a *Actions) startOrBackoff(f Facts, c *v1.Container, prev *runtimeapi.ContainerStatus) bool {
	d, inBackoff := f.Backoff[c.Name]
	if !inBackoff {
		return true
	}
	pod := f.Pod
	remaining := finishedAt(prev, f.Now).Add(d).Sub(f.Now)
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

// finishedAt is when prev exited, as its back-off counts: now when the
// runtime does not say.
func finishedAt(prev *runtimeapi.ContainerStatus, now time.Time) time.Time {
	if prev.FinishedAt == 0 {
		return now
	}
	return time.Unix(0, prev.FinishedAt)
}

// BackoffKey identifies one container of one pod for the crash-loop back-off.
// Like upstream's key it holds the image and the resources: a new image or a
// resize that restarts the container starts its back-off afresh. (The hash
// alone no longer would: it covers the name and image only.)
func BackoffKey(pod *v1.Pod, c *v1.Container) string {
	return fmt.Sprintf("%s_%s_%s_%s_%s_%s", pod.Name, pod.Namespace, pod.UID, c.Name, c.Image, c.Resources.String())
}

// finishedForGood says whether the restart policies (the container's rules and
// policy, then the pod's) keep exited container c down.
func finishedForGood(pod *v1.Pod, c *v1.Container, prev *runtimeapi.ContainerStatus) bool {
	if prev.State != runtimeapi.ContainerState_CONTAINER_EXITED {
		return false
	}
	return !podutil.ContainerShouldRestart(c, &pod.Spec, prev.ExitCode)
}

// anyRestartable says whether any app container of pod may ever restart.
func anyRestartable(pod *v1.Pod) bool {
	for i := range pod.Spec.Containers {
		if podutil.IsContainerRestartable(&pod.Spec, &pod.Spec.Containers[i]) {
			return true
		}
	}
	return false
}

// sandboxChanged reports whether the pod needs a new sandbox (none, not ready,
// another network namespace mode, no IP) and the attempt to create it with.
func sandboxChanged(pod *v1.Pod, st *pleg.PodStatus) (bool, uint32) {
	if len(st.Sandboxes) == 0 {
		return true, 0
	}
	sb := st.Sandboxes[0]
	next := sb.GetMetadata().GetAttempt() + 1
	if sb.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		return true, next
	}
	hostNet := sb.GetLinux().GetNamespaces().GetOptions().GetNetwork() == runtimeapi.NamespaceMode_NODE
	if hostNet != pod.Spec.HostNetwork {
		return true, next
	}
	if !pod.Spec.HostNetwork && sb.GetNetwork().GetIp() == "" {
		return true, next
	}
	return false, 0
}

// latestByName returns each container name's newest runtime status.
func latestByName(st *pleg.PodStatus) map[string]*runtimeapi.ContainerStatus {
	m := map[string]*runtimeapi.ContainerStatus{}
	for name, list := range instancesByName(st) {
		m[name] = list[0]
	}
	return m
}

// instancesByName lists the pod's container instances by container name, newest first.
func instancesByName(st *pleg.PodStatus) map[string][]*runtimeapi.ContainerStatus {
	all := append([]*runtimeapi.ContainerStatus(nil), st.Containers...)
	sort.SliceStable(all, func(i, j int) bool { return all[i].CreatedAt > all[j].CreatedAt })
	m := map[string][]*runtimeapi.ContainerStatus{}
	for _, c := range all {
		name := containerName(c)
		m[name] = append(m[name], c)
	}
	return m
}

func containerName(c *runtimeapi.ContainerStatus) string { return cri.ContainerName(c) }

func hashOf(c *runtimeapi.ContainerStatus) string {
	return c.GetAnnotations()[cri.AnnotationContainerHash]
}
