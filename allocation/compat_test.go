package allocation

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/testsupport/golden"
)

var update = flag.Bool("update", false, "rewrite testdata/nodelet")

// compatPods are the pods of test/rig/k8sbins/checkpointcompat (change both
// together): testdata/upstream has them as kubelet v1.37.2's code wrote them
// (allocated_pods_state; actuated_pods_state is the same format),
// testdata/nodelet as nodelet writes them, which that test reads with the
// kubelet's code.
func compatPods() map[types.UID]PodResourceInfo {
	q := resource.MustParse
	limit := q("64Mi")
	return map[types.UID]PodResourceInfo{
		"pod-a": {ContainerResources: map[string]v1.ResourceRequirements{
			"app": {Requests: v1.ResourceList{v1.ResourceCPU: q("500m"), v1.ResourceMemory: q("128Mi")}, Limits: v1.ResourceList{v1.ResourceCPU: q("1"), v1.ResourceMemory: q("256Mi")}},
		}},
		"pod-b": {
			ContainerResources: map[string]v1.ResourceRequirements{
				"main":    {Requests: v1.ResourceList{v1.ResourceCPU: q("250m")}},
				"sidecar": {},
			},
			PodLevelResources:    &v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceCPU: q("2"), v1.ResourceMemory: q("1Gi")}},
			EmptyDirVolumeLimits: map[string]*resource.Quantity{"scratch": &limit},
		},
	}
}

// The kubelet's file is read with its values, and nodelet writes the same
// values to the same bytes.
func TestStateCompatibleWithKubelet(t *testing.T) {
	want, err := os.ReadFile(filepath.Join("testdata", "upstream", AllocatedStateFile))
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := decode(want)
	if err != nil {
		t.Fatalf("reading the kubelet's file: %v", err)
	}
	if diff := cmp.Diff(compatPods(), got, cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
		t.Errorf("decoded (-want +got):\n%s", diff)
	}
	b, _, err := encode(compatPods())
	if err != nil {
		t.Fatal(err)
	}
	golden.Upstream(t, AllocatedStateFile, b, *update)
}

// The kubelet's checkpoint is restored, not set aside as corrupt.
func TestOpenStateOnKubeletCheckpoint(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile(filepath.Join("testdata", "upstream", AllocatedStateFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ActuatedStateFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := OpenState(context.Background(), dir, ActuatedStateFile, clocktesting.NewFakeClock(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	if aside, _ := filepath.Glob(filepath.Join(dir, "*.corrupt-*")); len(aside) != 0 {
		t.Errorf("the kubelet's checkpoint was set aside: %v", aside)
	}
	if r, ok := s.Container("pod-a", "app"); !ok || r.Limits.Memory().String() != "256Mi" {
		t.Errorf("pod-a/app = %v %v, want its 256Mi limit", r, ok)
	}
}
