package dra

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/testsupport/golden"
)

var update = flag.Bool("update", false, "rewrite testdata/nodelet")

// compatClaims are the claims of test/rig/k8sbins/checkpointcompat (change
// both together): testdata/upstream has them as kubelet v1.37.2's code
// wrote them, testdata/nodelet as nodelet writes them, which that test reads
// with the kubelet's code.
func compatClaims() []ClaimState {
	share := types.UID("share-1")
	return []ClaimState{
		{ClaimUID: "claim-uid-1", ClaimName: "gpu-claim", Namespace: "default", PodUIDs: map[string]struct{}{"pod-a": {}, "pod-b": {}},
			DriverState: map[string]DriverState{"gpu.example.com": {Devices: []Device{
				{PoolName: "node-1", DeviceName: "gpu-0", RequestNames: []string{"gpu"}, CDIDeviceIDs: []string{"example.com/gpu=gpu-0"}},
				{PoolName: "node-1", DeviceName: "gpu-1", ShareID: &share, RequestNames: []string{"gpu"}, CDIDeviceIDs: []string{"example.com/gpu=gpu-1"}},
			}}}},
		{ClaimUID: "claim-uid-2", ClaimName: "nic", Namespace: "team", PodUIDs: map[string]struct{}{"pod-c": {}},
			DriverState: map[string]DriverState{"nic.example.com": {
				Devices:            []Device{{PoolName: "pool", DeviceName: "nic-0", RequestNames: []string{"nic"}}},
				SkipNodeOperations: []resourceapi.SkipNodeOperation{resourceapi.SkipNodeOperationNodePrepareResources},
			}}},
	}
}

// The kubelet's file is read with its values, and nodelet writes the same
// values to the same bytes.
func TestStateCompatibleWithKubelet(t *testing.T) {
	upstream := filepath.Join("testdata", "upstream", StateFileName)
	got, err := readState(upstream)
	if err != nil {
		t.Fatalf("reading the kubelet's file: %v", err)
	}
	if diff := cmp.Diff(compatClaims(), got); diff != "" {
		t.Errorf("decoded (-want +got):\n%s", diff)
	}
	path := filepath.Join(t.TempDir(), StateFileName)
	if err := writeState(path, compatClaims()); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	golden.Upstream(t, StateFileName, b, *update)
}
