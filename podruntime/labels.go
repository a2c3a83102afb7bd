package podruntime

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/cri"
)

// containerAnnotations are the CRI annotations of a new container: the keys and
// values the upstream kubelet writes, so that either agent can read what the
// other created (the restart count, the hash, and what killing the container
// needs once its pod is gone: grace periods, the preStop hook and the ports a
// hook may name).
func containerAnnotations(pod *v1.Pod, c *v1.Container, restartCount int) map[string]string {
	a := map[string]string{
		cri.AnnotationContainerHash:            ContainerHash(c),
		cri.AnnotationContainerRestartCount:    strconv.Itoa(restartCount),
		cri.AnnotationTerminationMessagePath:   c.TerminationMessagePath,
		cri.AnnotationTerminationMessagePolicy: string(c.TerminationMessagePolicy),
	}
	if g := pod.DeletionGracePeriodSeconds; g != nil {
		a[cri.AnnotationPodDeletionGracePeriod] = strconv.FormatInt(*g, 10)
	}
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
		a[cri.AnnotationPodTerminationGracePeriod] = strconv.FormatInt(*g, 10)
	}
	// A LifecycleHandler and a []ContainerPort always marshal.
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
		b, _ := json.Marshal(c.Lifecycle.PreStop)
		a[cri.AnnotationPreStopHandler] = string(b)
	}
	if len(c.Ports) > 0 {
		b, _ := json.Marshal(c.Ports)
		a[cri.AnnotationContainerPorts] = string(b)
	}
	return a
}

// restoredSpec is what killing container c needs when its pod is gone (an
// orphan): its name, ports, termination message path and preStop hook, read
// back from its annotations as upstream does, whichever agent wrote them. A
// malformed annotation is left out.
func restoredSpec(c *runtimeapi.ContainerStatus) *v1.Container {
	ann := c.GetAnnotations()
	spec := &v1.Container{Name: containerName(c), TerminationMessagePath: ann[cri.AnnotationTerminationMessagePath]}
	if raw, ok := ann[cri.AnnotationPreStopHandler]; ok {
		h := &v1.LifecycleHandler{}
		if err := json.Unmarshal([]byte(raw), h); err == nil {
			spec.Lifecycle = &v1.Lifecycle{PreStop: h}
		}
	}
	if raw, ok := ann[cri.AnnotationContainerPorts]; ok {
		var ports []v1.ContainerPort
		if err := json.Unmarshal([]byte(raw), &ports); err == nil {
			spec.Ports = ports
		}
	}
	return spec
}

// RecordedGrace is the grace period recorded on container c for when its pod
// is gone: the pod's deletion grace period if it was being deleted when c was
// created, else its terminationGracePeriodSeconds, as upstream restores it.
func RecordedGrace(c *runtimeapi.ContainerStatus) (int64, bool) {
	ann := c.GetAnnotations()
	for _, k := range []string{cri.AnnotationPodDeletionGracePeriod, cri.AnnotationPodTerminationGracePeriod} {
		if v, err := strconv.ParseInt(ann[k], 10, 64); err == nil {
			return v, true
		}
	}
	return 0, false
}

// nextRestartCount is the restart count of the instance that follows prev:
// one more than its recorded count, which both agents write the same way (a
// missing or malformed one counts as 0, as upstream reads it).
func nextRestartCount(prev *runtimeapi.ContainerStatus) int {
	return recordedRestartCount(prev) + 1
}

func recordedRestartCount(c *runtimeapi.ContainerStatus) int {
	n, _ := strconv.Atoi(c.GetAnnotations()[cri.AnnotationContainerRestartCount])
	return n
}

// instanceNumbers are the two numbers a container's new instance is created
// with. They are equal unless a start cut off by a crash (cri.StartWasCut) left
// an instance the runtime will not remove.
type instanceNumbers struct {
	// Attempt is ContainerMetadata.Attempt and names the instance's log file: the
	// runtime refuses a second instance of a name with the same attempt.
	Attempt int
	// RestartCount is the restart-count annotation, which the pod's status
	// reports: the instances that ran before this one.
	RestartCount int
}

// nextInstance decides the numbers of a container's next instance from its
// instances in the runtime (newest first), whether the newest one, a cut
// start, was removed, and logDirNext (restartCountFromLogDir, read only when
// the runtime has none). A cut start never ran, so it is no restart: its
// replacement keeps its restart count, and takes its attempt only once it is
// gone (removed), else the next one, beside it. Upstream counts it (its count
// is always the newest instance's plus one); the fault suite showed a pod of
// never-exiting containers with restartCount 1 from it.
func nextInstance(instances []*runtimeapi.ContainerStatus, cutRemoved bool, logDirNext int) instanceNumbers {
	if len(instances) == 0 {
		return instanceNumbers{Attempt: logDirNext, RestartCount: logDirNext}
	}
	prev := instances[0]
	nextAttempt := 0 // above every attempt the runtime holds
	for _, c := range instances {
		nextAttempt = max(nextAttempt, int(c.GetMetadata().GetAttempt())+1)
	}
	if !cri.StartWasCut(prev) {
		restarts := nextRestartCount(prev)
		return instanceNumbers{Attempt: max(nextAttempt, restarts), RestartCount: restarts}
	}
	n := instanceNumbers{Attempt: nextAttempt, RestartCount: recordedRestartCount(prev)}
	if cutRemoved {
		n.Attempt = int(prev.GetMetadata().GetAttempt())
		for _, c := range instances[1:] {
			n.Attempt = max(n.Attempt, int(c.GetMetadata().GetAttempt())+1)
		}
	}
	return n
}

// restartCountFromLogDir is the restart count of a container's next instance
// when the runtime has none of it: one more than the highest N of the files
// named <N>.log... (rotated ones too) in its log directory, 0 when there is none.
func restartCountFromLogDir(dir string) int {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0 // no directory: the first instance
	}
	next := 0
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		// Upstream's pattern is ^(\d+)\.log, unanchored at the end.
		num, _, ok := strings.Cut(e.Name(), ".log")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(num)
		if err != nil || n < 0 || strings.TrimLeft(num, "0123456789") != "" {
			continue
		}
		if n+1 > next {
			next = n + 1
		}
	}
	return next
}
