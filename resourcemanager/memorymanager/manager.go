package memorymanager

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/resourcemetrics"
	"github.com/nodelet/nodelet/resourcemanager/internal/resourcestate"
	"github.com/nodelet/nodelet/resourcemanager/topologymanager"
)

// Config configures a Manager.
type Config struct {
	// Policy is memoryManagerPolicy: None or Static.
	Policy string
	// Static is the static policy (nil with policy None).
	Static *StaticPolicy
	// RootDir is the kubelet root dir, home of the checkpoint.
	RootDir string
	// Metrics records pinning (nil: not recorded).
	Metrics *resourcemetrics.Metrics
}

// provider is the embedded resourcestate.Provider: its methods (the
// topology manager's hints, Allocated, Release) are the Manager's.
type provider = resourcestate.Provider[State]

// Manager holds the memory blocks, checkpoints them and answers the
// topology manager and container creation.
type Manager struct {
	provider

	cfg Config

	mu    sync.Mutex
	state State
}

// New restores the checkpoint under cfg.RootDir (or starts fresh). A
// checkpoint of another policy, or one that does not fit this machine, is
// refused: the operator drains the node and removes the file, as upstream;
// under policy None a corrupt one holds nothing and is set aside.
func New(cfg Config, clk clock.Clock) (*Manager, error) {
	if cfg.Policy != PolicyNone && cfg.Policy != PolicyStatic {
		return nil, fmt.Errorf("creating the memory manager: unknown policy %q", cfg.Policy)
	}
	if cfg.Policy == PolicyStatic && cfg.Static == nil {
		return nil, errors.New("creating the memory manager: the static policy is not set up")
	}
	m := &Manager{cfg: cfg}
	path := m.checkpointPath()
	r := resourcestate.Restore[State]{
		What: "memory manager", Path: path, Corrupt: errCorrupt, Assigns: cfg.Static != nil,
		Read: func() (State, bool, error) { return readCheckpoint(path, cfg.Policy) },
		Empty: func() State {
			return State{Machine: NodeMap{}, Assignments: map[string]map[string][]Block{}, Reusable: map[string]map[string]map[v1.ResourceName]uint64{}}
		},
	}
	var policy resourcestate.Policy[State] // nil under policy None
	if cfg.Static != nil {
		r.Validate, r.Initial = cfg.Static.ValidateState, cfg.Static.InitialState
		policy = cfg.Static
	}
	m.provider = resourcestate.NewProvider(&m.mu, &m.state, policy, m.commit, "NUMA memory")
	s, ok, err := r.Run(clk.Now())
	if err != nil {
		return nil, err
	}
	m.state = s
	if err := writeCheckpoint(path, cfg.Policy, s); err != nil {
		return nil, fmt.Errorf("creating the memory manager: %w", err)
	}
	klog.InfoS("Memory manager started", "policy", cfg.Policy, "restored", ok)
	return m, nil
}

func (m *Manager) checkpointPath() string { return filepath.Join(m.cfg.RootDir, CheckpointFile) }

// commit checkpoints s and makes it current; a state that cannot be
// checkpointed is not used, so a restart never forgets a block. Callers
// hold mu.
func (m *Manager) commit(s State) error {
	if err := writeCheckpoint(m.checkpointPath(), m.cfg.Policy, s); err != nil {
		return fmt.Errorf("saving memory assignments: %w", err)
	}
	m.state = s
	return nil
}

// Allocate gives a container of a Guaranteed pod its memory blocks along
// the topology manager's affinity and checkpoints them.
func (m *Manager) Allocate(_ context.Context, pod *v1.Pod, c *v1.Container, affinity topologymanager.Hint) error {
	if m.cfg.Static == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	_, had := m.state.Assignments[string(pod.UID)][c.Name]
	next, err := m.cfg.Static.Allocate(m.state, pod, c, affinity)
	if Requests(pod, c) != nil {
		m.cfg.Metrics.MemoryPinning(err != nil)
	}
	if err != nil {
		err = fmt.Errorf("allocating memory for container %s: %w", c.Name, err)
		klog.InfoS("Memory manager refused a pod", "pod", klog.KObj(pod), "err", err)
		return err
	}
	if _, has := next.Assignments[string(pod.UID)][c.Name]; had || !has {
		return nil // kept, or a container the policy leaves alone
	}
	klog.InfoS("Memory manager assigned NUMA memory", "pod", klog.KObj(pod), "container", c.Name, "numaNodes", next.NUMANodes(string(pod.UID), c.Name))
	return m.commit(next)
}

// RemovePod releases every block of a pod that is gone.
func (m *Manager) RemovePod(ctx context.Context, podUID types.UID) {
	m.Release(ctx, podUID, m.Allocated(podUID))
}

// FreeInactive releases the blocks of every pod but admitting and active,
// as upstream's removeStaleState before an allocation; the caller calls it
// only once the pod sources are ready, or a restored pod not re-admitted
// yet would lose its memory.
func (m *Manager) FreeInactive(ctx context.Context, admitting types.UID, active []*v1.Pod) {
	keep := map[types.UID]bool{admitting: true}
	for _, p := range active {
		keep[p.UID] = true
	}
	m.mu.Lock()
	var stale []types.UID
	for uid := range m.state.Assignments {
		if !keep[types.UID(uid)] {
			stale = append(stale, types.UID(uid))
		}
	}
	m.mu.Unlock()
	for _, uid := range stale {
		m.RemovePod(ctx, uid)
	}
}

// MemsFor is the cpuset.mems a new container is created with: the NUMA
// nodes of its memory blocks; "" (the runtime's default) for a container
// without blocks.
func (m *Manager) MemsFor(podUID types.UID, container string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	nodes := m.state.NUMANodes(string(podUID), container)
	parts := make([]string, 0, len(nodes))
	for _, n := range nodes {
		parts = append(parts, strconv.Itoa(n))
	}
	return strings.Join(parts, ",")
}

// ContainerBlocks are a container's memory blocks (none without), for the
// pod resources API.
func (m *Manager) ContainerBlocks(podUID types.UID, container string) []Block {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Block
	for _, b := range m.state.Assignments[string(podUID)][container] {
		out = append(out, Block{NUMAAffinity: slices.Clone(b.NUMAAffinity), Type: b.Type, Size: b.Size})
	}
	return out
}

// AllocatableBlocks are what the Static policy can give: one block per NUMA
// node and resource with its allocatable size (total less reserved), nodes
// ascending then resources by name; none under policy None, as upstream's
// GetAllocatableMemory.
func (m *Manager) AllocatableBlocks() []Block {
	if m.cfg.Static == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return allocatableBlocks(m.state.Machine)
}

func allocatableBlocks(machine NodeMap) []Block {
	var out []Block
	for _, id := range machine.Nodes() {
		node := machine[id]
		for _, name := range slices.Sorted(maps.Keys(node.MemoryMap)) {
			if t := node.MemoryMap[name]; t.Allocatable > 0 {
				out = append(out, Block{NUMAAffinity: []int{id}, Type: name, Size: t.Allocatable})
			}
		}
	}
	return out
}
