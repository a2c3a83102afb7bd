package cpumanager

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"k8s.io/utils/cpuset"
)

// fixtureCPU places one CPU in a sysfs fixture: raw sysfs values, so
// core_id repeats across sockets as on real machines.
type fixtureCPU struct{ socket, core, node int }

// writeSysfs writes a sysfs tree under a temp root: cpu*/topology files,
// the online list and, withNodes, node*/cpulist with node*/cpu* links to the
// CPU directories as the kernel makes them.
func writeSysfs(t *testing.T, online string, cpus map[int]fixtureCPU, withNodes bool) string {
	t.Helper()
	root := t.TempDir()
	write := func(rel, content string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("sys/devices/system/cpu/online", online)
	nodes := map[int]string{}
	for id, c := range cpus {
		dir := "sys/devices/system/cpu/cpu" + strconv.Itoa(id) + "/topology/"
		write(dir+"physical_package_id", strconv.Itoa(c.socket))
		write(dir+"core_id", strconv.Itoa(c.core))
		if nodes[c.node] != "" {
			nodes[c.node] += ","
		}
		nodes[c.node] += strconv.Itoa(id)
		if withNodes {
			nodeDir := filepath.Join(root, "sys/devices/system/node/node"+strconv.Itoa(c.node))
			if err := os.MkdirAll(nodeDir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("../../cpu/cpu"+strconv.Itoa(id), filepath.Join(nodeDir, "cpu"+strconv.Itoa(id))); err != nil {
				t.Fatal(err)
			}
		}
	}
	if withNodes {
		for n, list := range nodes {
			write("sys/devices/system/node/node"+strconv.Itoa(n)+"/cpulist", list)
		}
	}
	return root
}

// fixtureOneSocketTwoCores is this machine's shape: 2 CPUs, no SMT.
func fixtureOneSocketTwoCores(t *testing.T) string {
	return writeSysfs(t, "0-1", map[int]fixtureCPU{0: {0, 0, 0}, 1: {0, 1, 0}}, true)
}

// fixtureTwoNUMASMT: one socket, 2 NUMA nodes (sub-NUMA clustering),
// 8 cores with 2 threads; CPU n and n+8 are siblings. Node 0 holds cores
// 0-3 (CPUs 0-3,8-11), node 1 cores 4-7 (CPUs 4-7,12-15).
func fixtureTwoNUMASMT(t *testing.T) string {
	cpus := map[int]fixtureCPU{}
	for core := 0; core < 8; core++ {
		cpus[core] = fixtureCPU{0, core, core / 4}
		cpus[core+8] = fixtureCPU{0, core, core / 4}
	}
	return writeSysfs(t, "0-15", cpus, true)
}

// fixtureTwoSockets: 2 sockets x 2 cores x 2 threads, a NUMA node per
// socket; core_id is 0 and 1 on both sockets. Socket 0 holds CPUs 0,1,4,5
// (cores {0,4},{1,5}), socket 1 CPUs 2,3,6,7 (cores {2,6},{3,7}).
func fixtureTwoSockets(t *testing.T) string {
	return writeSysfs(t, "0-7", map[int]fixtureCPU{
		0: {0, 0, 0}, 1: {0, 1, 0}, 4: {0, 0, 0}, 5: {0, 1, 0},
		2: {1, 0, 1}, 3: {1, 1, 1}, 6: {1, 0, 1}, 7: {1, 1, 1},
	}, true)
}

func mustTopology(t *testing.T, root string) *Topology {
	t.Helper()
	topo, err := DiscoverTopology(root)
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

func mustParse(t *testing.T, s string) cpuset.CPUSet {
	t.Helper()
	set, err := cpuset.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return set
}
