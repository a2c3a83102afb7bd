package topologymanager

import (
	"testing"
)

func h(preferred bool, nodes ...int) Hint {
	return Hint{Affinity: mustMask(nodes...), Preferred: preferred}
}

// Fixture topologies: one NUMA node (the 1 socket/2 core machine), two
// (2 NUMA nodes/8 SMT cores), and four with distances for
// prefer-closest-numa-nodes (0-2 and 1-3 are near, the rest far).
var (
	oneNode  = NUMAInfo{Nodes: []int{0}}
	twoNodes = NUMAInfo{Nodes: []int{0, 1}}
	fourNear = NUMAInfo{Nodes: []int{0, 1, 2, 3}, Distances: map[int][]uint64{
		0: {10, 20, 12, 20}, 1: {20, 10, 20, 12}, 2: {12, 20, 10, 20}, 3: {20, 12, 20, 10},
	}}
)

func TestMerge(t *testing.T) {
	either := []Hint{h(true, 0), h(true, 1), h(false, 0, 1)}
	defOpts := Options{MaxAllowableNUMANodes: DefaultMaxAllowableNUMANodes}
	closest := Options{MaxAllowableNUMANodes: DefaultMaxAllowableNUMANodes, PreferClosestNUMA: true}
	tests := []struct {
		name      string
		policy    string
		opts      Options
		numa      NUMAInfo
		providers []ProviderHints
		want      Hint
		admit     bool
	}{
		{"none admits with no affinity", PolicyNone, defOpts, twoNodes,
			[]ProviderHints{{"cpu": {h(true, 1)}}}, Hint{}, true},
		{"best-effort, no providers: every node, preferred", PolicyBestEffort, defOpts, twoNodes,
			nil, h(true, 0, 1), true},
		{"best-effort, providers without preference", PolicyBestEffort, defOpts, twoNodes,
			[]ProviderHints{nil, {"cpu": nil}}, h(true, 0, 1), true},
		{"best-effort, both fit either node: the lower single node", PolicyBestEffort, defOpts, twoNodes,
			[]ProviderHints{{"cpu": either}, {"vendor/dev": either}}, h(true, 0), true},
		{"best-effort, disjoint preferences: every node, not preferred", PolicyBestEffort, defOpts, twoNodes,
			[]ProviderHints{{"cpu": {h(true, 0)}}, {"vendor/dev": {h(true, 1)}}}, h(false, 0, 1), true},
		{"restricted refuses disjoint preferences", PolicyRestricted, defOpts, twoNodes,
			[]ProviderHints{{"cpu": {h(true, 0)}}, {"vendor/dev": {h(true, 1)}}}, h(false, 0, 1), false},
		{"restricted admits a common node", PolicyRestricted, defOpts, twoNodes,
			[]ProviderHints{{"cpu": {h(true, 1), h(false, 0, 1)}}, {"vendor/dev": either}}, h(true, 1), true},
		{"a resource nowhere placeable makes the merge non-preferred", PolicyRestricted, defOpts, twoNodes,
			[]ProviderHints{{"cpu": {h(true, 0)}}, {"vendor/dev": {}}}, h(false, 0), false},
		{"differing preferred masks are not preferred; width aims at the widest need", PolicyBestEffort, defOpts, twoNodes,
			[]ProviderHints{{"cpu": {h(true, 0), h(false, 0, 1)}}, {"vendor/dev": {h(true, 0, 1)}}}, h(false, 0, 1), true},
		{"restricted admits a preferred two-node placement", PolicyRestricted, defOpts, twoNodes,
			[]ProviderHints{{"cpu": {h(true, 0, 1)}}, {"vendor/dev": {h(true, 0, 1)}}}, h(true, 0, 1), true},
		{"single-numa-node picks the common node", PolicySingleNUMANode, defOpts, twoNodes,
			[]ProviderHints{{"cpu": {h(true, 1), h(false, 0, 1)}}, {"vendor/dev": either}}, h(true, 1), true},
		{"single-numa-node refuses a request only two nodes hold", PolicySingleNUMANode, defOpts, twoNodes,
			[]ProviderHints{{"cpu": either}, {"vendor/dev": {h(true, 0, 1)}}}, Hint{}, false},
		{"single-numa-node, no preference: no affinity, admitted", PolicySingleNUMANode, defOpts, twoNodes,
			[]ProviderHints{nil}, Hint{Preferred: true}, true},
		{"one node machine: best-effort puts it on node 0", PolicyBestEffort, defOpts, oneNode,
			[]ProviderHints{{"cpu": {h(true, 0)}}, nil}, h(true, 0), true},
		{"one node machine: single-numa-node's whole machine is no affinity", PolicySingleNUMANode, defOpts, oneNode,
			[]ProviderHints{{"cpu": {h(true, 0)}}}, Hint{Preferred: true}, true},
		{"one node machine: too big a request is refused by restricted", PolicyRestricted, defOpts, oneNode,
			[]ProviderHints{{"cpu": {}}}, h(false, 0), false},
		{"equal widths: the lower mask without prefer-closest", PolicyBestEffort, defOpts, fourNear,
			[]ProviderHints{{"cpu": {h(true, 0, 1), h(true, 0, 2)}}}, h(true, 0, 1), true},
		{"prefer-closest-numa-nodes: the nearer pair", PolicyBestEffort, closest, fourNear,
			[]ProviderHints{{"cpu": {h(true, 0, 1), h(true, 0, 2)}}}, h(true, 0, 2), true},
		{"prefer-closest still prefers fewer nodes", PolicyRestricted, closest, fourNear,
			[]ProviderHints{{"cpu": {h(true, 0, 2), h(true, 3)}}}, h(true, 3), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, admit := Merge(tt.policy, tt.opts, tt.numa, tt.providers)
			if got != tt.want || admit != tt.admit {
				t.Errorf("Merge = {%s %v} admit %v, want {%s %v} admit %v", got.Affinity, got.Preferred, admit, tt.want.Affinity, tt.want.Preferred, tt.admit)
			}
		})
	}
}

func TestIterateBitMasks(t *testing.T) {
	var got []string
	IterateBitMasks([]int{0, 1, 2}, func(m BitMask) { got = append(got, m.String()) })
	want := []string{"0", "1", "2", "0,1", "0,2", "1,2", "0,1,2"}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}

func TestBitMask(t *testing.T) {
	if _, err := NewBitMask(64); err == nil {
		t.Error("NewBitMask(64) accepted a node the mask cannot hold")
	}
	a, b := mustMask(0, 3), mustMask(1, 2)
	if !b.IsNarrowerThan(a) || a.IsNarrowerThan(b) {
		t.Errorf("equal widths break ties by value: %s narrower than %s", b, a)
	}
	if !mustMask(2).IsNarrowerThan(mustMask(0, 1)) {
		t.Error("one node is narrower than two")
	}
	if !a.AnySet([]int{5, 3}) || a.AnySet([]int{1}) {
		t.Error("AnySet")
	}
}
