package gc

import (
	"cmp"
	"maps"
	"slices"
	"time"
)

// ContainerRecord is what container GC knows about one container.
type ContainerRecord struct {
	ID        string
	SandboxID string
	PodUID    string
	Name      string // container name in the pod spec
	CreatedAt time.Time
	Running   bool
}

// SandboxRecord is what container GC knows about one pod sandbox.
type SandboxRecord struct {
	ID        string
	PodUID    string
	CreatedAt time.Time
	Ready     bool
}

// ContainerPolicy is the container GC policy. Upstream takes it from
// deprecated flags: MinAge 0, MaxPerPodContainer 1, MaxContainers -1.
// A negative limit means unlimited.
type ContainerPolicy struct {
	MinAge             time.Duration
	MaxPerPodContainer int
	MaxContainers      int
}

// DefaultContainerPolicy is upstream's default.
func DefaultContainerPolicy() ContainerPolicy {
	return ContainerPolicy{MinAge: 0, MaxPerPodContainer: 1, MaxContainers: -1}
}

type unitKey struct{ podUID, name string }

// SelectContainersToRemove applies upstream's rules to dead containers:
//  1. only non-running containers created more than MinAge ago are evictable,
//     grouped per (pod UID, container name) and newest first;
//  2. every evictable container of a deleted pod goes;
//  3. each group keeps at most MaxPerPodContainer (≥ 0);
//  4. with MaxContainers ≥ 0 and more evictable left, each group is cut to
//     MaxContainers/groups (at least 1), then the oldest overall go until
//     MaxContainers remain. MaxContainers wins over MaxPerPodContainer.
//
// deletedPods holds the UIDs of pods known to be gone; pass nil until all
// pod sources are ready, so nothing is removed for that reason.
func SelectContainersToRemove(containers []ContainerRecord, policy ContainerPolicy, deletedPods map[string]bool, now time.Time) []ContainerRecord {
	units := map[unitKey][]ContainerRecord{}
	for _, c := range containers {
		if c.Running || now.Sub(c.CreatedAt) < policy.MinAge {
			continue
		}
		k := unitKey{c.PodUID, c.Name}
		units[k] = append(units[k], c)
	}
	newestFirst := func(a, b ContainerRecord) int {
		if r := b.CreatedAt.Compare(a.CreatedAt); r != 0 {
			return r
		}
		return cmp.Compare(a.ID, b.ID)
	}
	keys := make([]unitKey, 0, len(units))
	for k := range units {
		slices.SortFunc(units[k], newestFirst)
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b unitKey) int {
		return cmp.Or(cmp.Compare(a.podUID, b.podUID), cmp.Compare(a.name, b.name))
	})

	var remove []ContainerRecord
	keep := func(k unitKey, n int) {
		if len(units[k]) > n {
			remove = append(remove, units[k][n:]...)
			units[k] = units[k][:n]
		}
	}
	for _, k := range keys {
		if deletedPods[k.podUID] {
			keep(k, 0)
		}
	}
	if policy.MaxPerPodContainer >= 0 {
		for _, k := range keys {
			keep(k, policy.MaxPerPodContainer)
		}
	}
	if policy.MaxContainers >= 0 {
		total, nonEmpty := 0, 0
		for _, k := range keys {
			total += len(units[k])
			if len(units[k]) > 0 {
				nonEmpty++
			}
		}
		if total > policy.MaxContainers && nonEmpty > 0 {
			perUnit := max(policy.MaxContainers/nonEmpty, 1)
			for _, k := range keys {
				keep(k, perUnit)
			}
			var rest []ContainerRecord
			for _, k := range keys {
				rest = append(rest, units[k]...)
			}
			if len(rest) > policy.MaxContainers {
				slices.SortFunc(rest, newestFirst)
				remove = append(remove, rest[policy.MaxContainers:]...)
			}
		}
	}
	return remove
}

// SelectSandboxesToRemove picks sandboxes to remove: a sandbox may go when it
// is not ready and no container (running or dead, after this round's
// removals) refers to it. Deleted pods lose all such sandboxes; other pods
// keep their newest sandbox whatever its state.
func SelectSandboxesToRemove(sandboxes []SandboxRecord, remainingContainers []ContainerRecord, deletedPods map[string]bool) []SandboxRecord {
	hasContainers := map[string]bool{}
	for _, c := range remainingContainers {
		hasContainers[c.SandboxID] = true
	}
	byPod := map[string][]SandboxRecord{}
	for _, s := range sandboxes {
		byPod[s.PodUID] = append(byPod[s.PodUID], s)
	}
	var out []SandboxRecord
	for _, uid := range slices.Sorted(maps.Keys(byPod)) {
		ss := byPod[uid]
		slices.SortFunc(ss, func(a, b SandboxRecord) int {
			return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), cmp.Compare(a.ID, b.ID))
		})
		start := 1 // keep the newest for a pod that still exists
		if deletedPods[uid] {
			start = 0
		}
		for _, s := range ss[min(start, len(ss)):] {
			if !s.Ready && !hasContainers[s.ID] {
				out = append(out, s)
			}
		}
	}
	return out
}
