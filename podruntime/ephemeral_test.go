package podruntime

import (
	"context"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/cri"
)

func addEphemeral(pod *v1.Pod, name, target string) {
	pod.Spec.EphemeralContainers = append(pod.Spec.EphemeralContainers, v1.EphemeralContainer{
		EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: name, Image: "busybox:1", Command: []string{"sh"}, Stdin: true, TTY: true},
		TargetContainerName:      target,
	})
}

// A debug container added to a running pod starts once, in the pod's sandbox,
// in the process namespace of its target (the others keep their own), and is
// never restarted after it exits.
func TestEphemeralContainerStartsOnceInItsTargetsPidNamespace(t *testing.T) {
	r := newSyncRig(t)
	ctx := context.Background()
	pod := syncPod("debugme", v1.RestartPolicyAlways, nil, "app")
	m := r.manager()
	if _, err := m.SyncPod(ctx, pod, r.status(pod)); err != nil {
		t.Fatalf("first sync: %v", err)
	}
	appID := r.containerID(pod, "app", runtimeapi.ContainerState_CONTAINER_RUNNING)
	sandboxID := r.status(pod).Sandboxes[0].Id

	addEphemeral(pod, "debugger", "app")
	addEphemeral(pod, "plain", "")
	r.fake.ResetCalls()
	if _, err := m.SyncPod(ctx, pod, r.status(pod)); err != nil {
		t.Fatalf("sync after adding ephemeral containers: %v", err)
	}
	if slices.Contains(r.fake.Calls(), "RunPodSandbox") {
		t.Errorf("a new sandbox was created for an ephemeral container; calls: %v", r.fake.Calls())
	}
	st := r.status(pod)
	if len(st.Sandboxes) != 1 || st.Sandboxes[0].Id != sandboxID {
		t.Errorf("sandboxes = %v, want only %s", st.Sandboxes, sandboxID)
	}
	debugID := r.containerID(pod, "debugger", runtimeapi.ContainerState_CONTAINER_RUNNING)
	plainID := r.containerID(pod, "plain", runtimeapi.ContainerState_CONTAINER_RUNNING)

	cfg := r.fake.ContainerConfig(debugID)
	ns := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	if ns.GetPid() != runtimeapi.NamespaceMode_TARGET || ns.GetTargetId() != appID {
		t.Errorf("debugger namespaces = %v, want pid TARGET of %s", ns, appID)
	}
	if ns.GetNetwork() != runtimeapi.NamespaceMode_POD || ns.GetIpc() != runtimeapi.NamespaceMode_POD {
		t.Errorf("debugger network/ipc = %v, want the pod's", ns)
	}
	if cfg.GetLogPath() != "debugger/0.log" || cfg.GetLabels()[cri.LabelContainerName] != "debugger" || !cfg.GetStdin() || !cfg.GetTty() {
		t.Errorf("debugger config: log %q, labels %v, stdin %v, tty %v", cfg.GetLogPath(), cfg.GetLabels(), cfg.GetStdin(), cfg.GetTty())
	}
	for id, name := range map[string]string{plainID: "plain", appID: "app"} {
		ns := r.fake.ContainerConfig(id).GetLinux().GetSecurityContext().GetNamespaceOptions()
		if ns.GetPid() != runtimeapi.NamespaceMode_CONTAINER || ns.GetTargetId() != "" {
			t.Errorf("%s namespaces = %v, want its own pid namespace", name, ns)
		}
	}

	r.fake.ExitContainer(debugID, 0, "")
	r.fake.ExitContainer(plainID, 137, "")
	r.fake.ResetCalls()
	for i := range 2 {
		if _, err := m.SyncPod(ctx, pod, r.status(pod)); err != nil {
			t.Fatalf("sync %d after the ephemeral containers exited: %v", i, err)
		}
	}
	if slices.Contains(r.fake.Calls(), "CreateContainer") {
		t.Errorf("an exited ephemeral container was restarted; calls: %v", r.fake.Calls())
	}
	if got := r.containers(pod, "app"); !slices.Equal(got, []runtimeapi.ContainerState{runtimeapi.ContainerState_CONTAINER_RUNNING}) {
		t.Errorf("app = %v, want it untouched and running", got)
	}
}

// With a process namespace shared by the pod (or the host's), the target is
// not needed: the ephemeral container gets the pod's options, as upstream.
func TestEphemeralTargetIgnoredWithSharedPidNamespace(t *testing.T) {
	r := newSyncRig(t)
	ctx := context.Background()
	pod := syncPod("shared", v1.RestartPolicyAlways, nil, "app")
	pod.Spec.ShareProcessNamespace = ptr.To(true)
	m := r.manager()
	if _, err := m.SyncPod(ctx, pod, r.status(pod)); err != nil {
		t.Fatalf("first sync: %v", err)
	}
	addEphemeral(pod, "debugger", "app")
	if _, err := m.SyncPod(ctx, pod, r.status(pod)); err != nil {
		t.Fatalf("sync after adding the ephemeral container: %v", err)
	}
	id := r.containerID(pod, "debugger", runtimeapi.ContainerState_CONTAINER_RUNNING)
	ns := r.fake.ContainerConfig(id).GetLinux().GetSecurityContext().GetNamespaceOptions()
	if ns.GetPid() != runtimeapi.NamespaceMode_POD || ns.GetTargetId() != "" {
		t.Errorf("namespaces = %v, want the pod's shared pid namespace", ns)
	}
}

// A target that is not running keeps the ephemeral container waiting
// (CreateContainerConfigError, as upstream); it starts once the target runs.
func TestEphemeralWaitsForItsTarget(t *testing.T) {
	r := newSyncRig(t)
	ctx := context.Background()
	pod := syncPod("target-down", v1.RestartPolicyAlways, nil, "app", "other")
	m := r.manager()
	if _, err := m.SyncPod(ctx, pod, r.status(pod)); err != nil {
		t.Fatalf("first sync: %v", err)
	}
	// The target exits and is in back-off, so the next sync does not restart it.
	r.fake.ExitContainer(r.containerID(pod, "app", runtimeapi.ContainerState_CONTAINER_RUNNING), 1, "")
	m.backoff.Next(BackoffKey(pod, &pod.Spec.Containers[0]), m.deps.Clock.Now())

	addEphemeral(pod, "debugger", "app")
	res, err := m.SyncPod(ctx, pod, r.status(pod))
	if err == nil || !strings.Contains(err.Error(), "unable to find target container app") {
		t.Fatalf("sync error = %v, want the missing target named", err)
	}
	w := res.Waiting["debugger"]
	if w.Reason != "CreateContainerConfigError" || w.Message != "unable to find target container app" {
		t.Errorf("debugger waiting = %+v", w)
	}
	if got := r.containers(pod, "debugger"); len(got) != 0 {
		t.Errorf("debugger containers = %v, want none while its target is down", got)
	}

	// Ephemeral containers start first in a sync (as upstream): the one that
	// restarts the target still finds it down; the next one starts the debugger.
	m.backoff.Reset(BackoffKey(pod, &pod.Spec.Containers[0]))
	if _, err := m.SyncPod(ctx, pod, r.status(pod)); err == nil || !strings.Contains(err.Error(), "unable to find target container app") {
		t.Fatalf("sync restarting the target: error %v, want the target still down", err)
	}
	if _, err := m.SyncPod(ctx, pod, r.status(pod)); err != nil {
		t.Fatalf("sync with the target running: %v", err)
	}
	id := r.containerID(pod, "debugger", runtimeapi.ContainerState_CONTAINER_RUNNING)
	appID := r.containerID(pod, "app", runtimeapi.ContainerState_CONTAINER_RUNNING)
	if ns := r.fake.ContainerConfig(id).GetLinux().GetSecurityContext().GetNamespaceOptions(); ns.GetTargetId() != appID {
		t.Errorf("debugger target = %q, want the running app %s", ns.GetTargetId(), appID)
	}
}

// KillPod stops ephemeral containers with the rest of the pod.
func TestKillPodStopsEphemeralContainers(t *testing.T) {
	r := newSyncRig(t)
	ctx := context.Background()
	pod := syncPod("killme", v1.RestartPolicyAlways, nil, "app")
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
	m := r.manager()
	if _, err := m.SyncPod(ctx, pod, r.status(pod)); err != nil {
		t.Fatalf("first sync: %v", err)
	}
	addEphemeral(pod, "debugger", "app")
	if _, err := m.SyncPod(ctx, pod, r.status(pod)); err != nil {
		t.Fatalf("sync adding the debugger: %v", err)
	}
	if err := m.KillPod(ctx, pod, r.status(pod), nil); err != nil {
		t.Fatalf("KillPod: %v", err)
	}
	for _, c := range r.status(pod).Containers {
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Errorf("container %s still running after KillPod", containerName(c))
		}
	}
}
