package cgroups

import (
	"context"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// QOSUpdater creates pod cgroups for the pod workers and keeps the QoS cgroups in step, as
// the kubelet does: before it creates a pod cgroup that does not exist yet, it updates the QoS
// cgroups (UpdateQOSCgroups: burstable's cpu weight from the summed cpu requests of the active
// Burstable pods, this one included), and Run repeats that every interval (the kubelet's QoS
// container manager: every minute), so pods that have gone stop counting.
type QOSUpdater struct {
	Manager *Manager

	mu         sync.Mutex
	activePods func() []*v1.Pod
}

// SetActivePods sets the source of the active pods (set once the pod loop exists; until
// then only the pod being created counts).
func (u *QOSUpdater) SetActivePods(f func() []*v1.Pod) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.activePods = f
}

func (u *QOSUpdater) pods(extra *v1.Pod) []*v1.Pod {
	u.mu.Lock()
	f := u.activePods
	u.mu.Unlock()
	var pods []*v1.Pod
	if f != nil {
		pods = f()
	}
	if extra == nil {
		return pods
	}
	for _, p := range pods {
		if p.UID == extra.UID {
			return pods
		}
	}
	return append(pods, extra)
}

// EnsurePodCgroup updates the QoS cgroups when the pod's cgroup is new, then creates or
// updates the pod's cgroup. A failed QoS update is logged, not returned (as upstream).
func (u *QOSUpdater) EnsurePodCgroup(ctx context.Context, pod *v1.Pod) error {
	if !u.Manager.PodCgroupExists(pod) {
		if err := u.Manager.UpdateQOSCgroups(ctx, u.pods(pod)); err != nil {
			klog.FromContext(ctx).V(2).Info("Failed to update QoS cgroups while creating a pod cgroup", "pod", klog.KObj(pod), "err", err)
		}
	}
	return u.Manager.EnsurePodCgroup(ctx, pod)
}

// Run updates the QoS cgroups from the active pods every interval until ctx ends.
func (u *QOSUpdater) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := u.Manager.UpdateQOSCgroups(ctx, u.pods(nil)); err != nil {
				klog.FromContext(ctx).Info("Failed to update QoS cgroups", "err", err)
			}
		}
	}
}
