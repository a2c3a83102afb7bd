// Package nodeshutdown implements graceful node shutdown: priority groups from
// the kubelet configuration, the kill plan (the pure Plan), its execution
// group by group by the Manager, and the logind delay inhibitor lock over
// D-Bus (Inhibitor) that gives nodelet the time to run it. `nodelet shutdown
// plan` prints the plan.
package nodeshutdown

import (
	"errors"
	"fmt"
	"sort"
	"time"

	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodelet/nodelet/internal/podutil"
)

// Group is a range of pod priorities, from Priority up to the next group's, and the time its
// pods get to stop.
type Group struct {
	Priority    int32
	GracePeriod time.Duration
}

// Groups turns the configuration into priority groups sorted by ascending priority. No groups
// (and no error) means the feature is off.
func Groups(kc *kubeletconfigv1beta1.KubeletConfiguration) ([]Group, error) {
	if kc == nil {
		return nil, nil
	}
	total := kc.ShutdownGracePeriod.Duration
	critical := kc.ShutdownGracePeriodCriticalPods.Duration
	byPriority := kc.ShutdownGracePeriodByPodPriority

	if len(byPriority) > 0 && (total != 0 || critical != 0) {
		return nil, errors.New("shutdownGracePeriodByPodPriority cannot be combined with shutdownGracePeriod or shutdownGracePeriodCriticalPods")
	}
	if len(byPriority) > 0 {
		groups := make([]Group, 0, len(byPriority))
		seen := make(map[int32]bool, len(byPriority))
		for i, p := range byPriority {
			if p.ShutdownGracePeriodSeconds < 0 {
				return nil, fmt.Errorf("shutdownGracePeriodByPodPriority[%d]: shutdownGracePeriodSeconds %d must not be negative", i, p.ShutdownGracePeriodSeconds)
			}
			// Two entries for one priority would make the pod's group depend on list order.
			if seen[p.Priority] {
				return nil, fmt.Errorf("shutdownGracePeriodByPodPriority[%d]: priority %d is listed twice", i, p.Priority)
			}
			seen[p.Priority] = true
			groups = append(groups, Group{Priority: p.Priority, GracePeriod: time.Duration(p.ShutdownGracePeriodSeconds) * time.Second})
		}
		sort.Slice(groups, func(a, b int) bool { return groups[a].Priority < groups[b].Priority })
		return groups, nil
	}

	if total < 0 || critical < 0 {
		return nil, fmt.Errorf("shutdownGracePeriod (%s) and shutdownGracePeriodCriticalPods (%s) must not be negative", total, critical)
	}
	if critical > total {
		return nil, fmt.Errorf("shutdownGracePeriodCriticalPods (%s) must not be greater than shutdownGracePeriod (%s)", critical, total)
	}
	if total == 0 {
		return nil, nil
	}
	return []Group{
		{Priority: podutil.DefaultPriority, GracePeriod: total - critical},
		{Priority: podutil.SystemCriticalPriority, GracePeriod: critical},
	}, nil
}

// TotalGrace is the longest a shutdown can take with these groups: what logind must allow.
func TotalGrace(groups []Group) time.Duration {
	var d time.Duration
	for _, g := range groups {
		d += g.GracePeriod
	}
	return d
}
