package cpumanager

import (
	"slices"

	"k8s.io/utils/cpuset"
)

// RunningContainer is a running container as the runtime lists it.
type RunningContainer struct {
	ID, PodUID, Name string
}

// cpusetUpdate is one UpdateContainerResources the reconcile makes.
type cpusetUpdate struct {
	ID   string
	CPUs cpuset.CPUSet
}

// decideUpdates returns the containers whose cpuset differs from what they
// were last given: exclusive containers their CPUs, the rest the shared
// pool as it is now. An empty target (a shared pool emptied under
// strict-cpu-reservation) is skipped: the runtime reads "" as "no change".
func decideUpdates(s State, running []RunningContainer, applied map[string]cpuset.CPUSet) []cpusetUpdate {
	var out []cpusetUpdate
	for _, c := range running {
		want := s.CPUsFor(c.PodUID, c.Name)
		if want.IsEmpty() {
			continue
		}
		if last, ok := applied[c.ID]; ok && last.Equals(want) {
			continue
		}
		out = append(out, cpusetUpdate{ID: c.ID, CPUs: want})
	}
	return out
}

// decideStale returns the pods holding exclusive CPUs that were not active
// at this reconcile nor the one before (a pod admitted a moment ago may not
// be active yet), and the pods first seen inactive now.
func decideStale(s State, active map[string]bool, seenBefore map[string]bool) (release []string, seenNow map[string]bool) {
	seenNow = map[string]bool{}
	for uid := range s.Assignments {
		if active[uid] {
			continue
		}
		if seenBefore[uid] {
			release = append(release, uid)
		} else {
			seenNow[uid] = true
		}
	}
	slices.Sort(release)
	return release, seenNow
}
