//go:build chaos

package chaos

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

var (
	runtimeRunning = flag.Int("chaos.runtime-running", 5, "TestRuntimeKilled: pods running when containerd is first killed")
	runtimeBurst   = flag.Int("chaos.runtime-burst", 20, "TestRuntimeKilled: pods created at once, containerd killed again while they start")
)

// runtimeHealthPeriod is how often nodelet asks the runtime for its Status (upstream's
// updateRuntimeUp period): a dead runtime is noticed within it.
const runtimeHealthPeriod = 5 * time.Second

// runtimeDownMessage is what nodelet's (and upstream's) Ready message says of a runtime that
// does not answer.
const runtimeDownMessage = "container runtime is down"

// TestRuntimeKilled kills containerd with SIGKILL twice — once under running pods, once in the
// middle of a burst of pod starts — and brings it back each time as the rig runs it. The user
// checks that the node said why it was not Ready (the runtime is down) within nodelet's
// runtime health period, that it was Ready again within 10 s of the runtime's return, that
// the running pods kept their containers (the shims outlive containerd), and that every pod
// of the burst ends Running and Ready with exactly one sandbox and one container in
// containerd: nothing doubled by a call whose answer was lost, nothing left behind.
func TestRuntimeKilled(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	running, burst := *runtimeRunning, *runtimeBurst
	n := startNode(t, f, running+burst, nil)
	cs := fastClient(t, f)
	cd := rigDaemonOf(t, f, "containerd")
	t.Logf("CHAOS %s load=%s", t.Name(), loadavg())

	// 1. containerd killed under running pods.
	createPods(t, ctx, cs, podNames("run", running), func(name string) *v1.Pod { return sleepPod(f, ns, name) })
	before := podContainers(waitAllReady(t, ctx, cs, ns, running, 2*time.Minute))
	killRuntime(t, ctx, f, cd, "running")
	after := podContainers(waitAllReady(t, ctx, cs, ns, running, time.Minute))
	for name, b := range before {
		if a := after[name]; a != b {
			t.Errorf("pod %s: container %s (restarts %d) before containerd was killed, %s (restarts %d) after: a running pod was restarted",
				name, b.id, b.restarts, a.id, a.restarts)
		}
	}

	// 2. containerd killed while a burst of pods starts: once a few sandboxes exist.
	burstNames := podNames("burst", burst)
	created := make(chan []error, 1)
	go func() {
		created <- concurrently(burstNames, func(name string) error {
			p := sleepPod(f, ns, name)
			_, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
			return err
		})
	}()
	killAfter := max(1, burst/4)
	var seen int
	err := framework.WaitFor(ctx, 2*time.Minute, fmt.Sprintf("%d sandboxes of the burst in containerd", killAfter), func(ctx context.Context) (bool, error) {
		sbs, err := f.CRI.PodSandboxes(ctx, map[string]string{framework.LabelPodNamespace: ns})
		if err != nil {
			return false, err
		}
		seen = len(sbs) - running
		return seen >= killAfter, nil
	})
	if errs := <-created; len(errs) > 0 {
		t.Fatalf("creating the burst: %d creates failed, first: %v", len(errs), errs[0])
	}
	if err != nil {
		t.Fatal(err)
	}
	figure(t, "burst_sandboxes_when_killed", seen)
	killRuntime(t, ctx, f, cd, "burst")

	start := time.Now()
	pods := waitAllReady(t, ctx, cs, ns, running+burst, 3*time.Minute)
	figure(t, "burst_all_ready_after_runtime_back", time.Since(start))
	s := summarize(pods)
	figure(t, "restarts", s.restarts)
	if s.restarts > 0 {
		// A sleep never exits: a restart is a container nodelet started twice.
		t.Errorf("%d container restarts after containerd was killed mid-burst; want 0", s.restarts)
	}
	now := podContainers(pods)
	for name, b := range before {
		if a := now[name]; a != b {
			t.Errorf("pod %s: container %s before the second kill, %s after", name, b.id, a.id)
		}
	}

	// Nothing doubled, nothing left: one sandbox and one container per pod. A sandbox or
	// container whose creation the kill cut short may linger until container GC (every
	// minute) removes it: allow it that long, and say how long it took.
	view, err := runtimeCheck(ctx, f.CRI, pods)
	if err != nil {
		t.Fatal(err)
	}
	figure(t, "runtime_problems_at_all_ready", len(view.problems))
	for _, p := range view.problems {
		t.Logf("at all Ready: %s", p)
	}
	start = time.Now()
	err = framework.WaitFor(ctx, 75*time.Second, "one sandbox and one container per pod in containerd", func(ctx context.Context) (bool, error) {
		v, err := runtimeCheck(ctx, f.CRI, pods)
		if err != nil {
			return false, err
		}
		view = v
		return len(view.problems) == 0, nil
	})
	figure(t, "runtime_leftovers_gone_after", time.Since(start))
	if err != nil {
		t.Errorf("%v:\n%s", err, strings.Join(view.problems, "\n"))
	}
	figure(t, "runtime_problems", len(view.problems))
	reportLeakedTasks(t, view.leaked)
	figure(t, "cut_starts_replaced", cutStartsReplaced(n))
	t.Logf("CHAOS %s load=%s", t.Name(), loadavg())
}

// killRuntime kills containerd with SIGKILL, waits until the node's Ready condition says the
// runtime is down (figure <phase>_down_reported_after, bound: the runtime health period plus
// 3 s for the status write and this poll), starts containerd again and waits until the node
// is Ready (figure <phase>_ready_after_runtime_back, bound 10 s).
func killRuntime(t *testing.T, ctx context.Context, f *framework.Framework, cd *rigDaemon, phase string) {
	t.Helper()
	cd.stop(t, syscall.SIGKILL, 10*time.Second)
	down, c := waitNodeReadyCondition(t, ctx, f, time.Minute, "to say "+runtimeDownMessage, func(c v1.NodeCondition) bool {
		return c.Status != v1.ConditionTrue && strings.Contains(c.Message, runtimeDownMessage)
	})
	figure(t, phase+"_down_reported_after", down)
	t.Logf("Ready condition with containerd down: %s %s: %q", c.Status, c.Reason, c.Message)
	if bound := runtimeHealthPeriod + 3*time.Second; down > bound {
		t.Errorf("%s: the node said %q %v after containerd was killed; want within %v (runtime health period %v)", phase, runtimeDownMessage, down.Round(10*time.Millisecond), bound, runtimeHealthPeriod)
	}
	cd.start(t)
	waitRuntimeBack(t, ctx, f, time.Minute)
	back, _ := waitNodeReadyCondition(t, ctx, f, 2*time.Minute, "to be True", func(c v1.NodeCondition) bool {
		return c.Status == v1.ConditionTrue
	})
	figure(t, phase+"_ready_after_runtime_back", back)
	if back > 10*time.Second {
		t.Errorf("%s: the node was Ready %v after containerd answered again; want within 10s", phase, back.Round(10*time.Millisecond))
	}
}
