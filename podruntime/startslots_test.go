package podruntime

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/testsupport/eventually"
	"github.com/nodelet/nodelet/pleg"
)

// gatedStarts holds every RunPodSandbox and CreateContainer until open is closed and
// counts how many are held at once.
type gatedStarts struct {
	Runtime
	open           chan struct{}
	inFlight, most atomic.Int32
}

func (g *gatedStarts) hold() func() {
	now := g.inFlight.Add(1)
	for {
		m := g.most.Load()
		if now <= m || g.most.CompareAndSwap(m, now) {
			break
		}
	}
	<-g.open
	return func() { g.inFlight.Add(-1) }
}

func (g *gatedStarts) RunPodSandbox(ctx context.Context, cfg *runtimeapi.PodSandboxConfig, handler string) (string, error) {
	defer g.hold()()
	return g.Runtime.RunPodSandbox(ctx, cfg, handler)
}

func (g *gatedStarts) CreateContainer(ctx context.Context, sb string, cfg *runtimeapi.ContainerConfig, sbCfg *runtimeapi.PodSandboxConfig) (string, error) {
	defer g.hold()()
	return g.Runtime.CreateContainer(ctx, sb, cfg, sbCfg)
}

func TestRuntimeStartsAreBounded(t *testing.T) {
	for _, bound := range []int{0, 2} {
		t.Run(fmt.Sprintf("MaxRuntimeStarts=%d", bound), func(t *testing.T) {
			r := newSyncRig(t)
			gate := &gatedStarts{Runtime: r.client, open: make(chan struct{})}
			cfg := Config{RootDir: r.root, PodLogsDir: filepath.Join(r.root, "logs"), MaxRuntimeStarts: bound}
			m := New(cfg, Deps{Runtime: gate, Images: r.client, Volumes: noVolumes{}, Env: fakeSecrets{}, Node: func() NodeFacts { return NodeFacts{Name: "node1"} }, Recorder: record.NewFakeRecorder(1000), Clock: clock.RealClock{}})
			const pods = 5
			var wg sync.WaitGroup
			errs := make(chan error, pods)
			for i := range pods {
				pod := syncPod(fmt.Sprintf("p%d", i), v1.RestartPolicyAlways, nil, "app")
				wg.Go(func() {
					if _, err := m.SyncPod(context.Background(), pod, &pleg.PodStatus{UID: pod.UID}); err != nil {
						errs <- fmt.Errorf("sync of %s: %w", pod.Name, err)
					}
				})
			}
			want := int32(bound)
			if bound == 0 {
				want = pods
			}
			eventually.True(t, "runtime calls held", func() bool { return gate.inFlight.Load() == want })
			close(gate.open)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if got := gate.most.Load(); got != want {
				t.Errorf("at most %d sandbox or container creations at once, want %d", got, want)
			}
			for i := range pods {
				pod := syncPod(fmt.Sprintf("p%d", i), v1.RestartPolicyAlways, nil, "app")
				if got := r.containers(pod, "app"); len(got) != 1 || got[0] != runtimeapi.ContainerState_CONTAINER_RUNNING {
					t.Errorf("%s: app states %v, want one running", pod.Name, got)
				}
			}
		})
	}
}

func TestRuntimeStartWaitEndsWithItsSync(t *testing.T) {
	r := newSyncRig(t)
	cfg := Config{RootDir: r.root, PodLogsDir: filepath.Join(r.root, "logs"), MaxRuntimeStarts: 1}
	m := New(cfg, Deps{Runtime: r.client, Images: r.client, Volumes: noVolumes{}, Env: fakeSecrets{}, Node: func() NodeFacts { return NodeFacts{Name: "node1"} }, Recorder: record.NewFakeRecorder(1000), Clock: clock.RealClock{}})
	release, err := m.startSlots.acquire(context.Background(), false) // the one slot is taken
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	pod := syncPod("waits", v1.RestartPolicyAlways, nil, "app")
	if _, err := m.SyncPod(ctx, pod, &pleg.PodStatus{UID: pod.UID}); err == nil {
		t.Fatal("a cancelled sync waiting for a start slot returned no error")
	}
}

// TestStartSlotsContainersFirst: with the one slot taken, a container creation that
// arrives after a sandbox creation still gets the slot first; a waiter whose context
// ends leaves the line without taking a slot.
func TestStartSlotsContainersFirst(t *testing.T) {
	s := newStartSlots(1)
	ctx := context.Background()
	release, err := s.acquire(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan string, 3)
	waiter := func(name string, container bool) {
		rel, err := s.acquire(ctx, container)
		if err != nil {
			order <- name + ": " + err.Error()
			return
		}
		order <- name
		rel()
	}
	go waiter("sandbox", false)
	eventually.True(t, "sandbox waiting", func() bool { s.mu.Lock(); defer s.mu.Unlock(); return len(s.sandboxes) == 1 })
	cctx, cancel := context.WithCancel(ctx)
	gone := make(chan error, 1)
	go func() { _, err := s.acquire(cctx, true); gone <- err }()
	eventually.True(t, "cancelled waiter waiting", func() bool { s.mu.Lock(); defer s.mu.Unlock(); return len(s.containers) == 1 })
	cancel()
	if err := <-gone; err == nil {
		t.Fatal("acquire with a cancelled context returned a slot")
	}
	go waiter("container", true)
	eventually.True(t, "container waiting", func() bool { s.mu.Lock(); defer s.mu.Unlock(); return len(s.containers) == 1 })
	release()
	if first, second := <-order, <-order; first != "container" || second != "sandbox" {
		t.Fatalf("slots went to %q then %q, want container then sandbox", first, second)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.free != 1 || len(s.containers)+len(s.sandboxes) != 0 {
		t.Fatalf("after all released: free=%d waiting=%d/%d, want 1 free, none waiting", s.free, len(s.containers), len(s.sandboxes))
	}
}
