package topologymanager

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// fakeProvider holds free units per NUMA node; a container asks for
// needs[name] units on one node. Its hints are the nodes that still hold
// enough; Allocate takes from the affinity's first node.
type fakeProvider struct {
	free      map[int]int
	needs     map[string]int
	allocated []string // "container@affinity"
	podHints  int
}

func (f *fakeProvider) hintsFor(n int) ProviderHints {
	if n == 0 {
		return nil
	}
	hints := []Hint{}
	for _, node := range []int{0, 1} {
		if f.free[node] >= n {
			hints = append(hints, h(true, node))
		}
	}
	return ProviderHints{"fake": hints}
}

func (f *fakeProvider) GetTopologyHints(_ *v1.Pod, c *v1.Container) ProviderHints {
	return f.hintsFor(f.needs[c.Name])
}

func (f *fakeProvider) GetPodTopologyHints(pod *v1.Pod) ProviderHints {
	f.podHints++
	total := 0
	for _, c := range pod.Spec.Containers {
		total += f.needs[c.Name]
	}
	return f.hintsFor(total)
}

func (f *fakeProvider) Allocate(_ context.Context, _ *v1.Pod, c *v1.Container, hint Hint) error {
	f.allocated = append(f.allocated, c.Name+"@"+hint.Affinity.String())
	if bits := hint.Affinity.Bits(); len(bits) > 0 {
		f.free[bits[0]] -= f.needs[c.Name]
	}
	return nil
}

func testPod(names ...string) *v1.Pod {
	p := &v1.Pod{}
	for _, n := range names {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: n})
	}
	return p
}

func TestAdmitScopes(t *testing.T) {
	opts := Options{MaxAllowableNUMANodes: DefaultMaxAllowableNUMANodes}
	tests := []struct {
		name, policy, scope string
		free                map[int]int
		wantErr             bool
		want                []string
	}{
		// a and b need 3 each, 4 free per node: the container scope places
		// b after a took node 0's, on node 1.
		{"container scope sees earlier allocations", PolicySingleNUMANode, ScopeContainer, map[int]int{0: 4, 1: 4}, false, []string{"a@0", "b@1"}},
		// The pod's 6 fit no single node.
		{"pod scope refuses what no node holds", PolicySingleNUMANode, ScopePod, map[int]int{0: 4, 1: 4}, true, nil},
		{"pod scope gives every container the pod's node", PolicySingleNUMANode, ScopePod, map[int]int{0: 4, 1: 8}, false, []string{"a@1", "b@1"}},
		{"none allocates with no affinity", PolicyNone, ScopePod, map[int]int{0: 0, 1: 0}, false, []string{"a@", "b@"}},
		{"best-effort admits what restricted would not", PolicyBestEffort, ScopeContainer, map[int]int{0: 1, 1: 1}, false, []string{"a@0,1", "b@0,1"}},
		{"restricted refuses", PolicyRestricted, ScopeContainer, map[int]int{0: 1, 1: 1}, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &fakeProvider{free: tt.free, needs: map[string]int{"a": 3, "b": 3}}
			m, err := New(Config{Policy: tt.policy, Scope: tt.scope, Options: opts, NUMA: twoNodes}, p)
			if err != nil {
				t.Fatal(err)
			}
			err = m.Admit(context.Background(), testPod("a", "b"))
			if tt.wantErr {
				var ae AffinityError
				if !errors.As(err, &ae) || ae.Type() != "TopologyAffinityError" || err.Error() != "Resources cannot be allocated with Topology locality" {
					t.Fatalf("Admit = %v, want the topology affinity error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(p.allocated, tt.want) {
				t.Errorf("allocated %v, want %v", p.allocated, tt.want)
			}
			if tt.policy == PolicyNone && p.podHints != 0 {
				t.Error("policy none asked for hints")
			}
		})
	}
}

func TestNewRefusesTooManyNUMANodes(t *testing.T) {
	nine := NUMAInfo{Nodes: []int{0, 1, 2, 3, 4, 5, 6, 7, 8}}
	opts := Options{MaxAllowableNUMANodes: DefaultMaxAllowableNUMANodes}
	if _, err := New(Config{Policy: PolicyBestEffort, Scope: ScopeContainer, Options: opts, NUMA: nine}); err == nil {
		t.Error("best-effort accepted 9 NUMA nodes with max-allowable-numa-nodes 8")
	}
	if _, err := New(Config{Policy: PolicyNone, Scope: ScopeContainer, Options: opts, NUMA: nine}); err != nil {
		t.Errorf("policy none refused a 9-node machine: %v", err)
	}
	opts.MaxAllowableNUMANodes = 9
	if _, err := New(Config{Policy: PolicyBestEffort, Scope: ScopeContainer, Options: opts, NUMA: nine}); err != nil {
		t.Errorf("max-allowable-numa-nodes 9 refused 9 nodes: %v", err)
	}
	if _, err := New(Config{Policy: "everything", Scope: ScopeContainer, Options: opts, NUMA: twoNodes}); err == nil {
		t.Error("an unknown policy was accepted")
	}
}

func TestDiscoverNUMA(t *testing.T) {
	root := t.TempDir()
	for node, dist := range map[string]string{"node0": "10 21\n", "node1": "21 10\n"} {
		dir := filepath.Join(root, "sys/devices/system/node", node)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "distance"), []byte(dist), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := DiscoverNUMA(root, true)
	if err != nil {
		t.Fatal(err)
	}
	want := NUMAInfo{Nodes: []int{0, 1}, Distances: map[int][]uint64{0: {10, 21}, 1: {21, 10}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("DiscoverNUMA = %+v, want %+v", got, want)
	}
	if err := os.Remove(filepath.Join(root, "sys/devices/system/node/node1/distance")); err != nil {
		t.Fatal(err)
	}
	if _, err := DiscoverNUMA(root, true); err == nil {
		t.Error("prefer-closest-numa-nodes accepted a node without distances")
	}
	if got, err := DiscoverNUMA(root, false); err != nil || !reflect.DeepEqual(got.Nodes, []int{0, 1}) {
		t.Errorf("without distances asked for = %+v, %v; want nodes 0 and 1", got, err)
	}
	// Without node directories cadvisor reports the sockets' CPUs as node 0.
	flat := t.TempDir()
	for rel, content := range map[string]string{
		"sys/devices/system/cpu/online":                            "0\n",
		"sys/devices/system/cpu/cpu0/topology/core_id":             "0\n",
		"sys/devices/system/cpu/cpu0/topology/physical_package_id": "0\n",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(flat, rel)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(flat, rel), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err = DiscoverNUMA(flat, false)
	if err != nil || !reflect.DeepEqual(got.Nodes, []int{0}) {
		t.Errorf("a machine without node dirs = %+v, %v; want node 0", got, err)
	}
	if _, err := DiscoverNUMA(t.TempDir(), false); err == nil {
		t.Error("an empty root gave NUMA nodes")
	}
}

// releasingProvider holds "held" from before; Allocate gives each container
// a unit and fails on "bad".
type releasingProvider struct {
	fakeProvider
	holds    map[string]bool
	released []string
}

func (r *releasingProvider) Allocate(ctx context.Context, pod *v1.Pod, c *v1.Container, hint Hint) error {
	if c.Name == "bad" {
		return errors.New("no room for bad")
	}
	r.holds[c.Name] = true
	return nil
}

func (r *releasingProvider) Allocated(types.UID) []string {
	var out []string
	for name := range r.holds {
		out = append(out, name)
	}
	return out
}

func (r *releasingProvider) Release(_ context.Context, _ types.UID, containers []string) {
	for _, name := range containers {
		delete(r.holds, name)
		r.released = append(r.released, name)
	}
}

// A failed admission takes back what it gave, and only that.
func TestAdmitReleasesOnFailure(t *testing.T) {
	p := &releasingProvider{holds: map[string]bool{"held": true}}
	m, err := New(Config{Policy: PolicyNone, Scope: ScopeContainer, NUMA: twoNodes}, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Admit(context.Background(), testPod("held", "a", "bad")); err == nil {
		t.Fatal("admitted a pod a provider refused")
	}
	if !reflect.DeepEqual(p.released, []string{"a"}) || !p.holds["held"] {
		t.Errorf("released %v (holding %v), want only a released", p.released, p.holds)
	}
}
