package cpumanager

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/cpuset"

	"github.com/nodelet/nodelet/internal/periodic"
	"github.com/nodelet/nodelet/internal/resourcemetrics"
	"github.com/nodelet/nodelet/resourcemanager/internal/resourcestate"
	"github.com/nodelet/nodelet/resourcemanager/topologymanager"
)

// Runtime is the part of the CRI runtime service the executor uses.
type Runtime interface {
	UpdateContainerResources(ctx context.Context, containerID string, resources *runtimeapi.ContainerResources) error
}

// Config configures a Manager.
type Config struct {
	// Policy is cpuManagerPolicy: none or static.
	Policy string
	// Static is the static policy (nil with policy none).
	Static *StaticPolicy
	// RootDir is the kubelet root dir, home of the checkpoint.
	RootDir string
	// ReconcilePeriod is cpuManagerReconcilePeriod; 0 never reconciles.
	ReconcilePeriod time.Duration
	// Metrics records pinning and the pools (nil: not recorded).
	Metrics *resourcemetrics.Metrics
}

// provider is the embedded resourcestate.Provider: its methods (the
// topology manager's hints, Allocated, Release) are the Manager's.
type provider = resourcestate.Provider[State]

// Manager holds the CPU assignments, checkpoints them and applies them.
type Manager struct {
	provider

	cfg     Config
	rt      Runtime
	running func(ctx context.Context) ([]RunningContainer, error)
	active  func() []*v1.Pod
	clock   clock.WithTicker

	mu      sync.Mutex
	state   State
	applied map[string]cpuset.CPUSet // container ID → cpuset last given
	stale   map[string]bool          // pods inactive at the last reconcile
}

// New restores the checkpoint under cfg.RootDir (or starts fresh). A
// checkpoint of another policy, or one that does not fit this machine, is
// refused: the operator drains the node and removes the file, as upstream.
// running lists the running containers; active returns the active pods.
func New(cfg Config, rt Runtime, running func(ctx context.Context) ([]RunningContainer, error), active func() []*v1.Pod, clk clock.WithTicker) (*Manager, error) {
	if cfg.Policy != PolicyNone && cfg.Policy != PolicyStatic {
		return nil, fmt.Errorf("creating the CPU manager: unknown policy %q", cfg.Policy)
	}
	if cfg.Policy == PolicyStatic && cfg.Static == nil {
		return nil, errors.New("creating the CPU manager: the static policy is not set up")
	}
	m := &Manager{cfg: cfg, rt: rt, running: running, active: active, clock: clk, applied: map[string]cpuset.CPUSet{}, stale: map[string]bool{}}
	path := m.checkpointPath()
	r := resourcestate.Restore[State]{
		What: "CPU manager", Path: path, Corrupt: errCorrupt, Assigns: cfg.Static != nil,
		Read: func() (State, bool, error) { return readCheckpoint(path, cfg.Policy) },
		Empty: func() State {
			return State{DefaultCPUSet: cpuset.New(), Assignments: map[string]map[string]cpuset.CPUSet{}}
		},
	}
	var policy resourcestate.Policy[State] // nil under policy none
	if cfg.Static != nil {
		r.Validate, r.Initial = cfg.Static.ValidateState, cfg.Static.InitialState
		policy = cfg.Static
	}
	m.provider = resourcestate.NewProvider(&m.mu, &m.state, policy, m.commit, "exclusive CPUs")
	s, ok, err := r.Run(clk.Now())
	if err != nil {
		return nil, err
	}
	m.state = s
	if err := writeCheckpoint(path, cfg.Policy, s); err != nil {
		return nil, fmt.Errorf("creating the CPU manager: %w", err)
	}
	if cfg.Static != nil {
		// The series upstream's static policy makes exist at start; nodelet
		// refuses prefer-align-cpus-by-uncorecache, so uncore_cache stays 0.
		cfg.Metrics.InitAlignment(resourcemetrics.ScopeContainer, resourcemetrics.BoundaryPhysicalCPU, true)
		cfg.Metrics.InitAlignment(resourcemetrics.ScopeContainer, resourcemetrics.BoundaryUncoreCache, false)
		m.recordPool()
	}
	klog.InfoS("CPU manager started", "policy", cfg.Policy, "defaultCPUSet", s.DefaultCPUSet.String(), "restored", ok)
	return m, nil
}

func (m *Manager) checkpointPath() string { return filepath.Join(m.cfg.RootDir, CheckpointFile) }

// Allocate gives a container its exclusive CPUs at admission, on the
// affinity's NUMA nodes first, and checkpoints them; the topology manager
// calls it for each container, init containers first (so app containers can
// reuse theirs). The error says why (an SMTAlignmentError when
// full-pcpus-only refuses the request).
func (m *Manager) Allocate(_ context.Context, pod *v1.Pod, c *v1.Container, affinity topologymanager.Hint) error {
	if m.cfg.Static == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	_, had := m.state.Lookup(string(pod.UID), c.Name)
	next, set, err := m.cfg.Static.Allocate(m.state, pod, c, affinity.Affinity)
	if GuaranteedCPUs(pod, c) > 0 {
		m.cfg.Metrics.CPUPinning(err != nil)
		if m.cfg.Static.Options.FullPCPUsOnly {
			if err != nil {
				m.cfg.Metrics.AlignFailed(resourcemetrics.ScopeContainer, resourcemetrics.BoundaryPhysicalCPU)
			} else {
				m.cfg.Metrics.Aligned(resourcemetrics.ScopeContainer, resourcemetrics.BoundaryPhysicalCPU)
			}
		}
	}
	if err != nil {
		err = fmt.Errorf("allocating CPUs for container %s: %w", c.Name, err)
		klog.InfoS("CPU manager refused a pod", "pod", klog.KObj(pod), "err", err)
		return err
	}
	if had || set.IsEmpty() {
		return nil // nothing to checkpoint: kept, or a shared-pool container
	}
	klog.InfoS("CPU manager assigned exclusive CPUs", "pod", klog.KObj(pod), "container", c.Name, "cpus", set.String(), "numaAffinity", affinity.Affinity.String())
	return m.commit(next)
}

// commit checkpoints s and makes it current; a state that cannot be
// checkpointed is not used, so a restart never forgets an assignment.
// Callers hold mu.
func (m *Manager) commit(s State) error {
	if err := writeCheckpoint(m.checkpointPath(), m.cfg.Policy, s); err != nil {
		return fmt.Errorf("saving CPU assignments: %w", err)
	}
	m.state = s
	m.recordPool()
	return nil
}

// recordPool sets the pool gauges from the state. Callers hold mu (or own m).
func (m *Manager) recordPool() {
	if m.cfg.Metrics == nil || m.cfg.Static == nil {
		return
	}
	shared, exclusive, perNUMA := m.cfg.Static.PoolSizes(m.state)
	m.cfg.Metrics.CPUPool(shared, exclusive, perNUMA)
}

// CPUSetFor is the cpuset a new container is created with: its exclusive
// CPUs, else the shared pool; "" (runtime default) with policy none.
func (m *Manager) CPUSetFor(podUID types.UID, container string) string {
	if m.cfg.Static == nil {
		return ""
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state.CPUsFor(string(podUID), container).String()
}

// ExclusiveCPUs returns a container's exclusive CPUs (empty when it shares
// the pool), for the pod resources API.
func (m *Manager) ExclusiveCPUs(podUID, container string) cpuset.CPUSet {
	m.mu.Lock()
	defer m.mu.Unlock()
	set, _ := m.state.Lookup(podUID, container)
	return set.Clone()
}

// AllocatableCPUs are the CPUs pods may be given exclusively (every CPU but the
// reserved ones) under the static policy, none under policy none: what the pod
// resources API's GetAllocatableResources reports, as upstream.
func (m *Manager) AllocatableCPUs() cpuset.CPUSet {
	if m.cfg.Static == nil {
		return cpuset.New()
	}
	return m.cfg.Static.Topology.CPUs().Difference(m.cfg.Static.Reserved)
}

// RemovePod releases every exclusive CPU of a pod that is gone.
func (m *Manager) RemovePod(ctx context.Context, podUID types.UID) {
	if m.cfg.Static == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.releasePods(ctx, []string{string(podUID)})
}

// releasePods drops pods' assignments. Callers hold mu.
func (m *Manager) releasePods(ctx context.Context, uids []string) {
	s := m.state
	for _, uid := range uids {
		for name := range s.Assignments[uid] {
			s = m.cfg.Static.Release(s, uid, name)
		}
	}
	if s.DefaultCPUSet.Equals(m.state.DefaultCPUSet) && len(s.Assignments) == len(m.state.Assignments) {
		return
	}
	if err := m.commit(s); err != nil {
		klog.FromContext(ctx).Error(err, "Releasing CPUs", "pods", uids)
		return
	}
	klog.FromContext(ctx).Info("Released exclusive CPUs", "pods", uids, "defaultCPUSet", s.DefaultCPUSet.String())
}

// Run reconciles every ReconcilePeriod until ctx ends.
func (m *Manager) Run(ctx context.Context) {
	if m.cfg.Static == nil || m.cfg.ReconcilePeriod <= 0 {
		<-ctx.Done()
		return
	}
	periodic.Every(ctx, m.clock, m.cfg.ReconcilePeriod, m.Reconcile)
}

// Reconcile releases the CPUs of pods no longer active and gives every
// running container the cpuset the state says.
func (m *Manager) Reconcile(ctx context.Context) {
	logger := klog.FromContext(ctx)
	active := map[string]bool{}
	for _, p := range m.active() {
		active[string(p.UID)] = true
	}
	running, err := m.running(ctx)
	if err != nil {
		logger.Error(err, "CPU manager reconcile: listing running containers")
		return
	}
	m.mu.Lock()
	release, seen := decideStale(m.state, active, m.stale)
	m.stale = seen
	m.releasePods(ctx, release)
	updates := decideUpdates(m.state, running, m.applied)
	live := map[string]bool{}
	for _, c := range running {
		live[c.ID] = true
	}
	for id := range m.applied {
		if !live[id] {
			delete(m.applied, id)
		}
	}
	m.mu.Unlock()
	// The runtime calls run unlocked: admission need not wait on them.
	for _, u := range updates {
		err := m.rt.UpdateContainerResources(ctx, u.ID, &runtimeapi.ContainerResources{Linux: &runtimeapi.LinuxContainerResources{CpusetCpus: u.CPUs.String()}})
		if err != nil {
			logger.Error(err, "CPU manager reconcile: updating a container's cpuset", "containerID", u.ID, "cpuset", u.CPUs.String())
			continue
		}
		m.mu.Lock()
		m.applied[u.ID] = u.CPUs
		m.mu.Unlock()
	}
}

// ContainerLister lists containers (the CRI runtime service).
type ContainerLister interface {
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
}

// RunningFromCRI lists running containers by the pod UID and container
// name labels nodelet puts on them.
func RunningFromCRI(l ContainerLister, podUIDLabel, nameLabel string) func(ctx context.Context) ([]RunningContainer, error) {
	return func(ctx context.Context) ([]RunningContainer, error) {
		cs, err := l.ListContainers(ctx, &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}})
		if err != nil {
			return nil, fmt.Errorf("listing running containers: %w", err)
		}
		out := make([]RunningContainer, 0, len(cs))
		for _, c := range cs {
			uid, name := c.GetLabels()[podUIDLabel], c.GetLabels()[nameLabel]
			if uid == "" || name == "" {
				continue // not a pod container nodelet made
			}
			out = append(out, RunningContainer{ID: c.GetId(), PodUID: uid, Name: name})
		}
		return out, nil
	}
}
