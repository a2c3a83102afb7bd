package cpumanager

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/cpuset"

	"github.com/nodelet/nodelet/cgroups"
	"github.com/nodelet/nodelet/resourcemanager/internal/resourcestate"
	"github.com/nodelet/nodelet/resourcemanager/topologymanager"
)

// Policy names, as the kubelet configuration spells them.
const (
	PolicyNone   = "none"
	PolicyStatic = "static"
)

// Policy option names (cpuManagerPolicyOptions keys).
const (
	OptionFullPCPUsOnly            = "full-pcpus-only"
	OptionDistributeCPUsAcrossNUMA = "distribute-cpus-across-numa"
	OptionStrictCPUReservation     = "strict-cpu-reservation"
)

// Options are the static policy's options.
type Options struct {
	FullPCPUsOnly            bool
	DistributeCPUsAcrossNUMA bool
	StrictCPUReservation     bool
}

// ParseOptions reads cpuManagerPolicyOptions. Options nodelet does not
// build (align-by-socket, distribute-cpus-across-cores,
// prefer-align-cpus-by-uncorecache, ...) are refused by name rather than
// ignored, as upstream refuses unknown ones.
func ParseOptions(policy string, m map[string]string) (Options, error) {
	var o Options
	if len(m) > 0 && policy != PolicyStatic {
		return o, fmt.Errorf("cpu manager policy options are only supported with the %q policy, not %q", PolicyStatic, policy)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		var dst *bool
		switch k {
		case OptionFullPCPUsOnly:
			dst = &o.FullPCPUsOnly
		case OptionDistributeCPUsAcrossNUMA:
			dst = &o.DistributeCPUsAcrossNUMA
		case OptionStrictCPUReservation:
			dst = &o.StrictCPUReservation
		default:
			return o, fmt.Errorf("unsupported cpu manager policy option %q", k)
		}
		b, err := strconv.ParseBool(m[k])
		if err != nil {
			return o, fmt.Errorf("bad value for option %q: %w", k, err)
		}
		*dst = b
	}
	return o, nil
}

// SMTAlignmentError refuses a request full-pcpus-only cannot place on whole
// cores; its Type is the pod's rejection reason, as upstream.
type SMTAlignmentError struct {
	RequestedCPUs         int
	CPUsPerCore           int
	AvailablePhysicalCPUs int // non-zero when whole cores ran out
}

func (e SMTAlignmentError) Error() string {
	if e.AvailablePhysicalCPUs > 0 {
		return fmt.Sprintf("SMT Alignment Error: not enough free physical CPUs: available physical CPUs = %d, requested CPUs = %d, CPUs per core = %d", e.AvailablePhysicalCPUs, e.RequestedCPUs, e.CPUsPerCore)
	}
	return fmt.Sprintf("SMT Alignment Error: requested %d cpus not multiple cpus per core = %d", e.RequestedCPUs, e.CPUsPerCore)
}

// Type is the admission rejection reason.
func (e SMTAlignmentError) Type() string { return "SMTAlignmentError" }

// ReservedCPUs decides the CPUs the static policy keeps out of exclusive
// allocation: reservedSystemCPUs when set, else kubeReserved+systemReserved
// cpu rounded up to whole CPUs, taken lowest-numbered by topology (whole
// sockets, cores, then threads, as an allocation would).
func ReservedCPUs(t *Topology, explicit string, kubeReserved, systemReserved resource.Quantity) (cpuset.CPUSet, error) {
	if explicit != "" {
		s, err := cpuset.Parse(explicit)
		if err != nil {
			return cpuset.New(), fmt.Errorf("parsing reservedSystemCPUs %q: %w", explicit, err)
		}
		if !s.IsSubsetOf(t.CPUs()) {
			return cpuset.New(), fmt.Errorf("reservedSystemCPUs %q names CPUs outside the machine's %q", s, t.CPUs())
		}
		return s, nil
	}
	total := kubeReserved.DeepCopy()
	total.Add(systemReserved)
	n := int(math.Ceil(float64(total.MilliValue()) / 1000))
	if n == 0 {
		// Upstream refuses the static policy without a reservation: the
		// shared pool could otherwise be emptied by exclusive allocations.
		return cpuset.New(), errors.New("the static policy requires systemreserved.cpu + kubereserved.cpu to be greater than zero")
	}
	s, err := takeByTopology(t, t.CPUs(), n, false)
	if err != nil {
		return cpuset.New(), fmt.Errorf("unable to reserve the required amount of CPUs (%d): %w", n, err)
	}
	return s, nil
}

// State is the CPU manager's state: the shared pool (upstream's default
// cpuset) and the exclusive assignments by pod UID and container name.
type State struct {
	DefaultCPUSet cpuset.CPUSet
	Assignments   map[string]map[string]cpuset.CPUSet
}

// Clone returns a deep copy so decisions never mutate their input.
func (s State) Clone() State {
	out := State{DefaultCPUSet: s.DefaultCPUSet.Clone(), Assignments: map[string]map[string]cpuset.CPUSet{}}
	for pod, cs := range s.Assignments {
		out.Assignments[pod] = map[string]cpuset.CPUSet{}
		for c, set := range cs {
			out.Assignments[pod][c] = set.Clone()
		}
	}
	return out
}

// Assigned returns every exclusively assigned CPU.
func (s State) Assigned() cpuset.CPUSet {
	out := cpuset.New()
	for _, cs := range s.Assignments {
		for _, set := range cs {
			out = out.Union(set)
		}
	}
	return out
}

// Containers are the pod's containers holding exclusive CPUs, sorted.
func (s State) Containers(podUID string) []string {
	return resourcestate.Containers(s.Assignments, podUID)
}

// Lookup returns a container's exclusive CPUs.
func (s State) Lookup(podUID, container string) (cpuset.CPUSet, bool) {
	set, ok := s.Assignments[podUID][container]
	return set, ok
}

// CPUsFor is the cpuset a container runs on: its exclusive CPUs, else the
// shared pool.
func (s State) CPUsFor(podUID, container string) cpuset.CPUSet {
	if set, ok := s.Lookup(podUID, container); ok {
		return set
	}
	return s.DefaultCPUSet
}

// StaticPolicy decides exclusive CPU assignments.
type StaticPolicy struct {
	Topology *Topology
	Reserved cpuset.CPUSet
	Options  Options
}

// Name is the policy name recorded in the checkpoint.
func (p *StaticPolicy) Name() string { return PolicyStatic }

// NewStaticPolicy checks that the options fit the topology.
func NewStaticPolicy(t *Topology, reserved cpuset.CPUSet, o Options) (*StaticPolicy, error) {
	if reserved.Size() >= t.NumCPUs {
		return nil, fmt.Errorf("creating the static CPU policy: reserved CPUs %q leave none of the machine's %d for pods", reserved, t.NumCPUs)
	}
	return &StaticPolicy{Topology: t, Reserved: reserved, Options: o}, nil
}

// InitialState is the state of a node without a checkpoint: every CPU in
// the shared pool, less the reserved ones under strict-cpu-reservation.
func (p *StaticPolicy) InitialState() State {
	def := p.Topology.CPUs()
	if p.Options.StrictCPUReservation {
		def = def.Difference(p.Reserved)
	}
	return State{DefaultCPUSet: def, Assignments: map[string]map[string]cpuset.CPUSet{}}
}

// ValidateState checks a restored state against the machine, as upstream
// does before trusting a checkpoint.
func (p *StaticPolicy) ValidateState(s State) error {
	all := p.Topology.CPUs()
	if !p.Options.StrictCPUReservation && !p.Reserved.IsSubsetOf(s.DefaultCPUSet) {
		return fmt.Errorf("not all reserved cpus: %q are present in defaultCpuSet: %q", p.Reserved, s.DefaultCPUSet)
	}
	if p.Options.StrictCPUReservation && !p.Reserved.Intersection(s.DefaultCPUSet).IsEmpty() {
		return fmt.Errorf("some of strictly reserved cpus: %q are present in defaultCpuSet: %q", p.Reserved, s.DefaultCPUSet)
	}
	assigned := cpuset.New()
	for pod, cs := range s.Assignments {
		for c, set := range cs {
			if !set.Intersection(s.DefaultCPUSet).IsEmpty() {
				return fmt.Errorf("pod: %s, container: %s cpuset: %q overlaps with default cpuset %q", pod, c, set, s.DefaultCPUSet)
			}
			assigned = assigned.Union(set)
		}
	}
	inState := s.DefaultCPUSet.Union(assigned)
	if p.Options.StrictCPUReservation {
		inState = inState.Union(p.Reserved)
	}
	if !inState.Equals(all) {
		return fmt.Errorf("current set of available CPUs %q doesn't match with CPUs in state %q", all, inState)
	}
	return nil
}

// Available is what exclusive allocations may take: the shared pool less
// the reserved CPUs.
func (p *StaticPolicy) Available(s State) cpuset.CPUSet {
	return s.DefaultCPUSet.Difference(p.Reserved)
}

// PoolSizes are the shared pool's CPUs (what exclusive allocations may
// still take, as upstream's gauge counts it), the exclusively assigned CPUs
// and those per NUMA node of the machine (0 for a node with none).
func (p *StaticPolicy) PoolSizes(s State) (shared, exclusive int, perNUMA map[int]int) {
	assigned := s.Assigned()
	perNUMA = map[int]int{}
	for _, node := range p.Topology.ids(p.Topology.CPUs(), numaOf) {
		perNUMA[node] = p.Topology.filter(assigned, func(i CPUInfo) bool { return i.NUMANodeID == node }).Size()
	}
	return p.Available(s).Size(), assigned.Size(), perNUMA
}

// GuaranteedCPUs is the number of exclusive CPUs a container gets: its CPU
// request when the pod is Guaranteed and the request is whole CPUs, else 0.
// A pod with pod-level resources stays on the shared pool, as upstream's
// managers leave such pods alone.
func GuaranteedCPUs(pod *v1.Pod, c *v1.Container) int {
	if cgroups.QOSClass(pod) != v1.PodQOSGuaranteed {
		return 0
	}
	if r := pod.Spec.Resources; r != nil && (len(r.Requests) > 0 || len(r.Limits) > 0) {
		return 0
	}
	req := c.Resources.Requests[v1.ResourceCPU]
	if req.MilliValue()%1000 != 0 {
		return 0
	}
	return int(req.Value())
}

// isInitContainer says whether name is a non-restartable init container:
// those CPUs are handed on to the app containers, as upstream. Sidecars
// (restartPolicy Always) keep theirs.
func isInitContainer(pod *v1.Pod, name string) (init bool) {
	for _, c := range pod.Spec.InitContainers {
		if c.Name == name {
			return c.RestartPolicy == nil || *c.RestartPolicy != v1.ContainerRestartPolicyAlways
		}
	}
	return false
}

// reusable returns the CPUs of the pod's finished-or-running init containers
// that an app container (or a later init container) may take again.
func reusable(s State, pod *v1.Pod, name string) cpuset.CPUSet {
	out := cpuset.New()
	for c, set := range s.Assignments[string(pod.UID)] {
		if c != name && isInitContainer(pod, c) {
			out = out.Union(set)
		}
	}
	// CPUs already re-used by an app container are not free for another.
	for c, set := range s.Assignments[string(pod.UID)] {
		if c != name && !isInitContainer(pod, c) {
			out = out.Difference(set)
		}
	}
	return out
}

// Allocate decides a container's exclusive CPUs. It returns the new state
// and the CPUs assigned (empty for a container that shares the pool). An
// existing assignment is kept as is. With a NUMA affinity (the topology
// manager's choice; empty for none) the CPUs of those nodes are taken
// first and only the rest from elsewhere, as upstream.
func (p *StaticPolicy) Allocate(s State, pod *v1.Pod, c *v1.Container, affinity topologymanager.BitMask) (State, cpuset.CPUSet, error) {
	n := GuaranteedCPUs(pod, c)
	if n == 0 {
		return s, cpuset.New(), nil
	}
	if set, ok := s.Lookup(string(pod.UID), c.Name); ok {
		return s, set, nil
	}
	perCore := p.Topology.CPUsPerCore()
	reuse := reusable(s, pod, c.Name)
	avail := p.Available(s).Union(reuse)
	if p.Options.FullPCPUsOnly && perCore > 1 {
		if n%perCore != 0 {
			return s, cpuset.New(), SMTAlignmentError{RequestedCPUs: n, CPUsPerCore: perCore}
		}
		// Only wholly free cores count as physical CPUs.
		whole := cpuset.New()
		for _, core := range p.Topology.ids(avail, coreOf) {
			if cpus := p.Topology.cpusOf(coreOf, core); cpus.IsSubsetOf(avail) {
				whole = whole.Union(cpus)
			}
		}
		if whole.Size() < n {
			return s, cpuset.New(), SMTAlignmentError{RequestedCPUs: n, CPUsPerCore: perCore, AvailablePhysicalCPUs: whole.Size()}
		}
		avail = whole
	}
	set := cpuset.New()
	if !affinity.IsEmpty() {
		aligned := p.Topology.filter(avail, func(i CPUInfo) bool { return affinity.IsSet(i.NUMANodeID) })
		got, err := p.take(aligned, min(n, aligned.Size()))
		if err != nil {
			return s, cpuset.New(), err
		}
		set = got
	}
	rest, err := p.take(avail.Difference(set), n-set.Size())
	if err != nil {
		return s, cpuset.New(), err
	}
	set = set.Union(rest)
	out := s.Clone()
	if out.Assignments[string(pod.UID)] == nil {
		out.Assignments[string(pod.UID)] = map[string]cpuset.CPUSet{}
	}
	out.Assignments[string(pod.UID)][c.Name] = set
	out.DefaultCPUSet = out.DefaultCPUSet.Difference(set)
	return out, set, nil
}

// take picks n CPUs of avail by the policy's options: distributed across
// NUMA nodes (in whole cores under full-pcpus-only), else packed.
func (p *StaticPolicy) take(avail cpuset.CPUSet, n int) (cpuset.CPUSet, error) {
	if n == 0 {
		return cpuset.New(), nil // all came from the affinity's nodes
	}
	if p.Options.DistributeCPUsAcrossNUMA {
		group := 1
		if p.Options.FullPCPUsOnly {
			group = p.Topology.CPUsPerCore()
		}
		return takeDistributedAcrossNUMA(p.Topology, avail, n, group, p.Options.FullPCPUsOnly)
	}
	return takeByTopology(p.Topology, avail, n, p.Options.FullPCPUsOnly)
}

// Release drops a container's assignment, returning to the shared pool the
// CPUs no other container of the pod still holds (an app container may be
// running on its init container's CPUs).
func (p *StaticPolicy) Release(s State, podUID, container string) State {
	set, ok := s.Lookup(podUID, container)
	if !ok {
		return s
	}
	out := s.Clone()
	delete(out.Assignments[podUID], container)
	inUse := cpuset.New()
	for _, other := range out.Assignments[podUID] {
		inUse = inUse.Union(other)
	}
	if len(out.Assignments[podUID]) == 0 {
		delete(out.Assignments, podUID)
	}
	out.DefaultCPUSet = out.DefaultCPUSet.Union(set.Difference(inUse))
	return out
}
