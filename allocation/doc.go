// Package allocation keeps what the node admitted for each pod (in-place pod
// resize, KEP-1287), as the upstream kubelet's allocation manager does.
//
// A pod's spec resources are what is desired; the allocated resources are what
// the node admitted and runs the pod with; the actuated resources are what the
// runtime was last told (at CreateContainer or UpdateContainerResources). Both
// of the latter are checkpointed under the root dir in upstream's format and
// checksum (allocated_pods_state, actuated_pods_state), so a node switching
// between the kubelet and nodelet keeps them; a file that does not read back
// is set aside and nodelet starts with no allocations, and a failed write is
// retried every 10 s (see docs/on-disk.md).
//
// Decisions are pure functions (ResourceInfoForPod, UpdatePodFromAllocation,
// ResizeInfeasible, IsResizeInProgress, the event messages); the Manager keeps
// the allocated state, the resize conditions (PodResizePending,
// PodResizeInProgress) and the queue of Deferred resizes, retried in
// upstream's order. A resize is infeasible, as upstream, with swap, with
// pod-level resources, and for Guaranteed pods under a static CPU or memory
// manager.
//
// The sync loop admits and decides resizes against the other pods'
// allocations; podruntime actuates them (the pod cgroup around
// UpdateContainerResources, decreases first, RestartContainer policies restart
// the container).
package allocation
