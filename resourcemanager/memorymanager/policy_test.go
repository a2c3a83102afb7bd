package memorymanager

import (
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodelet/nodelet/resourcemanager/topologymanager"
)

const (
	mi = uint64(1) << 20
	gi = uint64(1) << 30
)

var hugepages2Mi = v1.ResourceName("hugepages-2Mi")

// twoNodes: 2 NUMA nodes of 4Gi memory and 1Gi of 2Mi huge pages each;
// node 0 keeps 512Mi for the system. Allocatable memory: 2.5Gi on node 0,
// 3Gi on node 1.
func twoNodes(t *testing.T) *StaticPolicy {
	t.Helper()
	p, err := NewStaticPolicy(map[int]NodeMemory{
		0: {v1.ResourceMemory: 4 * gi, hugepages2Mi: gi},
		1: {v1.ResourceMemory: 4 * gi, hugepages2Mi: gi},
	}, map[int]map[v1.ResourceName]uint64{0: {v1.ResourceMemory: 512 * mi}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// oneNode: a single node of 2Gi, 256Mi reserved.
func oneNode(t *testing.T) *StaticPolicy {
	t.Helper()
	p, err := NewStaticPolicy(map[int]NodeMemory{0: {v1.ResourceMemory: 2 * gi}}, map[int]map[v1.ResourceName]uint64{0: {v1.ResourceMemory: 256 * mi}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func ctr(name, cpu, mem string) v1.Container {
	r := v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse(mem)}
	return v1.Container{Name: name, Resources: v1.ResourceRequirements{Requests: r, Limits: r}}
}

func podOf(uid string, init []v1.Container, cs ...v1.Container) *v1.Pod {
	return &v1.Pod{ObjectMeta: metaUID(uid), Spec: v1.PodSpec{InitContainers: init, Containers: cs}}
}

func guaranteed(uid, mem string) *v1.Pod { return podOf(uid, nil, ctr("app", "1", mem)) }

func mask(t *testing.T, nodes ...int) topologymanager.BitMask {
	t.Helper()
	m, err := topologymanager.NewBitMask(nodes...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func render(ph topologymanager.ProviderHints, res v1.ResourceName) string {
	if ph == nil {
		return "none"
	}
	var parts []string
	for _, h := range ph[string(res)] {
		s := "{" + h.Affinity.String() + "}"
		if h.Preferred {
			s += "*"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

func TestInitialState(t *testing.T) {
	s := twoNodes(t).InitialState()
	if got := *s.Machine[0].MemoryMap[v1.ResourceMemory]; got != (MemoryTable{TotalMemSize: 4 * gi, SystemReserved: 512 * mi, Allocatable: 2560 * mi, Free: 2560 * mi}) {
		t.Errorf("node 0 memory %+v", got)
	}
	if got := *s.Machine[1].MemoryMap[hugepages2Mi]; got != (MemoryTable{TotalMemSize: gi, Allocatable: gi, Free: gi}) {
		t.Errorf("node 1 huge pages %+v", got)
	}
	if !reflect.DeepEqual(s.Machine[1].Cells, []int{1}) {
		t.Errorf("node 1 cells %v", s.Machine[1].Cells)
	}
}

func TestReservedMemory(t *testing.T) {
	q := resource.MustParse
	reservations := []kubeletconfigv1beta1.MemoryReservation{
		{NumaNode: 0, Limits: v1.ResourceList{v1.ResourceMemory: q("300Mi")}},
		{NumaNode: 1, Limits: v1.ResourceList{v1.ResourceMemory: q("312Mi")}},
	}
	reserved, err := ReservedPerNode([]int{0, 1}, reservations)
	if err != nil {
		t.Fatal(err)
	}
	// kubeReserved 100Mi + systemReserved 412Mi + evictionHard 100Mi.
	if err := ValidateReservedMemory(reserved, v1.ResourceList{v1.ResourceMemory: q("612Mi"), v1.ResourceCPU: q("1")}); err != nil {
		t.Errorf("matching reservation refused: %v", err)
	}
	err = ValidateReservedMemory(reserved, v1.ResourceList{v1.ResourceMemory: q("712Mi")})
	if err == nil || err.Error() != `the total amount "612Mi" of type "memory" is not equal to the value "712Mi" determined by Node Allocatable feature` {
		t.Errorf("mismatch: got %v", err)
	}
	withHuge, err := ReservedPerNode([]int{0, 1}, append(reservations, kubeletconfigv1beta1.MemoryReservation{NumaNode: 1, Limits: v1.ResourceList{hugepages2Mi: q("2Mi")}}))
	if err != nil {
		t.Fatal(err)
	}
	if err := ValidateReservedMemory(withHuge, v1.ResourceList{v1.ResourceMemory: q("612Mi")}); err == nil || !strings.Contains(err.Error(), `of type "hugepages-2Mi"`) {
		t.Errorf("huge pages reserved per node but not on the node: got %v", err)
	}
	if _, err := ReservedPerNode([]int{0}, reservations); err == nil || !strings.Contains(err.Error(), "NUMA node 1 that does not exist") {
		t.Errorf("unknown node: got %v", err)
	}
	if _, err := NewStaticPolicy(map[int]NodeMemory{0: {v1.ResourceMemory: gi}}, nil); err == nil || !strings.Contains(err.Error(), "you should specify the system reserved memory") {
		t.Errorf("no reserved memory: got %v", err)
	}
}

func TestTopologyHints(t *testing.T) {
	p := twoNodes(t)
	fresh := p.InitialState()
	onZero, err := p.Allocate(fresh, guaranteed("z", "1Gi"), &guaranteed("z", "1Gi").Spec.Containers[0], topologymanager.Hint{Affinity: mask(t, 0), Preferred: true})
	if err != nil {
		t.Fatal(err)
	}
	bestEffort := podOf("be", nil, v1.Container{Name: "app"})
	tests := []struct {
		name string
		p    *StaticPolicy
		s    State
		pod  *v1.Pod
		want string
	}{
		{"BestEffort: no preference", p, fresh, bestEffort, "none"},
		{"1Gi fits either node", p, fresh, guaranteed("g", "1Gi"), "{0}* {1}* {0,1}"},
		{"3Gi: only node 1's allocatable holds it", p, fresh, guaranteed("g", "3Gi"), "{1}* {0,1}"},
		{"5Gi needs both nodes", p, fresh, guaranteed("g", "5Gi"), "{0,1}*"},
		{"6Gi fits nowhere: no hint (the allocation refuses it)", p, fresh, guaranteed("g", "6Gi"), ""},
		{"a node with a single-node block joins no group", p, onZero, guaranteed("g", "3Gi"), "{1}*"},
		{"existing blocks regenerate their hint", p, onZero, guaranteed("z", "1Gi"), "{0}*"},
		{"one node machine", oneNode(t), oneNode(t).InitialState(), guaranteed("g", "1Gi"), "{0}*"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := render(tt.p.TopologyHints(tt.s, tt.pod, &tt.pod.Spec.Containers[0]), v1.ResourceMemory); got != tt.want {
				t.Errorf("hints %q, want %q", got, tt.want)
			}
		})
	}
	pod := podOf("p", []v1.Container{ctr("init", "1", "3Gi")}, ctr("a", "1", "1Gi"), ctr("b", "1", "1Gi"))
	if got := render(p.PodTopologyHints(fresh, pod), v1.ResourceMemory); got != "{1}* {0,1}" {
		t.Errorf("pod hints (the init container's 3Gi is the peak) %q", got)
	}
}

func TestAllocateAndRelease(t *testing.T) {
	p := twoNodes(t)
	tests := []struct {
		name     string
		mem      string
		affinity topologymanager.Hint
		want     []int
		wantErr  string
	}{
		{"on the chosen node", "1Gi", topologymanager.Hint{Affinity: mask(t, 1), Preferred: true}, []int{1}, ""},
		{"no affinity: the policy's best, node 0", "1Gi", topologymanager.Hint{}, []int{0}, ""},
		{"too small an affinity is widened", "3Gi", topologymanager.Hint{Affinity: mask(t, 0)}, []int{0, 1}, ""},
		{"a preferred affinity is not widened to a non-preferred one", "3Gi", topologymanager.Hint{Affinity: mask(t, 0), Preferred: true}, nil, "failed to find the extended preferred hint"},
		{"widened to a preferred one", "5Gi", topologymanager.Hint{Affinity: mask(t, 0), Preferred: true}, []int{0, 1}, ""},
		{"more than the machine has", "6Gi", topologymanager.Hint{}, nil, "no NUMA nodes with enough memory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := p.InitialState()
			pod := guaranteed("g", tt.mem)
			next, err := p.Allocate(s, pod, &pod.Spec.Containers[0], tt.affinity)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := next.NUMANodes("g", "app"); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("nodes %v, want %v", got, tt.want)
			}
			if !reflect.DeepEqual(s.Machine, p.InitialState().Machine) {
				t.Error("Allocate mutated its input")
			}
			if err := p.ValidateState(next); err != nil {
				t.Errorf("state not valid after allocation: %v", err)
			}
			back := p.Release(next, "g", "app")
			if !reflect.DeepEqual(back.Machine, p.InitialState().Machine) {
				t.Errorf("release left %+v", back.Machine)
			}
		})
	}
}

// An init container's memory is taken again by the app containers on the
// same nodes, and the blocks still add up to what is reserved.
func TestInitContainerMemoryReused(t *testing.T) {
	p := twoNodes(t)
	pod := podOf("p", []v1.Container{ctr("init", "1", "1Gi")}, ctr("a", "1", "1536Mi"))
	s := p.InitialState()
	hint := topologymanager.Hint{Affinity: mask(t, 1), Preferred: true}
	s, err := p.Allocate(s, pod, &pod.Spec.InitContainers[0], hint)
	if err != nil {
		t.Fatal(err)
	}
	s, err = p.Allocate(s, pod, &pod.Spec.Containers[0], hint)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Machine[1].MemoryMap[v1.ResourceMemory].Reserved; got != 1536*mi {
		t.Errorf("reserved %dMi on node 1, want 1536Mi (the init container's 1Gi reused)", got/mi)
	}
	if err := p.ValidateState(s); err != nil {
		t.Errorf("state not valid: %v", err)
	}
	s = p.Release(p.Release(s, "p", "a"), "p", "init")
	if !reflect.DeepEqual(s.Machine, p.InitialState().Machine) {
		t.Errorf("release left %+v", s.Machine[1].MemoryMap[v1.ResourceMemory])
	}
}

func TestValidateStateRefusesAnotherMachine(t *testing.T) {
	p := twoNodes(t)
	pod := guaranteed("g", "1Gi")
	s, err := p.Allocate(p.InitialState(), pod, &pod.Spec.Containers[0], topologymanager.Hint{})
	if err != nil {
		t.Fatal(err)
	}
	lost := s.Clone()
	lost.Machine[0].MemoryMap[v1.ResourceMemory].Reserved = 0
	lost.Machine[0].MemoryMap[v1.ResourceMemory].Free = 2560 * mi
	if err := p.ValidateState(lost); err == nil || !strings.Contains(err.Error(), "the containers' blocks hold") {
		t.Errorf("blocks without reservation: got %v", err)
	}
	if err := oneNode(t).ValidateState(s); err == nil {
		t.Error("a two-node state validated on a one-node machine")
	}
}

func metaUID(uid string) (m metav1.ObjectMeta) {
	m.UID = types.UID(uid)
	m.Name = uid
	return m
}
