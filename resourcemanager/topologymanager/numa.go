package topologymanager

import (
	"fmt"
	"slices"

	info "github.com/google/cadvisor/lib/model"

	"github.com/nodelet/nodelet/resourcemanager/internal/machineinfo"
)

// DiscoverNUMA reads the machine's NUMA nodes under root ("/" on a host, a
// fixture tree in tests) through cadvisor's machine-info code, as upstream's
// NewNUMAInfo, and, when distances is set (prefer-closest-numa-nodes), each
// node's distance list. Without node directories cadvisor reports one node
// per socket, as upstream sees it.
func DiscoverNUMA(root string, distances bool) (NUMAInfo, error) {
	nodes, err := machineinfo.Nodes(root)
	if err != nil {
		return NUMAInfo{}, fmt.Errorf("discovering NUMA nodes: %w", err)
	}
	return numaInfo(nodes, distances)
}

// numaInfo is cadvisor's nodes as the topology manager needs them. cadvisor
// leaves out a distance file it cannot read; prefer-closest-numa-nodes
// cannot work without, so that is refused.
func numaInfo(nodes []info.Node, distances bool) (NUMAInfo, error) {
	out := NUMAInfo{}
	if distances {
		out.Distances = map[int][]uint64{}
	}
	for _, n := range nodes {
		if n.Id >= 64 {
			return NUMAInfo{}, fmt.Errorf("discovering NUMA nodes: node %d beyond the 64 the topology manager handles", n.Id)
		}
		out.Nodes = append(out.Nodes, n.Id)
		if distances {
			if len(n.Distances) == 0 {
				return NUMAInfo{}, fmt.Errorf("reading NUMA distances for prefer-closest-numa-nodes: node %d has none (node%d/distance)", n.Id, n.Id)
			}
			out.Distances[n.Id] = slices.Clone(n.Distances)
		}
	}
	slices.Sort(out.Nodes)
	if len(out.Nodes) == 0 {
		return NUMAInfo{}, fmt.Errorf("discovering NUMA nodes: none found")
	}
	return out, nil
}
