package agent

import (
	"context"
	"fmt"
	"sync"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// runtimeConfigUpdater is the CRI call that hands the pod CIDR to the runtime.
type runtimeConfigUpdater interface {
	UpdateRuntimeConfig(ctx context.Context, runtimeConfig *runtimeapi.RuntimeConfig) error
}

// podCIDR passes the pod CIDR to the runtime (CRI UpdateRuntimeConfig), as upstream:
// podCIDR from the config at start (standalone mode), then the Node's
// spec.podCIDRs when the control plane sets or changes them.
type podCIDR struct {
	rt      runtimeConfigUpdater
	mu      sync.Mutex
	current string // what the runtime last accepted
}

// update sends cidr (comma-separated for dual-stack) when it differs from what
// the runtime has. It reports a change; after a failure it reports one too and
// keeps the old value, so the next call tries again.
func (p *podCIDR) update(ctx context.Context, cidr string) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cidr == p.current {
		return false, nil
	}
	err := p.rt.UpdateRuntimeConfig(ctx, &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: cidr}})
	if err != nil {
		return true, fmt.Errorf("failed to update pod CIDR: %w", err)
	}
	klog.FromContext(ctx).Info("Updating Pod CIDR", "originalPodCIDR", p.current, "newPodCIDR", cidr)
	p.current = cidr
	return true, nil
}
