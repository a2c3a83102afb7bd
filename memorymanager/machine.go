package memorymanager

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// NodeMemory is one NUMA node's memory by resource (memory and
// hugepages-<size>), in bytes.
type NodeMemory map[v1.ResourceName]uint64

// DiscoverMachine reads each NUMA node's MemTotal (node*/meminfo) and huge
// pages (node*/hugepages/hugepages-<size>kB/nr_hugepages) under root ("/"
// on a host, a fixture tree in tests).
func DiscoverMachine(root string) (map[int]NodeMemory, error) {
	dirs, err := filepath.Glob(filepath.Join(root, "sys/devices/system/node/node[0-9]*"))
	if err != nil {
		return nil, fmt.Errorf("discovering NUMA memory: %w", err)
	}
	out := map[int]NodeMemory{}
	for _, dir := range dirs {
		id, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(dir), "node"))
		if err != nil {
			continue // not a node directory
		}
		total, err := memTotal(filepath.Join(dir, "meminfo"))
		if err != nil {
			return nil, fmt.Errorf("discovering the memory of NUMA node %d: %w", id, err)
		}
		mem := NodeMemory{v1.ResourceMemory: total}
		pages, _ := filepath.Glob(filepath.Join(dir, "hugepages/hugepages-*kB"))
		for _, p := range pages {
			kib, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(p), "hugepages-"), "kB"), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("parsing the huge page size of %s: %w", p, err)
			}
			b, err := os.ReadFile(filepath.Join(p, "nr_hugepages"))
			if err != nil {
				return nil, fmt.Errorf("discovering huge pages of NUMA node %d: %w", id, err)
			}
			n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("parsing %s/nr_hugepages: %w", p, err)
			}
			mem[hugePageResourceName(kib)] = n * kib * 1024
		}
		out[id] = mem
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("discovering NUMA memory: no node directories under %s", filepath.Join(root, "sys/devices/system/node"))
	}
	return out, nil
}

// hugePageResourceName is "hugepages-2Mi" for 2048 KiB pages, as upstream.
func hugePageResourceName(kib uint64) v1.ResourceName {
	return v1.ResourceName(v1.ResourceHugePagesPrefix + resource.NewQuantity(int64(kib)*1024, resource.BinarySI).String())
}

// memTotal reads "Node N MemTotal: <kB> kB" from a node's meminfo.
func memTotal(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", path, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 4 && fields[2] == "MemTotal:" {
			kb, err := strconv.ParseUint(fields[3], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parsing MemTotal in %s: %w", path, err)
			}
			return kb * 1024, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("reading %s: %w", path, err)
	}
	return 0, fmt.Errorf("no MemTotal in %s", path)
}
