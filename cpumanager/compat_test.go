package cpumanager

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/cpuset"

	"github.com/nodelet/nodelet/internal/golden"
)

var update = flag.Bool("update", false, "rewrite testdata/nodelet")

// compatCases are the states of test/rig/k8sbins/checkpointcompat (change
// both together): testdata/upstream has them as kubelet v1.37.2's code wrote
// them, testdata/nodelet as nodelet writes them, which that test reads with
// the kubelet's code.
func compatCases(t *testing.T) []struct {
	golden, policy string
	state          State
} {
	return []struct {
		golden, policy string
		state          State
	}{
		{"cpu_manager_state.none", PolicyNone, State{DefaultCPUSet: cpuset.New(), Assignments: map[string]map[string]cpuset.CPUSet{}}},
		{"cpu_manager_state.static", PolicyStatic, State{DefaultCPUSet: mustParse(t, "0,3-7"), Assignments: map[string]map[string]cpuset.CPUSet{
			"pod-a": {"app": mustParse(t, "1-2")},
			"pod-b": {"init": mustParse(t, "8"), "main": mustParse(t, "9-10")},
		}}},
	}
}

// The kubelet's files are read with their values, and nodelet writes the
// same values to the same bytes.
func TestCheckpointCompatibleWithKubelet(t *testing.T) {
	for _, tc := range compatCases(t) {
		t.Run(tc.golden, func(t *testing.T) {
			upstream := filepath.Join("testdata", "upstream", tc.golden)
			got, ok, err := readCheckpoint(upstream, tc.policy)
			if err != nil || !ok {
				t.Fatalf("reading the kubelet's file: ok=%v %v", ok, err)
			}
			if diff := cmp.Diff(tc.state, got, cmp.Comparer(cpuset.CPUSet.Equals)); diff != "" {
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
