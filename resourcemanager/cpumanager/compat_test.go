package cpumanager

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	testclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/cpuset"

	"github.com/nodelet/nodelet/internal/testsupport/golden"
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
			golden.Upstream(t, tc.golden, b, *update)
		})
	}
}

// The formats older kubelets wrote (written by v1.37.2's code for them) and
// the one nodelet wrote before it took upstream's checksums are read; the
// pod-level entries of v3 are ignored, as upstream does with its gate off.
func TestCheckpointOlderFormats(t *testing.T) {
	podA := State{DefaultCPUSet: mustParse(t, "0,3-7"), Assignments: map[string]map[string]cpuset.CPUSet{"pod-a": {"app": mustParse(t, "1-2")}}}
	for _, tc := range []struct {
		path string
		want State
	}{
		{"testdata/upstream/cpu_manager_state.v2", podA},
		{"testdata/upstream/cpu_manager_state.v3", podA},
		{"testdata/legacy/cpu_manager_state.static", compatCases(t)[1].state},
	} {
		got, ok, err := readCheckpoint(tc.path, PolicyStatic)
		if err != nil || !ok {
			t.Fatalf("%s: ok=%v %v", tc.path, ok, err)
		}
		if diff := cmp.Diff(tc.want, got, cmp.Comparer(cpuset.CPUSet.Equals)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.path, diff)
		}
	}
	// Upstream accepts a v2 file without a checksum (its old file backend's).
	path := filepath.Join(t.TempDir(), CheckpointFile)
	if err := os.WriteFile(path, []byte(`{"policyName":"static","defaultCpuSet":"0-1","checksum":0}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, _, err := readCheckpoint(path, PolicyStatic); err != nil || got.DefaultCPUSet.String() != "0-1" {
		t.Errorf("v2 file without checksum: %v %v", got, err)
	}
	// A v3 or v2 file whose content changed is refused.
	for _, f := range []string{"testdata/upstream/cpu_manager_state.v2", "testdata/upstream/cpu_manager_state.v3", "testdata/legacy/cpu_manager_state.static"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(strings.Replace(string(b), `"1-2"`, `"1-3"`, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, _, err := readCheckpoint(path, PolicyStatic); !errors.Is(err, errCorrupt) || !strings.Contains(err.Error(), "corrupted") {
			t.Errorf("%s changed: got %v, want it refused as corrupted", f, err)
		}
	}
}

// The kubelet's checkpoint is restored, not set aside as corrupt.
func TestManagerStartsOnKubeletCheckpoint(t *testing.T) {
	root := t.TempDir()
	b, err := os.ReadFile("testdata/upstream/cpu_manager_state.none")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, CheckpointFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Policy: PolicyNone, RootDir: root}, &fakeRuntime{}, nil, nil, testclock.NewFakeClock(time.Now())); err != nil {
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
