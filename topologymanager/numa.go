package topologymanager

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// DiscoverNUMA reads the machine's NUMA nodes under root ("/" on a host, a
// fixture tree in tests) and, when distances is set
// (prefer-closest-numa-nodes), each node's distance list. A machine without
// /sys/devices/system/node is one node, 0, as the CPU manager reads it.
func DiscoverNUMA(root string, distances bool) (NUMAInfo, error) {
	dirs, err := filepath.Glob(filepath.Join(root, "sys/devices/system/node/node[0-9]*"))
	if err != nil {
		return NUMAInfo{}, fmt.Errorf("discovering NUMA nodes: %w", err)
	}
	info := NUMAInfo{}
	for _, dir := range dirs {
		id, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(dir), "node"))
		if err != nil {
			continue // not a node directory
		}
		if id >= 64 {
			return NUMAInfo{}, fmt.Errorf("discovering NUMA nodes: node %d beyond the 64 the topology manager handles", id)
		}
		info.Nodes = append(info.Nodes, id)
	}
	slices.Sort(info.Nodes)
	if len(info.Nodes) == 0 {
		info.Nodes = []int{0}
	}
	if !distances {
		return info, nil
	}
	info.Distances = map[int][]uint64{}
	for _, id := range info.Nodes {
		path := filepath.Join(root, "sys/devices/system/node", "node"+strconv.Itoa(id), "distance")
		b, err := os.ReadFile(path)
		if err != nil {
			return NUMAInfo{}, fmt.Errorf("reading NUMA distances for prefer-closest-numa-nodes: %w", err)
		}
		for _, f := range strings.Fields(string(b)) {
			d, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				return NUMAInfo{}, fmt.Errorf("parsing NUMA distances in %s: %w", path, err)
			}
			info.Distances[id] = append(info.Distances[id], d)
		}
	}
	return info, nil
}
