package devicemanager

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/testsupport/golden"
)

var update = flag.Bool("update", false, "rewrite testdata/nodelet")

// compatCheckpoint is the checkpoint of test/rig/k8sbins/checkpointcompat
// (change both together): testdata/upstream has it as kubelet v1.37.2's
// code wrote it, testdata/nodelet as nodelet writes it, which that test
// reads with the kubelet's code.
func compatCheckpoint() checkpointData {
	// A ContainerAllocateResponse with Envs {"DEV": "0"} in protobuf.
	resp := []byte("\n\b\n\x03DEV\x12\x010")
	return checkpointData{
		PodDeviceEntries: []podDeviceEntry{
			{PodUID: "pod-a", ContainerName: "app", ResourceName: "example.com/dev", DeviceIDs: []string{"dev-0", "dev-2"},
				NUMA: map[string][]int{"dev-0": {0}, "dev-2": nil}, AllocResp: resp},
			{PodUID: "pod-b", ContainerName: "main", ResourceName: "example.com/dev", DeviceIDs: []string{"dev-1"},
				NUMA: map[string][]int{"dev-1": {1}}, AllocResp: resp},
		},
		RegisteredDevices: map[string][]string{"example.com/dev": {"dev-0", "dev-1", "dev-2"}, "example.com/other": {}},
	}
}

// The kubelet's file is read with its values, and nodelet writes the same
// values to the same bytes.
func TestCheckpointCompatibleWithKubelet(t *testing.T) {
	upstream := filepath.Join("testdata", "upstream", CheckpointName)
	got, err := readCheckpoint(upstream)
	if err != nil {
		t.Fatalf("reading the kubelet's file: %v", err)
	}
	want := compatCheckpoint()
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(checkpointData{}, podDeviceEntry{})); diff != "" {
		t.Errorf("decoded (-want +got):\n%s", diff)
	}
	path := filepath.Join(t.TempDir(), CheckpointName)
	if err := writeCheckpoint(path, want); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	golden.Upstream(t, CheckpointName, b, *update)
}

// The kubelet's checkpoint is restored, not set aside as corrupt: its
// assignments and their NUMA nodes are there before any plugin registers.
func TestManagerStartsOnKubeletCheckpoint(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile(filepath.Join("testdata", "upstream", CheckpointName))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, CheckpointName), b, 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := New(dir, clocktesting.NewFakeClock(time.Now()), []int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	if aside, _ := filepath.Glob(filepath.Join(dir, "*.corrupt-*")); len(aside) != 0 {
		t.Errorf("the kubelet's checkpoint was set aside: %v", aside)
	}
	if got := topologyOf(m.ContainerDevices("pod-a", "app")); got != "dev-0@[0] dev-2@[]" {
		t.Errorf("pod-a's devices = %q, want dev-0@[0] dev-2@[]", got)
	}
}
