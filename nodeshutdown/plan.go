package nodeshutdown

import (
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/podutil"
)

// DefaultPodGrace is a pod's termination grace period when its spec sets none.
const DefaultPodGrace = 30 * time.Second

// PlannedPod is one pod to stop and the grace it gets.
type PlannedPod struct {
	Pod   *v1.Pod
	Grace time.Duration
}

// PlannedGroup is a group with the pods that fall into it.
type PlannedGroup struct {
	Group
	Pods []PlannedPod
	// Empty groups are skipped at shutdown and take no time.
	Empty bool
}

// Plan puts each pod into the highest group whose priority is ≤ the pod's (pods below the
// lowest group go to the lowest) and returns the groups lowest priority first, the order in
// which they are stopped. groups must be sorted ascending, as Groups returns them.
func Plan(groups []Group, pods []*v1.Pod) []PlannedGroup {
	plan := make([]PlannedGroup, len(groups))
	for i, g := range groups {
		plan[i].Group = g
	}
	if len(plan) == 0 {
		return plan
	}
	for _, pod := range pods {
		prio := podutil.Priority(pod)
		idx := sort.Search(len(groups), func(i int) bool { return groups[i].Priority > prio }) - 1
		if idx < 0 {
			idx = 0
		}
		plan[idx].Pods = append(plan[idx].Pods, PlannedPod{Pod: pod, Grace: podGrace(pod, groups[idx].GracePeriod)})
	}
	for i := range plan {
		plan[i].Empty = len(plan[i].Pods) == 0
		sort.Slice(plan[i].Pods, func(a, b int) bool {
			pa, pb := plan[i].Pods[a].Pod, plan[i].Pods[b].Pod
			if pa.Namespace != pb.Namespace {
				return pa.Namespace < pb.Namespace
			}
			return pa.Name < pb.Name
		})
	}
	return plan
}

// PlanDuration is the longest these pods can take: empty groups cost nothing.
func PlanDuration(plan []PlannedGroup) time.Duration {
	var d time.Duration
	for _, g := range plan {
		if !g.Empty {
			d += g.GracePeriod
		}
	}
	return d
}

// podGrace caps the pod's own grace by its group's.
func podGrace(pod *v1.Pod, group time.Duration) time.Duration {
	own := DefaultPodGrace
	if s := pod.Spec.TerminationGracePeriodSeconds; s != nil {
		own = max(time.Duration(*s)*time.Second, 0)
	}
	return min(own, group)
}

// FormatPlan prints the plan as a table for a person about to reboot the node. logindMax is
// logind's InhibitDelayMaxSec; ok says whether it could be read at all.
func FormatPlan(w io.Writer, plan []PlannedGroup, logindMax time.Duration, ok bool) error {
	groups := make([]Group, len(plan))
	for i, g := range plan {
		groups[i] = g.Group
	}
	total := TotalGrace(groups)

	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tPRIORITY>=\tGROUP GRACE\tPOD\tPOD PRIORITY\tPOD GRACE")
	if len(plan) == 0 {
		fmt.Fprintln(tw, "-\t-\t-\t(graceful node shutdown is off: no grace periods configured)\t\t")
	}
	for i, g := range plan {
		if g.Empty {
			fmt.Fprintf(tw, "%d\t%d\t%s\t(no pods: skipped, takes no time)\t\t\n", i+1, g.Priority, g.GracePeriod)
			continue
		}
		for j, p := range g.Pods {
			step, prio, grace := "", "", ""
			if j == 0 {
				step, prio, grace = fmt.Sprint(i+1), fmt.Sprint(g.Priority), g.GracePeriod.String()
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s/%s\t%d\t%s\n", step, prio, grace, p.Pod.Namespace, p.Pod.Name, podutil.Priority(p.Pod), p.Grace)
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing the shutdown plan: %w", err)
	}
	var verdict string
	switch {
	case len(plan) == 0:
		verdict = "not needed"
	case !ok:
		verdict = "UNKNOWN: logind could not be asked; without it nodelet gets no time at shutdown"
	case logindMax >= total:
		verdict = fmt.Sprintf("%s: OK", logindMax)
	default:
		verdict = fmt.Sprintf("%s: TOO SMALL, logind will stop waiting after %s of the %s needed", logindMax, logindMax, total)
	}
	_, err := fmt.Fprintf(w, "total grace (all groups): %s\nworst case for these pods: %s\nlogind InhibitDelayMaxSec: %s\n", total, PlanDuration(plan), verdict)
	if err != nil {
		return fmt.Errorf("writing the shutdown plan: %w", err)
	}
	return nil
}
