package allocation

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

// A checkpoint the upstream kubelet wrote (its own test vector): nodelet reads
// it, checksum included, so a node switching from the kubelet keeps its
// allocations.
const upstreamCheckpoint = `{"data":"{\"entries\":{\"pod1\":{\"ContainerResources\":{\"container1\":{\"requests\":{\"cpu\":\"1Ki\",\"memory\":\"1Ki\"}}}}}}","checksum":1178570812}`

func TestStateReadsUpstreamCheckpoint(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, AllocatedStateFile), []byte(upstreamCheckpoint), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := OpenState(dir, AllocatedStateFile)
	if err != nil {
		t.Fatalf("OpenState: %v", err)
	}
	got, ok := s.Container("pod1", "container1")
	want := v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1Ki"), v1.ResourceMemory: resource.MustParse("1Ki")}}
	if !ok || !apiequality.Semantic.DeepEqual(got, want) {
		t.Fatalf("container1 = %v (%v), want %v", got, ok, want)
	}
	// Written back unchanged, it is the same bytes: the format is upstream's.
	blob, _, err := encode(map[types.UID]PodResourceInfo{"pod1": {ContainerResources: map[string]v1.ResourceRequirements{"container1": want}}})
	if err != nil {
		t.Fatal(err)
	}
	// Upstream omits nil PodLevelResources/EmptyDirVolumeLimits only because its
	// writer predates them; both decode to the same state.
	back, sum, err := decode(blob)
	if err != nil || sum == 0 || !apiequality.Semantic.DeepEqual(back["pod1"].ContainerResources["container1"], want) {
		t.Fatalf("round trip = %v, %d, %v", back, sum, err)
	}
}

func TestStatePersistsAndRefusesCorruption(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenState(dir, ActuatedStateFile)
	if err != nil {
		t.Fatalf("OpenState on an empty dir: %v", err)
	}
	r := v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("64Mi")}}
	if err := s.SetContainer("uid-a", "app", r); err != nil {
		t.Fatalf("SetContainer: %v", err)
	}
	path := filepath.Join(dir, ActuatedStateFile)
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("checkpoint file: %v, %v", fi, err)
	}
	again, err := OpenState(dir, ActuatedStateFile)
	if err != nil {
		t.Fatalf("reopening: %v", err)
	}
	if got, ok := again.Container("uid-a", "app"); !ok || !apiequality.Semantic.DeepEqual(got, r) {
		t.Fatalf("reopened app = %v, %v", got, ok)
	}

	// Removal is kept in memory only, as upstream: the file still names the pod.
	again.RemovePod("uid-a")
	if _, ok := again.Pod("uid-a"); ok {
		t.Fatal("uid-a still held after RemovePod")
	}
	if b, _ := os.ReadFile(path); !strings.Contains(string(b), "uid-a") {
		t.Fatal("RemovePod rewrote the checkpoint")
	}

	blob, _ := os.ReadFile(path)
	if err := os.WriteFile(path, []byte(strings.Replace(string(blob), "64Mi", "65Mi", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = OpenState(dir, ActuatedStateFile)
	if err == nil || !strings.Contains(err.Error(), "please drain this node and delete pod resource information checkpoint file") ||
		!strings.Contains(err.Error(), path) {
		t.Fatalf("corrupted checkpoint: err = %v", err)
	}
}

func TestStateCopiesAndOrphans(t *testing.T) {
	s := NewMemoryState()
	info := PodResourceInfo{ContainerResources: map[string]v1.ResourceRequirements{
		"c": {Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m")}},
	}}
	if err := s.SetPod("a", info); err != nil {
		t.Fatal(err)
	}
	if err := s.SetPod("b", info); err != nil {
		t.Fatal(err)
	}
	// The caller's map is not the state's.
	info.ContainerResources["c"].Requests[v1.ResourceCPU] = resource.MustParse("1")
	got, _ := s.Container("a", "c")
	if got.Requests.Cpu().MilliValue() != 100 {
		t.Fatalf("state shares the caller's map: cpu = %v", got.Requests.Cpu())
	}
	s.RemoveOrphanedPods(map[types.UID]bool{"b": true})
	if uids := s.UIDs(); len(uids) != 1 || uids[0] != "b" {
		t.Fatalf("UIDs after orphan removal = %v", uids)
	}
}
