package memorymanager

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodelet/nodelet/cgroups"
	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/resourcemanager/topologymanager"
)

// Policy names, as memoryManagerPolicy spells them.
const (
	PolicyNone   = "None"
	PolicyStatic = "Static"
)

// isMemoryResource says whether a resource is one the memory manager
// places: memory and huge pages.
func isMemoryResource(name v1.ResourceName) bool {
	return name == v1.ResourceMemory || strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix)
}

// ReservedPerNode sums reservedMemory by NUMA node and resource, refusing a
// node the machine does not have, as upstream.
func ReservedPerNode(nodes []int, reservations []kubeletconfigv1beta1.MemoryReservation) (map[int]map[v1.ResourceName]uint64, error) {
	out := map[int]map[v1.ResourceName]uint64{}
	for _, r := range reservations {
		node := int(r.NumaNode)
		if !slices.Contains(nodes, node) {
			return nil, fmt.Errorf("the reserved memory configuration references a NUMA node %d that does not exist on this machine", r.NumaNode)
		}
		if out[node] == nil {
			out[node] = map[v1.ResourceName]uint64{}
		}
		for name, q := range r.Limits {
			if q.Sign() < 0 {
				return nil, fmt.Errorf("reserved memory %s of NUMA node %d is negative", name, node)
			}
			out[node][name] += uint64(q.Value())
		}
	}
	return out, nil
}

// ValidateReservedMemory checks, as upstream, that reservedMemory adds up,
// per memory resource, to the node allocatable reservation (kubeReserved +
// systemReserved + the hard eviction threshold).
func ValidateReservedMemory(reserved map[int]map[v1.ResourceName]uint64, nodeAllocatableReservation v1.ResourceList) error {
	totals := map[v1.ResourceName]uint64{}
	for _, byRes := range reserved {
		for name, v := range byRes {
			totals[name] += v
		}
	}
	names := map[v1.ResourceName]bool{}
	for name := range totals {
		names[name] = true
	}
	for name := range nodeAllocatableReservation {
		if isMemoryResource(name) {
			names[name] = true
		}
	}
	for _, name := range slices.Sorted(func(yield func(v1.ResourceName) bool) {
		for n := range names {
			if !yield(n) {
				return
			}
		}
	}) {
		want := nodeAllocatableReservation[name]
		got := resource.NewQuantity(int64(totals[name]), resource.BinarySI)
		if want.Cmp(*got) != 0 {
			return fmt.Errorf("the total amount %q of type %q is not equal to the value %q determined by Node Allocatable feature", got.String(), name, want.String())
		}
	}
	return nil
}

// StaticPolicy decides the memory blocks of Guaranteed pods' containers.
type StaticPolicy struct {
	Machine  map[int]NodeMemory
	Reserved map[int]map[v1.ResourceName]uint64
}

// NewStaticPolicy refuses a configuration without reserved memory, as
// upstream: the system needs some.
func NewStaticPolicy(machine map[int]NodeMemory, reserved map[int]map[v1.ResourceName]uint64) (*StaticPolicy, error) {
	var total uint64
	for _, byRes := range reserved {
		total += byRes[v1.ResourceMemory]
	}
	if total == 0 {
		return nil, errors.New("[memorymanager] you should specify the system reserved memory")
	}
	return &StaticPolicy{Machine: machine, Reserved: reserved}, nil
}

// InitialState is the machine with nothing assigned: per node and resource
// the total, the reserved part and the rest allocatable and free (memory
// less what the node's huge pages take).
func (p *StaticPolicy) InitialState() State {
	s := State{Machine: NodeMap{}, Assignments: map[string]map[string][]Block{}, Reusable: map[string]map[string]map[v1.ResourceName]uint64{}}
	for id, mem := range p.Machine {
		n := &NodeState{MemoryMap: map[v1.ResourceName]*MemoryTable{}, Cells: []int{id}}
		var huge uint64
		for name, total := range mem {
			if name == v1.ResourceMemory {
				continue
			}
			huge += total
			n.MemoryMap[name] = table(total, p.Reserved[id][name], 0)
		}
		n.MemoryMap[v1.ResourceMemory] = table(mem[v1.ResourceMemory], p.Reserved[id][v1.ResourceMemory], huge)
		s.Machine[id] = n
	}
	return s
}

// table is a resource's memory on a node with nothing assigned; other is
// memory the resource cannot use (huge pages, for memory).
func table(total, reserved, other uint64) *MemoryTable {
	alloc := uint64(0)
	if total > reserved+other {
		alloc = total - reserved - other
	}
	return &MemoryTable{TotalMemSize: total, SystemReserved: reserved, Allocatable: alloc, Free: alloc}
}

// ValidateState checks a restored state against the machine, as upstream
// before trusting a checkpoint: the machine's memory must be what the
// checkpoint says, and the blocks must account for what is reserved.
func (p *StaticPolicy) ValidateState(s State) error {
	want := p.InitialState()
	for pod, cs := range s.Assignments {
		for name, blocks := range cs {
			for _, b := range blocks {
				for _, n := range b.NUMAAffinity {
					if want.Machine[n] == nil || want.Machine[n].MemoryMap[b.Type] == nil {
						return fmt.Errorf("[memorymanager] pod %s container %s has %s memory on NUMA node %d, which the machine lacks", pod, name, b.Type, n)
					}
				}
			}
		}
	}
	for _, id := range want.Machine.Nodes() {
		got := s.Machine[id]
		if got == nil {
			return fmt.Errorf("[memorymanager] the expected machine state is different from the real one: NUMA node %d missing", id)
		}
		for name, w := range want.Machine[id].MemoryMap {
			g := got.MemoryMap[name]
			if g == nil || g.TotalMemSize != w.TotalMemSize || g.SystemReserved != w.SystemReserved || g.Allocatable != w.Allocatable {
				return fmt.Errorf("[memorymanager] the expected machine state is different from the real one: NUMA node %d %s", id, name)
			}
		}
	}
	// The blocks add up to what is reserved, per resource (how a cross-node
	// block spreads over its nodes is the allocation's order, not replayed).
	blockSums, reservedSums := map[v1.ResourceName]uint64{}, map[v1.ResourceName]uint64{}
	for _, cs := range s.Assignments {
		for _, blocks := range cs {
			for _, b := range blocks {
				blockSums[b.Type] += b.Size
			}
		}
	}
	for id, n := range s.Machine {
		if want.Machine[id] == nil {
			return fmt.Errorf("[memorymanager] the expected machine state is different from the real one: NUMA node %d is not on this machine", id)
		}
		for name, t := range n.MemoryMap {
			if t.Reserved+t.Free != t.Allocatable {
				return fmt.Errorf("[memorymanager] the expected machine state is different from the real one: NUMA node %d %s reserved %d + free %d is not allocatable %d", id, name, t.Reserved, t.Free, t.Allocatable)
			}
			reservedSums[name] += t.Reserved
		}
	}
	for name := range s.Machine.resources() {
		if blockSums[name] != reservedSums[name] {
			return fmt.Errorf("[memorymanager] the expected machine state is different from the real one: %s reserved %d, the containers' blocks hold %d", name, reservedSums[name], blockSums[name])
		}
	}
	return nil
}

// Requests are the memory and huge pages a container of a Guaranteed pod
// asks for (none for other pods, which the policy leaves alone; nor for a
// pod with pod-level resources, as the CPU manager).
func Requests(pod *v1.Pod, c *v1.Container) map[v1.ResourceName]uint64 {
	if cgroups.QOSClass(pod) != v1.PodQOSGuaranteed {
		return nil
	}
	if r := pod.Spec.Resources; r != nil && (len(r.Requests) > 0 || len(r.Limits) > 0) {
		return nil
	}
	out := map[v1.ResourceName]uint64{}
	for name, q := range podutil.RequestsOf(&c.Resources) {
		if isMemoryResource(name) && q.Sign() > 0 {
			out[name] = uint64(q.Value())
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// podRequests are the pod's requests as upstream counts them for the pod
// scope: the larger of its init containers' peak and its long-running
// containers' sum, per resource.
func podRequests(pod *v1.Pod) map[v1.ResourceName]uint64 {
	out := map[v1.ResourceName]uint64{}
	sidecars := map[v1.ResourceName]uint64{}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		for name, v := range Requests(pod, c) {
			if podutil.IsRestartableInitContainer(c) {
				sidecars[name] += v
			} else {
				out[name] = max(out[name], sidecars[name]+v)
			}
		}
	}
	apps := map[v1.ResourceName]uint64{}
	for i := range pod.Spec.Containers {
		for name, v := range Requests(pod, &pod.Spec.Containers[i]) {
			apps[name] += v
		}
	}
	for name, v := range sidecars {
		apps[name] += v
	}
	for name, v := range apps {
		out[name] = max(out[name], v)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// TopologyHints are the policy's hints for a container, as upstream's: none
// for a container it does not place; the hints of its blocks for one that
// has them; else the node sets with enough free memory of every resource.
func (p *StaticPolicy) TopologyHints(s State, pod *v1.Pod, c *v1.Container) topologymanager.ProviderHints {
	req := Requests(pod, c)
	if req == nil {
		return nil
	}
	if blocks, ok := s.Assignments[string(pod.UID)][c.Name]; ok {
		return regenerateHints(blocks, req)
	}
	return calculateHints(s.Machine, req)
}

// PodTopologyHints are the hints for the whole pod (the pod scope).
func (p *StaticPolicy) PodTopologyHints(s State, pod *v1.Pod) topologymanager.ProviderHints {
	req := podRequests(pod)
	if req == nil {
		return nil
	}
	for _, c := range podutil.AllContainers(pod) {
		if blocks, ok := s.Assignments[string(pod.UID)][c.Name]; ok {
			return regenerateHints(blocks, Requests(pod, &c))
		}
	}
	return calculateHints(s.Machine, req)
}

// regenerateHints are the hints of existing blocks: each resource on its
// blocks' nodes, preferred; none at all when the blocks no longer match the
// request (upstream lets the allocation decide then).
func regenerateHints(blocks []Block, req map[v1.ResourceName]uint64) topologymanager.ProviderHints {
	if len(blocks) != len(req) {
		return nil
	}
	hints := topologymanager.ProviderHints{}
	for _, b := range blocks {
		if req[b.Type] != b.Size {
			return nil
		}
		m, err := topologymanager.NewBitMask(b.NUMAAffinity...)
		if err != nil {
			return nil
		}
		hints[string(b.Type)] = append(hints[string(b.Type)], topologymanager.Hint{Affinity: m, Preferred: true})
	}
	return hints
}

// calculateHints is upstream's: every node set whose allocatable memory of
// each requested resource could hold the request, that does not break the
// rule that a node serves either single-node or one group's cross-node
// allocations, and whose free memory holds the request now; preferred are
// those as narrow as the narrowest set that could ever hold it. A resource
// with no such set has no entry, as upstream.
func calculateHints(machine NodeMap, req map[v1.ResourceName]uint64) topologymanager.ProviderHints {
	nodes := machine.Nodes()
	minWidth := len(nodes)
	hints := topologymanager.ProviderHints{}
	topologymanager.IterateBitMasks(nodes, func(mask topologymanager.BitMask) {
		bits := mask.Bits()
		free, alloc := sums(machine, bits, req)
		for name, v := range req {
			if alloc[name] < v {
				return
			}
		}
		if mask.Count() < minWidth {
			minWidth = mask.Count()
		}
		if len(bits) == 1 && len(machine[bits[0]].Cells) > 1 {
			return // grouped with other nodes: no single-node allocation
		}
		if len(bits) > 1 {
			for _, n := range bits {
				if machine[n].NumberOfAssignments > 0 && (len(machine[n].Cells) == 1 || !slices.Equal(sortedCopy(machine[n].Cells), bits)) {
					return
				}
			}
		}
		for name, v := range req {
			if free[name] < v {
				return
			}
		}
		for name := range req {
			hints[string(name)] = append(hints[string(name)], topologymanager.Hint{Affinity: mask})
		}
	})
	for name := range hints {
		for i := range hints[name] {
			hints[name][i].Preferred = hints[name][i].Affinity.Count() == minWidth
		}
	}
	return hints
}

func sums(machine NodeMap, nodes []int, req map[v1.ResourceName]uint64) (free, alloc map[v1.ResourceName]uint64) {
	free, alloc = map[v1.ResourceName]uint64{}, map[v1.ResourceName]uint64{}
	for _, n := range nodes {
		for name := range req {
			if t := machine[n].MemoryMap[name]; t != nil {
				free[name] += t.Free
				alloc[name] += t.Allocatable
			}
		}
	}
	return free, alloc
}

func sortedCopy(s []int) []int {
	out := slices.Clone(s)
	sort.Ints(out)
	return out
}

// bestHint is upstream's findBestHint: preferred first, then the narrowest.
func bestHint(hints []topologymanager.Hint) (topologymanager.Hint, bool) {
	var best topologymanager.Hint
	found := false
	for _, h := range hints {
		switch {
		case !found:
			best, found = h, true
		case h.Preferred && !best.Preferred:
			best = h
		case h.Preferred == best.Preferred && h.Affinity.IsNarrowerThan(best.Affinity):
			best = h
		}
	}
	return best, found
}

// violatesGrouping says whether placing memory on mask's nodes would mix
// single-node and cross-node allocations on a node, or two groups.
func violatesGrouping(machine NodeMap, mask topologymanager.BitMask) bool {
	bits := mask.Bits()
	if len(bits) == 1 {
		return false
	}
	for _, n := range bits {
		if machine[n].NumberOfAssignments == 0 {
			continue
		}
		if len(machine[n].Cells) == 1 || !slices.Equal(sortedCopy(machine[n].Cells), bits) {
			return true
		}
	}
	return false
}

// maskKey names an affinity for the Reusable map.
func maskKey(nodes []int) string {
	m, _ := topologymanager.NewBitMask(nodes...)
	return m.String()
}

// Allocate decides a container's memory blocks along the topology
// manager's affinity (empty: the policy's own best hint), widened when it
// cannot hold the request, as upstream; memory the pod's init containers
// left on the same nodes is taken again first. It returns the new state;
// an existing assignment is kept as is.
func (p *StaticPolicy) Allocate(s State, pod *v1.Pod, c *v1.Container, affinity topologymanager.Hint) (State, error) {
	req := Requests(pod, c)
	if req == nil {
		return s, nil
	}
	uid := string(pod.UID)
	if _, ok := s.Assignments[uid][c.Name]; ok {
		return s, nil
	}
	best := affinity
	if best.Affinity.IsEmpty() {
		def, ok := bestHint(calculateHints(s.Machine, req)[string(v1.ResourceMemory)])
		if !ok {
			return s, errors.New("[memorymanager] failed to get the default NUMA affinity, no NUMA nodes with enough memory is available")
		}
		if !def.Preferred && best.Preferred {
			return s, errors.New("[memorymanager] failed to find the default preferred hint")
		}
		best = def
	}
	if free, _ := sums(s.Machine, best.Affinity.Bits(), req); !covers(free, req) {
		var wider []topologymanager.Hint
		for _, h := range calculateHints(s.Machine, req)[string(v1.ResourceMemory)] {
			if topologymanager.And(h.Affinity, best.Affinity) == best.Affinity {
				wider = append(wider, h)
			}
		}
		ext, ok := bestHint(wider)
		if !ok {
			return s, errors.New("[memorymanager] failed to find NUMA nodes to extend the current topology hint")
		}
		if !ext.Preferred && best.Preferred {
			return s, errors.New("[memorymanager] failed to find the extended preferred hint")
		}
		best = ext
	}
	if violatesGrouping(s.Machine, best.Affinity) {
		return s, errors.New("[memorymanager] preferred hint violates NUMA node allocation")
	}
	out := s.Clone()
	nodes := best.Affinity.Bits()
	key := maskKey(nodes)
	init := isRegularInit(pod, c.Name)
	var blocks []Block
	for _, name := range sortedNames(req) {
		size := req[name]
		blocks = append(blocks, Block{NUMAAffinity: nodes, Type: name, Size: size})
		reuse := out.Reusable[uid][key][name]
		take := size - min(size, reuse)
		reserve(out.Machine, nodes, name, take)
		switch {
		case init:
			// An init container's memory is there for the pod's later containers.
			setReusable(out, uid, key, name, max(reuse, size))
		case reuse > 0:
			setReusable(out, uid, key, name, reuse-min(size, reuse))
		}
	}
	// Only the pod being admitted keeps reusable memory, as upstream.
	for other := range out.Reusable {
		if other != uid {
			delete(out.Reusable, other)
		}
	}
	if out.Assignments[uid] == nil {
		out.Assignments[uid] = map[string][]Block{}
	}
	out.Assignments[uid][c.Name] = blocks
	if !init {
		shrinkInitBlocks(out, pod, c.Name, blocks)
	}
	return out, nil
}

// shrinkInitBlocks takes a later container's blocks off the earlier init
// containers' blocks of the same type and nodes, as upstream's
// updateInitContainersMemoryBlocks: the blocks then add up to what is
// reserved, so releasing them frees no other pod's memory.
func shrinkInitBlocks(s State, pod *v1.Pod, name string, blocks []Block) {
	uid := string(pod.UID)
	for _, b := range blocks {
		size := b.Size
		for i := range pod.Spec.InitContainers {
			ic := &pod.Spec.InitContainers[i]
			if ic.Name == name || size == 0 {
				break
			}
			if podutil.IsRestartableInitContainer(ic) {
				continue
			}
			for j := range s.Assignments[uid][ic.Name] {
				ib := &s.Assignments[uid][ic.Name][j]
				if ib.Size == 0 || ib.Type != b.Type || !slices.Equal(ib.NUMAAffinity, b.NUMAAffinity) {
					continue
				}
				take := min(size, ib.Size)
				ib.Size -= take
				size -= take
			}
		}
	}
}

func covers(free, req map[v1.ResourceName]uint64) bool {
	for name, v := range req {
		if free[name] < v {
			return false
		}
	}
	return true
}

func setReusable(s State, uid, key string, name v1.ResourceName, v uint64) {
	if s.Reusable[uid] == nil {
		s.Reusable[uid] = map[string]map[v1.ResourceName]uint64{}
	}
	if s.Reusable[uid][key] == nil {
		s.Reusable[uid][key] = map[v1.ResourceName]uint64{}
	}
	s.Reusable[uid][key][name] = v
}

func sortedNames(req map[v1.ResourceName]uint64) []v1.ResourceName {
	names := make([]v1.ResourceName, 0, len(req))
	for n := range req {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// isRegularInit says whether name is a non-restartable init container.
func isRegularInit(pod *v1.Pod, name string) bool {
	for i := range pod.Spec.InitContainers {
		if c := &pod.Spec.InitContainers[i]; c.Name == name {
			return !podutil.IsRestartableInitContainer(c)
		}
	}
	return false
}

// reserve takes size bytes of name from nodes' free memory in order, and
// counts the block on every node of the group, as upstream's
// updateMachineState.
func reserve(machine NodeMap, nodes []int, name v1.ResourceName, size uint64) {
	for _, n := range nodes {
		st := machine[n]
		st.NumberOfAssignments++
		st.Cells = slices.Clone(nodes)
		t := st.MemoryMap[name]
		if size == 0 || t == nil || t.Free == 0 {
			continue
		}
		take := min(size, t.Free)
		t.Reserved += take
		t.Free -= take
		size -= take
	}
}

// Release drops a container's blocks, giving their memory back to the
// nodes in order and ungrouping nodes no block uses any more, as upstream's
// RemoveContainer.
func (p *StaticPolicy) Release(s State, podUID, container string) State {
	blocks, ok := s.Assignments[podUID][container]
	if !ok {
		return s
	}
	out := s.Clone()
	delete(out.Assignments[podUID], container)
	if len(out.Assignments[podUID]) == 0 {
		delete(out.Assignments, podUID)
		delete(out.Reusable, podUID)
	}
	for _, b := range blocks {
		size := b.Size
		for _, n := range b.NUMAAffinity {
			st := out.Machine[n]
			if st == nil {
				continue
			}
			st.NumberOfAssignments--
			if st.NumberOfAssignments <= 0 {
				st.NumberOfAssignments, st.Cells = 0, []int{n}
			}
			t := st.MemoryMap[b.Type]
			if size == 0 || t == nil || t.Reserved == 0 {
				continue
			}
			give := min(size, t.Reserved)
			t.Free += give
			t.Reserved -= give
			size -= give
		}
	}
	return out
}
