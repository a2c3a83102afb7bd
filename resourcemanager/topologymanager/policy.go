package topologymanager

import (
	"fmt"
	"slices"
	"strconv"
)

// Policy names (topologyManagerPolicy) and scopes (topologyManagerScope).
const (
	PolicyNone           = "none"
	PolicyBestEffort     = "best-effort"
	PolicyRestricted     = "restricted"
	PolicySingleNUMANode = "single-numa-node"

	ScopeContainer = "container"
	ScopePod       = "pod"
)

// Policy option names (topologyManagerPolicyOptions keys).
const (
	OptionPreferClosestNUMANodes = "prefer-closest-numa-nodes"
	OptionMaxAllowableNUMANodes  = "max-allowable-numa-nodes"
)

// DefaultMaxAllowableNUMANodes is how many NUMA nodes a machine may have
// before the topology manager refuses to start, as upstream: the merge
// iterates every combination of nodes.
const DefaultMaxAllowableNUMANodes = 8

// Hint is a provider's (or the merge's) NUMA placement for a resource:
// Affinity the nodes (empty: any), Preferred whether it is a best placement.
type Hint struct {
	Affinity  BitMask
	Preferred bool
}

// Options are the parsed topologyManagerPolicyOptions.
type Options struct {
	PreferClosestNUMA     bool
	MaxAllowableNUMANodes int
}

// Gates are the feature gates that make option levels available.
type Gates struct {
	PolicyOptions, BetaOptions, AlphaOptions bool
}

// Upstream's option levels: both options are GA now, so only the
// TopologyManagerPolicyOptions gate matters for them; the level sets are
// kept so a new alpha or beta option is gated as upstream.
var (
	alphaOptions  = []string{}
	betaOptions   = []string{}
	stableOptions = []string{OptionPreferClosestNUMANodes, OptionMaxAllowableNUMANodes}
)

// ParseOptions reads topologyManagerPolicyOptions as upstream: unknown
// options are refused, options of a level whose gate is off are refused,
// max-allowable-numa-nodes may not go below the default.
func ParseOptions(m map[string]string, g Gates) (Options, error) {
	o := Options{MaxAllowableNUMANodes: DefaultMaxAllowableNUMANodes}
	if len(m) > 0 && !g.PolicyOptions {
		return o, fmt.Errorf("topologyManagerPolicyOptions requires feature gate TopologyManagerPolicyOptions")
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		switch {
		case slices.Contains(alphaOptions, k) && !g.AlphaOptions:
			return o, fmt.Errorf("topology manager policy alpha-level options not enabled, but option %q provided", k)
		case slices.Contains(betaOptions, k) && !g.BetaOptions:
			return o, fmt.Errorf("topology manager policy beta-level options not enabled, but option %q provided", k)
		case !slices.Contains(stableOptions, k) && !slices.Contains(alphaOptions, k) && !slices.Contains(betaOptions, k):
			return o, fmt.Errorf("unknown Topology Manager Policy option: %q", k)
		}
		v := m[k]
		switch k {
		case OptionPreferClosestNUMANodes:
			b, err := strconv.ParseBool(v)
			if err != nil {
				return o, fmt.Errorf("bad value for option %q: %w", k, err)
			}
			o.PreferClosestNUMA = b
		case OptionMaxAllowableNUMANodes:
			n, err := strconv.Atoi(v)
			if err != nil {
				return o, fmt.Errorf("unable to convert policy option to integer %q: %w", k, err)
			}
			if n < DefaultMaxAllowableNUMANodes {
				return o, fmt.Errorf("the minimum value of %q should not be less than %v", k, DefaultMaxAllowableNUMANodes)
			}
			o.MaxAllowableNUMANodes = n
		}
	}
	return o, nil
}

// ValidPolicy and ValidScope say whether a name is one upstream knows.
func ValidPolicy(p string) bool {
	return slices.Contains([]string{PolicyNone, PolicyBestEffort, PolicyRestricted, PolicySingleNUMANode}, p)
}

func ValidScope(s string) bool { return s == ScopeContainer || s == ScopePod }

// NUMAInfo is the machine's NUMA nodes and their distances (node ID →
// distances indexed by node ID, from sysfs node*/distance).
type NUMAInfo struct {
	Nodes     []int
	Distances map[int][]uint64
}

// DefaultAffinity is every node of the machine.
func (n NUMAInfo) DefaultAffinity() BitMask { return mustMask(n.Nodes...) }

// averageDistance is the mean distance between every pair of m's nodes.
func (n NUMAInfo) averageDistance(m BitMask) float64 {
	nodes := m.Bits()
	if len(nodes) == 0 {
		return 0
	}
	var sum, count float64
	for _, a := range nodes {
		for _, b := range nodes {
			if d := n.Distances[a]; b < len(d) {
				sum += float64(d[b])
			}
			count++
		}
	}
	return sum / count
}

func narrowest(a, b BitMask) BitMask {
	if a.IsNarrowerThan(b) {
		return a
	}
	return b
}

// closest prefers the narrower mask, then the one whose nodes are closer
// together, then the lower one (prefer-closest-numa-nodes).
func (n NUMAInfo) closest(a, b BitMask) BitMask {
	if a.Count() != b.Count() {
		return narrowest(a, b)
	}
	da, db := n.averageDistance(a), n.averageDistance(b)
	if da == db {
		if a.IsLessThan(b) {
			return a
		}
		return b
	}
	if da < db {
		return a
	}
	return b
}
