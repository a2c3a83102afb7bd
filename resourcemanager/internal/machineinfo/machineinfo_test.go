package machineinfo

import (
	"os"
	"path/filepath"
	"testing"

	info "github.com/google/cadvisor/lib/model"
	"github.com/google/go-cmp/cmp"
)

func write(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for rel, content := range files {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// cadvisor's reader under a fixture root: a node's CPUs (through the
// node*/cpu* links), memory, huge pages and distances; without an online
// list every CPU is online (no hotplug), with one only the listed CPUs.
func TestNodesUnderRoot(t *testing.T) {
	root := t.TempDir()
	write(t, root, map[string]string{
		"sys/devices/system/cpu/cpu0/topology/core_id":                          "0\n",
		"sys/devices/system/cpu/cpu0/topology/physical_package_id":              "0\n",
		"sys/devices/system/cpu/cpu1/topology/core_id":                          "0\n",
		"sys/devices/system/cpu/cpu1/topology/physical_package_id":              "0\n",
		"sys/devices/system/node/node0/meminfo":                                 "Node 0 MemTotal:       2048 kB\n",
		"sys/devices/system/node/node0/distance":                                "10\n",
		"sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages": "3\n",
	})
	for _, cpu := range []string{"cpu0", "cpu1"} {
		if err := os.Symlink("../../cpu/"+cpu, filepath.Join(root, "sys/devices/system/node/node0", cpu)); err != nil {
			t.Fatal(err)
		}
	}
	want := []info.Node{{
		Id: 0, Memory: 2048 * 1024, Distances: []uint64{10},
		HugePages: []info.HugePagesInfo{{PageSize: 2048, NumPages: 3}},
		Cores:     []info.Core{{Id: 0, SocketID: 0, Threads: []int{0, 1}}},
	}}
	got, err := Nodes(root)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("no online list (-want +got):\n%s", diff)
	}

	write(t, root, map[string]string{"sys/devices/system/cpu/online": "1\n"})
	want[0].Cores[0].Threads = []int{1}
	if got, err = Nodes(root); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cpu0 offline (-want +got):\n%s", diff)
	}
}
