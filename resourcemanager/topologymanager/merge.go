package topologymanager

import "sort"

// ProviderHints are one provider's hints by resource name. A nil map (or an
// empty one) means the provider does not care; a resource with nil hints
// does not care either; a resource with an empty, non-nil list cannot be
// placed anywhere.
type ProviderHints map[string][]Hint

// Merge decides the affinity a container (or pod) gets from its providers'
// hints under policy, and whether the policy admits it, as upstream's
// policies do: none admits with no affinity; best-effort admits the best
// merged hint; restricted admits only a preferred one; single-numa-node
// considers only single-node (or don't-care) preferred hints and admits
// only a preferred result.
func Merge(policy string, opts Options, numa NUMAInfo, providers []ProviderHints) (Hint, bool) {
	switch policy {
	case PolicyBestEffort:
		return mergeHints(numa, filterProvidersHints(providers), policy, opts), true
	case PolicyRestricted:
		best := mergeHints(numa, filterProvidersHints(providers), policy, opts)
		return best, best.Preferred
	case PolicySingleNUMANode:
		best := mergeHints(numa, filterSingleNUMAHints(filterProvidersHints(providers)), policy, opts)
		if best.Affinity == numa.DefaultAffinity() {
			// Every node is no NUMA affinity at all.
			best.Affinity = 0
		}
		return best, best.Preferred
	default:
		return Hint{}, true
	}
}

// filterProvidersHints flattens the providers' hints into one list per
// resource, turning "don't care" into a preferred any-node hint and "cannot
// place" into a non-preferred one.
func filterProvidersHints(providers []ProviderHints) [][]Hint {
	var out [][]Hint
	for _, hints := range providers {
		if len(hints) == 0 {
			out = append(out, []Hint{{Preferred: true}})
			continue
		}
		// Resources in a fixed order, so equal merges break ties the same way.
		names := make([]string, 0, len(hints))
		for name := range hints {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			switch h := hints[name]; {
			case h == nil:
				out = append(out, []Hint{{Preferred: true}})
			case len(h) == 0:
				out = append(out, []Hint{{Preferred: false}})
			default:
				out = append(out, h)
			}
		}
	}
	return out
}

// filterSingleNUMAHints keeps the preferred hints of no or exactly one node.
func filterSingleNUMAHints(all [][]Hint) [][]Hint {
	out := make([][]Hint, 0, len(all))
	for _, hints := range all {
		var kept []Hint
		for _, h := range hints {
			if h.Preferred && h.Affinity.Count() <= 1 {
				kept = append(kept, h)
			}
		}
		out = append(out, kept)
	}
	return out
}

// mergeHints tries every permutation of one hint per resource and keeps the
// best merged one; none at all yields every node, not preferred.
func mergeHints(numa NUMAInfo, hints [][]Hint, policy string, opts Options) Hint {
	m := merger{numa: numa, policy: policy, opts: opts, bestNonPreferredCount: maxOfMinAffinityCounts(hints)}
	def := numa.DefaultAffinity()
	var best *Hint
	iteratePermutations(hints, func(perm []Hint) {
		merged := mergePermutation(def, perm)
		best = m.compare(best, &merged)
	})
	if best == nil {
		return Hint{Affinity: def}
	}
	return *best
}

// iteratePermutations calls f with each choice of one hint per resource.
func iteratePermutations(all [][]Hint, f func([]Hint)) {
	var rec func(i int, acc []Hint)
	rec = func(i int, acc []Hint) {
		if i == len(all) {
			f(acc)
			return
		}
		for _, h := range all[i] {
			rec(i+1, append(acc, h))
		}
	}
	rec(0, make([]Hint, 0, len(all)))
}

// mergePermutation ANDs the hints' affinities (any-node hints count as every
// node); the result is preferred only when every hint is preferred and all
// that name nodes name the same ones.
func mergePermutation(def BitMask, perm []Hint) Hint {
	preferred := true
	var affinities []BitMask
	for _, h := range perm {
		if !h.Affinity.IsEmpty() {
			affinities = append(affinities, h.Affinity)
			if h.Affinity != affinities[0] {
				preferred = false
			}
		}
		if !h.Preferred {
			preferred = false
		}
	}
	return Hint{Affinity: And(def, affinities...), Preferred: preferred}
}

// maxOfMinAffinityCounts is, over resources, the largest node count of
// their narrowest hint: the width a non-preferred result should aim for.
func maxOfMinAffinityCounts(all [][]Hint) int {
	out := 0
	for _, hints := range all {
		var narrow *Hint
		for i := range hints {
			if hints[i].Affinity.IsEmpty() {
				continue
			}
			if narrow == nil || hints[i].Affinity.IsNarrowerThan(narrow.Affinity) {
				narrow = &hints[i]
			}
		}
		if narrow != nil && narrow.Affinity.Count() > out {
			out = narrow.Affinity.Count()
		}
	}
	return out
}

type merger struct {
	numa                  NUMAInfo
	policy                string
	opts                  Options
	bestNonPreferredCount int
}

// compareMasks picks between two equally preferred hints: the narrower, or
// with prefer-closest-numa-nodes (not under single-numa-node) the closer.
func (m merger) compareMasks(current, candidate *Hint) *Hint {
	if candidate.Affinity == current.Affinity {
		return current
	}
	var best BitMask
	if m.policy != PolicySingleNUMANode && m.opts.PreferClosestNUMA {
		best = m.numa.closest(current.Affinity, candidate.Affinity)
	} else {
		best = narrowest(current.Affinity, candidate.Affinity)
	}
	if best == current.Affinity {
		return current
	}
	return candidate
}

// compare is upstream's HintMerger.compare: a preferred hint beats a
// non-preferred one; two preferred ones are compared by mask; among
// non-preferred ones the one whose width is nearest to (not above)
// bestNonPreferredCount wins.
func (m merger) compare(current, candidate *Hint) *Hint {
	if candidate.Affinity.Count() == 0 {
		return current
	}
	if current == nil {
		return candidate
	}
	if current.Preferred != candidate.Preferred {
		if candidate.Preferred {
			return candidate
		}
		return current
	}
	if current.Preferred {
		return m.compareMasks(current, candidate)
	}
	cur, cand, target := current.Affinity.Count(), candidate.Affinity.Count(), m.bestNonPreferredCount
	switch {
	case cur > target:
		return m.compareMasks(current, candidate)
	case cur == target:
		if cand != target {
			return current
		}
		return m.compareMasks(current, candidate)
	case cand > target:
		return current
	case cand == target:
		return candidate
	case cand > cur:
		return candidate
	case cand < cur:
		return current
	default:
		return m.compareMasks(current, candidate)
	}
}
