package memorymanager

import (
	"fmt"

	info "github.com/google/cadvisor/lib/model"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/resourcemanager/internal/machineinfo"
)

// NodeMemory is one NUMA node's memory by resource (memory and
// hugepages-<size>), in bytes.
type NodeMemory map[v1.ResourceName]uint64

// DiscoverMachine reads each NUMA node's MemTotal and huge pages under root
// ("/" on a host, a fixture tree in tests) through cadvisor's machine-info
// code, as upstream.
func DiscoverMachine(root string) (map[int]NodeMemory, error) {
	nodes, err := machineinfo.Nodes(root)
	if err != nil {
		return nil, fmt.Errorf("discovering NUMA memory: %w", err)
	}
	return nodeMemory(nodes)
}

// nodeMemory turns cadvisor's nodes into memory by resource. cadvisor
// reports 0 for a node whose meminfo it could not read (or, without node
// directories, for the sockets it returns instead): refused, since the
// Static policy would hand out memory it cannot place.
func nodeMemory(nodes []info.Node) (map[int]NodeMemory, error) {
	out := map[int]NodeMemory{}
	for _, node := range nodes {
		if node.Memory == 0 {
			return nil, fmt.Errorf("discovering NUMA memory: node %d has no MemTotal (no node*/meminfo)", node.Id)
		}
		mem := NodeMemory{v1.ResourceMemory: node.Memory}
		for _, hp := range node.HugePages {
			mem[hugePageResourceName(hp.PageSize)] = hp.NumPages * hp.PageSize * 1024
		}
		out[node.Id] = mem
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("discovering NUMA memory: no NUMA nodes")
	}
	return out, nil
}

// hugePageResourceName is "hugepages-2Mi" for 2048 KiB pages, as upstream.
func hugePageResourceName(kib uint64) v1.ResourceName {
	return v1.ResourceName(v1.ResourceHugePagesPrefix + resource.NewQuantity(int64(kib)*1024, resource.BinarySI).String())
}
