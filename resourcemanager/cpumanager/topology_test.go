package cpumanager

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDiscoverTopology(t *testing.T) {
	tests := []struct {
		name string
		root func(*testing.T) string
		want *Topology
	}{
		{"1 socket 2 cores no SMT", fixtureOneSocketTwoCores, &Topology{
			NumCPUs: 2, NumCores: 2, NumSockets: 1, NumNUMANodes: 1,
			CPUDetails: map[int]CPUInfo{0: {0, 0, 0}, 1: {0, 1, 0}},
		}},
		{"2 NUMA nodes 8 cores SMT", fixtureTwoNUMASMT, &Topology{
			NumCPUs: 16, NumCores: 8, NumSockets: 1, NumNUMANodes: 2,
			CPUDetails: func() map[int]CPUInfo {
				m := map[int]CPUInfo{}
				for c := 0; c < 8; c++ {
					m[c] = CPUInfo{0, c, c / 4}
					m[c+8] = CPUInfo{0, c, c / 4}
				}
				return m
			}(),
		}},
		{"2 sockets: core ids repeat, unique ids are the lowest sibling", fixtureTwoSockets, &Topology{
			NumCPUs: 8, NumCores: 4, NumSockets: 2, NumNUMANodes: 2,
			CPUDetails: map[int]CPUInfo{
				0: {0, 0, 0}, 4: {0, 0, 0}, 1: {0, 1, 0}, 5: {0, 1, 0},
				2: {1, 2, 1}, 6: {1, 2, 1}, 3: {1, 3, 1}, 7: {1, 3, 1},
			},
		}},
		{"no node directory is one NUMA node", func(t *testing.T) string {
			return writeSysfs(t, "0-1", map[int]fixtureCPU{0: {0, 0, 0}, 1: {0, 0, 0}}, false)
		}, &Topology{
			NumCPUs: 2, NumCores: 1, NumSockets: 1, NumNUMANodes: 1,
			CPUDetails: map[int]CPUInfo{0: {0, 0, 0}, 1: {0, 0, 0}},
		}},
		{"offline CPUs are left out", func(t *testing.T) string {
			return writeSysfs(t, "0", map[int]fixtureCPU{0: {0, 0, 0}, 1: {0, 1, 0}}, true)
		}, &Topology{
			NumCPUs: 1, NumCores: 1, NumSockets: 1, NumNUMANodes: 1,
			CPUDetails: map[int]CPUInfo{0: {0, 0, 0}},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := mustTopology(t, tc.root(t))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("topology (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDiscoverTopologyErrors(t *testing.T) {
	if _, err := DiscoverTopology(t.TempDir()); err == nil {
		t.Error("an empty root must fail: no CPUs")
	}
	root := writeSysfs(t, "0", map[int]fixtureCPU{0: {0, 0, 0}}, true)
	if err := os.WriteFile(filepath.Join(root, "sys/devices/system/cpu/cpu0/topology/core_id"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := DiscoverTopology(root); err == nil {
		t.Error("an unparsable core_id must fail")
	}
}

// A CPU directory without topology files is left out, as cadvisor (and so
// upstream's kubelet) leaves it out, rather than failing the CPU manager.
func TestDiscoverTopologySkipsCPUWithoutTopology(t *testing.T) {
	root := writeSysfs(t, "0-1", map[int]fixtureCPU{0: {0, 0, 0}}, true)
	if err := os.MkdirAll(filepath.Join(root, "sys/devices/system/cpu/cpu1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../cpu/cpu1", filepath.Join(root, "sys/devices/system/node/node0/cpu1")); err != nil {
		t.Fatal(err)
	}
	got := mustTopology(t, root)
	if got.NumCPUs != 1 || got.CPUs().String() != "0" {
		t.Errorf("topology = %+v, want cpu0 only", got)
	}
}
