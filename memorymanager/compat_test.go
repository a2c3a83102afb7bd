package memorymanager

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/golden"
)

var update = flag.Bool("update", false, "rewrite testdata/nodelet")

// compatCases are the states of test/rig/k8sbins/checkpointcompat (change
// both together): testdata/upstream has them as kubelet v1.37.2's code wrote
// them, testdata/nodelet as nodelet writes them, which that test reads with
// the kubelet's code.
func compatCases() []struct {
	golden, policy string
	state          State
} {
	const gi, mi = 1 << 30, 1 << 20
	reusable := map[string]map[string]map[v1.ResourceName]uint64{}
	machine := NodeMap{
		0: {NumberOfAssignments: 2, Cells: []int{0}, MemoryMap: map[v1.ResourceName]*MemoryTable{
			v1.ResourceMemory: {TotalMemSize: 8 * gi, SystemReserved: gi, Allocatable: 7 * gi, Reserved: gi, Free: 6 * gi},
			"hugepages-2Mi":   {TotalMemSize: 512 * mi, Allocatable: 512 * mi, Reserved: 4 * mi, Free: 508 * mi},
		}},
		1: {NumberOfAssignments: 0, Cells: []int{1}, MemoryMap: map[v1.ResourceName]*MemoryTable{
			v1.ResourceMemory: {TotalMemSize: 8 * gi, Allocatable: 8 * gi, Free: 8 * gi},
			"hugepages-2Mi":   {TotalMemSize: 512 * mi, Allocatable: 512 * mi, Free: 512 * mi},
		}},
	}
	entries := map[string]map[string][]Block{"pod-a": {"app": {
		{NUMAAffinity: []int{0}, Type: v1.ResourceMemory, Size: gi},
		{NUMAAffinity: []int{0}, Type: "hugepages-2Mi", Size: 4 * mi},
	}}}
	return []struct {
		golden, policy string
		state          State
	}{
		{"memory_manager_state.none", PolicyNone, State{Machine: NodeMap{}, Assignments: map[string]map[string][]Block{}, Reusable: reusable}},
		{"memory_manager_state.static", PolicyStatic, State{Machine: machine, Assignments: entries, Reusable: reusable}},
	}
}

// The kubelet's files are read with their values, and nodelet writes the
// same values to the same bytes.
func TestCheckpointCompatibleWithKubelet(t *testing.T) {
	for _, tc := range compatCases() {
		t.Run(tc.golden, func(t *testing.T) {
			upstream := filepath.Join("testdata", "upstream", tc.golden)
			got, ok, err := readCheckpoint(upstream, tc.policy)
			if err != nil || !ok {
				t.Fatalf("reading the kubelet's file: ok=%v %v", ok, err)
			}
			if diff := cmp.Diff(tc.state, got); diff != "" {
				t.Errorf("decoded (-want +got):\n%s", diff)
			}
			b, err := encodeCheckpoint(tc.policy, tc.state)
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(upstream)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != string(want) {
				t.Errorf("nodelet writes\n%s\nthe kubelet\n%s", b, want)
			}
			golden.Bytes(t, filepath.Join("testdata", "nodelet", tc.golden), b, *update)
		})
	}
}
