// Package podutil is the one home of the small facts about a pod that several
// packages ask: where it came from (static, mirror; the kubernetes.io/config.*
// annotation keys and source names), whether it is critical, its priority and
// its constants, whether its phase is terminal and which init containers are
// sidecars. It holds the one decision whether an exited container restarts
// (ContainerShouldRestart: the container's restartPolicyRules and
// restartPolicy, then the pod's), asked by podruntime, podstatus and prober,
// and a pod's requests as the scheduler counts them (PodRequests: admission,
// resize, eviction ranking). The keys and values are upstream's, so a node can
// switch between nodelet and the kubelet.
package podutil

import (
	v1 "k8s.io/api/core/v1"
)

// Annotations the pod sources set (upstream keys).
const (
	// AnnotationConfigSource names the source a pod came from (SourceAPI, SourceFile, SourceHTTP).
	AnnotationConfigSource = "kubernetes.io/config.source"
	// AnnotationConfigHash is a static pod's UID, a hash of its manifest.
	AnnotationConfigHash = "kubernetes.io/config.hash"
	// AnnotationConfigMirror marks a mirror pod; its value is its static pod's hash.
	AnnotationConfigMirror = "kubernetes.io/config.mirror"
	// AnnotationConfigSeen is when the node first saw the pod (RFC 3339).
	AnnotationConfigSeen = "kubernetes.io/config.seen"
)

// Pod source names, as upstream.
const (
	SourceAPI  = "api"
	SourceFile = "file"
	SourceHTTP = "http"
)

// Priorities and priority classes (upstream's scheduling constants).
const (
	// DefaultPriority is the priority of a pod without one (no default PriorityClass).
	DefaultPriority int32 = 0
	// HighestUserDefinablePriority is the highest priority a user's PriorityClass may have.
	HighestUserDefinablePriority int32 = 1000000000
	// SystemCriticalPriority is where system-cluster-critical and system-node-critical start.
	SystemCriticalPriority = 2 * HighestUserDefinablePriority
	// SystemClusterCritical and SystemNodeCritical are the built-in critical classes.
	SystemClusterCritical = "system-cluster-critical"
	SystemNodeCritical    = "system-node-critical"
)

// IsStaticPod: the pod came from a source other than the API server (a manifest
// file). A pod without the source annotation is not static.
func IsStaticPod(pod *v1.Pod) bool {
	src, ok := pod.Annotations[AnnotationConfigSource]
	return ok && src != SourceAPI
}

// IsMirrorPod: the pod is the API server's mirror of a static pod.
func IsMirrorPod(pod *v1.Pod) bool {
	_, ok := pod.Annotations[AnnotationConfigMirror]
	return ok
}

// Priority is the pod's priority, DefaultPriority when it has none.
func Priority(pod *v1.Pod) int32 {
	if pod.Spec.Priority != nil {
		return *pod.Spec.Priority
	}
	return DefaultPriority
}

// IsCriticalPod: static pods, mirror pods and pods with a system-critical priority.
// The OOM score, QoS memory settings and eviction spare them.
func IsCriticalPod(pod *v1.Pod) bool {
	return IsStaticPod(pod) || IsMirrorPod(pod) || (pod.Spec.Priority != nil && *pod.Spec.Priority >= SystemCriticalPriority)
}

// Preemptable: the node may stop preemptee to make room for preemptor, as
// upstream's kubelet decides it: a critical pod may preempt any non-critical one;
// otherwise only a pod of a strictly higher priority, when both have one.
func Preemptable(preemptor, preemptee *v1.Pod) bool {
	if IsCriticalPod(preemptor) && !IsCriticalPod(preemptee) {
		return true
	}
	return preemptor.Spec.Priority != nil && preemptee.Spec.Priority != nil && *preemptor.Spec.Priority > *preemptee.Spec.Priority
}

// IsNodeCriticalPod: a critical pod of the system-node-critical priority class.
func IsNodeCriticalPod(pod *v1.Pod) bool {
	return IsCriticalPod(pod) && pod.Spec.PriorityClassName == SystemNodeCritical
}

// IsTerminal reports whether the phase is Succeeded or Failed: the pod never runs again.
func IsTerminal(phase v1.PodPhase) bool {
	return phase == v1.PodSucceeded || phase == v1.PodFailed
}

// IsRestartableInitContainer: an init container with restartPolicy Always, a
// sidecar. Ask it only of init containers (IsSidecar checks that too): an app
// container's own restartPolicy means something else.
func IsRestartableInitContainer(c *v1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways
}

// IsSidecar: c is one of pod's init containers and restartable.
func IsSidecar(pod *v1.Pod, c *v1.Container) bool {
	if !IsRestartableInitContainer(c) {
		return false
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == c.Name {
			return true
		}
	}
	return false
}

// SetCondition puts cond in status, replacing the condition of its type; the
// transition time of one with the same status is kept (it did not transition).
func SetCondition(status *v1.PodStatus, cond v1.PodCondition) {
	for i := range status.Conditions {
		if status.Conditions[i].Type != cond.Type {
			continue
		}
		if status.Conditions[i].Status == cond.Status {
			cond.LastTransitionTime = status.Conditions[i].LastTransitionTime
		}
		status.Conditions[i] = cond
		return
	}
	status.Conditions = append(status.Conditions, cond)
}
