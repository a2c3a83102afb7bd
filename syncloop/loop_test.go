package syncloop

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/cri"
	"github.com/nodelet/nodelet/internal/testsupport/eventually"
	"github.com/nodelet/nodelet/internal/testsupport/fakecri"
	"github.com/nodelet/nodelet/pleg"
	"github.com/nodelet/nodelet/podconfig"
	"github.com/nodelet/nodelet/podruntime"
	"github.com/nodelet/nodelet/volumes"
)

// Hand-written fakes for the loop's collaborators that talk to the API server or
// the host; the runtime side is real (fakecri.Runtime over gRPC, real PLEG).

type fakeSources struct {
	ch    chan podconfig.Update
	ready bool
	asked int // SourcesReady calls: one per housekeeping tick
	// sendOnReady, if set, is sent on ch by the SourcesReady call that makes the sources
	// ready: a snapshot still buffered when the loop first sees them ready.
	sendOnReady *podconfig.Update
	readyAsk    int // the SourcesReady call that did so
	mu          sync.Mutex
}

func (s *fakeSources) Updates() <-chan podconfig.Update { return s.ch }
func (s *fakeSources) SourcesReady() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked++
	if s.sendOnReady != nil && !s.ready {
		s.ch <- *s.sendOnReady
		s.sendOnReady = nil
		s.ready = true
		s.readyAsk = s.asked
	}
	return s.ready
}

func (s *fakeSources) askedCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.asked
}

type fakeStatus struct {
	mu sync.Mutex
	m  map[types.UID]v1.PodStatus
}

func (f *fakeStatus) SetPodStatus(pod *v1.Pod, s v1.PodStatus) {
	f.mu.Lock()
	f.m[pod.UID] = s
	f.mu.Unlock()
}
func (f *fakeStatus) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.m[uid]
	return s, ok
}
func (f *fakeStatus) RemoveOrphanedStatuses(keep map[types.UID]bool) {}
func (f *fakeStatus) ForgetPodStatus(uid types.UID) {
	f.mu.Lock()
	delete(f.m, uid)
	f.mu.Unlock()
}

type fakeVolumes struct {
	mu       sync.Mutex
	tornDown map[types.UID]bool
	// setUps records the labels of each pod SetUpPod was called with.
	setUps map[types.UID][]map[string]string
}

func (f *fakeVolumes) SetUpPod(ctx context.Context, pod *v1.Pod) (map[string]volumes.HostVolume, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.setUps == nil {
		f.setUps = map[types.UID][]map[string]string{}
	}
	f.setUps[pod.UID] = append(f.setUps[pod.UID], pod.Labels)
	return map[string]volumes.HostVolume{}, nil
}

// setUpsOf returns the labels of each SetUpPod call for uid.
func (f *fakeVolumes) setUpsOf(uid types.UID) []map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]map[string]string(nil), f.setUps[uid]...)
}
func (f *fakeVolumes) PrepareSubPath(ctx context.Context, pod *v1.Pod, hv volumes.HostVolume, sp volumes.SubPath) (string, error) {
	return "", errors.New("fakeVolumes has no sub paths")
}
func (f *fakeVolumes) TearDownSubPaths(ctx context.Context, uid types.UID) error { return nil }
func (f *fakeVolumes) TearDownPod(ctx context.Context, uid types.UID) error {
	f.mu.Lock()
	f.tornDown[uid] = true
	f.mu.Unlock()
	return nil
}

type noEnv struct{}

func (noEnv) ConfigMap(ctx context.Context, ns, name string) (*v1.ConfigMap, error) { return nil, nil }
func (noEnv) Secret(ctx context.Context, ns, name string) (*v1.Secret, error)       { return nil, nil }
func (noEnv) Services(ctx context.Context, ns string) ([]*v1.Service, error)        { return nil, nil }

type rig struct {
	fake    *fakecri.Runtime
	client  *cri.Client
	sources *fakeSources
	status  *fakeStatus
	vols    *fakeVolumes
	loop    *Loop
	rec     *record.FakeRecorder
	// loopConfig, set by an option, changes the loop's Config.
	loopConfig func(*Config)
	cancel     context.CancelFunc
	done       chan struct{}
}

// rigOption changes the rig's wiring before the loop starts (e.g. adds probes).
type rigOption func(ctx context.Context, r *rig, rt *podruntime.Deps, deps *Deps)

func newRig(t *testing.T, fake *fakecri.Runtime, opts ...rigOption) *rig {
	t.Helper()
	if fake == nil {
		fake = fakecri.New(t)
		fake.AddImage("busybox:1")
	}
	ctx, cancel := context.WithCancel(context.Background())
	client, err := cri.New(ctx, fake.Endpoint(), "", 10*time.Second)
	if err != nil {
		t.Fatalf("connecting to the fake runtime: %v", err)
	}
	clk := clock.RealClock{}
	cache := pleg.NewCache(clk)
	g := pleg.NewGeneric(client, cache, 50*time.Millisecond, time.Minute, clk)
	r := &rig{
		fake: fake, client: client, cancel: cancel, done: make(chan struct{}),
		sources: &fakeSources{ch: make(chan podconfig.Update, 10)},
		status:  &fakeStatus{m: map[types.UID]v1.PodStatus{}},
		vols:    &fakeVolumes{tornDown: map[types.UID]bool{}},
	}
	dir := t.TempDir()
	nodeFacts := func() podruntime.NodeFacts {
		return podruntime.NodeFacts{Name: "node1", HostIPs: []string{"192.0.2.10"}, Allocatable: v1.ResourceList{
			v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("4Gi"), v1.ResourcePods: resource.MustParse("110"),
		}}
	}
	rec := record.NewFakeRecorder(1000)
	r.rec = rec
	var rtDeps podruntime.Deps
	deps := Deps{Cache: cache, PLEG: g, Status: r.status, Volumes: r.vols, Sources: r.sources, Node: nodeFacts, Recorder: rec, Clock: clk}
	for _, o := range opts {
		o(ctx, r, &rtDeps, &deps)
	}
	rtDeps.Runtime, rtDeps.Images, rtDeps.Volumes, rtDeps.Env = client, client, r.vols, noEnv{}
	rtDeps.Node, rtDeps.Recorder, rtDeps.Clock = nodeFacts, rec, clk
	deps.Runtime = podruntime.New(podruntime.Config{RootDir: dir, PodLogsDir: dir + "/logs"}, rtDeps)
	loopCfg := Config{RootDir: dir, PodLogsDir: dir + "/logs", HousekeepingPeriod: 100 * time.Millisecond, ResyncTick: 50 * time.Millisecond}
	if r.loopConfig != nil {
		r.loopConfig(&loopCfg)
	}
	r.loop = New(loopCfg, deps)
	go g.Start(ctx)
	go func() { r.loop.Run(ctx); close(r.done) }()
	t.Cleanup(func() {
		cancel()
		<-r.done
		_ = client.Close(context.Background())
	})
	return r
}

func (r *rig) ready() {
	r.sources.mu.Lock()
	r.sources.ready = true
	r.sources.mu.Unlock()
}

// countOf counts the calls of method the fake runtime served.
func countOf(fake *fakecri.Runtime, method string) int {
	n := 0
	for _, c := range fake.Calls() {
		if c == method {
			n++
		}
	}
	return n
}

// rounds waits for a relist, then for n more housekeeping ticks and relists
// after it: what a test asserting that nothing happened waits for, instead of
// sleeping (every tick then saw what the runtime runs).
func (r *rig) rounds(t *testing.T, n int) {
	t.Helper()
	relists := countOf(r.fake, "ListContainers")
	eventually.True(t, "a relist", func() bool { return countOf(r.fake, "ListContainers") > relists })
	ticks, relists := r.sources.askedCount(), countOf(r.fake, "ListContainers")
	eventually.True(t, "housekeeping ticks and relists", func() bool {
		return r.sources.askedCount() >= ticks+n && countOf(r.fake, "ListContainers") >= relists+n
	})
}

func newPod(uid, name string) *v1.Pod {
	grace := int64(1)
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(uid), CreationTimestamp: metav1.Now()},
		Spec: v1.PodSpec{
			RestartPolicy: v1.RestartPolicyAlways, HostNetwork: true, TerminationGracePeriodSeconds: &grace,
			Containers: []v1.Container{{Name: "app", Image: "busybox:1", ImagePullPolicy: v1.PullIfNotPresent}},
		},
	}
}

func (r *rig) containers(t *testing.T, uid string) []*runtimeapi.Container {
	t.Helper()
	list, err := r.client.ListContainers(context.Background(), &runtimeapi.ContainerFilter{LabelSelector: map[string]string{cri.LabelPodUID: uid}})
	if err != nil {
		t.Fatalf("listing containers: %v", err)
	}
	return list
}

func running(list []*runtimeapi.Container) int {
	n := 0
	for _, c := range list {
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			n++
		}
	}
	return n
}

func TestPodRunsThenIsDeletedAndReclaimed(t *testing.T) {
	r := newRig(t, nil)
	r.ready()
	pod := newPod("uid-1", "web")
	r.sources.ch <- podconfig.Update{Op: podconfig.OpAdd, Pods: []*v1.Pod{pod}, Source: "api"}
	eventually.True(t, "the container to run and the pod to be Running", func() bool {
		s, ok := r.status.GetPodStatus(pod.UID)
		return running(r.containers(t, "uid-1")) == 1 && ok && s.Phase == v1.PodRunning
	})
	select {
	case <-r.loop.Synced():
	case <-time.After(5 * time.Second):
		t.Fatal("loop never reported synced")
	}
	if r.loop.CanDeletePod(pod) {
		t.Fatal("a running pod must not be deletable")
	}

	del := pod.DeepCopy()
	now := metav1.Now()
	del.DeletionTimestamp = &now
	r.sources.ch <- podconfig.Update{Op: podconfig.OpUpdate, Pods: []*v1.Pod{del}, Source: "api"}
	eventually.True(t, "the pod's resources to be reclaimed", func() bool { return r.loop.CanDeletePod(del) })
	if n := len(r.containers(t, "uid-1")); n != 0 {
		t.Fatalf("%d containers left after deletion", n)
	}
	r.vols.mu.Lock()
	torn := r.vols.tornDown[pod.UID]
	r.vols.mu.Unlock()
	if !torn {
		t.Fatal("volumes were not torn down")
	}
	s, _ := r.status.GetPodStatus(pod.UID)
	if s.Phase != v1.PodFailed && s.Phase != v1.PodSucceeded {
		t.Fatalf("final phase = %s, want a terminal phase", s.Phase)
	}
}

// TestSyncedWaitsForBufferedSnapshot: the sources became ready with their snapshot still
// buffered. Synced must close only after the loop handled it, so that whoever waits for
// Synced (the eviction manager) acts after the pods from before a restart are admitted.
func TestSyncedWaitsForBufferedSnapshot(t *testing.T) {
	r := newRig(t, nil)
	pod := newPod("uid-1", "web")
	r.sources.mu.Lock()
	r.sources.sendOnReady = &podconfig.Update{Op: podconfig.OpAdd, Pods: []*v1.Pod{pod}, Source: "api"}
	r.sources.mu.Unlock()
	select {
	case <-r.loop.Synced():
	case <-time.After(5 * time.Second):
		t.Fatal("loop never reported synced")
	}
	r.sources.mu.Lock()
	readyAsk, asked := r.sources.readyAsk, r.sources.asked
	r.sources.mu.Unlock()
	if asked <= readyAsk {
		t.Fatalf("Synced closed at the housekeeping that first saw the sources ready (SourcesReady call %d), with their snapshot still buffered", readyAsk)
	}
	if !slices.ContainsFunc(r.loop.Pods(), func(p *v1.Pod) bool { return p.UID == pod.UID }) {
		t.Fatalf("Synced closed before the loop knew the snapshot's pod %s", pod.UID)
	}
}

func TestRestartAdoptsRunningPods(t *testing.T) {
	fake := fakecri.New(t)
	fake.AddImage("busybox:1")
	pod := newPod("uid-2", "adopted")
	first := newRig(t, fake)
	first.ready()
	first.sources.ch <- podconfig.Update{Op: podconfig.OpAdd, Pods: []*v1.Pod{pod}, Source: "api"}
	eventually.True(t, "the container to run", func() bool { return running(first.containers(t, "uid-2")) == 1 })
	before := first.containers(t, "uid-2")[0].Id
	first.cancel()
	<-first.done

	second := newRig(t, fake)
	fake.ResetCalls()
	second.sources.ch <- podconfig.Update{Op: podconfig.OpAdd, Pods: []*v1.Pod{pod}, Source: "api"}
	second.ready()
	eventually.True(t, "the adopted pod's status", func() bool {
		s, ok := second.status.GetPodStatus(pod.UID)
		return ok && s.Phase == v1.PodRunning
	})
	second.rounds(t, 3)
	list := second.containers(t, "uid-2")
	if len(list) != 1 || list[0].Id != before || running(list) != 1 {
		t.Fatalf("after restart containers = %v, want the same single running container %s", list, before)
	}
	for _, c := range fake.Calls() {
		if c == "RunPodSandbox" || c == "CreateContainer" || c == "StopContainer" {
			t.Fatalf("restart must not touch running pods, but called %s (calls: %v)", c, fake.Calls())
		}
	}
}

func TestOrphanedPodIsKilledOnceSourcesAreReady(t *testing.T) {
	fake := fakecri.New(t)
	fake.AddImage("busybox:1")
	first := newRig(t, fake)
	first.ready()
	first.sources.ch <- podconfig.Update{Op: podconfig.OpAdd, Pods: []*v1.Pod{newPod("uid-3", "gone")}, Source: "api"}
	eventually.True(t, "the container to run", func() bool { return running(first.containers(t, "uid-3")) == 1 })
	first.cancel()
	<-first.done

	// The pod was deleted while nodelet was down: the new sources never mention it.
	second := newRig(t, fake)
	second.rounds(t, 3)
	if running(second.containers(t, "uid-3")) != 1 {
		t.Fatal("an unknown pod must not be killed before all sources are ready")
	}
	second.ready()
	eventually.True(t, "the orphaned pod to be removed", func() bool { return len(second.containers(t, "uid-3")) == 0 })
}

func TestAdmissionRejectsPodThatDoesNotFit(t *testing.T) {
	r := newRig(t, nil)
	r.ready()
	pod := newPod("uid-4", "huge")
	pod.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse("3")}
	r.add("api", pod)
	r.waitRejected(t, pod, "OutOfcpu")
	if n := len(r.containers(t, "uid-4")); n != 0 {
		t.Fatalf("a rejected pod got %d containers", n)
	}
}

func TestCrashingContainerIsRestarted(t *testing.T) {
	r := newRig(t, nil)
	r.ready()
	pod := newPod("uid-5", "crash")
	r.sources.ch <- podconfig.Update{Op: podconfig.OpAdd, Pods: []*v1.Pod{pod}, Source: "api"}
	eventually.True(t, "the container to run", func() bool { return running(r.containers(t, "uid-5")) == 1 })
	r.fake.ExitContainer(r.containers(t, "uid-5")[0].Id, 1, "Error")
	// The first restart is immediate; the next one waits in CrashLoopBackOff.
	eventually.True(t, "a restarted container", func() bool {
		list := r.containers(t, "uid-5")
		return len(list) == 2 && running(list) == 1
	})
	for _, c := range r.containers(t, "uid-5") {
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			r.fake.ExitContainer(c.Id, 1, "Error")
		}
	}
	eventually.True(t, "CrashLoopBackOff in the status", func() bool {
		s, _ := r.status.GetPodStatus(pod.UID)
		return len(s.ContainerStatuses) == 1 && s.ContainerStatuses[0].State.Waiting != nil &&
			s.ContainerStatuses[0].State.Waiting.Reason == "CrashLoopBackOff" && s.ContainerStatuses[0].RestartCount == 1
	})
}

func TestKillPodForNodeShutdown(t *testing.T) {
	for _, tc := range []struct {
		name string
		// exitOnTerm: the container handles SIGTERM and exits 0 before the stop completes.
		exitOnTerm bool
	}{
		{name: "killed"},
		{name: "exits 0 on TERM", exitOnTerm: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, nil)
			r.ready()
			pod := newPod("uid-6", "victim")
			r.sources.ch <- podconfig.Update{Op: podconfig.OpAdd, Pods: []*v1.Pod{pod}, Source: "api"}
			eventually.True(t, "the container to run", func() bool { return running(r.containers(t, "uid-6")) == 1 })
			eventually.True(t, "the pod to be active", func() bool { return len(r.loop.ActivePods()) == 1 })
			if tc.exitOnTerm {
				id := r.containers(t, "uid-6")[0].Id
				r.fake.SetDelay("StopContainer", 500*time.Millisecond)
				go func() {
					for !slices.Contains(r.fake.Calls(), "StopContainer") {
						time.Sleep(10 * time.Millisecond)
					}
					r.fake.ExitContainer(id, 0, "")
				}()
			}

			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			// As the shutdown manager does: Failed, unless the pod had succeeded already.
			err := r.loop.KillPod(ctx, pod, time.Second, func(s *v1.PodStatus) {
				if s.Phase != v1.PodSucceeded {
					s.Phase = v1.PodFailed
				}
				s.Reason, s.Message = "Terminated", "Pod was terminated in response to imminent node shutdown."
			})
			if err != nil {
				t.Fatalf("KillPod: %v", err)
			}
			if n := running(r.containers(t, "uid-6")); n != 0 {
				t.Fatalf("%d containers still running after KillPod returned", n)
			}
			s, _ := r.status.GetPodStatus(pod.UID)
			if s.Phase != v1.PodFailed || s.Reason != "Terminated" {
				t.Fatalf("status = %s/%s, want Failed/Terminated", s.Phase, s.Reason)
			}
			if len(r.loop.ActivePods()) != 0 {
				t.Fatal("a killed pod is still listed as active")
			}
			if ps := r.loop.Pods(); len(ps) != 1 || ps[0].UID != pod.UID {
				t.Fatalf("Pods() = %d pods, want the killed pod still known (the kubelet API lists it)", len(ps))
			}
			// A node-level kill stops the pod but does not delete it: its containers stay for logs.
			if len(r.containers(t, "uid-6")) == 0 {
				t.Fatal("a pod killed for shutdown must keep its (stopped) containers")
			}
		})
	}
}

func TestAdmittersRejectFirst(t *testing.T) {
	r := newRig(t, nil)
	r.loop.deps.Admitters = []func(*v1.Pod) *Rejection{func(*v1.Pod) *Rejection {
		return &Rejection{Reason: "NodeShutdown", Message: "Pod was rejected as the node is shutting down."}
	}}
	r.ready()
	pod := newPod("uid-7", "late")
	r.add("api", pod)
	r.waitRejected(t, pod, "NodeShutdown")
}
