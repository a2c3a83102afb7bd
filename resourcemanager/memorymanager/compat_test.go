package memorymanager

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	testclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/testsupport/golden"
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
			golden.Upstream(t, tc.golden, b, *update)
		})
	}
}

// The formats older kubelets wrote (written by v1.37.2's code for them) and
// the one nodelet wrote before it took upstream's checksums are read; the
// pod-level entries of v2 are ignored, as upstream does with its gate off.
func TestCheckpointOlderFormats(t *testing.T) {
	static := compatCases()[1].state
	for _, path := range []string{
		"testdata/upstream/memory_manager_state.v1",
		"testdata/upstream/memory_manager_state.v2",
		"testdata/legacy/memory_manager_state.static",
	} {
		got, ok, err := readCheckpoint(path, PolicyStatic)
		if err != nil || !ok {
			t.Fatalf("%s: ok=%v %v", path, ok, err)
		}
		if diff := cmp.Diff(static, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", path, diff)
		}
		// The same file with its content changed is refused.
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		changed := filepath.Join(t.TempDir(), CheckpointFile)
		if err := os.WriteFile(changed, []byte(strings.Replace(string(b), `"size":1073741824`, `"size":1073741825`, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, _, err := readCheckpoint(changed, PolicyStatic); !errors.Is(err, errCorrupt) || !strings.Contains(err.Error(), "corrupted") {
			t.Errorf("%s changed: got %v, want it refused as corrupted", path, err)
		}
	}
}

// The kubelet's checkpoint is restored, not set aside as corrupt.
func TestManagerStartsOnKubeletCheckpoint(t *testing.T) {
	root := t.TempDir()
	b, err := os.ReadFile("testdata/upstream/memory_manager_state.none")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, CheckpointFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Policy: PolicyNone, RootDir: root}, testclock.NewFakeClock(time.Now())); err != nil {
		t.Fatal(err)
	}
	if aside, _ := filepath.Glob(filepath.Join(root, "*.corrupt-*")); len(aside) != 0 {
		t.Errorf("the kubelet's checkpoint was set aside: %v", aside)
	}
	after, err := os.ReadFile(filepath.Join(root, CheckpointFile))
	if err != nil || string(after) != string(b) {
		t.Errorf("checkpoint rewritten as %s (%v), want the kubelet's bytes", after, err)
	}
}
