package allocation

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/testsupport/eventually"
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
	s, err := OpenState(context.Background(), dir, AllocatedStateFile, clocktesting.NewFakeClock(time.Unix(1700000000, 0)))
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

func TestStatePersists(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenState(context.Background(), dir, ActuatedStateFile, clocktesting.NewFakeClock(time.Unix(1700000000, 0)))
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
	again, err := OpenState(context.Background(), dir, ActuatedStateFile, clocktesting.NewFakeClock(time.Unix(1700000000, 0)))
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

}

// A checkpoint that does not read back (a wrong checksum, truncated, garbage)
// does not stop nodelet: the state starts empty (the pods are admitted again
// at their specs), the log names the file, and its bytes are kept aside.
func TestStateSetsAsideCorruptCheckpoint(t *testing.T) {
	r := v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("64Mi")}}
	for name, corrupt := range map[string]func([]byte) []byte{
		"checksum":  func(b []byte) []byte { return []byte(strings.Replace(string(b), "64Mi", "65Mi", 1)) },
		"truncated": func(b []byte) []byte { return b[:len(b)/2] },
		"empty":     func([]byte) []byte { return nil },
		"garbage":   func(b []byte) []byte { return bytes.Repeat([]byte{0xff, 0x00}, len(b)) },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			clk := clocktesting.NewFakeClock(time.Unix(1700000000, 0))
			s, err := OpenState(context.Background(), dir, AllocatedStateFile, clk)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.SetContainer("uid-a", "app", r); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, AllocatedStateFile)
			blob, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			bad := corrupt(blob)
			if err := os.WriteFile(path, bad, 0o600); err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			ctx := klog.NewContext(context.Background(), textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(&logs))))
			again, err := OpenState(ctx, dir, AllocatedStateFile, clk)
			if err != nil {
				t.Fatalf("a corrupt checkpoint stopped the start: %v", err)
			}
			if uids := again.UIDs(); len(uids) != 0 {
				t.Errorf("state from a corrupt checkpoint holds %v, want nothing", uids)
			}
			if !strings.Contains(logs.String(), "Ignoring a corrupt pod resource checkpoint") || !strings.Contains(logs.String(), path) {
				t.Errorf("the log does not name the ignored file:\n%s", logs.String())
			}
			kept, err := os.ReadFile(path + ".corrupt-1700000000")
			if err != nil || !bytes.Equal(kept, bad) {
				t.Errorf("corrupt file not kept aside: %q, %v", kept, err)
			}
			// The next allocation writes a good checkpoint again.
			if err := again.SetContainer("uid-b", "app", r); err != nil {
				t.Fatal(err)
			}
			third, err := OpenState(ctx, dir, AllocatedStateFile, clk)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := third.Container("uid-b", "app"); !ok {
				t.Error("the checkpoint written after a corrupt one does not read back")
			}
		})
	}
}

// A write that fails (here: the root dir is not writable, as a full disk
// fails it) is not forgotten: Flush writes it once it can.
func TestStateRetriesFailedWrite(t *testing.T) {
	// A file where the directory should be fails the write even for root.
	parent := t.TempDir()
	dir := filepath.Join(parent, "root")
	if err := os.WriteFile(dir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s := &State{path: filepath.Join(dir, AllocatedStateFile), pods: map[types.UID]PodResourceInfo{}}
	r := v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m")}}
	if err := s.SetContainer("uid-a", "app", r); err == nil {
		t.Fatal("a write into a file as directory succeeded")
	}
	if err := s.Flush(); err == nil {
		t.Fatal("Flush succeeded while the write still cannot")
	}
	// Space (here: the directory) comes back.
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	back, err := OpenState(context.Background(), dir, AllocatedStateFile, clocktesting.NewFakeClock(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := back.Container("uid-a", "app"); !ok {
		t.Fatal("the allocation whose write failed never reached the checkpoint")
	}
	// Nothing behind: Flush does not write (the file is left as is).
	if err := os.Remove(s.path); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.path); !os.IsNotExist(err) {
		t.Errorf("Flush wrote with nothing behind: %v", err)
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

// RunFlusher writes a checkpoint whose write failed once it can, without any
// further allocation, and stops with its context.
func TestRunFlusherRetries(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "root")
	if err := os.WriteFile(dir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s := &State{path: filepath.Join(dir, AllocatedStateFile), pods: map[types.UID]PodResourceInfo{}}
	if err := s.SetContainer("uid-a", "app", v1.ResourceRequirements{}); err == nil {
		t.Fatal("a write into a file as directory succeeded")
	}
	clk := clocktesting.NewFakeClock(time.Unix(1700000000, 0))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.RunFlusher(ctx, clk, 10*time.Second)
	}()
	defer func() { cancel(); <-done }()
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, "the failed write to land", func() bool {
		if clk.HasWaiters() {
			clk.Step(10 * time.Second)
		}
		_, err := os.Stat(s.path)
		return err == nil
	})
}
