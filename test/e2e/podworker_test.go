//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

// podGoneFromNode polls until the pod is gone from the API server and the
// runtime holds no container or sandbox of uid.
func podGoneFromNode(ctx context.Context, f *framework.Framework, ns, name, uid string, timeout time.Duration) error {
	return framework.WaitFor(ctx, timeout, "pod "+ns+"/"+name+" gone from the API and the runtime", func(ctx context.Context) (bool, error) {
		_, err := f.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil || !apierrors.IsNotFound(err) {
			return false, err
		}
		ctrs, err := f.CRI.PodContainers(ctx, uid)
		if err != nil {
			return false, err
		}
		sbs, err := f.CRI.PodSandboxesOf(ctx, uid)
		if err != nil {
			return false, err
		}
		return len(ctrs) == 0 && len(sbs) == 0, nil
	})
}

// TestPodWorkerDeleteCancelsHungPostStart (issue 14, item 2): a pod whose postStart
// exec hook never returns is deleted with grace 1s; the hung sync is cancelled and
// the pod is gone from the API server and from containerd within the grace
// period plus a few seconds. Before, the worker waited for the hook for ever.
func TestPodWorkerDeleteCancelsHungPostStart(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	startNode(t, f, framework.NodeletOptions{})
	p := f.BusyboxPod(ns, "hung-poststart", "sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait")
	p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
	p.Spec.Containers[0].Lifecycle = &v1.Lifecycle{
		PostStart: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"sleep", "3600"}}},
	}
	pod := f.CreatePod(ctx, p)
	uid := string(pod.UID)
	// The container runs and the postStart hook hangs inside the sync.
	err := framework.WaitFor(ctx, 2*time.Minute, "the container to run", func(ctx context.Context) (bool, error) {
		list, err := f.CRI.PodContainers(ctx, uid)
		if err != nil {
			return false, err
		}
		return len(list) == 1 && list[0].State == runtimeapi.ContainerState_CONTAINER_RUNNING, nil
	})
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	f.DeletePod(ctx, ns, pod.Name, ptr.To[int64](1))
	// Grace 1s (nodelet, as upstream, gives a container at least 2s) plus a few
	// seconds for the relist, the status manager and the API.
	const bound = 12 * time.Second
	if err := podGoneFromNode(ctx, f, ns, pod.Name, uid, bound); err != nil {
		list, _ := f.CRI.PodContainers(ctx, uid)
		t.Fatalf("%v; containers: %v", err, list)
	}
	t.Logf("pod with a hung postStart hook gone from the API and containerd %.1fs after a delete with grace 1s", time.Since(start).Seconds())
}

// TestPodWorkerStaticPodRemovedOnce (issue 14, item 1): removing a static pod's
// manifest while its container is slow to stop (it traps TERM and takes 3s)
// stops and removes the pod through its one worker: containerd sees exactly one
// RemoveContainer per container, and nodelet never starts an "orphan" worker
// for the same UID.
func TestPodWorkerStaticPodRemovedOnce(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	n, static := startWithSlowStopStatic(t, f, "slow-stop", 0)
	name := "slow-stop-" + f.Env.NodeName
	f.WaitForPod(ctx, "default", name, 2*time.Minute, "a Running mirror pod", func(p *v1.Pod) bool {
		return p.Status.Phase == v1.PodRunning && framework.IsPodReady(p)
	})
	byName := map[string]string{framework.LabelPodName: name, framework.LabelPodNamespace: "default"}
	ctrs, err := f.CRI.Containers(ctx, byName)
	if err != nil || len(ctrs) != 1 {
		t.Fatalf("containers of %s: %v (err %v), want 1", name, ctrs, err)
	}
	uid := ctrs[0].Labels[framework.LabelPodUID]
	ids := []string{ctrs[0].Id}

	logPath := containerdLog(f)
	from := fileSize(t, logPath)
	start := time.Now()
	n.RemoveStaticPod(static.Name)
	if err := podGoneFromNode(ctx, f, "default", name, uid, time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("static pod gone %.1fs after its manifest was removed", time.Since(start).Seconds())
	// An observation window, not a synchronisation: three housekeeping periods
	// in which a second worker would call RemoveContainer again.
	time.Sleep(6 * time.Second)

	calls := removeContainerCalls(t, logPath, from, ids)
	for _, id := range ids {
		if calls[id] != 1 {
			t.Errorf("containerd saw %d RemoveContainer calls for container %s, want exactly 1", calls[id], id)
		}
	}
	orphans := 0
	for _, line := range strings.Split(n.Logs(), "\n") {
		if strings.Contains(line, "Killing pod that is no longer wanted on this node") && strings.Contains(line, uid) {
			orphans++
		}
	}
	if orphans > 1 {
		t.Errorf("nodelet started %d orphan workers for the static pod's UID %s", orphans, uid)
	}
	t.Logf("RemoveContainer calls per container: %v; orphan workers: %d", calls, orphans)
}

// startWithSlowStopStatic starts nodelet with one static pod, name, whose
// container takes 3s to stop after TERM; nodelet reads the manifest dir every
// second, so a removal is seen at once. verbosity 0 is startNode's default.
func startWithSlowStopStatic(t *testing.T, f *framework.Framework, name string, verbosity int) (*framework.Nodelet, *v1.Pod) {
	t.Helper()
	static := f.BusyboxPod("default", name, "sh", "-c", "trap 'sleep 3; exit 0' TERM; sleep 3600 & wait")
	static.Spec.HostNetwork = true
	static.Spec.TerminationGracePeriodSeconds = ptr.To[int64](10)
	n := startNode(t, f, framework.NodeletOptions{Verbosity: verbosity, StaticPods: []*v1.Pod{static}, Config: func(c *kubeletconfigv1beta1.KubeletConfiguration) {
		c.FileCheckFrequency = metav1.Duration{Duration: time.Second}
	}})
	return n, static
}

// containerdLog is the rig's containerd log, which has a line for every CRI
// RemoveContainer request (also those that fail).
func containerdLog(f *framework.Framework) string {
	dir := f.Env.All["LOGS_DIR"]
	if dir == "" {
		dir = filepath.Join(f.Env.RigDir, "logs")
	}
	return filepath.Join(dir, "containerd.log")
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatalf("containerd's log: %v", err)
	}
	return fi.Size()
}

// removeContainerCalls counts, in the log from offset on, the RemoveContainer
// requests for each of ids (containerd logs the request, then its outcome).
func removeContainerCalls(t *testing.T, path string, offset int64, ids []string) map[string]int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading containerd's log: %v", err)
	}
	out := map[string]int{}
	for _, line := range strings.Split(string(data[min(offset, int64(len(data))):]), "\n") {
		if !strings.Contains(line, "RemoveContainer for ") || strings.Contains(line, "returns successfully") || strings.Contains(line, " failed") {
			continue
		}
		for _, id := range ids {
			if strings.Contains(line, id) {
				out[id]++
			}
		}
	}
	return out
}

// containerStates lists the pod's containers named name in each state.
func containerStates(ctx context.Context, f *framework.Framework, uid, name string) (map[runtimeapi.ContainerState][]string, error) {
	list, err := f.CRI.Containers(ctx, map[string]string{framework.LabelPodUID: uid, framework.LabelContainerName: name})
	if err != nil {
		return nil, err
	}
	out := map[runtimeapi.ContainerState][]string{}
	for _, c := range list {
		out[c.State] = append(out[c.State], c.Id)
	}
	return out, nil
}

// TestPodWorkerStaticPodPutBackRunsAgain: a static pod's manifest removed and put
// back unchanged brings the pod back under the same UID (a hash of the file). The
// pod runs again and its mirror pod comes back, both when the manifest returns
// after the old pod is gone and when it returns while the old pod still stops.
// Before, the finished worker (or the old life's terminal status) kept the pod
// from ever running again: no container, no mirror.
func TestPodWorkerStaticPodPutBackRunsAgain(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	n, static := startWithSlowStopStatic(t, f, "put-back", 4) // 4: "Pod worker forgotten"
	name := "put-back-" + f.Env.NodeName
	runningMirror := func(what string, not types.UID) *v1.Pod {
		t.Helper()
		return f.WaitForPod(ctx, "default", name, 2*time.Minute, what, func(p *v1.Pod) bool {
			return p.UID != not && p.Status.Phase == v1.PodRunning && framework.IsPodReady(p)
		})
	}
	mirror := runningMirror("a Running mirror pod", "")
	byName := map[string]string{framework.LabelPodName: name, framework.LabelPodNamespace: "default"}
	ctrs, err := f.CRI.Containers(ctx, byName)
	if err != nil || len(ctrs) != 1 {
		t.Fatalf("containers of %s: %v (err %v), want 1", name, ctrs, err)
	}
	uid := ctrs[0].Labels[framework.LabelPodUID]

	forgotten := `"Pod worker forgotten" pod="default/` + name + `"`
	for _, tc := range []struct {
		name string
		wait bool // wait for the old pod's worker to be gone before putting the manifest back
	}{
		{name: "after the old worker is gone", wait: true},
		{name: "while the old pod still stops"},
	} {
		before, err := containerStates(ctx, f, uid, "main")
		if err != nil {
			t.Fatal(err)
		}
		old := before[runtimeapi.ContainerState_CONTAINER_RUNNING]
		start := time.Now()
		n.RemoveStaticPod(static.Name)
		if tc.wait {
			if err := podGoneFromNode(ctx, f, "default", name, uid, time.Minute); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			// Housekeeping drops the old worker once the runtime no longer lists the pod.
			drops := strings.Count(n.Logs(), forgotten)
			err := framework.WaitFor(ctx, 30*time.Second, "the old worker to be dropped", func(context.Context) (bool, error) {
				return strings.Count(n.Logs(), forgotten) > drops, nil
			})
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
		} else {
			// The old container is asked to stop (it takes 3s after TERM).
			err := framework.WaitFor(ctx, 30*time.Second, "the old pod to be stopping", func(ctx context.Context) (bool, error) {
				_, err := f.Client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
				return apierrors.IsNotFound(err), nil
			})
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
		}
		n.WriteStaticPod(static)
		mirror = runningMirror(tc.name+": the mirror pod back and Running", mirror.UID)
		states, err := containerStates(ctx, f, uid, "main")
		if err != nil {
			t.Fatal(err)
		}
		now := states[runtimeapi.ContainerState_CONTAINER_RUNNING]
		if len(now) != 1 || slices.Contains(old, now[0]) {
			t.Fatalf("%s: running containers of UID %s = %v (before: %v), want one new one", tc.name, uid, now, old)
		}
		t.Logf("%s: static pod running again under the same UID %.1fs after its manifest was removed", tc.name, time.Since(start).Seconds())
	}
	// For the record (timing decides, so it is not asserted): how many put-backs
	// found the old worker still live.
	t.Logf("nodelet log: %d restart(s) asked of a live worker, %d worker(s) dropped",
		strings.Count(n.Logs(), "Pod is back in its source while its old life ends"), strings.Count(n.Logs(), forgotten))
}

// TestPodWorkerInitContainerLeftCreatedCompletesAfterRestart (issue 14, item 4):
// nodelet dies between an init container's CreateContainer and its
// StartContainer (a CRI proxy holds the start, then the test kills nodelet), so
// the runtime is left with the pod's sandbox and a CREATED init container. The
// restarted nodelet adopts the sandbox, runs a new instance of the init
// container and completes init: the pod runs. Before, the pod stayed in Init for
// ever, waiting for the created container to exit.
func TestPodWorkerInitContainerLeftCreatedCompletesAfterRestart(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	proxy := framework.StartCRIProxy(t, f.Env.ContainerRuntimeEndpoint)
	n := startNode(t, f, framework.NodeletOptions{Config: func(c *kubeletconfigv1beta1.KubeletConfiguration) {
		c.ContainerRuntimeEndpoint = proxy.Endpoint
	}})
	p := f.BusyboxPod(ns, "init-left-created", "sleep", "3600")
	p.Spec.InitContainers = []v1.Container{{
		Name: "setup", Image: f.Env.BusyboxImage, ImagePullPolicy: v1.PullNever,
		Command: []string{"sh", "-c", "echo initialized"},
	}}
	held := proxy.HoldStart(ns, p.Name, "setup")
	pod := f.CreatePod(ctx, p)
	uid := string(pod.UID)
	select {
	case <-held:
	case <-time.After(2 * time.Minute):
		t.Fatal("nodelet never started the init container")
	}
	n.Kill() // between CreateContainer and StartContainer
	setup, err := containerStates(ctx, f, uid, "setup")
	if err != nil {
		t.Fatal(err)
	}
	created := setup[runtimeapi.ContainerState_CONTAINER_CREATED]
	if len(created) != 1 || len(setup) != 1 {
		t.Fatalf("init containers after the kill = %v, want one CREATED", setup)
	}
	sbs, err := f.CRI.PodSandboxesOf(ctx, uid)
	if err != nil || len(sbs) != 1 || sbs[0].State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("sandboxes after the kill = %v (err %v), want one ready", sbs, err)
	}

	// The restarted nodelet talks to the runtime directly.
	n.Config.ContainerRuntimeEndpoint = f.Env.ContainerRuntimeEndpoint
	n.WriteConfig()
	n.Restart()
	running := f.WaitForPod(ctx, ns, pod.Name, 2*time.Minute, "the pod to complete init and run", func(p *v1.Pod) bool {
		return p.Status.Phase == v1.PodRunning && framework.IsPodReady(p)
	})
	if st := running.Status.InitContainerStatuses; len(st) != 1 || st[0].State.Terminated == nil || st[0].State.Terminated.ExitCode != 0 {
		t.Errorf("init container status = %+v, want terminated with exit code 0", st)
	}
	setup, err = containerStates(ctx, f, uid, "setup")
	if err != nil {
		t.Fatal(err)
	}
	exited := setup[runtimeapi.ContainerState_CONTAINER_EXITED]
	if len(exited) != 1 || exited[0] == created[0] {
		t.Errorf("init containers after the restart = %v (the one left created: %s), want a new instance that ran", setup, created[0])
	}
	after, err := f.CRI.PodSandboxesOf(ctx, uid)
	if err != nil || len(after) != 1 || after[0].Id != sbs[0].Id {
		t.Errorf("sandboxes after the restart = %v (err %v), want the adopted %s only", after, err, sbs[0].Id)
	}
	t.Logf("init containers after the restart: %v; sandbox %s adopted", setup, sbs[0].Id)
}
