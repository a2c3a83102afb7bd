//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

// The pod spec as upstream's NodeConformance specs use it, each as a user sees
// it through the API: $(VAR) in command and args, runAsNonRoot, failing init
// containers, and container-level restart policies and rules.

// TestCommandArgsVariableExpansion is "Variable Expansion should allow
// substituting values in a container's command/args": $(VAR) from env and
// envFrom-style derived values reaches the process expanded, $$ escapes,
// an unresolvable reference is passed as written.
func TestCommandArgsVariableExpansion(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	n := startNode(t, f, framework.NodeletOptions{})

	pod := f.BusyboxPod(ns, "expand", "sh", "-c", `TEST_VAR=wrong echo "cmd=$(TEST_VAR)"; echo "args=$0 $1 $2"`)
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	c := &pod.Spec.Containers[0]
	c.Args = []string{"$(DERIVED)", "$$(TEST_VAR)", "$(UNSET_VAR)"}
	c.Env = []v1.EnvVar{{Name: "TEST_VAR", Value: "test-value"}, {Name: "DERIVED", Value: "x-$(TEST_VAR)"}}
	created := f.CreatePod(ctx, pod)
	got := f.WaitForPod(ctx, ns, "expand", 2*time.Minute, "to succeed", func(p *v1.Pod) bool {
		return p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed
	})
	if got.Status.Phase != v1.PodSucceeded {
		t.Fatalf("pod ended %s: %s", got.Status.Phase, framework.DescribePod(got))
	}
	logFile := filepath.Join(n.PodLogsDir, ns+"_expand_"+string(created.UID), "main", "0.log")
	b, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"stdout F cmd=test-value\n", "stdout F args=x-test-value $(TEST_VAR) $(UNSET_VAR)\n"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("log %s lacks %q:\n%s", logFile, want, b)
		}
	}
	t.Logf("log of the expanded command: %q", string(b))
}

// TestRunAsNonRoot is "Security Context When creating a container with
// runAsNonRoot should not run without a specified user ID / with an explicit
// root user ID": the rig's busybox image names no user, so it would run as
// root. Such containers are not started, wait in CreateContainerConfigError,
// and the pod gets upstream's Failed events; with a non-root runAsUser the
// same image runs.
func TestRunAsNonRoot(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	startNode(t, f, framework.NodeletOptions{})

	pod := f.BusyboxPod(ns, "nonroot", "sleep", "3600")
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	pod.Spec.SecurityContext = &v1.PodSecurityContext{RunAsNonRoot: ptr.To(true)}
	pod.Spec.Containers[0].Name = "image-user"
	for _, c := range []struct {
		name string
		uid  int64
	}{{"explicit-root", 0}, {"explicit-nonroot", 1234}} {
		pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{
			Name: c.name, Image: f.Env.BusyboxImage, ImagePullPolicy: v1.PullNever, Command: []string{"sleep", "3600"},
			SecurityContext: &v1.SecurityContext{RunAsUser: ptr.To(c.uid)},
		})
	}
	created := f.CreatePod(ctx, pod)
	where := fmt.Sprintf("(pod: %q, container: ", "nonroot_"+ns+"("+string(created.UID)+")")
	want := map[string]string{
		"image-user":    "container has runAsNonRoot and image will run as root " + where + "image-user)",
		"explicit-root": "container's runAsUser breaks non-root policy " + where + "explicit-root)",
	}
	got := f.WaitForPod(ctx, ns, "nonroot", 2*time.Minute, "to refuse the root containers and run the other", func(p *v1.Pod) bool {
		ok := 0
		for _, cs := range p.Status.ContainerStatuses {
			w := cs.State.Waiting
			switch {
			case cs.Name == "explicit-nonroot" && cs.State.Running != nil:
				ok++
			case w != nil && w.Reason == "CreateContainerConfigError" && w.Message == want[cs.Name]:
				ok++
			}
		}
		return ok == 3
	})
	for _, cs := range got.Status.ContainerStatuses {
		if cs.Name != "explicit-nonroot" && (cs.ContainerID != "" || cs.LastTerminationState.Terminated != nil) {
			t.Errorf("container %s was created: %+v", cs.Name, cs)
		}
	}
	t.Logf("pod: %s", framework.DescribePod(got))
	for _, name := range []string{"image-user", "explicit-root"} {
		msg := "Error: " + want[name]
		err := framework.WaitFor(ctx, time.Minute, "a Failed event "+msg, func(ctx context.Context) (bool, error) {
			evs, err := f.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=nonroot,reason=Failed"})
			if err != nil {
				return false, err
			}
			for _, ev := range evs.Items {
				if ev.Type == v1.EventTypeWarning && ev.Message == msg {
					t.Logf("event %s %s: %s", ev.Type, ev.Reason, ev.Message)
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Errorf("%v; events: %v", err, eventReasons(ctx, t, f, ns, "nonroot"))
		}
	}
}

// watchPod watches pod ns/name from before it is created (create it in
// create), checks every version seen with check, and returns the first
// version done accepts. A check error fails the test with the version.
func watchPod(ctx context.Context, t *testing.T, f *framework.Framework, ns, name string, timeout time.Duration, create func(),
	check func(p *v1.Pod) error, done func(p *v1.Pod) bool) *v1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	w, err := f.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatalf("watching pod %s: %v", name, err)
	}
	defer w.Stop()
	create()
	var last *v1.Pod
	versions := 0
	for ev := range w.ResultChan() {
		p, ok := ev.Object.(*v1.Pod)
		if !ok {
			continue
		}
		versions++
		last = p
		if err := check(p); err != nil {
			t.Fatalf("pod version %d: %v\n%s", versions, err, framework.DescribePod(p))
		}
		if done(p) {
			t.Logf("done after %d pod versions: %s", versions, framework.DescribePod(p))
			return p
		}
	}
	if last != nil {
		t.Fatalf("pod %s not done within %v; last seen:\n%s", name, timeout, framework.DescribePod(last))
	}
	t.Fatalf("pod %s not seen within %v", name, timeout)
	return nil
}

// appWaitsPodInitializing is upstream's invariant while initialization is not
// complete: every app container waits, with reason PodInitializing, never ran.
func appWaitsPodInitializing(p *v1.Pod) error {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Waiting == nil || cs.State.Waiting.Reason != "PodInitializing" || cs.RestartCount != 0 {
			return fmt.Errorf("app container %s is not waiting with PodInitializing: %+v", cs.Name, cs.State)
		}
	}
	return nil
}

func initializedCondition(p *v1.Pod) *v1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == v1.PodInitialized {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

func initPod(f *framework.Framework, ns, name string, policy v1.RestartPolicy, init1, init2 string) *v1.Pod {
	pod := f.BusyboxPod(ns, name, "sleep", "3600")
	pod.Spec.Containers[0].Name = "run1"
	pod.Spec.RestartPolicy = policy
	for _, c := range []struct{ name, cmd string }{{"init1", init1}, {"init2", init2}} {
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, v1.Container{
			Name: c.name, Image: f.Env.BusyboxImage, ImagePullPolicy: v1.PullNever, Command: []string{"sh", "-c", c.cmd},
		})
	}
	return pod
}

// TestInitContainerFailsRestartNever is "InitContainer should not start app
// containers and fail the pod if init containers fail on a RestartNever pod":
// in every version of the pod the app container waits with PodInitializing,
// an init container not yet terminated waits with PodInitializing too; the
// second init container fails and the pod ends Failed, not initialized.
func TestInitContainerFailsRestartNever(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	startNode(t, f, framework.NodeletOptions{})

	pod := initPod(f, ns, "init-never", v1.RestartPolicyNever, "exit 0", "exit 1")
	end := watchPod(ctx, t, f, ns, "init-never", 2*time.Minute, func() { f.CreatePod(ctx, pod) },
		func(p *v1.Pod) error {
			if err := appWaitsPodInitializing(p); err != nil {
				return err
			}
			for _, cs := range p.Status.InitContainerStatuses {
				if w := cs.State.Waiting; cs.State.Terminated == nil && w != nil && w.Reason != "PodInitializing" {
					return fmt.Errorf("init container %s waits with %q, want PodInitializing", cs.Name, w.Reason)
				}
				if tm := cs.State.Terminated; cs.Name == "init1" && tm != nil && tm.ExitCode != 0 {
					return fmt.Errorf("init1 exited %d", tm.ExitCode)
				}
			}
			return nil
		},
		func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
	if n := len(end.Status.InitContainerStatuses); n != 2 {
		t.Fatalf("%d init container statuses, want 2", n)
	}
	if tm := end.Status.InitContainerStatuses[1].State.Terminated; tm == nil || tm.ExitCode != 1 {
		t.Errorf("init2 = %+v, want terminated with exit code 1", end.Status.InitContainerStatuses[1].State)
	}
	c := initializedCondition(end)
	if c == nil || c.Status != v1.ConditionFalse || c.Reason != "ContainersNotInitialized" || c.Message != "containers with incomplete status: [init2]" {
		t.Errorf("Initialized condition = %+v", c)
	}
	if len(end.Status.ContainerStatuses) != 1 || end.Status.ContainerStatuses[0].State.Waiting == nil {
		t.Errorf("app container statuses = %+v, want run1 waiting", end.Status.ContainerStatuses)
	}
}

// TestInitContainerFailsRestartAlways is "InitContainer should not start app
// containers if init containers fail on a RestartAlways pod": the failing
// first init container is retried with back-off (restart count 3), the
// second never leaves waiting (PodInitializing), the app container waits
// with PodInitializing, and the pod stays Pending, not initialized.
func TestInitContainerFailsRestartAlways(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	startNode(t, f, framework.NodeletOptions{})

	pod := initPod(f, ns, "init-always", v1.RestartPolicyAlways, "exit 1", "exit 0")
	sawLastState := false
	end := watchPod(ctx, t, f, ns, "init-always", 3*time.Minute, func() { f.CreatePod(ctx, pod) },
		func(p *v1.Pod) error {
			if err := appWaitsPodInitializing(p); err != nil {
				return err
			}
			if p.Status.Phase != v1.PodPending {
				return fmt.Errorf("phase %s, want Pending", p.Status.Phase)
			}
			if len(p.Status.InitContainerStatuses) != 2 {
				return nil
			}
			if w := p.Status.InitContainerStatuses[1].State.Waiting; w == nil || w.Reason != "PodInitializing" {
				return fmt.Errorf("init2 = %+v, want waiting with PodInitializing", p.Status.InitContainerStatuses[1].State)
			}
			first := p.Status.InitContainerStatuses[0]
			if tm := first.State.Terminated; tm != nil && tm.ExitCode == 0 {
				return fmt.Errorf("init1 exited 0")
			}
			sawLastState = sawLastState || first.LastTerminationState.Terminated != nil
			return nil
		},
		func(p *v1.Pod) bool {
			return len(p.Status.InitContainerStatuses) == 2 && p.Status.InitContainerStatuses[0].RestartCount >= 3
		})
	if !sawLastState {
		t.Error("init1 never showed its last termination")
	}
	c := initializedCondition(end)
	if c == nil || c.Status != v1.ConditionFalse || c.Reason != "ContainersNotInitialized" || c.Message != "containers with incomplete status: [init1 init2]" {
		t.Errorf("Initialized condition = %+v", c)
	}
}

// TestContainerRestartRules is "Pod Extended (container restart policy)
// Container Restart Rules" (ContainerRestartRules, beta, on by default): a
// container's own restartPolicy and restartPolicyRules override the pod's.
func TestContainerRestartRules(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	startNode(t, f, framework.NodeletOptions{})

	never, always := v1.ContainerRestartPolicyNever, v1.ContainerRestartPolicyAlways
	on42 := []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestart,
		ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}
	cases := []struct {
		name      string
		pod       v1.RestartPolicy
		policy    *v1.ContainerRestartPolicy
		rules     []v1.ContainerRestartRule
		exit      int
		restarted bool
	}{
		{"rule-match", v1.RestartPolicyNever, &never, on42, 42, true},
		{"rule-mismatch", v1.RestartPolicyNever, &never, on42, 1, false},
		{"container-never", v1.RestartPolicyAlways, &never, nil, 1, false},
		{"container-always", v1.RestartPolicyNever, &always, nil, 1, true},
	}
	for _, c := range cases {
		pod := f.BusyboxPod(ns, c.name, "sh", "-c", fmt.Sprintf("exit %d", c.exit))
		pod.Spec.RestartPolicy = c.pod
		pod.Spec.Containers[0].RestartPolicy, pod.Spec.Containers[0].RestartPolicyRules = c.policy, c.rules
		f.CreatePod(ctx, pod)
	}
	for _, c := range cases {
		if c.restarted {
			p := f.WaitForPod(ctx, ns, c.name, 2*time.Minute, "container restarted", func(p *v1.Pod) bool {
				return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount > 0
			})
			if p.Status.Phase != v1.PodRunning {
				t.Errorf("%s: phase %s while its container restarts, want Running", c.name, p.Status.Phase)
			}
			t.Logf("%s: %s", c.name, framework.DescribePod(p))
			continue
		}
		p := f.WaitForPod(ctx, ns, c.name, 2*time.Minute, "no longer running", func(p *v1.Pod) bool {
			return p.Status.Phase == v1.PodFailed || p.Status.Phase == v1.PodSucceeded
		})
		if p.Status.Phase != v1.PodFailed || len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("%s: want Failed with no restart: %s", c.name, framework.DescribePod(p))
		}
		t.Logf("%s: %s", c.name, framework.DescribePod(p))
	}
	// A container left down stays down: no restart shows up later.
	time.Sleep(5 * time.Second)
	for _, name := range []string{"rule-mismatch", "container-never"} {
		p, err := f.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if rc := p.Status.ContainerStatuses[0].RestartCount; rc != 0 {
			t.Errorf("%s restarted %d times after it ended", name, rc)
		}
	}
}
