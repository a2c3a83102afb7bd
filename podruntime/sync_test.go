package podruntime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nodelet/nodelet/cri"
	"github.com/nodelet/nodelet/internal/testsupport/fakecri"
	"github.com/nodelet/nodelet/pleg"
)

// syncRig runs SyncPod over the fake CRI and reads the pod's status back through
// a real relist, as the sync loop does.
type syncRig struct {
	t      *testing.T
	fake   *fakecri.Runtime
	client *cri.Client
	root   string
	cache  *pleg.Cache
	relist *pleg.Generic
}

func newSyncRig(t *testing.T) *syncRig {
	t.Helper()
	fake := fakecri.New(t)
	client, err := cri.New(context.Background(), fake.Endpoint(), "", 10*time.Second)
	if err != nil {
		t.Fatalf("connecting to the fake runtime: %v", err)
	}
	t.Cleanup(func() { _ = client.Close(context.Background()) })
	cache := pleg.NewCache(clock.RealClock{})
	return &syncRig{t: t, fake: fake, client: client, root: t.TempDir(), cache: cache,
		relist: pleg.NewGeneric(client, cache, time.Second, time.Minute, clock.RealClock{})}
}

// manager is a fresh Manager, as after a nodelet start.
func (r *syncRig) manager() *Manager {
	cfg := Config{RootDir: r.root, PodLogsDir: filepath.Join(r.root, "logs")}
	return New(cfg, Deps{Runtime: r.client, Images: r.client, Volumes: noVolumes{}, Env: fakeSecrets{}, Node: func() NodeFacts { return NodeFacts{Name: "node1"} }, Recorder: record.NewFakeRecorder(1000), Clock: clock.RealClock{}})
}

func (r *syncRig) status(pod *v1.Pod) *pleg.PodStatus {
	r.t.Helper()
	r.relist.Relist(context.Background())
	st, err := r.cache.Get(pod.UID)
	if err != nil {
		r.t.Fatalf("reading the status of %s: %v", pod.Name, err)
	}
	return st
}

// containers returns the states of the pod's containers named name, oldest first.
func (r *syncRig) containers(pod *v1.Pod, name string) []runtimeapi.ContainerState {
	r.t.Helper()
	st := r.status(pod)
	var out []runtimeapi.ContainerState
	for _, c := range slices.Backward(st.Containers) {
		if containerName(c) == name {
			out = append(out, c.State)
		}
	}
	return out
}

func (r *syncRig) containerID(pod *v1.Pod, name string, state runtimeapi.ContainerState) string {
	r.t.Helper()
	for _, c := range r.status(pod).Containers {
		if containerName(c) == name && c.State == state {
			return c.Id
		}
	}
	r.t.Fatalf("no %s container %s", state, name)
	return ""
}

func syncPod(name string, policy v1.RestartPolicy, inits []string, containers ...string) *v1.Pod {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Spec:       v1.PodSpec{RestartPolicy: policy},
	}
	for _, n := range inits {
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, v1.Container{Name: n, Image: "busybox:1"})
	}
	for _, n := range containers {
		pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: n, Image: "busybox:1"})
	}
	return pod
}

// Nodelet stopped between CreateContainer and StartContainer of an init
// container: after its restart the pod must finish its initialization (issue
// 14, item 4), not wait forever for the created container to exit.
func TestInitContainerLeftCreatedIsStartedAfterRestart(t *testing.T) {
	r := newSyncRig(t)
	ctx := context.Background()
	pod := syncPod("init-created", v1.RestartPolicyAlways, []string{"setup"}, "app")

	// The first nodelet creates the init container and dies before starting it
	// (played by StartContainer failing; nothing starts it afterwards).
	r.fake.InjectError("StartContainer", errors.New("nodelet stopped here"))
	if _, err := r.manager().SyncPod(ctx, pod, r.status(pod)); err == nil {
		t.Fatal("the first sync's start was meant to fail")
	}
	if got := r.containers(pod, "setup"); !slices.Equal(got, []runtimeapi.ContainerState{runtimeapi.ContainerState_CONTAINER_CREATED}) {
		t.Fatalf("init container states = %v, want one created", got)
	}

	m := r.manager() // restarted
	if _, err := m.SyncPod(ctx, pod, r.status(pod)); err != nil {
		t.Fatalf("sync after the restart: %v", err)
	}
	// The leftover is removed first: one instance, running.
	want := []runtimeapi.ContainerState{runtimeapi.ContainerState_CONTAINER_RUNNING}
	if got := r.containers(pod, "setup"); !slices.Equal(got, want) {
		t.Fatalf("init container states after the restart = %v, want %v (a new instance runs, the leftover is gone)", got, want)
	}

	r.fake.ExitContainer(r.containerID(pod, "setup", runtimeapi.ContainerState_CONTAINER_RUNNING), 0, "")
	if _, err := m.SyncPod(ctx, pod, r.status(pod)); err != nil {
		t.Fatalf("sync after the init container completed: %v", err)
	}
	if got := r.containers(pod, "app"); !slices.Equal(got, []runtimeapi.ContainerState{runtimeapi.ContainerState_CONTAINER_RUNNING}) {
		t.Fatalf("app container states = %v, want it running: the pod completed init", got)
	}
}

// Nodelet killed between CreateContainer and StartContainer of an app
// container (issue 20 scenario 1): after its restart the leftover is removed
// before its replacement is created, and the replacement takes its attempt
// number (it never ran: restart count 0), so the pod has one container.
func TestAppContainerLeftCreatedIsReplacedAfterRestart(t *testing.T) {
	r := newSyncRig(t)
	ctx := context.Background()
	pod := syncPod("app-created", v1.RestartPolicyAlways, nil, "app")
	r.fake.InjectError("StartContainer", errors.New("nodelet stopped here"))
	if _, err := r.manager().SyncPod(ctx, pod, r.status(pod)); err == nil {
		t.Fatal("the first sync's start was meant to fail")
	}
	leftover := r.containerID(pod, "app", runtimeapi.ContainerState_CONTAINER_CREATED)

	r.fake.ResetCalls()
	if _, err := r.manager().SyncPod(ctx, pod, r.status(pod)); err != nil {
		t.Fatalf("sync after the restart: %v", err)
	}
	if got := r.containers(pod, "app"); !slices.Equal(got, []runtimeapi.ContainerState{runtimeapi.ContainerState_CONTAINER_RUNNING}) {
		t.Fatalf("app container states = %v, want one running (leftover removed)", got)
	}
	calls := r.fake.Calls()
	rm, create := slices.Index(calls, "RemoveContainer"), slices.Index(calls, "CreateContainer")
	if rm < 0 || create < 0 || rm > create {
		t.Errorf("calls %v: want RemoveContainer of the leftover before CreateContainer", calls)
	}
	if cfg := r.fake.ContainerConfig(leftover); cfg != nil {
		t.Errorf("leftover %s still exists", leftover)
	}
	running := r.containerID(pod, "app", runtimeapi.ContainerState_CONTAINER_RUNNING)
	cfg := r.fake.ContainerConfig(running)
	if cfg.GetMetadata().GetAttempt() != 0 || cfg.GetAnnotations()[cri.AnnotationContainerRestartCount] != "0" {
		t.Errorf("replacement attempt %d, restartCount %q: want 0, the leftover's (it never ran)",
			cfg.GetMetadata().GetAttempt(), cfg.GetAnnotations()[cri.AnnotationContainerRestartCount])
	}
}

// Nodelet killed during StartContainer (issue 20 scenario 1): containerd sees the
// call cancelled and ends the container exited, never started, StartError
// "context canceled". After the restart that attempt is no restart: it is removed
// and replaced with its attempt number, even under restartPolicy Never, so the
// pod has one container with restart count 0. A start that failed for the
// container's own reason keeps counting as upstream counts it.
func TestCutStartIsReplacedWithItsAttempt(t *testing.T) {
	for _, tc := range []struct {
		name            string
		code            int32
		reason, message string
		replaced        bool
	}{
		{"cancelled by nodelet's death", 128, "StartError", "failed to create containerd task: failed to create shim task: context canceled", true},
		{"lost by a restarted runtime", 255, "Unknown", "", true},
		{"the container's own failure", 128, "StartError", `exec: "nope": executable file not found in $PATH`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newSyncRig(t)
			ctx := context.Background()
			pod := syncPod("app-cut", v1.RestartPolicyNever, nil, "app")
			r.fake.InjectError("StartContainer", errors.New("nodelet stopped here"))
			if _, err := r.manager().SyncPod(ctx, pod, r.status(pod)); err == nil {
				t.Fatal("the first sync's start was meant to fail")
			}
			cut := r.containerID(pod, "app", runtimeapi.ContainerState_CONTAINER_CREATED)
			r.fake.FailStart(cut, tc.code, tc.reason, tc.message)

			if _, err := r.manager().SyncPod(ctx, pod, r.status(pod)); err != nil {
				t.Fatalf("sync after the restart: %v", err)
			}
			if !tc.replaced {
				if got := r.containers(pod, "app"); !slices.Equal(got, []runtimeapi.ContainerState{runtimeapi.ContainerState_CONTAINER_EXITED}) {
					t.Fatalf("app container states = %v, want the failed one only (restartPolicy Never)", got)
				}
				return
			}
			if got := r.containers(pod, "app"); !slices.Equal(got, []runtimeapi.ContainerState{runtimeapi.ContainerState_CONTAINER_RUNNING}) {
				t.Fatalf("app container states = %v, want one running (the cut one removed)", got)
			}
			if cfg := r.fake.ContainerConfig(cut); cfg != nil {
				t.Errorf("cut container %s still exists", cut)
			}
			cfg := r.fake.ContainerConfig(r.containerID(pod, "app", runtimeapi.ContainerState_CONTAINER_RUNNING))
			if cfg.GetMetadata().GetAttempt() != 0 || cfg.GetAnnotations()[cri.AnnotationContainerRestartCount] != "0" {
				t.Errorf("replacement attempt %d, restartCount %q: want 0, the cut one's (it never ran)",
					cfg.GetMetadata().GetAttempt(), cfg.GetAnnotations()[cri.AnnotationContainerRestartCount])
			}
		})
	}
}

// containerd can keep a task that a cancelled NewTask created after all: the cut
// container then cannot be removed ("cannot delete running task") and never will
// be. The pod must not wait for it forever: its replacement takes the next attempt.
func TestCutStartThatCannotBeRemovedDoesNotBlockThePod(t *testing.T) {
	r := newSyncRig(t)
	ctx := context.Background()
	pod := syncPod("app-stuck", v1.RestartPolicyAlways, nil, "app")
	r.fake.InjectError("StartContainer", errors.New("nodelet stopped here"))
	if _, err := r.manager().SyncPod(ctx, pod, r.status(pod)); err == nil {
		t.Fatal("the first sync's start was meant to fail")
	}
	cut := r.containerID(pod, "app", runtimeapi.ContainerState_CONTAINER_CREATED)
	r.fake.FailStart(cut, 128, "StartError", "failed to create containerd task: context canceled")
	r.fake.InjectError("RemoveContainer", status.Error(codes.FailedPrecondition, `failed to delete containerd container "x": cannot delete running task x: failed precondition`))
	if _, err := r.manager().SyncPod(ctx, pod, r.status(pod)); err != nil {
		t.Fatalf("sync with an unremovable cut container: %v", err)
	}
	if got := r.containers(pod, "app"); !slices.Contains(got, runtimeapi.ContainerState_CONTAINER_RUNNING) {
		t.Fatalf("app container states = %v, want a running replacement", got)
	}
	cfg := r.fake.ContainerConfig(r.containerID(pod, "app", runtimeapi.ContainerState_CONTAINER_RUNNING))
	if cfg.GetMetadata().GetAttempt() != 1 {
		t.Errorf("replacement attempt %d, want 1 (the cut one keeps 0)", cfg.GetMetadata().GetAttempt())
	}
	// Issue 33: the cut one never ran, so the replacement is no restart (the
	// fault suite's pod of never-exiting containers reported restartCount 1).
	if rc := cfg.GetAnnotations()[cri.AnnotationContainerRestartCount]; rc != "0" {
		t.Errorf("replacement restartCount %q, want 0: the cut one never ran", rc)
	}
	if cfg.GetLogPath() != filepath.Join("app", "1.log") {
		t.Errorf("replacement log %q, want app/1.log (its attempt's)", cfg.GetLogPath())
	}
}

// A cut start's log goes with it: containerd creates the file before the task
// the kill cut off, and once no instance of the container is left the count
// goes on from the log files (restartCountFromLogDir), which must not take the
// cut one for a restart (issue 33).
func TestCutStartLogIsNoRestart(t *testing.T) {
	r := newSyncRig(t)
	ctx := context.Background()
	pod := syncPod("app-cutlog", v1.RestartPolicyAlways, nil, "app")
	r.fake.InjectError("StartContainer", errors.New("nodelet stopped here"))
	if _, err := r.manager().SyncPod(ctx, pod, r.status(pod)); err == nil {
		t.Fatal("the first sync's start was meant to fail")
	}
	cut := r.containerID(pod, "app", runtimeapi.ContainerState_CONTAINER_CREATED)
	var logPath string
	for _, c := range r.status(pod).Containers {
		if c.Id == cut {
			logPath = c.GetLogPath()
		}
	}
	if logPath == "" {
		t.Fatal("the cut container has no log path")
	}
	// What containerd leaves: the log it opened for the NewTask the kill cut off.
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(logPath, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	r.fake.FailStart(cut, 128, "StartError", "failed to create containerd task: context canceled")

	// The cut one is removed; creating its replacement fails this time.
	r.fake.InjectError("CreateContainer", errors.New("runtime not ready"))
	if _, err := r.manager().SyncPod(ctx, pod, r.status(pod)); err == nil {
		t.Fatal("the replacement's creation was meant to fail")
	}
	if got := r.containers(pod, "app"); len(got) != 0 {
		t.Fatalf("app container states = %v, want none (the cut one removed)", got)
	}
	if _, err := r.manager().SyncPod(ctx, pod, r.status(pod)); err != nil {
		t.Fatalf("sync with no instance left: %v", err)
	}
	cfg := r.fake.ContainerConfig(r.containerID(pod, "app", runtimeapi.ContainerState_CONTAINER_RUNNING))
	if cfg.GetMetadata().GetAttempt() != 0 || cfg.GetAnnotations()[cri.AnnotationContainerRestartCount] != "0" {
		t.Errorf("attempt %d, restartCount %q: want 0 and 0 (the cut one never ran)",
			cfg.GetMetadata().GetAttempt(), cfg.GetAnnotations()[cri.AnnotationContainerRestartCount])
	}
}

// containerd refuses to remove a container whose StartContainer (from the
// nodelet that was killed) is still in flight. That is retried shortly: the
// sync does not fail, the container gets no Waiting reason, and no second
// instance is created meanwhile.
func TestRemoveStartingContainerRetried(t *testing.T) {
	r := newSyncRig(t)
	ctx := context.Background()
	pod := syncPod("app-starting", v1.RestartPolicyAlways, nil, "app")
	r.fake.InjectError("StartContainer", errors.New("nodelet stopped here"))
	if _, err := r.manager().SyncPod(ctx, pod, r.status(pod)); err == nil {
		t.Fatal("the first sync's start was meant to fail")
	}

	m := r.manager() // restarted
	// containerd's words (internal/cri/server/container_remove.go), code Unknown.
	r.fake.InjectError("RemoveContainer", errors.New(`failed to set removing state for container "abc": container is in starting state, can't be removed`))
	r.fake.ResetCalls()
	res, err := m.SyncPod(ctx, pod, r.status(pod))
	if err != nil {
		t.Fatalf("a busy leftover failed the sync: %v", err)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > 2*time.Second {
		t.Errorf("RequeueAfter = %v, want a short retry", res.RequeueAfter)
	}
	if w, ok := res.Waiting["app"]; ok {
		t.Errorf("app waits with %v: a busy leftover is no failure", w)
	}
	if slices.Contains(r.fake.Calls(), "CreateContainer") {
		t.Errorf("a second instance was created while the leftover was busy: %v", r.fake.Calls())
	}
	if got := r.containers(pod, "app"); !slices.Equal(got, []runtimeapi.ContainerState{runtimeapi.ContainerState_CONTAINER_CREATED}) {
		t.Fatalf("app container states = %v, want the leftover only", got)
	}

	// The retry finds the runtime done with it.
	if _, err := m.SyncPod(ctx, pod, r.status(pod)); err != nil {
		t.Fatalf("retried sync: %v", err)
	}
	if got := r.containers(pod, "app"); !slices.Equal(got, []runtimeapi.ContainerState{runtimeapi.ContainerState_CONTAINER_RUNNING}) {
		t.Fatalf("app container states after the retry = %v, want one running", got)
	}
}

// A pod whose containers all succeeded under OnFailure loses its sandbox: no new
// one is created only to be killed (issue 14, item 5).
func TestNoSandboxForAPodThatIsDone(t *testing.T) {
	r := newSyncRig(t)
	ctx := context.Background()
	pod := syncPod("done", v1.RestartPolicyOnFailure, []string{"setup"}, "app")
	m := r.manager()
	for _, step := range []string{"setup", "app"} {
		if _, err := m.SyncPod(ctx, pod, r.status(pod)); err != nil {
			t.Fatalf("sync to start %s: %v", step, err)
		}
		r.fake.ExitContainer(r.containerID(pod, step, runtimeapi.ContainerState_CONTAINER_RUNNING), 0, "")
	}
	st := r.status(pod)
	if err := r.client.StopPodSandbox(ctx, st.Sandboxes[0].Id); err != nil {
		t.Fatal(err)
	}

	r.fake.ResetCalls()
	if _, err := m.SyncPod(ctx, pod, r.status(pod)); err != nil {
		t.Fatalf("sync of the finished pod: %v", err)
	}
	calls := r.fake.Calls()
	for _, forbidden := range []string{"RunPodSandbox", "CreateContainer", "RemoveContainer"} {
		if slices.Contains(calls, forbidden) {
			t.Errorf("%s called for a pod with nothing left to run; calls: %v", forbidden, calls)
		}
	}
	if got := len(r.status(pod).Sandboxes); got != 1 {
		t.Errorf("sandboxes = %d, want the old one only", got)
	}
}

// A new sandbox runs the init containers again from the first, as upstream:
// those of the old sandbox are removed so none passes for completed.
func TestNewSandboxRerunsInitContainers(t *testing.T) {
	r := newSyncRig(t)
	ctx := context.Background()
	pod := syncPod("rerun", v1.RestartPolicyAlways, []string{"one", "two"}, "app")
	m := r.manager()
	for _, step := range []string{"one", "two"} {
		if _, err := m.SyncPod(ctx, pod, r.status(pod)); err != nil {
			t.Fatalf("sync to start %s: %v", step, err)
		}
		r.fake.ExitContainer(r.containerID(pod, step, runtimeapi.ContainerState_CONTAINER_RUNNING), 0, "")
	}
	if _, err := m.SyncPod(ctx, pod, r.status(pod)); err != nil {
		t.Fatalf("sync to start the app: %v", err)
	}
	if err := r.client.StopPodSandbox(ctx, r.status(pod).Sandboxes[0].Id); err != nil {
		t.Fatal(err)
	}

	if _, err := m.SyncPod(ctx, pod, r.status(pod)); err != nil {
		t.Fatalf("sync after the sandbox died: %v", err)
	}
	if got := r.containers(pod, "one"); !slices.Equal(got, []runtimeapi.ContainerState{runtimeapi.ContainerState_CONTAINER_RUNNING}) {
		t.Errorf("first init container = %v, want only a new running instance", got)
	}
	if got := r.containers(pod, "two"); len(got) != 0 {
		t.Errorf("second init container = %v, want none until the first completed again", got)
	}
}

// While the runtime says its network is not ready, a pod on the pod network is not
// started (upstream's NetworkNotReady event and error) and a host-network pod is.
func TestNetworkNotReadyHoldsPodNetworkPods(t *testing.T) {
	r := newSyncRig(t)
	ctx := context.Background()
	nerr := "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized"
	facts := NodeFacts{Name: "node1"}
	rec := record.NewFakeRecorder(100)
	m := New(Config{RootDir: r.root, PodLogsDir: filepath.Join(r.root, "logs")}, Deps{Runtime: r.client, Images: r.client, Volumes: noVolumes{}, Env: fakeSecrets{}, Node: func() NodeFacts { return facts }, Recorder: rec, Clock: clock.RealClock{}})

	facts.NetworkError = nerr
	pod := syncPod("podnet", v1.RestartPolicyAlways, nil, "app")
	_, err := m.SyncPod(ctx, pod, r.status(pod))
	if err == nil || err.Error() != "network is not ready: "+nerr {
		t.Fatalf("SyncPod of a pod-network pod = %v, want upstream's network-not-ready error", err)
	}
	if ev := <-rec.Events; ev != "Warning NetworkNotReady network is not ready: "+nerr {
		t.Errorf("event = %q", ev)
	}
	if st := r.status(pod); len(st.Sandboxes) != 0 {
		t.Errorf("%d sandboxes created while the network was not ready", len(st.Sandboxes))
	}

	host := syncPod("hostnet", v1.RestartPolicyAlways, nil, "app")
	host.Spec.HostNetwork = true
	if _, err := m.SyncPod(ctx, host, r.status(host)); err != nil {
		t.Fatalf("SyncPod of a host-network pod: %v", err)
	}
	if got := r.containers(host, "app"); !slices.Equal(got, []runtimeapi.ContainerState{runtimeapi.ContainerState_CONTAINER_RUNNING}) {
		t.Errorf("host-network pod's containers = %v, want one running", got)
	}

	facts.NetworkError = ""
	if _, err := m.SyncPod(ctx, pod, r.status(pod)); err != nil {
		t.Fatalf("SyncPod once the network is ready: %v", err)
	}
	if got := r.containers(pod, "app"); !slices.Equal(got, []runtimeapi.ContainerState{runtimeapi.ContainerState_CONTAINER_RUNNING}) {
		t.Errorf("pod-network pod's containers = %v, want one running", got)
	}
}

// A container held back by its crash-loop back-off gets upstream's BackOff warning, with
// upstream's wording; its first restart (no back-off yet) gets none.
func TestCrashLoopBackOffEvent(t *testing.T) {
	r := newSyncRig(t)
	ctx := context.Background()
	rec := record.NewFakeRecorder(100)
	m := New(Config{RootDir: r.root, PodLogsDir: filepath.Join(r.root, "logs")}, Deps{Runtime: r.client, Images: r.client, Volumes: noVolumes{}, Env: fakeSecrets{}, Node: func() NodeFacts { return NodeFacts{Name: "node1"} }, Recorder: rec, Clock: clock.RealClock{}})
	pod := syncPod("crashy", v1.RestartPolicyAlways, nil, "app")
	backOffs := func() []string {
		var got []string
		for {
			select {
			case ev := <-rec.Events:
				if strings.HasPrefix(ev, "Warning BackOff ") {
					got = append(got, ev)
				}
			default:
				return got
			}
		}
	}
	for i := range 2 {
		if _, err := m.SyncPod(ctx, pod, r.status(pod)); err != nil {
			t.Fatalf("sync %d: %v", i, err)
		}
		if got := backOffs(); len(got) != 0 {
			t.Fatalf("sync %d started the container and warned of a back-off: %v", i, got)
		}
		r.fake.ExitContainer(r.containerID(pod, "app", runtimeapi.ContainerState_CONTAINER_RUNNING), 1, "Error")
	}
	res, err := m.SyncPod(ctx, pod, r.status(pod))
	if err != nil {
		t.Fatal(err)
	}
	if res.Waiting["app"].Reason != "CrashLoopBackOff" {
		t.Fatalf("waiting = %+v, want CrashLoopBackOff", res.Waiting)
	}
	want := "Warning BackOff Back-off restarting failed container app in pod crashy_default(uid-crashy)"
	if got := backOffs(); !slices.Equal(got, []string{want}) {
		t.Errorf("events = %q, want [%q]", got, want)
	}
}
