package prober

import (
	"time"

	v1 "k8s.io/api/core/v1"
)

// CarriedReady decides whether a container keeps, across a nodelet restart,
// the Ready its API status shows until its readiness probe has a result, and
// returns its runtime container ID. It does when the API reports it running
// and ready since before this nodelet started (nodeletStart): it was probed
// ready by the nodelet before, and starting it at not-ready would flap every
// running pod Ready→NotReady→Ready on each restart. Upstream's kubelet keeps
// it the same way, from the pod status it reads back from the API server.
// A container started after nodeletStart, one the API shows not ready or not
// running, or one without an ID starts at not-ready as always.
func CarriedReady(api v1.ContainerStatus, nodeletStart time.Time) (string, bool) {
	if !api.Ready || api.ContainerID == "" || api.State.Running == nil {
		return "", false
	}
	if api.Started != nil && !*api.Started {
		return "", false
	}
	started := api.State.Running.StartedAt.Time
	if started.IsZero() || !started.Before(nodeletStart) {
		return "", false
	}
	return rawID(api.ContainerID), true
}

// apiContainerStatus returns the API status of the container named name
// (app containers, then sidecars).
func apiContainerStatus(pod *v1.Pod, name string) (v1.ContainerStatus, bool) {
	for _, list := range [][]v1.ContainerStatus{pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses} {
		for _, cs := range list {
			if cs.Name == name {
				return cs, true
			}
		}
	}
	return v1.ContainerStatus{}, false
}
