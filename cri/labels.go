package cri

import runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

// Label and annotation keys nodelet puts on CRI sandboxes and containers. They are
// the keys the upstream kubelet uses, so a node switched from the kubelet to nodelet
// (or back) recognises the pods already running there.
const (
	LabelPodName       = "io.kubernetes.pod.name"
	LabelPodNamespace  = "io.kubernetes.pod.namespace"
	LabelPodUID        = "io.kubernetes.pod.uid"
	LabelContainerName = "io.kubernetes.container.name"

	AnnotationContainerHash             = "io.kubernetes.container.hash"
	AnnotationContainerRestartCount     = "io.kubernetes.container.restartCount"
	AnnotationTerminationMessagePath    = "io.kubernetes.container.terminationMessagePath"
	AnnotationTerminationMessagePolicy  = "io.kubernetes.container.terminationMessagePolicy"
	AnnotationPodTerminationGracePeriod = "io.kubernetes.pod.terminationGracePeriod"
	AnnotationPodDeletionGracePeriod    = "io.kubernetes.pod.deletionGracePeriod"
	AnnotationPreStopHandler            = "io.kubernetes.container.preStopHandler"
	AnnotationContainerPorts            = "io.kubernetes.container.ports"
)

// ContainerName is the pod container a runtime container stands for: its
// container-name label, else its metadata name.
func ContainerName(c *runtimeapi.ContainerStatus) string {
	if n := c.GetLabels()[LabelContainerName]; n != "" {
		return n
	}
	return c.GetMetadata().GetName()
}
