package syncloop

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"google.golang.org/protobuf/proto"

	"github.com/nodelet/nodelet/pleg"
	"github.com/nodelet/nodelet/podconfig"
	"github.com/nodelet/nodelet/podruntime"
)

// fakeRuntime stands in for the runtime at the loop's own interfaces (Runtime,
// Cache, PLEG): one pod status per UID, changed synchronously by the calls, and
// hooks that let a test block or fail a call.
type fakeRuntime struct {
	mu       sync.Mutex
	pods     map[types.UID]*pleg.PodStatus
	calls    []string          // "SyncPod uid", "KillPod uid", "RemovePod uid"
	removed  map[string]int    // RemoveContainer calls by container ID
	active   map[types.UID]int // calls in progress by UID
	maxAct   map[types.UID]int // most calls in progress at once by UID
	syncHook func(ctx context.Context, pod *v1.Pod) error
	killHook func(ctx context.Context, pod *v1.Pod, grace *int64) error
	rmHook   func(ctx context.Context, uid types.UID) error
}

func newFakeRuntime() *fakeRuntime {
	return &fakeRuntime{
		pods: map[types.UID]*pleg.PodStatus{}, removed: map[string]int{},
		active: map[types.UID]int{}, maxAct: map[types.UID]int{},
	}
}

func (f *fakeRuntime) enter(call string, uid types.UID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call+" "+string(uid))
	f.active[uid]++
	f.maxAct[uid] = max(f.maxAct[uid], f.active[uid])
}

func (f *fakeRuntime) leave(uid types.UID) {
	f.mu.Lock()
	f.active[uid]--
	f.mu.Unlock()
}

// SyncPod starts the pod's one container (and sandbox) if it has none, then runs the hook.
func (f *fakeRuntime) SyncPod(ctx context.Context, pod *v1.Pod, _ *pleg.PodStatus) (podruntime.Result, error) {
	f.enter("SyncPod", pod.UID)
	defer f.leave(pod.UID)
	f.mu.Lock()
	if _, ok := f.pods[pod.UID]; !ok {
		f.pods[pod.UID] = &pleg.PodStatus{
			UID: pod.UID, Name: pod.Name, Namespace: pod.Namespace,
			Sandboxes: []*runtimeapi.PodSandboxStatus{{Id: "sb-" + string(pod.UID), State: runtimeapi.PodSandboxState_SANDBOX_READY}},
			Containers: []*runtimeapi.ContainerStatus{{
				Id: "c-" + string(pod.UID), State: runtimeapi.ContainerState_CONTAINER_RUNNING,
				Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
			}},
		}
	}
	hook := f.syncHook
	f.mu.Unlock()
	if hook != nil {
		return podruntime.Result{}, hook(ctx, pod)
	}
	return podruntime.Result{}, nil
}

// KillPod runs the hook, then stops every container and sandbox of the pod.
func (f *fakeRuntime) KillPod(ctx context.Context, pod *v1.Pod, _ *pleg.PodStatus, grace *int64) error {
	f.enter("KillPod", pod.UID)
	defer f.leave(pod.UID)
	f.mu.Lock()
	hook := f.killHook
	f.mu.Unlock()
	if hook != nil {
		if err := hook(ctx, pod, grace); err != nil {
			return err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if st, ok := f.pods[pod.UID]; ok {
		for _, c := range st.Containers {
			c.State = runtimeapi.ContainerState_CONTAINER_EXITED
		}
		for _, s := range st.Sandboxes {
			s.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
		}
	}
	return nil
}

// RemovePod runs the hook, then removes every container (counting each) and sandbox.
func (f *fakeRuntime) RemovePod(ctx context.Context, uid types.UID, _ *pleg.PodStatus, _ string) error {
	f.enter("RemovePod", uid)
	defer f.leave(uid)
	f.mu.Lock()
	hook := f.rmHook
	f.mu.Unlock()
	if hook != nil {
		if err := hook(ctx, uid); err != nil {
			return err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if st, ok := f.pods[uid]; ok {
		for _, c := range st.Containers {
			f.removed[c.Id]++
		}
		delete(f.pods, uid)
	}
	return nil
}

func (f *fakeRuntime) GCBackoff() {}

// Get and GetNewerThan: the fake's state is always current.
func (f *fakeRuntime) Get(uid types.UID) (*pleg.PodStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.copyOf(uid), nil
}

func (f *fakeRuntime) GetNewerThan(_ context.Context, uid types.UID, _ time.Time) (*pleg.PodStatus, error) {
	return f.Get(uid)
}

func (f *fakeRuntime) copyOf(uid types.UID) *pleg.PodStatus {
	st, ok := f.pods[uid]
	if !ok {
		return &pleg.PodStatus{UID: uid}
	}
	out := &pleg.PodStatus{UID: uid, Name: st.Name, Namespace: st.Namespace}
	for _, c := range st.Containers {
		out.Containers = append(out.Containers, proto.CloneOf(c))
	}
	for _, s := range st.Sandboxes {
		out.Sandboxes = append(out.Sandboxes, proto.CloneOf(s))
	}
	return out
}

func (f *fakeRuntime) Watch() <-chan *pleg.Event  { return nil }
func (f *fakeRuntime) Relist(ctx context.Context) {}
func (f *fakeRuntime) RequestReinspect(types.UID) {}
func (f *fakeRuntime) Listed() bool               { return true }
func (f *fakeRuntime) Pods() []*pleg.PodStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*pleg.PodStatus
	for uid := range f.pods {
		out = append(out, f.copyOf(uid))
	}
	return out
}

func (f *fakeRuntime) count(call string, uid types.UID) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if c == call+" "+string(uid) {
			n++
		}
	}
	return n
}

func (f *fakeRuntime) maxActive(uid types.UID) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.maxAct[uid]
}

func (f *fakeRuntime) running(uid types.UID) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, ok := f.pods[uid]
	return ok && anyRunning(st)
}

// stepLoop is a Loop driven by the test itself, as its loop goroutine: the test
// calls handleUpdate and housekeeping; only the workers' own goroutines run
// on their own. Time is a fake clock.
type stepLoop struct {
	*Loop
	rt     *fakeRuntime
	clk    *clocktesting.FakeClock
	status *fakeStatus
	ctx    context.Context
	stop   context.CancelFunc // stops the loop as the end of Run would
}

func newStepLoop(t *testing.T) *stepLoop {
	t.Helper()
	rt := newFakeRuntime()
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	status := &fakeStatus{m: map[types.UID]v1.PodStatus{}}
	src := &fakeSources{ch: make(chan podconfig.Update), ready: true}
	node := func() podruntime.NodeFacts {
		return podruntime.NodeFacts{Name: "node1", Allocatable: v1.ResourceList{
			v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("4Gi"), v1.ResourcePods: resource.MustParse("110"),
		}}
	}
	l := New(Config{RootDir: t.TempDir(), PodLogsDir: t.TempDir()}, Deps{
		Runtime: rt, Cache: rt, PLEG: rt, Status: status, Volumes: &fakeVolumes{tornDown: map[types.UID]bool{}},
		Sources: src, Node: node, Recorder: record.NewFakeRecorder(1000), Clock: clk,
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		l.workersWG.Wait()
	})
	return &stepLoop{Loop: l, rt: rt, clk: clk, status: status, ctx: ctx, stop: cancel}
}

func (s *stepLoop) add(pod *v1.Pod) {
	s.handleUpdate(s.ctx, podconfig.Update{Op: podconfig.OpAdd, Pods: []*v1.Pod{pod}, Source: "api"})
}

// addSynced adds pod and waits for its first sync to reach the runtime.
func (s *stepLoop) addSynced(t *testing.T, pod *v1.Pod) {
	t.Helper()
	synced, syncedOnce := signal()
	s.rt.mu.Lock()
	s.rt.syncHook = func(context.Context, *v1.Pod) error { syncedOnce(); return nil }
	s.rt.mu.Unlock()
	s.add(pod)
	waitClosed(t, synced, "the first sync")
}

func (s *stepLoop) remove(pod *v1.Pod) {
	s.handleUpdate(s.ctx, podconfig.Update{Op: podconfig.OpRemove, Pods: []*v1.Pod{pod}, Source: "api"})
}

func (s *stepLoop) worker(uid types.UID) *worker {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.workers[uid]
}

// waitClosed waits for ch, failing the test after a generous bound (the fake
// runtime answers at once; the bound only catches a hang).
func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// gate holds fake runtime calls until the test opens it: a hook calls wait,
// and entered is closed when the first call arrives.
type gate struct {
	entered <-chan struct{}
	enter   func()
	release <-chan struct{}
	open    func()
}

// newGate returns a closed gate. It opens when the test ends at the latest,
// before the loop's own cleanup joins the workers.
func newGate(t *testing.T) *gate {
	entered, enter := signal()
	release, open := signal()
	t.Cleanup(open)
	return &gate{entered: entered, enter: enter, release: release, open: open}
}

// wait is a hook's body: it reports the call and blocks until the gate opens,
// whatever its context says.
func (g *gate) wait() error {
	g.enter()
	<-g.release
	return nil
}

// holdRemovePod makes the fake's RemovePod wait at a gate the test opens.
func (s *stepLoop) holdRemovePod(t *testing.T) *gate {
	g := newGate(t)
	s.rt.mu.Lock()
	s.rt.rmHook = func(context.Context, types.UID) error { return g.wait() }
	s.rt.mu.Unlock()
	return g
}

// signal returns a channel closed on the first call of the returned func.
func signal() (chan struct{}, func()) {
	ch := make(chan struct{})
	var once sync.Once
	return ch, func() { once.Do(func() { close(ch) }) }
}

func podKey(pod *v1.Pod) string { return fmt.Sprintf("%s/%s", pod.Namespace, pod.Name) }
