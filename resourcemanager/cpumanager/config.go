package cpumanager

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/resourcemetrics"
)

// NewFromConfig builds the Manager the kubelet configuration asks for:
// cpuManagerPolicy, cpuManagerPolicyOptions, cpuManagerReconcilePeriod and,
// for the static policy, the reservation (reservedSystemCPUs, else
// kubeReserved+systemReserved cpu). sysRoot is "/" (a fixture in tests);
// metrics may be nil.
func NewFromConfig(kc *kubeletconfigv1beta1.KubeletConfiguration, rootDir, sysRoot string, rt Runtime,
	running func(ctx context.Context) ([]RunningContainer, error), active func() []*v1.Pod, clk clock.WithTicker, metrics *resourcemetrics.Metrics) (*Manager, error) {
	policy := kc.CPUManagerPolicy
	if policy == "" {
		policy = PolicyNone
	}
	opts, err := ParseOptions(policy, kc.CPUManagerPolicyOptions)
	if err != nil {
		return nil, fmt.Errorf("setting up the CPU manager: cpuManagerPolicyOptions: %w", err)
	}
	cfg := Config{Policy: policy, RootDir: rootDir, ReconcilePeriod: kc.CPUManagerReconcilePeriod.Duration, Metrics: metrics}
	if policy == PolicyStatic {
		topo, err := DiscoverTopology(sysRoot)
		if err != nil {
			return nil, fmt.Errorf("setting up the CPU manager: %w", err)
		}
		kube, err := reservedCPU("kubeReserved", kc.KubeReserved)
		if err != nil {
			return nil, fmt.Errorf("setting up the CPU manager: %w", err)
		}
		system, err := reservedCPU("systemReserved", kc.SystemReserved)
		if err != nil {
			return nil, fmt.Errorf("setting up the CPU manager: %w", err)
		}
		reserved, err := ReservedCPUs(topo, kc.ReservedSystemCPUs, kube, system)
		if err != nil {
			return nil, fmt.Errorf("setting up the CPU manager: %w", err)
		}
		if cfg.Static, err = NewStaticPolicy(topo, reserved, opts); err != nil {
			return nil, fmt.Errorf("setting up the CPU manager: %w", err)
		}
	}
	return New(cfg, rt, running, active, clk)
}

func reservedCPU(field string, m map[string]string) (resource.Quantity, error) {
	s, ok := m[string(v1.ResourceCPU)]
	if !ok {
		return resource.Quantity{}, nil
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return resource.Quantity{}, fmt.Errorf("parsing %s cpu %q: %w", field, s, err)
	}
	return q, nil
}
