package podruntime

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/allocation"
	"github.com/nodelet/nodelet/cgroups"
)

// fakePodCgroup is a pod cgroup in memory; each write is logged with what the
// runtime holds for the container at that moment, which shows the order.
type fakePodCgroup struct {
	mu      sync.Mutex
	cfg     cgroups.ResourceConfig
	usage   int64
	log     []string
	snoop   func() string // the container's resources now
	failSet error
}

func (f *fakePodCgroup) PodCgroupConfig(*v1.Pod) (cgroups.ResourceConfig, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cfg, nil
}

func (f *fakePodCgroup) PodMemoryUsage(*v1.Pod) (int64, error) { return f.usage, nil }

func (f *fakePodCgroup) SetPodCgroupConfig(_ context.Context, _ *v1.Pod, rc cgroups.ResourceConfig) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failSet != nil {
		return f.failSet
	}
	f.cfg = mergeConfig(f.cfg, rc)
	what := ""
	switch {
	case rc.Memory != nil:
		what = fmt.Sprintf("pod memory=%d", *rc.Memory)
	case rc.CPUQuota != nil:
		what = fmt.Sprintf("pod quota=%d", *rc.CPUQuota)
	case rc.CPUShares != nil:
		what = fmt.Sprintf("pod shares=%d", *rc.CPUShares)
	}
	f.log = append(f.log, what+" while container "+f.snoop())
	return nil
}

type resizeRig struct {
	*syncRig
	actuated *allocation.State
	pcg      *fakePodCgroup
	rec      *record.FakeRecorder
}

func newResizeRig(t *testing.T) *resizeRig {
	r := &resizeRig{syncRig: newSyncRig(t), actuated: allocation.NewMemoryState(), rec: record.NewFakeRecorder(100)}
	i64 := func(v int64) *int64 { return &v }
	u64 := func(v uint64) *uint64 { return &v }
	r.pcg = &fakePodCgroup{cfg: cgroups.ResourceConfig{Memory: i64(64 << 20), CPUQuota: i64(10000), CPUPeriod: u64(100000), CPUShares: u64(102)}}
	return r
}

func (r *resizeRig) manager() *Manager {
	cfg := Config{RootDir: r.root, PodLogsDir: filepath.Join(r.root, "logs"),
		Resources: cgroups.ResourceOptions{CPUCFSQuota: true}}
	return New(cfg, Deps{Runtime: r.client, Images: r.client, Volumes: noVolumes{}, Env: fakeSecrets{}, Node: func() NodeFacts { return NodeFacts{Name: "node1", MemoryCapacity: 8 << 30} }, Recorder: r.rec, Clock: clock.RealClock{}, Actuated: r.actuated, PodResize: r.pcg})
}

func resizePod(policy []v1.ContainerResizePolicy, res v1.ResourceRequirements) *v1.Pod {
	pod := syncPod("resize", v1.RestartPolicyAlways, nil, "app")
	pod.Spec.Containers[0].Resources = res
	pod.Spec.Containers[0].ResizePolicy = policy
	return pod
}

func linuxResources(fake interface {
	ContainerConfig(string) *runtimeapi.ContainerConfig
}, id string) string {
	r := fake.ContainerConfig(id).GetLinux().GetResources()
	return fmt.Sprintf("shares=%d quota=%d memory=%d", r.GetCpuShares(), r.GetCpuQuota(), r.GetMemoryLimitInBytes())
}

// started runs a fresh pod of one Guaranteed 100m/64Mi container (resizePolicy
// policy) and returns the manager and the running container's ID; the pod
// cgroup log then shows the container's resources with snoop.
func (r *resizeRig) started(t *testing.T, policy []v1.ContainerResizePolicy) (*Manager, *v1.Pod, string) {
	t.Helper()
	m := r.manager()
	pod := resizePod(policy, rr("100m", "64Mi", "100m", "64Mi"))
	if _, err := m.SyncPod(context.Background(), pod, r.status(pod)); err != nil {
		t.Fatalf("first sync: %v", err)
	}
	id := r.containerID(pod, "app", runtimeapi.ContainerState_CONTAINER_RUNNING)
	r.pcg.snoop = func() string { return linuxResources(r.fake, id) }
	return m, pod, id
}

// 100m/64Mi grown to 200m/128Mi: the same container is updated in place,
// after the pod cgroup grew, and the new values are recorded as actuated.
func TestSyncPodResizesInPlace(t *testing.T) {
	ctx := context.Background()
	r := newResizeRig(t)
	m, pod, id := r.started(t, nil)
	if got := linuxResources(r.fake, id); got != "shares=102 quota=10000 memory=67108864" {
		t.Fatalf("created with %s", got)
	}

	resized := resizePod(nil, rr("200m", "128Mi", "200m", "128Mi"))
	res, err := m.SyncPod(ctx, resized, r.status(resized))
	if err != nil || !res.Resized || res.ResizeErr != nil {
		t.Fatalf("resize sync: res %+v, err %v", res, err)
	}
	if now := r.containerID(resized, "app", runtimeapi.ContainerState_CONTAINER_RUNNING); now != id {
		t.Fatalf("the container was replaced: %s -> %s", id, now)
	}
	if got := linuxResources(r.fake, id); got != "shares=204 quota=20000 memory=134217728" {
		t.Errorf("after the resize the runtime has %s", got)
	}
	want := []string{
		"pod memory=134217728 while container shares=102 quota=10000 memory=67108864",
		"pod quota=20000 while container shares=102 quota=10000 memory=134217728",
		"pod shares=204 while container shares=102 quota=10000 memory=134217728",
	}
	if strings.Join(r.pcg.log, "\n") != strings.Join(want, "\n") {
		t.Errorf("pod cgroup writes:\n%s\nwant\n%s", strings.Join(r.pcg.log, "\n"), strings.Join(want, "\n"))
	}
	got, _ := r.actuated.Container(pod.UID, "app")
	if !allocation.SameCPUMemory(got, resized.Spec.Containers[0].Resources) {
		t.Errorf("actuated = %v", got)
	}
	// Done: the next sync has nothing to resize.
	if res, err := m.SyncPod(ctx, resized, r.status(resized)); err != nil || res.Resized {
		t.Errorf("sync after the resize: resized again (%v), err %v", res.Resized, err)
	}

	// Shrunk back: containers first, the pod cgroup after (memory use is
	// checked first: without it a lower limit is refused).
	r.pcg.log = nil
	r.fake.SetMemoryUsage(id, 1<<20)
	if _, err := m.SyncPod(ctx, pod, r.status(pod)); err != nil {
		t.Fatalf("shrink: %v", err)
	}
	want = []string{
		"pod memory=67108864 while container shares=204 quota=20000 memory=67108864",
		"pod shares=102 while container shares=102 quota=10000 memory=67108864",
		"pod quota=10000 while container shares=102 quota=10000 memory=67108864",
	}
	if strings.Join(r.pcg.log, "\n") != strings.Join(want, "\n") {
		t.Errorf("pod cgroup writes when shrinking:\n%s\nwant\n%s", strings.Join(r.pcg.log, "\n"), strings.Join(want, "\n"))
	}
}

// RestartContainer on memory: the container is killed with upstream's words
// and started again with the new resources, in the resized pod cgroup.
func TestSyncPodResizeRestartsContainer(t *testing.T) {
	ctx := context.Background()
	r := newResizeRig(t)
	m, _, old := r.started(t, restartOnMemory)
	drain(r.rec)

	resized := resizePod(restartOnMemory, rr("100m", "128Mi", "100m", "128Mi"))
	res, err := m.SyncPod(ctx, resized, r.status(resized))
	if err != nil || !res.Resized {
		t.Fatalf("resize sync: %+v, %v", res, err)
	}
	if got := r.containers(resized, "app"); len(got) != 2 || got[0] != runtimeapi.ContainerState_CONTAINER_EXITED || got[1] != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("container states = %v, want the old one exited and a new one running", got)
	}
	id := r.containerID(resized, "app", runtimeapi.ContainerState_CONTAINER_RUNNING)
	if id == old {
		t.Fatal("the container was not restarted")
	}
	if n := r.fake.ContainerConfig(id).GetMetadata().GetAttempt(); n != 1 {
		t.Errorf("new container attempt = %d, want 1", n)
	}
	if got := linuxResources(r.fake, id); got != "shares=102 quota=10000 memory=134217728" {
		t.Errorf("restarted with %s", got)
	}
	if len(r.pcg.log) != 1 || !strings.HasPrefix(r.pcg.log[0], "pod memory=134217728") {
		t.Errorf("pod cgroup writes = %q, want the memory limit raised", r.pcg.log)
	}
	if !containsEvent(drain(r.rec), "Normal Killing Container app resize requires restart") {
		t.Error("no Killing event naming the resize")
	}
}

func containsEvent(events []string, want string) bool {
	for _, e := range events {
		if e == want {
			return true
		}
	}
	return false
}

// A memory limit is not lowered below what the container uses: the resize
// fails with upstream's words, nothing changes, and it is tried again later.
func TestSyncPodRefusesMemoryLimitBelowUsage(t *testing.T) {
	ctx := context.Background()
	r := newResizeRig(t)
	m, _, id := r.started(t, nil)
	r.fake.SetMemoryUsage(id, 40<<20)
	r.pcg.usage = 41 << 20

	shrunk := resizePod(nil, rr("100m", "32Mi", "100m", "32Mi"))
	res, err := m.SyncPod(ctx, shrunk, r.status(shrunk))
	if err == nil || res.ResizeErr == nil {
		t.Fatalf("shrinking below usage succeeded: %+v", res)
	}
	want := `cannot decrease memory limits: [attempting to set pod memory limit (33554432) below current usage (42991616), attempting to set container "app" memory limit (33554432) below current usage (41943040)]`
	if res.ResizeErr.Error() != want {
		t.Errorf("ResizeErr = %q\nwant        %q", res.ResizeErr, want)
	}
	if got := linuxResources(r.fake, id); got != "shares=102 quota=10000 memory=67108864" || len(r.pcg.log) != 0 {
		t.Errorf("a refused resize changed things: runtime %s, pod cgroup writes %q", got, r.pcg.log)
	}
	// Once the usage drops, the next sync resizes.
	r.fake.SetMemoryUsage(id, 10<<20)
	r.pcg.usage = 11 << 20
	if res, err := m.SyncPod(ctx, shrunk, r.status(shrunk)); err != nil || res.ResizeErr != nil {
		t.Fatalf("retry: %+v, %v", res, err)
	}
	if got := linuxResources(r.fake, id); got != "shares=102 quota=10000 memory=33554432" {
		t.Errorf("after the retry the runtime has %s", got)
	}
}

// An error of the runtime stops the resize; what succeeded is recorded, so
// the next sync resumes from there.
func TestSyncPodResizeErrorIsRetried(t *testing.T) {
	ctx := context.Background()
	r := newResizeRig(t)
	m, pod, id := r.started(t, nil)
	resized := resizePod(nil, rr("200m", "128Mi", "200m", "128Mi"))
	r.fake.InjectError("UpdateContainerResources", fmt.Errorf("runtime says no"))
	res, err := m.SyncPod(ctx, resized, r.status(resized))
	if err == nil || res.ResizeErr == nil || !strings.Contains(res.ResizeErr.Error(), "updating memory of container app") {
		t.Fatalf("resize with a failing runtime: %+v, %v", res, err)
	}
	if got, _ := r.actuated.Container(pod.UID, "app"); got.Limits.Memory().Value() != 64<<20 {
		t.Errorf("a failed update was recorded as actuated: %v", got)
	}
	if _, err := m.SyncPod(ctx, resized, r.status(resized)); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if got := linuxResources(r.fake, id); got != "shares=204 quota=20000 memory=134217728" {
		t.Errorf("after the retry the runtime has %s", got)
	}
}
