package cpumanager

import (
	"context"
	"errors"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	testclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/cpuset"

	"github.com/nodelet/nodelet/resourcemanager/topologymanager"
)

// hintsString renders hints as "{0}* {0,1}" (* preferred); "none" for no
// preference, "[]" for not placeable.
func hintsString(ph topologymanager.ProviderHints) string {
	if ph == nil {
		return "none"
	}
	hs, ok := ph[resourceCPU]
	if !ok || hs == nil {
		return "none"
	}
	out := "["
	for i, h := range hs {
		if i > 0 {
			out += " "
		}
		out += "{" + h.Affinity.String() + "}"
		if h.Preferred {
			out += "*"
		}
	}
	return out + "]"
}

// On the 2 NUMA node/8 SMT core fixture with 0,8 reserved, node 0 has 6
// free CPUs (1-3,9-11) and node 1 has 8 (4-7,12-15).
func TestStaticPolicyTopologyHints(t *testing.T) {
	topo := mustTopology(t, fixtureTwoNUMASMT(t))
	p, err := NewStaticPolicy(topo, mustParse(t, "0,8"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	fresh := p.InitialState()
	held := fresh.Clone()
	held.Assignments["h"] = map[string]cpuset.CPUSet{"app": mustParse(t, "4,12")}
	held.DefaultCPUSet = held.DefaultCPUSet.Difference(mustParse(t, "4,12"))
	sidecar := container("side", "1", "1")
	always := v1.ContainerRestartPolicyAlways
	sidecar.RestartPolicy = &always
	tests := []struct {
		name string
		s    State
		pod  *v1.Pod
		want string
	}{
		{"BestEffort: no preference", fresh, withUID(pod(nil, container("app", "", "")), "be"), "none"},
		{"fractional CPUs: no preference", fresh, guaranteed("f", "app", "1500m"), "none"},
		{"2 CPUs fit either node", fresh, guaranteed("g", "app", "2"), "[{0}* {1}* {0,1}]"},
		{"7 CPUs: only node 1 has enough free", fresh, guaranteed("g", "app", "7"), "[{1}* {0,1}]"},
		{"10 CPUs need both nodes, which is preferred", fresh, guaranteed("g", "app", "10"), "[{0,1}*]"},
		{"15 CPUs: more than free, not placeable", fresh, guaranteed("g", "app", "15"), "[]"},
		{"an assignment regenerates its own hints", held, guaranteed("h", "app", "2"), "[{1}* {0,1}]"},
		{"an assignment of another size is not placeable", held, guaranteed("h", "app", "4"), "[]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &tt.pod.Spec.Containers[0]
			if got := hintsString(p.TopologyHints(tt.s, tt.pod, c)); got != tt.want {
				t.Errorf("hints %s, want %s", got, tt.want)
			}
		})
	}
	podTests := []struct {
		name string
		pod  *v1.Pod
		want string
	}{
		{"3+3 app CPUs fit node 0's 6", withUID(pod(nil, container("a", "3", "3"), container("b", "3", "3")), "p"), "[{0}* {1}* {0,1}]"},
		{"an init container's 7 is the pod's peak", withUID(pod([]v1.Container{container("init", "7", "7")}, container("a", "2", "2")), "p"), "[{1}* {0,1}]"},
		{"a sidecar adds to the app containers", withUID(pod([]v1.Container{sidecar}, container("a", "6", "6")), "p"), "[{1}* {0,1}]"},
		{"BestEffort pod: no preference", withUID(pod(nil, container("a", "", "")), "p"), "none"},
	}
	for _, tt := range podTests {
		t.Run("pod: "+tt.name, func(t *testing.T) {
			if got := hintsString(p.PodTopologyHints(fresh, tt.pod)); got != tt.want {
				t.Errorf("pod hints %s, want %s", got, tt.want)
			}
		})
	}
}

func TestStaticPolicyAllocateHonoursAffinity(t *testing.T) {
	topo := mustTopology(t, fixtureTwoNUMASMT(t))
	tests := []struct {
		name     string
		opts     Options
		cpus     string
		affinity []int
		want     string
	}{
		{"node 1", Options{}, "2", []int{1}, "4,12"},
		{"node 0", Options{}, "2", []int{0}, "1,9"},
		{"more than the node has: all of it, then the rest elsewhere", Options{}, "8", []int{0}, "1-4,9-12"},
		{"full cores on node 1", Options{FullPCPUsOnly: true}, "4", []int{1}, "4-5,12-13"},
		{"distributed within the affinity", Options{DistributeCPUsAcrossNUMA: true}, "2", []int{1}, "4,12"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := NewStaticPolicy(topo, mustParse(t, "0,8"), tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			pd := guaranteed("g", "app", tt.cpus)
			mask, err := topologymanager.NewBitMask(tt.affinity...)
			if err != nil {
				t.Fatal(err)
			}
			_, got, err := p.Allocate(p.InitialState(), pd, &pd.Spec.Containers[0], mask)
			if err != nil {
				t.Fatal(err)
			}
			if got.String() != tt.want {
				t.Errorf("assigned %s, want %s", got, tt.want)
			}
		})
	}
}

// The CPU manager as the topology manager's hint provider: under
// single-numa-node each container lands on one node, and a container no
// node can hold any more refuses the pod with TopologyAffinityError and
// gives back what its earlier containers got.
func TestManagerUnderSingleNUMANodePolicy(t *testing.T) {
	p, err := NewStaticPolicy(mustTopology(t, fixtureTwoNUMASMT(t)), mustParse(t, "0,8"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Policy: PolicyStatic, Static: p, RootDir: t.TempDir()}, &fakeRuntime{}, nil, nil, testclock.NewFakeClock(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	tm, err := topologymanager.New(topologymanager.Config{
		Policy: topologymanager.PolicySingleNUMANode, Scope: topologymanager.ScopeContainer,
		Options: topologymanager.Options{MaxAllowableNUMANodes: 8}, NUMA: topologymanager.NUMAInfo{Nodes: []int{0, 1}},
	}, m)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	admit := func(pd *v1.Pod) error { return tm.Admit(ctx, pd) }

	two := withUID(pod(nil, container("a", "6", "6"), container("b", "6", "6")), "two")
	if err := admit(two); err != nil {
		t.Fatal(err)
	}
	if a, b := m.ExclusiveCPUs("two", "a").String(), m.ExclusiveCPUs("two", "b").String(); a != "1-3,9-11" || b != "4-6,12-14" {
		t.Errorf("a on %s, b on %s; want node 0's 1-3,9-11 and node 1's 4-6,12-14", a, b)
	}
	third := withUID(pod(nil, container("c", "1", "1"), container("d", "2", "2")), "third")
	var affinity topologymanager.AffinityError
	if err := admit(third); !errors.As(err, &affinity) {
		t.Fatalf("got %v, want a TopologyAffinityError", err)
	}
	if got := m.ExclusiveCPUs("third", "c"); !got.IsEmpty() {
		t.Errorf("a refused pod kept %s", got)
	}
}
