package cpumanager

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"k8s.io/utils/cpuset"
)

// CPUInfo places one logical CPU. CoreID is unique on the machine (the
// lowest CPU number among the core's threads), because sysfs core_id repeats
// across sockets.
type CPUInfo struct {
	SocketID   int
	CoreID     int
	NUMANodeID int
}

// Topology is the machine's CPU layout.
type Topology struct {
	NumCPUs      int
	NumCores     int
	NumSockets   int
	NumNUMANodes int
	CPUDetails   map[int]CPUInfo
}

// CPUsPerCore is the number of hardware threads per core (1 without SMT).
func (t *Topology) CPUsPerCore() int {
	if t.NumCores == 0 {
		return 0
	}
	return t.NumCPUs / t.NumCores
}

// CPUs is every CPU of the topology.
func (t *Topology) CPUs() cpuset.CPUSet {
	ids := make([]int, 0, len(t.CPUDetails))
	for id := range t.CPUDetails {
		ids = append(ids, id)
	}
	return cpuset.New(ids...)
}

// filter returns the CPUs of set whose info satisfies keep.
func (t *Topology) filter(set cpuset.CPUSet, keep func(CPUInfo) bool) cpuset.CPUSet {
	var ids []int
	for _, id := range set.UnsortedList() {
		if info, ok := t.CPUDetails[id]; ok && keep(info) {
			ids = append(ids, id)
		}
	}
	return cpuset.New(ids...)
}

// ids returns the distinct values of key over set, sorted.
func (t *Topology) ids(set cpuset.CPUSet, key func(CPUInfo) int) []int {
	seen := map[int]bool{}
	var out []int
	for _, id := range set.UnsortedList() {
		info, ok := t.CPUDetails[id]
		if !ok {
			continue
		}
		k := key(info)
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func socketOf(i CPUInfo) int { return i.SocketID }
func coreOf(i CPUInfo) int   { return i.CoreID }
func numaOf(i CPUInfo) int   { return i.NUMANodeID }

// cpusOf returns every CPU of the machine sharing key value v.
func (t *Topology) cpusOf(key func(CPUInfo) int, v int) cpuset.CPUSet {
	return t.filter(t.CPUs(), func(i CPUInfo) bool { return key(i) == v })
}

// DiscoverTopology reads the CPU topology of the online CPUs under root
// ("/" on a real host; a fixture tree in tests).
func DiscoverTopology(root string) (*Topology, error) {
	cpuDir := filepath.Join(root, "sys/devices/system/cpu")
	online, err := readCPUList(filepath.Join(cpuDir, "online"))
	if err != nil {
		return nil, fmt.Errorf("discovering CPU topology: %w", err)
	}
	numaOfCPU := map[int]int{}
	nodeDirs, _ := filepath.Glob(filepath.Join(root, "sys/devices/system/node/node[0-9]*"))
	for _, dir := range nodeDirs {
		node, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(dir), "node"))
		if err != nil {
			continue
		}
		cpus, err := readCPUList(filepath.Join(dir, "cpulist"))
		if err != nil {
			return nil, fmt.Errorf("discovering CPU topology: %w", err)
		}
		for _, c := range cpus.UnsortedList() {
			numaOfCPU[c] = node
		}
	}
	type coreKey struct{ socket, core int }
	lowest := map[coreKey]int{}
	raw := map[int]coreKey{}
	for _, c := range online.List() {
		topo := filepath.Join(cpuDir, "cpu"+strconv.Itoa(c), "topology")
		socket, err := readInt(filepath.Join(topo, "physical_package_id"))
		if err != nil {
			return nil, fmt.Errorf("discovering CPU topology of cpu%d: %w", c, err)
		}
		core, err := readInt(filepath.Join(topo, "core_id"))
		if err != nil {
			return nil, fmt.Errorf("discovering CPU topology of cpu%d: %w", c, err)
		}
		k := coreKey{socket, core}
		raw[c] = k
		if l, ok := lowest[k]; !ok || c < l {
			lowest[k] = c
		}
	}
	t := &Topology{NumCPUs: online.Size(), CPUDetails: map[int]CPUInfo{}}
	sockets, nodes := map[int]bool{}, map[int]bool{}
	for c, k := range raw {
		// A machine without /sys/devices/system/node is one NUMA node (0).
		info := CPUInfo{SocketID: k.socket, CoreID: lowest[k], NUMANodeID: numaOfCPU[c]}
		t.CPUDetails[c] = info
		sockets[info.SocketID], nodes[info.NUMANodeID] = true, true
	}
	t.NumCores, t.NumSockets, t.NumNUMANodes = len(lowest), len(sockets), len(nodes)
	if t.NumCPUs == 0 {
		return nil, fmt.Errorf("discovering CPU topology: no online CPUs under %s", cpuDir)
	}
	return t, nil
}

func readCPUList(path string) (cpuset.CPUSet, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return cpuset.New(), fmt.Errorf("reading CPU list: %w", err)
	}
	s, err := cpuset.Parse(strings.TrimSpace(string(b)))
	if err != nil {
		return cpuset.New(), fmt.Errorf("parsing CPU list %s: %w", path, err)
	}
	return s, nil
}

func readInt(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("reading topology: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("parsing %s: %w", path, err)
	}
	return n, nil
}
