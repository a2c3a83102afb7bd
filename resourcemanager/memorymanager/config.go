package memorymanager

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/resourcemetrics"
)

// NewFromConfig builds the Manager the kubelet configuration asks for:
// memoryManagerPolicy and, for Static, the machine's NUMA memory under
// sysRoot ("/"; a fixture in tests) and reservedMemory, which must add up to
// nodeAllocatableReservation (kubeReserved + systemReserved + the hard
// eviction threshold), as upstream.
func NewFromConfig(kc *kubeletconfigv1beta1.KubeletConfiguration, nodeAllocatableReservation v1.ResourceList, rootDir, sysRoot string, clk clock.Clock, metrics *resourcemetrics.Metrics) (*Manager, error) {
	policy := kc.MemoryManagerPolicy
	if policy == "" {
		policy = PolicyNone
	}
	cfg := Config{Policy: policy, RootDir: rootDir, Metrics: metrics}
	switch {
	case policy == PolicyStatic:
		machine, err := DiscoverMachine(sysRoot)
		if err != nil {
			return nil, fmt.Errorf("setting up the memory manager: %w", err)
		}
		nodes := make([]int, 0, len(machine))
		for id := range machine {
			nodes = append(nodes, id)
		}
		reserved, err := ReservedPerNode(nodes, kc.ReservedMemory)
		if err != nil {
			return nil, fmt.Errorf("setting up the memory manager: reservedMemory: %w", err)
		}
		if err := ValidateReservedMemory(reserved, nodeAllocatableReservation); err != nil {
			return nil, fmt.Errorf("setting up the memory manager: reservedMemory: %w", err)
		}
		if cfg.Static, err = NewStaticPolicy(machine, reserved); err != nil {
			return nil, fmt.Errorf("setting up the memory manager: reservedMemory: %w", err)
		}
	case len(kc.ReservedMemory) > 0:
		// Upstream accepts it and uses it only under Static: said, not silently ignored.
		klog.InfoS("reservedMemory has no effect: memoryManagerPolicy is not Static", "memoryManagerPolicy", policy)
	}
	return New(cfg, clk)
}
