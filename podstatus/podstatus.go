// Package podstatus computes a pod's API status from its spec and what the
// runtime reports: phase, conditions with observedGeneration, init, app and
// ephemeral container states (ephemeral ones never ready and outside phase and
// conditions), resources from the runtime and allocatedResources, and the
// resize conditions. It is pure (Generate): the same inputs always give the
// same status, which is what lets the status manager patch only on real
// changes.
package podstatus

import (
	"slices"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/cgroups"
	"github.com/nodelet/nodelet/cri"
	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/pleg"
)

// Waiting is why a container is not running, as decided by the last sync
// (CrashLoopBackOff, ErrImagePull, CreateContainerConfigError, ...).
type Waiting struct {
	Reason  string
	Message string
}

// ContainerProbes answers for running containers: started (startup probe passed
// or none) and ready (readiness probe passed, or none).
type ContainerProbes interface {
	Started(podUID types.UID, container, containerID string) bool
	Ready(podUID types.UID, container, containerID string) bool
}

// Input is everything Generate needs.
type Input struct {
	Pod      *v1.Pod
	Runtime  *pleg.PodStatus // nil when the runtime knows nothing of the pod
	Previous v1.PodStatus    // the status last computed or seen in the API
	// Waiting holds per-container reasons from the last sync, by container name.
	Waiting map[string]Waiting
	HostIPs []string
	// RuntimeName prefixes container IDs ("containerd://<id>").
	RuntimeName string
	// TerminationMessage reads the message a terminated container left, if any.
	TerminationMessage func(spec *v1.Container, st *runtimeapi.ContainerStatus) string
	// Readiness reports probe-driven readiness for a running container; nil
	// means a running container is ready (no probes yet).
	Readiness func(containerID string) (ready, known bool)
	// Probes, when set, gives probe-driven started and ready flags of running
	// containers (startup and readiness probes).
	Probes ContainerProbes
	Now    time.Time
	// Terminal means the pod is done on this node (deleted, or finished): its phase
	// must become Succeeded or Failed once its containers stopped.
	Terminal bool
	// ResizeConditions are the pod's PodResizePending and PodResizeInProgress
	// conditions (in-place resize), reported as they are: they carry the
	// generation of the resize they speak of.
	ResizeConditions []v1.PodCondition
	// Actuated gives what the runtime was last told of a container's resources:
	// the memory request (which the runtime does not report) and, for a runtime
	// reporting none, all of them. Pod is the pod with its allocated resources.
	Actuated func(container string) (v1.ResourceRequirements, bool)
}

// Generate returns the pod status to report.
func Generate(in Input) v1.PodStatus {
	pod := in.Pod
	prev := in.Previous
	rt := in.Runtime
	if rt == nil {
		rt = &pleg.PodStatus{UID: pod.UID}
	}
	s := v1.PodStatus{
		QOSClass: QOSClass(pod),
		// PodObservedGenerationTracking (GA): the status is of this generation.
		ObservedGeneration: pod.Generation,
	}
	s.StartTime = prev.StartTime
	if s.StartTime == nil {
		t := metav1.NewTime(in.Now)
		s.StartTime = &t
	}
	for _, ip := range in.HostIPs {
		s.HostIPs = append(s.HostIPs, v1.HostIP{IP: ip})
	}
	if len(in.HostIPs) > 0 {
		s.HostIP = in.HostIPs[0]
	}
	ips := rt.IPs
	if pod.Spec.HostNetwork {
		ips = in.HostIPs
	}
	if len(ips) == 0 && len(prev.PodIPs) > 0 && sandboxReady(rt) {
		for _, p := range prev.PodIPs {
			ips = append(ips, p.IP)
		}
	}
	for _, ip := range ips {
		s.PodIPs = append(s.PodIPs, v1.PodIP{IP: ip})
	}
	if len(ips) > 0 {
		s.PodIP = ips[0]
	}

	byName := containersByName(rt)
	s.InitContainerStatuses = containerStatuses(in, pod.Spec.InitContainers, byName, prev.InitContainerStatuses, initContainer)
	s.ContainerStatuses = containerStatuses(in, pod.Spec.Containers, byName, prev.ContainerStatuses, appContainer)
	// Ephemeral containers are reported but take no part in the phase or the
	// conditions: a debugger does not make a pod ready, nor its exit fail it.
	s.EphemeralContainerStatuses = containerStatuses(in, ephemeralSpecs(pod), byName, prev.EphemeralContainerStatuses, ephemeralContainer)

	s.Phase = phase(pod, s.InitContainerStatuses, s.ContainerStatuses)
	if in.Terminal && !podutil.IsTerminal(s.Phase) && !anyRunning(s.InitContainerStatuses) && !anyRunning(s.ContainerStatuses) {
		s.Phase = terminalPhase(s.ContainerStatuses)
	}
	// A terminal phase is final: a pod that succeeded or failed never runs again.
	if podutil.IsTerminal(prev.Phase) {
		s.Phase = prev.Phase
		s.Reason, s.Message = prev.Reason, prev.Message
	}
	if podutil.IsTerminal(s.Phase) {
		terminateWaiting(pod, &s)
	}
	SortContainerStatuses(&s)
	s.Conditions = conditions(in, s)
	return s
}

// What upstream reports for a container that left no trace in the runtime.
const (
	reasonStatusUnknown = "ContainerStatusUnknown"
	// msgNotFoundAtEnd: the pod ended while the container was not running.
	msgNotFoundAtEnd = "The container could not be located when the pod was terminated"
	// msgVanishedWhileRunning: it was running, and is gone without an exit code.
	msgVanishedWhileRunning = "The container could not be located when the pod was deleted.  The container used to be Running"
	exitCodeUnknown         = 137
)

func statusUnknown(msg string) *v1.ContainerStateTerminated {
	return &v1.ContainerStateTerminated{Reason: reasonStatusUnknown, Message: msg, ExitCode: exitCodeUnknown}
}

// terminateWaiting ends the waiting containers of a terminal pod, as upstream does
// when a pod ends (ContainerStatusUnknown, exit code 137), so that clients see
// every container ended and none still coming (ContainerCreating after
// activeDeadlineSeconds, say). App containers of a pod that never initialized keep
// waiting, the failed init container says why; so do the init containers after
// the last one that ever started.
func terminateWaiting(pod *v1.Pod, s *v1.PodStatus) {
	end := func(cs *v1.ContainerStatus) {
		if cs.State.Waiting != nil {
			cs.State = v1.ContainerState{Terminated: statusUnknown(msgNotFoundAtEnd)}
		}
	}
	if initializedOnce(pod, s) {
		for i := range s.ContainerStatuses {
			end(&s.ContainerStatuses[i])
		}
	}
	for i := range startedInits(s.InitContainerStatuses) {
		end(&s.InitContainerStatuses[i])
	}
}

// initializedOnce says whether the pod ever completed its initialization: any app
// container that left waiting, or the last init container done (a sidecar:
// started).
func initializedOnce(pod *v1.Pod, s *v1.PodStatus) bool {
	inits := pod.Spec.InitContainers
	if len(inits) == 0 {
		return true
	}
	for _, cs := range s.ContainerStatuses {
		if cs.LastTerminationState.Terminated != nil || cs.State.Waiting == nil {
			return true
		}
	}
	last := len(s.InitContainerStatuses) - 1
	if last < 0 || last >= len(inits) || s.InitContainerStatuses[last].Name != inits[last].Name {
		return false
	}
	cs := s.InitContainerStatuses[last]
	if podutil.IsRestartableInitContainer(&inits[last]) {
		return cs.State.Running != nil && cs.Started != nil && *cs.Started
	}
	for _, t := range []*v1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
		if t != nil && t.ExitCode == 0 {
			return true
		}
	}
	return false
}

// startedInits is the init container statuses up to the last one that ever left
// waiting; the first one when none did.
func startedInits(list []v1.ContainerStatus) []v1.ContainerStatus {
	for i := len(list) - 1; i >= 0; i-- {
		if list[i].State.Waiting == nil || list[i].LastTerminationState.Terminated != nil {
			return list[:i+1]
		}
	}
	if len(list) > 0 {
		return list[:1]
	}
	return nil
}

// SortContainerStatuses puts container statuses in upstream's order: app and
// ephemeral containers by name, init containers as Generate lists them, in spec
// order, which readers of the API rely on (kubectl's Init:N/M, controllers).
func SortContainerStatuses(s *v1.PodStatus) {
	byName := func(a, b v1.ContainerStatus) int { return strings.Compare(a.Name, b.Name) }
	slices.SortStableFunc(s.ContainerStatuses, byName)
	slices.SortStableFunc(s.EphemeralContainerStatuses, byName)
}

func anyRunning(list []v1.ContainerStatus) bool {
	for _, c := range list {
		if c.State.Running != nil {
			return true
		}
	}
	return false
}

// terminalPhase is Succeeded when every container ended with exit code 0.
func terminalPhase(list []v1.ContainerStatus) v1.PodPhase {
	for _, c := range list {
		t := c.State.Terminated
		if t == nil {
			t = c.LastTerminationState.Terminated
		}
		if t == nil || t.ExitCode != 0 {
			return v1.PodFailed
		}
	}
	return v1.PodSucceeded
}

func sandboxReady(rt *pleg.PodStatus) bool {
	return len(rt.Sandboxes) > 0 && rt.Sandboxes[0].State == runtimeapi.PodSandboxState_SANDBOX_READY
}

// containersByName groups the runtime's containers by container name, newest first.
func containersByName(rt *pleg.PodStatus) map[string][]*runtimeapi.ContainerStatus {
	m := map[string][]*runtimeapi.ContainerStatus{}
	for _, c := range rt.Containers {
		name := c.GetLabels()[cri.LabelContainerName]
		if name == "" && c.GetMetadata() != nil {
			name = c.GetMetadata().GetName()
		}
		m[name] = append(m[name], c)
	}
	for _, list := range m {
		sort.SliceStable(list, func(i, j int) bool { return list[i].CreatedAt > list[j].CreatedAt })
	}
	return m
}

// containerKind says which list of the pod a container is in.
type containerKind int

const (
	appContainer containerKind = iota
	initContainer
	ephemeralContainer
)

// ephemeralSpecs are the pod's ephemeral containers as plain containers.
func ephemeralSpecs(pod *v1.Pod) []v1.Container {
	var out []v1.Container
	for i := range pod.Spec.EphemeralContainers {
		out = append(out, v1.Container(pod.Spec.EphemeralContainers[i].EphemeralContainerCommon))
	}
	return out
}

func containerStatuses(in Input, specs []v1.Container, byName map[string][]*runtimeapi.ContainerStatus, prev []v1.ContainerStatus, kind containerKind) []v1.ContainerStatus {
	isInit := kind == initContainer
	if len(specs) == 0 {
		return nil
	}
	prevByName := map[string]v1.ContainerStatus{}
	for _, p := range prev {
		prevByName[p.Name] = p
	}
	out := make([]v1.ContainerStatus, 0, len(specs))
	for i := range specs {
		spec := &specs[i]
		list := byName[spec.Name]
		cs := v1.ContainerStatus{Name: spec.Name, Image: spec.Image}
		if len(list) == 0 {
			p, had := prevByName[spec.Name]
			w, ok := in.Waiting[spec.Name]
			if !ok {
				w = Waiting{Reason: defaultWaitingReason(in.Pod)}
			}
			cs.State.Waiting = &v1.ContainerStateWaiting{Reason: w.Reason, Message: w.Message}
			if had {
				// The runtime lost the containers (removed); keep what we knew.
				cs.RestartCount = p.RestartCount
				cs.LastTerminationState = p.LastTerminationState
				switch {
				case p.State.Terminated != nil:
					cs.State = p.State
				case p.State.Running != nil && !ok && cs.LastTerminationState.Terminated == nil:
					// It ran and vanished without an exit code: it ended, as upstream
					// reports it, so that the pod does not fall back to Pending.
					cs.LastTerminationState.Terminated = statusUnknown(msgVanishedWhileRunning)
					if in.Pod.DeletionTimestamp == nil {
						cs.RestartCount++
					}
				}
			}
			out = append(out, withStartedFlag(cs, kind))
			continue
		}
		cur := list[0]
		cs.ContainerID = containerID(in.RuntimeName, cur.Id)
		cs.ImageID = cur.GetImageRef()
		if cur.GetImage() != nil && cur.GetImage().GetImage() != "" && cs.Image == "" {
			cs.Image = cur.GetImage().GetImage()
		}
		cs.RestartCount = restartCount(cur)
		cs.User = containerUser(cur.GetUser())
		state := cur.State
		if cri.StartWasCut(cur) {
			// It never ran (its start was cut off by a crash); the sync loop
			// replaces it with the same attempt: shown waiting, like a created one.
			state = runtimeapi.ContainerState_CONTAINER_CREATED
		}
		switch state {
		case runtimeapi.ContainerState_CONTAINER_RUNNING:
			cs.State.Running = &v1.ContainerStateRunning{StartedAt: nanoTime(cur.StartedAt)}
			if kind == ephemeralContainer {
				// Never ready, and no started flag: upstream's probe manager, which
				// sets both, knows nothing of ephemeral containers.
				break
			}
			started := true
			if in.Probes != nil {
				started = in.Probes.Started(in.Pod.UID, spec.Name, cur.Id)
			}
			// A running init container is never ready; an app container or sidecar is
			// once started and its readiness probe (if any) passed.
			ready := started && !(isInit && !podutil.IsRestartableInitContainer(spec))
			if ready && in.Probes != nil {
				ready = in.Probes.Ready(in.Pod.UID, spec.Name, cur.Id)
			}
			if ready && in.Readiness != nil {
				if r, known := in.Readiness(cur.Id); known {
					ready = r
				}
			}
			cs.Ready = ready
			cs.Started = &started
		case runtimeapi.ContainerState_CONTAINER_EXITED:
			cs.State.Terminated = terminated(in, spec, cur)
			if kind == ephemeralContainer {
				break
			}
			started := false
			cs.Started = &started
			// A completed init container counts as ready, as upstream reports it.
			cs.Ready = isInit && !podutil.IsRestartableInitContainer(spec) && cur.ExitCode == 0
		default:
			reason := defaultWaitingReason(in.Pod)
			if w, ok := in.Waiting[spec.Name]; ok {
				reason = w.Reason
			}
			cs.State.Waiting = &v1.ContainerStateWaiting{Reason: reason}
		}
		cs.Resources = statusResources(in, spec, cur, prevByName)
		cs.AllocatedResources = spec.Resources.Requests
		if len(list) > 1 && list[1].State == runtimeapi.ContainerState_CONTAINER_EXITED && !cri.StartWasCut(list[1]) {
			cs.LastTerminationState.Terminated = terminated(in, spec, list[1])
		} else if p, ok := prevByName[spec.Name]; ok && p.ContainerID != cs.ContainerID && p.State.Terminated != nil {
			// The previous instance was garbage collected; remember how it ended.
			cs.LastTerminationState.Terminated = p.State.Terminated
		} else if ok && p.LastTerminationState.Terminated != nil && p.ContainerID == cs.ContainerID {
			cs.LastTerminationState = p.LastTerminationState
		}
		// A dead container the sync loop decided not to restart yet waits in back-off.
		if cs.State.Terminated != nil {
			if w, ok := in.Waiting[spec.Name]; ok && w.Reason != "" {
				cs.LastTerminationState.Terminated = cs.State.Terminated
				cs.State = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: w.Reason, Message: w.Message}}
			}
		}
		out = append(out, withStartedFlag(cs, kind))
	}
	return out
}

// containerUser is the identity the runtime reports the container's first
// process runs with (status.containerStatuses[].user), as upstream copies it
// from CRI ContainerStatus; nil when the runtime reports none.
func containerUser(u *runtimeapi.ContainerUser) *v1.ContainerUser {
	if u == nil {
		return nil
	}
	out := &v1.ContainerUser{}
	if l := u.GetLinux(); l != nil {
		out.Linux = &v1.LinuxContainerUser{UID: l.GetUid(), GID: l.GetGid(), SupplementalGroups: l.GetSupplementalGroups()}
	}
	return out
}

// withStartedFlag gives every app and init container status a started flag, false
// unless set above: upstream's probe manager sets it on each of them whatever the
// state, and clients (the e2e framework's WaitForPodContainerStarted among them)
// dereference it unchecked while a container still waits.
func withStartedFlag(cs v1.ContainerStatus, kind containerKind) v1.ContainerStatus {
	if kind != ephemeralContainer && cs.Started == nil {
		started := false
		cs.Started = &started
	}
	return cs
}

// defaultWaitingReason is the reason of a container that has not run yet and
// has no other: PodInitializing in a pod with init containers (for its init
// containers too: a later one waits for the earlier ones), ContainerCreating
// otherwise, as upstream.
func defaultWaitingReason(pod *v1.Pod) string {
	if len(pod.Spec.InitContainers) > 0 {
		return "PodInitializing"
	}
	return "ContainerCreating"
}

func terminated(in Input, spec *v1.Container, c *runtimeapi.ContainerStatus) *v1.ContainerStateTerminated {
	t := &v1.ContainerStateTerminated{
		ExitCode:    c.ExitCode,
		Reason:      c.Reason,
		Message:     c.Message,
		StartedAt:   nanoTime(c.StartedAt),
		FinishedAt:  nanoTime(c.FinishedAt),
		ContainerID: containerID(in.RuntimeName, c.Id),
	}
	if t.Reason == "" {
		t.Reason = "Completed"
		if c.ExitCode != 0 {
			t.Reason = "Error"
		}
	}
	if in.TerminationMessage != nil {
		if msg := in.TerminationMessage(spec, c); msg != "" {
			t.Message = msg
		}
	}
	return t
}

func containerID(runtimeName, id string) string {
	if runtimeName == "" {
		runtimeName = "containerd"
	}
	return runtimeName + "://" + id
}

func restartCount(c *runtimeapi.ContainerStatus) int32 {
	var n int32
	for _, r := range c.GetAnnotations()[cri.AnnotationContainerRestartCount] {
		if r < '0' || r > '9' {
			return 0
		}
		n = n*10 + int32(r-'0')
	}
	return n
}

func nanoTime(ns int64) metav1.Time {
	if ns == 0 {
		return metav1.Time{}
	}
	return metav1.NewTime(time.Unix(0, ns))
}

// phase follows the upstream rules, restarts decided as podruntime decides them
// (podutil.ContainerShouldRestart: container restartPolicyRules and
// restartPolicy, then the pod's restartPolicy).
func phase(pod *v1.Pod, initStatuses, statuses []v1.ContainerStatus) v1.PodPhase {
	// Init containers: a failed one under Never fails the pod; any not yet done keeps it Pending.
	for i, ic := range pod.Spec.InitContainers {
		if podutil.IsRestartableInitContainer(&pod.Spec.InitContainers[i]) {
			if i < len(initStatuses) && initStatuses[i].State.Running == nil && initStatuses[i].LastTerminationState.Terminated == nil && initStatuses[i].State.Terminated == nil {
				return v1.PodPending
			}
			continue
		}
		var st *v1.ContainerStatus
		for j := range initStatuses {
			if initStatuses[j].Name == ic.Name {
				st = &initStatuses[j]
			}
		}
		if st == nil {
			return v1.PodPending
		}
		if t := st.State.Terminated; t != nil && t.ExitCode == 0 {
			continue
		}
		// A failed init container that will not run again fails the pod.
		if t := st.State.Terminated; t != nil && !podutil.ContainerShouldRestart(&pod.Spec.InitContainers[i], &pod.Spec, t.ExitCode) {
			return v1.PodFailed
		}
		if t := st.LastTerminationState.Terminated; st.State.Waiting != nil && t != nil {
			if t.ExitCode == 0 {
				continue
			}
			if !podutil.ContainerShouldRestart(&pod.Spec.InitContainers[i], &pod.Spec, t.ExitCode) {
				return v1.PodFailed
			}
		}
		return v1.PodPending
	}
	// stoppedForGood counts stopped containers that will not restart.
	var running, waiting, stopped, stoppedForGood, succeeded, unknown int
	for i, c := range pod.Spec.Containers {
		var st *v1.ContainerStatus
		for j := range statuses {
			if statuses[j].Name == c.Name {
				st = &statuses[j]
			}
		}
		switch {
		case st == nil:
			unknown++
		case st.State.Running != nil:
			running++
		case st.State.Terminated != nil:
			stopped++
			if st.State.Terminated.ExitCode == 0 {
				succeeded++
			}
			if !podutil.ContainerShouldRestart(&pod.Spec.Containers[i], &pod.Spec, st.State.Terminated.ExitCode) {
				stoppedForGood++
			}
		case st.State.Waiting != nil:
			if t := st.LastTerminationState.Terminated; t != nil {
				stopped++
				if t.ExitCode == 0 {
					succeeded++
				}
				if !podutil.ContainerShouldRestart(&pod.Spec.Containers[i], &pod.Spec, t.ExitCode) {
					stoppedForGood++
				}
			} else {
				waiting++
			}
		default:
			unknown++
		}
	}
	switch {
	case waiting > 0:
		return v1.PodPending
	case running > 0 && unknown == 0:
		return v1.PodRunning
	case running == 0 && stopped > 0 && unknown == 0:
		// Every container stopped: the pod runs on while one of them restarts
		// (by the container's rules and policy, then the pod's), and ends otherwise.
		switch {
		case stopped != stoppedForGood:
			return v1.PodRunning
		case stopped == succeeded:
			return v1.PodSucceeded
		default:
			return v1.PodFailed
		}
	default:
		return v1.PodPending
	}
}

// conditions computes the kubelet-owned conditions, keeping transition times of
// conditions whose status did not change, and any condition owned by others.
func conditions(in Input, s v1.PodStatus) []v1.PodCondition {
	pod := in.Pod
	initialized := true
	for i, ic := range pod.Spec.InitContainers {
		if podutil.IsRestartableInitContainer(&pod.Spec.InitContainers[i]) {
			if i >= len(s.InitContainerStatuses) || s.InitContainerStatuses[i].State.Running == nil {
				initialized = initialized && i < len(s.InitContainerStatuses) && s.InitContainerStatuses[i].Started != nil && *s.InitContainerStatuses[i].Started
			}
			continue
		}
		done := false
		for _, st := range s.InitContainerStatuses {
			if st.Name != ic.Name {
				continue
			}
			if t := st.State.Terminated; t != nil && t.ExitCode == 0 {
				done = true
			}
			if st.State.Waiting != nil && st.LastTerminationState.Terminated != nil && st.LastTerminationState.Terminated.ExitCode == 0 {
				done = true
			}
		}
		initialized = initialized && done
	}
	// Sidecars count for readiness as app containers do, and are named first (upstream's order).
	var unready []string
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if !podutil.IsRestartableInitContainer(c) {
			continue
		}
		if st := statusNamed(s.InitContainerStatuses, c.Name); st == nil || !st.Ready {
			unready = append(unready, c.Name)
		}
	}
	for _, st := range s.ContainerStatuses {
		if !st.Ready {
			unready = append(unready, st.Name)
		}
	}
	containersReady := len(s.ContainerStatuses) > 0 && len(unready) == 0
	if s.Phase == v1.PodSucceeded {
		containersReady = false
	}
	sandboxOK := in.Runtime != nil && sandboxReady(in.Runtime)
	if !pod.Spec.HostNetwork && len(s.PodIPs) == 0 {
		sandboxOK = false
	}
	want := []v1.PodCondition{
		cond(v1.PodReadyToStartContainers, sandboxOK, ""),
		cond(v1.PodInitialized, initialized, reasonIf(!initialized, "ContainersNotInitialized")),
		cond(v1.ContainersReady, containersReady, reasonIf(!containersReady, "ContainersNotReady")),
		cond(v1.PodReady, containersReady && readinessGatesOK(pod), reasonIf(!containersReady, "ContainersNotReady")),
		cond(v1.PodScheduled, true, ""),
	}
	if !containersReady {
		if names := unready; len(names) > 0 {
			msg := "containers with unready status: [" + strings.Join(names, " ") + "]"
			want[2].Message = msg
			want[3].Message = msg
		}
	}
	if !initialized {
		var names []string
		for _, st := range s.InitContainerStatuses {
			if st.State.Terminated == nil || st.State.Terminated.ExitCode != 0 {
				names = append(names, st.Name)
			}
		}
		want[1].Message = "containers with incomplete status: [" + strings.Join(names, " ") + "]"
	}
	prev := map[v1.PodConditionType]v1.PodCondition{}
	for _, c := range in.Previous.Conditions {
		prev[c.Type] = c
	}
	// The resize conditions are the kubelet's even when it has none to report.
	owned := map[v1.PodConditionType]bool{v1.PodResizePending: true, v1.PodResizeInProgress: true}
	out := make([]v1.PodCondition, 0, len(want)+len(in.Previous.Conditions)+len(in.ResizeConditions))
	for _, c := range want {
		owned[c.Type] = true
		c.ObservedGeneration = pod.Generation
		if p, ok := prev[c.Type]; ok && p.Status == c.Status {
			c.LastTransitionTime = p.LastTransitionTime
		} else {
			c.LastTransitionTime = metav1.NewTime(in.Now.Truncate(time.Second))
		}
		out = append(out, c)
	}
	if !podutil.IsTerminal(s.Phase) {
		// A finished pod resizes nothing any more (upstream clears them).
		out = append(out, in.ResizeConditions...)
	}
	for _, c := range in.Previous.Conditions {
		if !owned[c.Type] {
			out = append(out, c)
		}
	}
	return out
}

func statusNamed(list []v1.ContainerStatus, name string) *v1.ContainerStatus {
	for i := range list {
		if list[i].Name == name {
			return &list[i]
		}
	}
	return nil
}

func readinessGatesOK(pod *v1.Pod) bool {
	for _, g := range pod.Spec.ReadinessGates {
		ok := false
		for _, c := range pod.Status.Conditions {
			if c.Type == g.ConditionType && c.Status == v1.ConditionTrue {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

func cond(t v1.PodConditionType, ok bool, reason string) v1.PodCondition {
	st := v1.ConditionFalse
	if ok {
		st = v1.ConditionTrue
	}
	return v1.PodCondition{Type: t, Status: st, Reason: reason}
}

func reasonIf(b bool, r string) string {
	if b {
		return r
	}
	return ""
}

// QOSClass is the pod's QoS class as the API defines it (one definition, in cgroups).
func QOSClass(pod *v1.Pod) v1.PodQOSClass { return cgroups.QOSClass(pod) }

// Upstream's floors below which cpu values read back from the runtime are
// taken as the allocated ones: the minimum cpu.shares (2) and the smallest
// effective cpu limit (10m).
const (
	minShares        = 2
	minMilliCPULimit = 10
)

// statusResources is a container's status.resources: the allocated
// resources, with what the runtime reports for a running container (cpu
// request and limit, memory limit; the memory request from the actuated
// record), keeping last status's value for one the runtime does not report.
func statusResources(in Input, spec *v1.Container, cur *runtimeapi.ContainerStatus, prev map[string]v1.ContainerStatus) *v1.ResourceRequirements {
	r := spec.Resources.DeepCopy()
	if cur.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return r
	}
	var cpuLimit, cpuRequest, memLimit, memRequest *resource.Quantity
	if lr := cur.GetResources().GetLinux(); lr != nil {
		if lr.CpuPeriod > 0 {
			if milli := cgroups.QuotaToMilliCPU(lr.CpuQuota, lr.CpuPeriod); milli > 0 {
				cpuLimit = resource.NewMilliQuantity(milli, resource.DecimalSI)
			}
		}
		if milli := cgroups.SharesToMilliCPU(lr.CpuShares); lr.CpuShares > 0 && milli > 0 {
			cpuRequest = resource.NewMilliQuantity(milli, resource.DecimalSI)
		}
		if lr.MemoryLimitInBytes > 0 {
			memLimit = resource.NewQuantity(lr.MemoryLimitInBytes, resource.BinarySI)
		}
	}
	if in.Actuated != nil {
		if act, ok := in.Actuated(spec.Name); ok {
			if cpuLimit == nil && cpuRequest == nil && memLimit == nil {
				cpuRequest, cpuLimit, memLimit = act.Requests.Cpu(), act.Limits.Cpu(), act.Limits.Memory()
				memRequest = act.Requests.Memory()
			} else if q := act.Requests[v1.ResourceMemory]; !q.IsZero() {
				memRequest = &q
			}
		}
	}
	old, had := prev[spec.Name]
	// What the runtime does not report is what it last reported for this same
	// running container.
	keep := func(name v1.ResourceName, limit bool, into v1.ResourceList) {
		if !had || old.State.Running == nil || old.ContainerID != containerID(in.RuntimeName, cur.Id) || old.Resources == nil {
			return
		}
		from := old.Resources.Requests
		if limit {
			from = old.Resources.Limits
		}
		if q, ok := from[name]; ok {
			into[name] = q.DeepCopy()
		}
	}
	for _, l := range []struct {
		list     v1.ResourceList
		limit    bool
		cpu, mem *resource.Quantity
		cpuFloor int64
	}{{r.Limits, true, cpuLimit, memLimit, minMilliCPULimit}, {r.Requests, false, cpuRequest, memRequest, minShares}} {
		if l.list == nil {
			continue
		}
		switch {
		case l.cpu == nil:
			keep(v1.ResourceCPU, l.limit, l.list)
		case l.cpu.MilliValue() > l.cpuFloor || l.list.Cpu().MilliValue() > l.cpuFloor:
			// At or below the floor on both sides, the allocated value stays (upstream).
			l.list[v1.ResourceCPU] = l.cpu.DeepCopy()
		}
		if l.mem != nil {
			l.list[v1.ResourceMemory] = l.mem.DeepCopy()
		} else {
			keep(v1.ResourceMemory, l.limit, l.list)
		}
	}
	return r
}
