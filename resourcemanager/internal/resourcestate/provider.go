package resourcestate

import (
	"context"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/resourcemanager/topologymanager"
)

// State is a manager's state as Provider asks it: the containers of a pod
// that hold assignments.
type State interface {
	Containers(podUID string) []string
}

// Policy is the part of a static policy Provider asks: pure decisions over
// the state.
type Policy[S any] interface {
	TopologyHints(s S, pod *v1.Pod, c *v1.Container) topologymanager.ProviderHints
	PodTopologyHints(s S, pod *v1.Pod) topologymanager.ProviderHints
	Release(s S, podUID, container string) S
}

// Provider is what the CPU and memory managers answer the topology manager
// the same way (its HintProvider hints and its Releaser), each a call of the
// policy on the manager's state under the manager's lock. A manager embeds
// it, so these are the manager's methods.
type Provider[S State] struct {
	mu     *sync.Mutex
	state  *S
	policy Policy[S] // nil: a policy that assigns nothing
	commit func(S) error
	what   string
}

// NewProvider returns the Provider of a manager whose state is *state,
// guarded by mu. policy is nil under a policy that assigns nothing (no
// hints, nothing to release); commit checkpoints a state and makes it
// current, called with mu held; what names the resource in logs ("exclusive
// CPUs").
func NewProvider[S State](mu *sync.Mutex, state *S, policy Policy[S], commit func(S) error, what string) Provider[S] {
	return Provider[S]{mu: mu, state: state, policy: policy, commit: commit, what: what}
}

// GetTopologyHints are the policy's NUMA hints for a container from what is
// free now (nil, no preference, under a policy that assigns nothing).
func (p Provider[S]) GetTopologyHints(pod *v1.Pod, c *v1.Container) topologymanager.ProviderHints {
	if p.policy == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.policy.TopologyHints(*p.state, pod, c)
}

// GetPodTopologyHints are the hints for the whole pod (the pod scope).
func (p Provider[S]) GetPodTopologyHints(pod *v1.Pod) topologymanager.ProviderHints {
	if p.policy == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.policy.PodTopologyHints(*p.state, pod)
}

// Allocated are the pod's containers holding assignments, sorted.
func (p Provider[S]) Allocated(podUID types.UID) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return (*p.state).Containers(string(podUID))
}

// Release gives back the assignments of the pod's named containers (the
// topology manager's undo of a refused admission) and commits the state
// when any of them held one.
func (p Provider[S]) Release(ctx context.Context, podUID types.UID, containers []string) {
	if p.policy == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s, before := *p.state, len((*p.state).Containers(string(podUID)))
	for _, name := range containers {
		s = p.policy.Release(s, string(podUID), name)
	}
	if len(s.Containers(string(podUID))) == before {
		return
	}
	if err := p.commit(s); err != nil {
		klog.FromContext(ctx).Error(err, "Releasing "+p.what, "podUID", podUID, "containers", containers)
		return
	}
	klog.FromContext(ctx).Info("Released "+p.what, "podUID", podUID, "containers", containers)
}
