package agent

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/nodelet/nodelet/config"
	"github.com/nodelet/nodelet/podruntime"
	"github.com/nodelet/nodelet/resourcemanager/devicemanager"
	"github.com/nodelet/nodelet/resourcemanager/memorymanager"
	"github.com/nodelet/nodelet/resourcemanager/topologymanager"
)

// topologyConfig reads topologyManagerPolicy, topologyManagerScope and
// topologyManagerPolicyOptions, and the NUMA nodes under sysRoot ("/" on a
// host; their distances only when prefer-closest-numa-nodes needs them).
func topologyConfig(kc *kubeletconfigv1beta1.KubeletConfiguration, gates config.Gates, sysRoot string) (topologymanager.Config, error) {
	opts, err := topologymanager.ParseOptions(kc.TopologyManagerPolicyOptions, config.TopologyGates(gates))
	if err != nil {
		return topologymanager.Config{}, fmt.Errorf("setting up the topology manager: topologyManagerPolicyOptions: %w", err)
	}
	numa, err := topologymanager.DiscoverNUMA(sysRoot, opts.PreferClosestNUMA)
	if err != nil {
		return topologymanager.Config{}, fmt.Errorf("setting up the topology manager: %w", err)
	}
	return topologymanager.Config{Policy: kc.TopologyManagerPolicy, Scope: kc.TopologyManagerScope, Options: opts, NUMA: numa}, nil
}

// resourceAllocator is admission's resource allocation (syncloop.Resources):
// memory and devices of inactive pods freed once the sources are ready (as
// upstream's managers do before allocating), then the topology manager's
// admission over the CPU, memory and device managers (which takes back a
// refused pod's new CPUs and memory at once).
type resourceAllocator struct {
	topology *topologymanager.Manager
	memory   *memorymanager.Manager
	devices  *devicemanager.Manager
}

func (r resourceAllocator) Allocate(ctx context.Context, pod *v1.Pod, active []*v1.Pod, sourcesReady bool) error {
	if sourcesReady {
		r.memory.FreeInactive(ctx, pod.UID, active)
		r.devices.FreeInactive(pod.UID, active)
	}
	return r.topology.Admit(ctx, pod)
}

// podResourcesMemory is the memory manager as the pod resources API asks it.
type podResourcesMemory struct{ m *memorymanager.Manager }

func (p podResourcesMemory) ContainerMemory(uid types.UID, container string) []*podresourcesapi.ContainerMemory {
	return containerMemory(p.m.ContainerBlocks(uid, container))
}

func (p podResourcesMemory) AllocatableMemory() []*podresourcesapi.ContainerMemory {
	return containerMemory(p.m.AllocatableBlocks())
}

// containerMemory is memory blocks as the pod resources API has them: the
// resource name as memory type, the size in bytes, the NUMA nodes as topology.
func containerMemory(blocks []memorymanager.Block) []*podresourcesapi.ContainerMemory {
	var out []*podresourcesapi.ContainerMemory
	for _, b := range blocks {
		topo := &podresourcesapi.TopologyInfo{Nodes: make([]*podresourcesapi.NUMANode, 0, len(b.NUMAAffinity))}
		for _, n := range b.NUMAAffinity {
			topo.Nodes = append(topo.Nodes, &podresourcesapi.NUMANode{ID: int64(n)})
		}
		out = append(out, &podresourcesapi.ContainerMemory{MemoryType: string(b.Type), Size: b.Size, Topology: topo})
	}
	return out
}

// containerDevices puts both the device plugins' and the DRA drivers'
// devices into a container's config, device plugins first as upstream.
type containerDevices []podruntime.Devices

func (c containerDevices) ApplyDevices(ctx context.Context, pod *v1.Pod, ctr *v1.Container, cfg *runtimeapi.ContainerConfig) error {
	for _, d := range c {
		if err := d.ApplyDevices(ctx, pod, ctr, cfg); err != nil {
			return err
		}
	}
	return nil
}
