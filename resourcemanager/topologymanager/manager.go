package topologymanager

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/internal/resourcemetrics"
)

// HintProvider is a resource manager that places resources on NUMA nodes:
// it gives hints for a container (or a whole pod, under the pod scope) from
// what is free now, then allocates a container's resources along the
// affinity the merge chose (empty: no affinity).
type HintProvider interface {
	GetTopologyHints(pod *v1.Pod, container *v1.Container) ProviderHints
	GetPodTopologyHints(pod *v1.Pod) ProviderHints
	Allocate(ctx context.Context, pod *v1.Pod, container *v1.Container, affinity Hint) error
}

// Releaser is a provider that gives back what it allocated during an
// admission that then failed, so a refused pod holds nothing at once;
// what the pod held before (restored from a checkpoint) stays.
type Releaser interface {
	// Allocated are the pod's containers holding the provider's resources.
	Allocated(podUID types.UID) []string
	// Release gives back the named containers' resources.
	Release(ctx context.Context, podUID types.UID, containers []string)
}

// AffinityError is upstream's TopologyAffinityError: the policy found no
// admissible placement. Type is the pod's rejection reason.
type AffinityError struct{}

func (AffinityError) Error() string { return "Resources cannot be allocated with Topology locality" }

// Type is the admission rejection reason.
func (AffinityError) Type() string { return "TopologyAffinityError" }

// Config is the topology manager's configuration.
type Config struct {
	Policy  string
	Scope   string
	Options Options
	NUMA    NUMAInfo
	// Metrics records admissions (nil: not recorded).
	Metrics *resourcemetrics.Metrics
}

// Manager admits pods through its hint providers.
type Manager struct {
	cfg       Config
	providers []HintProvider
}

// New checks cfg as upstream's NewManager does: a policy other than none
// refuses machines with more NUMA nodes than max-allowable-numa-nodes, as
// the merge's work grows with every combination of nodes.
func New(cfg Config, providers ...HintProvider) (*Manager, error) {
	if !ValidPolicy(cfg.Policy) {
		return nil, fmt.Errorf("creating the topology manager: unknown policy %q", cfg.Policy)
	}
	if !ValidScope(cfg.Scope) {
		return nil, fmt.Errorf("creating the topology manager: unknown scope %q", cfg.Scope)
	}
	if cfg.Policy != PolicyNone && len(cfg.NUMA.Nodes) > cfg.Options.MaxAllowableNUMANodes {
		return nil, fmt.Errorf("creating the topology manager: unsupported on machines with more than %v NUMA Nodes", cfg.Options.MaxAllowableNUMANodes)
	}
	if cfg.Policy != PolicyNone {
		// The alignment series exist from the start, as upstream's.
		for _, scope := range []string{resourcemetrics.ScopeContainer, resourcemetrics.ScopePod} {
			cfg.Metrics.InitAlignment(scope, resourcemetrics.BoundaryNUMANode, true)
		}
	}
	klog.InfoS("Topology manager created", "policy", cfg.Policy, "scope", cfg.Scope, "options", cfg.Options, "numaNodes", cfg.NUMA.Nodes)
	return &Manager{cfg: cfg, providers: providers}, nil
}

// Admit decides each container's affinity and has every provider allocate
// along it, init containers first: under the container scope each container
// is merged on its own after the previous ones allocated (so their hints see
// what is left), under the pod scope the pod's hints are merged once and
// every container gets that affinity. A refusal is an AffinityError; a
// provider's allocation error is returned as it is (it names its own
// rejection reason or is unexpected). On a failure the Releasers give back
// what this admission gave. Every admission is counted and timed
// (kubelet_topology_manager_admission_*), as upstream.
func (m *Manager) Admit(ctx context.Context, pod *v1.Pod) error {
	start := time.Now()
	defer func() { m.cfg.Metrics.Admission(time.Since(start)) }()
	held := make([]map[string]bool, len(m.providers))
	for i, p := range m.providers {
		if r, ok := p.(Releaser); ok {
			held[i] = map[string]bool{}
			for _, name := range r.Allocated(pod.UID) {
				held[i][name] = true
			}
		}
	}
	err := m.admit(ctx, pod)
	if err == nil {
		return nil
	}
	for i, p := range m.providers {
		if r, ok := p.(Releaser); ok {
			var added []string
			for _, name := range r.Allocated(pod.UID) {
				if !held[i][name] {
					added = append(added, name)
				}
			}
			if len(added) > 0 {
				r.Release(ctx, pod.UID, added)
			}
		}
	}
	return err
}

// admit is Admit without the release on failure.
func (m *Manager) admit(ctx context.Context, pod *v1.Pod) error {
	containers := make([]*v1.Container, 0, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))
	for i := range pod.Spec.InitContainers {
		containers = append(containers, &pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		containers = append(containers, &pod.Spec.Containers[i])
	}
	var podHint Hint
	if m.cfg.Policy != PolicyNone && m.cfg.Scope == ScopePod {
		hints := make([]ProviderHints, 0, len(m.providers))
		for _, p := range m.providers {
			hints = append(hints, p.GetPodTopologyHints(pod))
		}
		best, ok := Merge(m.cfg.Policy, m.cfg.Options, m.cfg.NUMA, hints)
		klog.InfoS("Topology manager merged the pod's hints", "pod", klog.KObj(pod), "affinity", best.Affinity.String(), "preferred", best.Preferred, "admit", ok)
		if !ok {
			m.refused(resourcemetrics.ScopePod)
			return AffinityError{}
		}
		podHint = best
	}
	for _, c := range containers {
		hint := podHint
		if m.cfg.Policy != PolicyNone && m.cfg.Scope == ScopeContainer {
			hints := make([]ProviderHints, 0, len(m.providers))
			for _, p := range m.providers {
				hints = append(hints, p.GetTopologyHints(pod, c))
			}
			best, ok := Merge(m.cfg.Policy, m.cfg.Options, m.cfg.NUMA, hints)
			klog.InfoS("Topology manager merged a container's hints", "pod", klog.KObj(pod), "container", c.Name, "affinity", best.Affinity.String(), "preferred", best.Preferred, "admit", ok)
			if !ok {
				m.refused(resourcemetrics.ScopeContainer)
				return AffinityError{}
			}
			hint = best
		}
		for _, p := range m.providers {
			if err := p.Allocate(ctx, pod, c, hint); err != nil {
				if m.cfg.Policy != PolicyNone {
					m.cfg.Metrics.AdmissionError()
				}
				return err
			}
		}
		if m.alignmentGuaranteed() && m.cfg.Scope == ScopeContainer {
			m.cfg.Metrics.Aligned(resourcemetrics.ScopeContainer, resourcemetrics.BoundaryNUMANode)
		}
	}
	if m.alignmentGuaranteed() && m.cfg.Scope == ScopePod {
		m.cfg.Metrics.Aligned(resourcemetrics.ScopePod, resourcemetrics.BoundaryNUMANode)
	}
	return nil
}

// alignmentGuaranteed: only single-numa-node promises NUMA alignment, so
// only its admissions count as aligned (or failed to align), as upstream.
func (m *Manager) alignmentGuaranteed() bool { return m.cfg.Policy == PolicySingleNUMANode }

// refused counts a merge that found no admissible placement.
func (m *Manager) refused(scope string) {
	if m.alignmentGuaranteed() {
		m.cfg.Metrics.AlignFailed(scope, resourcemetrics.BoundaryNUMANode)
	}
	m.cfg.Metrics.AdmissionError()
}
