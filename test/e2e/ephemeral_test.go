//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

// ephemeralStatus returns the pod's status of ephemeral container name, or nil.
func ephemeralStatus(p *v1.Pod, name string) *v1.ContainerStatus {
	for i := range p.Status.EphemeralContainerStatuses {
		if p.Status.EphemeralContainerStatuses[i].Name == name {
			return &p.Status.EphemeralContainerStatuses[i]
		}
	}
	return nil
}

func describeEphemeral(p *v1.Pod) string {
	var b strings.Builder
	for _, s := range p.Status.EphemeralContainerStatuses {
		fmt.Fprintf(&b, " %s(ready=%v restarts=%d %+v)", s.Name, s.Ready, s.RestartCount, s.State)
	}
	return b.String()
}

// addEphemeral adds ec to the pod through its ephemeralcontainers subresource,
// as kubectl debug does.
func addEphemeral(t *testing.T, ctx context.Context, f *framework.Framework, ns, name string, ec v1.EphemeralContainer) {
	t.Helper()
	p, err := f.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, ec)
	if _, err := f.Client.CoreV1().Pods(ns).UpdateEphemeralContainers(ctx, name, p, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("adding ephemeral container %s: %v", ec.Name, err)
	}
}

// TestEphemeralContainerDebugsARunningPod is `kubectl debug -it pod --image=busybox
// --target=app` on nodelet: the debug container added to a running pod starts in
// its sandbox, in the target's process namespace (each sees the other's
// processes although the pod shares none), its logs and exec work through the
// kubelet API, and its exit shows as terminated while the pod stays Running and
// Ready and the container is never restarted. A second one without a target
// sees only its own processes.
func TestEphemeralContainerDebugsARunningPod(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	startNode(t, f, framework.NodeletOptions{})

	// The target's process is recognisable in ps: "sleep 31337".
	pod := f.BusyboxPod(ns, "debugme", "sleep", "31337")
	pod.Spec.Containers[0].Name = "app"
	pod.Spec.ShareProcessNamespace = ptr.To(false)
	created := f.CreatePod(ctx, pod)
	f.WaitForPodReady(ctx, ns, "debugme", 2*time.Minute)

	addEphemeral(t, ctx, f, ns, "debugme", v1.EphemeralContainer{
		EphemeralContainerCommon: v1.EphemeralContainerCommon{
			Name: "debugger", Image: f.Env.BusyboxImage, ImagePullPolicy: v1.PullNever,
			Command: []string{"sh", "-c", `echo debugger-started; while [ ! -f /tmp/stop ]; do sleep 0.2; done; echo debugger-done`},
			// As kubectl debug -it sets them.
			Stdin: true, TTY: true,
			TerminationMessagePolicy: v1.TerminationMessageReadFile,
		},
		TargetContainerName: "app",
	})
	p := f.WaitForPod(ctx, ns, "debugme", time.Minute, "to report its ephemeral container running", func(p *v1.Pod) bool {
		s := ephemeralStatus(p, "debugger")
		return s != nil && s.State.Running != nil
	})
	s := ephemeralStatus(p, "debugger")
	if s.Ready || s.ContainerID == "" || s.RestartCount != 0 || s.Image != f.Env.BusyboxImage {
		t.Errorf("running ephemeral status = %+v, want not ready, a container ID, no restart, the spec's image", s)
	}
	if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].Name != "app" {
		t.Errorf("container statuses = %+v, want only app", p.Status.ContainerStatuses)
	}
	// It runs in the pod's existing sandbox.
	sbs, err := f.CRI.PodSandboxesOf(ctx, string(created.UID))
	if err != nil {
		t.Fatal(err)
	}
	if len(sbs) != 1 {
		t.Errorf("sandboxes of the pod = %d, want 1", len(sbs))
	}

	if err := framework.WaitFor(ctx, 30*time.Second, "the debugger's log", func(ctx context.Context) (bool, error) {
		out, err := kubectl(ctx, f, "-n", ns, "logs", "debugme", "-c", "debugger")
		return err == nil && strings.Contains(out, "debugger-started"), nil
	}); err != nil {
		out, _ := kubectl(ctx, f, "-n", ns, "logs", "debugme", "-c", "debugger")
		t.Fatalf("%v; kubectl logs -c debugger = %q", err, out)
	}
	if out := mustKubectl(t, ctx, f, "-n", ns, "exec", "debugme", "-c", "debugger", "--", "echo", "marco"); out != "marco\n" {
		t.Errorf("exec echo in the debugger = %q", out)
	}
	ps := mustKubectl(t, ctx, f, "-n", ns, "exec", "debugme", "-c", "debugger", "--", "ps")
	if !strings.Contains(ps, "sleep 31337") {
		t.Errorf("ps in the debugger does not show the target's process (target pid namespace):\n%s", ps)
	}
	// One namespace, seen from both sides: the target sees the debugger too.
	if ps := mustKubectl(t, ctx, f, "-n", ns, "exec", "debugme", "-c", "app", "--", "ps"); !strings.Contains(ps, "debugger-started") {
		t.Errorf("ps in app does not show the debugger's processes:\n%s", ps)
	}

	// The debugger ends; it is reported terminated and never restarted.
	mustKubectl(t, ctx, f, "-n", ns, "exec", "debugme", "-c", "debugger", "--", "touch", "/tmp/stop")
	p = f.WaitForPod(ctx, ns, "debugme", time.Minute, "to report its ephemeral container terminated", func(p *v1.Pod) bool {
		s := ephemeralStatus(p, "debugger")
		return s != nil && s.State.Terminated != nil
	})
	if term := ephemeralStatus(p, "debugger").State.Terminated; term.ExitCode != 0 || term.Reason != "Completed" || term.FinishedAt.IsZero() {
		t.Errorf("debugger terminated = %+v, want exit 0, Completed, a finish time", term)
	}

	// A second debugger without a target: adding it changes the spec (a sync),
	// which must not bring the first back; it sees only its own processes.
	addEphemeral(t, ctx, f, ns, "debugme", v1.EphemeralContainer{
		EphemeralContainerCommon: v1.EphemeralContainerCommon{
			Name: "untargeted", Image: f.Env.BusyboxImage, ImagePullPolicy: v1.PullNever,
			Command:                  []string{"sh", "-c", "ps; echo untargeted-done"},
			TerminationMessagePolicy: v1.TerminationMessageReadFile,
		},
	})
	p = f.WaitForPod(ctx, ns, "debugme", time.Minute, "to report its second ephemeral container terminated", func(p *v1.Pod) bool {
		s := ephemeralStatus(p, "untargeted")
		return s != nil && s.State.Terminated != nil
	})
	out := mustKubectl(t, ctx, f, "-n", ns, "logs", "debugme", "-c", "untargeted")
	if !strings.Contains(out, "untargeted-done") || strings.Contains(out, "sleep 31337") {
		t.Errorf("untargeted debugger's ps:\n%s\nwant its own processes only", out)
	}

	// Syncs go on (resync, the status updates): still one instance of each
	// debugger, the pod Running and Ready, its app never restarted.
	time.Sleep(5 * time.Second)
	p, err = f.Client.CoreV1().Pods(ns).Get(ctx, "debugme", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.Phase != v1.PodRunning || !framework.IsPodReady(p) {
		t.Errorf("pod after its debuggers ended: %s%s; want Running and Ready", framework.DescribePod(p), describeEphemeral(p))
	}
	if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].RestartCount != 0 || p.Status.ContainerStatuses[0].State.Running == nil {
		t.Errorf("app status = %+v, want running, never restarted", p.Status.ContainerStatuses)
	}
	for _, name := range []string{"debugger", "untargeted"} {
		s := ephemeralStatus(p, name)
		if s == nil || s.State.Terminated == nil || s.RestartCount != 0 || s.Ready {
			t.Errorf("%s status = %+v, want terminated, not ready, never restarted", name, s)
		}
		cs, err := f.CRI.Containers(ctx, map[string]string{framework.LabelPodUID: string(created.UID), framework.LabelContainerName: name})
		if err != nil {
			t.Fatal(err)
		}
		if len(cs) != 1 {
			t.Errorf("runtime containers named %s = %d, want 1 (ephemeral containers are never restarted)", name, len(cs))
		}
	}
}
