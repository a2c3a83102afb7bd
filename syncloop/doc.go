// Package syncloop is nodelet's heart: one loop merges pod updates, PLEG
// events, periodic resyncs and housekeeping, and hands each pod to its own
// worker, so a pod is never synced twice at once and updates to a busy pod
// coalesce.
//
// # Pod workers
//
// One worker per pod UID. Its lifecycle (sync → terminating → terminated →
// removing → finished, and orphans) is the pure step over a snapshot,
// returning actions; the runner owns cancellation (a sync is cancelled when
// its pod starts terminating) and runs at most one goroutine per UID. A UID
// back in its source after it left (a static manifest put back) ends its old
// life; housekeeping then starts it again with the old status forgotten.
// KillPod is bounded by max(1.5 × grace, 10 s). With a tracer provider each
// sync, kill and volume teardown is upstream's span (syncPod,
// syncTerminatingPod, syncTerminatedPod).
//
// # Admission
//
// A new pod is admitted by the pure DecideAdmission, in upstream's order:
// sysctls against the safe set and allowedUnsafeSysctls, OS,
// supplementalGroupsPolicy Strict, then the scheduler's filters (pod count and
// resources, node selector and required node affinity, nodeName, host ports,
// NoExecute taints but for static pods); a critical pod short only of
// resources gets lower-priority pods stopped, chosen by QoS class and distance
// as upstream's CriticalPodAdmissionHandler, through KillPod as
// Failed/Preempting; then AppArmor on a host without it. It runs between the
// pressure admitters (Deps.Admitters) and the shutdown admitters
// (Deps.AdmittersAfter), against the Node object
// (node.Controller.AdmissionNode, read again when only node affinity fails),
// with the admitted pods counted at their allocated resources.
//
// A change of an admitted pod's resources is an in-place resize, decided by
// package allocation and retried while Deferred.
package syncloop
