// Package allocation keeps what the node admitted for each pod (in-place pod
// resize, KEP-1287), as the upstream kubelet's allocation manager does.
//
// A pod's spec resources are what is desired; the allocated resources are what
// the node admitted and runs the pod with; the actuated resources are what
// the runtime was last told (at CreateContainer or UpdateContainerResources).
// Both of the latter are checkpointed under the root dir in upstream's format
// (allocated_pods_state, actuated_pods_state), so a node switching between the
// kubelet and nodelet keeps them.
//
// Decisions are pure functions (ResourceInfoForPod, UpdatePodFromAllocation,
// ResizeInfeasible, IsResizeInProgress, the event messages); the Manager keeps
// the allocated state, the resize conditions (PodResizePending,
// PodResizeInProgress) and the queue of pending resizes.
package allocation
