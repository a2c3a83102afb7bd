//go:build chaos

package chaos

import (
	"context"
	"flag"
	"fmt"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

var (
	apiOutage   = flag.Duration("chaos.apiserver-outage", 30*time.Second, "TestAPIServerStopped: how long kube-apiserver stays stopped (the issue's figure is 5m)")
	apiPods     = flag.Int("chaos.apiserver-pods", 20, "TestAPIServerStopped: pods running through the outage (the issue's figure is 50)")
	apiDeleting = flag.Int("chaos.apiserver-deleting", 10, "TestAPIServerStopped: pods being deleted when the API server stops")
)

// apiFinishers is how many pods finish (exit 0, restartPolicy Never) during the outage: their
// Succeeded phase is a status the node must report once the API server is back.
const apiFinishers = 2

// apiDeleteGrace is the deleted pods' grace period: their containers (sleep, which ignores
// SIGTERM) are killed at its end, while the API server is down, so the final delete waits
// for its return.
const apiDeleteGrace = 10

// TestAPIServerStopped stops kube-apiserver (SIGTERM, as an upgrade or a crash-restart would)
// with pods running, pods being deleted and pods about to finish, and starts it again after
// the outage. The user checks that no running pod was killed (same containers, no restarts),
// that the node's Lease is renewed again soon after the return, that the statuses of what
// happened during the outage (pods that finished) reach the API within 30 s of the return,
// and that the pods deleted before the outage end gone from containerd and from the API.
func TestAPIServerStopped(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	running, deleting := *apiPods, *apiDeleting
	n := startNode(t, f, running+deleting+apiFinishers, nil)
	cs := fastClient(t, f)
	apiserver := rigDaemonOf(t, f, "kube-apiserver")
	t.Logf("CHAOS %s load=%s outage=%v pods=%d deleting=%d", t.Name(), loadavg(), *apiOutage, running, deleting)

	runNames, delNames, finNames := podNames("run", running), podNames("del", deleting), podNames("fin", apiFinishers)
	createPods(t, ctx, cs, runNames, func(name string) *v1.Pod { return sleepPod(f, ns, name) })
	createPods(t, ctx, cs, delNames, func(name string) *v1.Pod {
		p := sleepPod(f, ns, name)
		p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](apiDeleteGrace)
		return p
	})
	createPods(t, ctx, cs, finNames, func(name string) *v1.Pod {
		p := sleepPod(f, ns, name)
		p.Spec.Containers[0].Command = []string{"sh", "-c", "until [ -f /tmp/done ]; do sleep 0.2; done"}
		p.Spec.RestartPolicy = v1.RestartPolicyNever
		return p
	})
	pods := waitAllReady(t, ctx, cs, ns, running+deleting+apiFinishers, 3*time.Minute)
	before := podContainers(pods)
	uids := map[string]string{}
	for _, p := range pods {
		uids[p.Name] = string(p.UID)
	}
	lease0 := leaseRenewTime(t, ctx, f)

	// The deletions reach nodelet before the API server goes; their kills and final deletes
	// fall in the outage.
	for _, name := range delNames {
		f.DeletePod(ctx, ns, name, nil)
	}
	// The watch event reaches nodelet at once; its StopContainer then runs for the grace.
	time.Sleep(2 * time.Second)

	// The outage starts with SIGTERM: the API server stops taking requests at once, though its
	// drain can take long on a loaded machine (past 10 s it is killed).
	downAt := time.Now()
	apiserver.stop(t, syscall.SIGTERM, 10*time.Second)
	figure(t, "apiserver_exit_after_sigterm", time.Since(downAt))
	t.Logf("kube-apiserver stopped at %s", downAt.UTC().Format(time.RFC3339Nano))
	// The finishers exit during the outage: straight over CRI, the API server being down.
	for _, name := range finNames {
		id := strings.TrimPrefix(before[name].id, "containerd://")
		_, err := f.CRI.Runtime.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"touch", "/tmp/done"}, Timeout: 10})
		if err != nil {
			t.Fatalf("making %s finish during the outage: %v", name, err)
		}
	}
	// The running pods' containers are still running in the middle of the outage.
	time.Sleep(*apiOutage / 2)
	checkContainersRunning(t, ctx, f, before, runNames, "in the middle of the outage")
	time.Sleep(time.Until(downAt.Add(*apiOutage)))

	apiserver.start(t)
	restarted := time.Now()
	waitAPIServerBack(t, ctx, f, 2*time.Minute)
	upAt := time.Now()
	figure(t, "apiserver_start_to_ready", upAt.Sub(restarted))
	figure(t, "apiserver_down_for", upAt.Sub(downAt))
	// The rig's controllers must work again before the next test starts, whatever this one finds.
	t.Cleanup(func() { waitControllersBack(t, context.Background(), f, 5*time.Minute) })

	// Lease renewal resumes: a renewTime newer than the one before the outage.
	var lease1 time.Time
	err := framework.WaitFor(ctx, time.Minute, "the node Lease to be renewed after the API server's return", func(ctx context.Context) (bool, error) {
		l, err := f.Client.CoordinationV1().Leases("kube-node-lease").Get(ctx, f.Env.NodeName, metav1.GetOptions{})
		if err != nil || l.Spec.RenewTime == nil {
			return false, err
		}
		lease1 = l.Spec.RenewTime.Time
		return lease1.After(downAt), nil
	})
	leaseAfter := time.Since(upAt)
	if err != nil {
		t.Fatal(err)
	}
	figure(t, "lease_renewed_after_return", leaseAfter)
	figure(t, "lease_gap", lease1.Sub(lease0))
	// nodelet retries a failed renewal with a back-off capped at 7 s (upstream's), so a
	// renewal comes within that of the return, plus the write.
	if leaseAfter > 15*time.Second {
		t.Errorf("the node Lease was renewed %v after the API server's return; want within 15s", leaseAfter.Round(10*time.Millisecond))
	}

	// Statuses catch up: the finishers Succeeded, the deleted pods gone from the API, the
	// running ones Running and Ready.
	var pending []string
	err = framework.WaitFor(ctx, 2*time.Minute, "statuses of the outage in the API", func(ctx context.Context) (bool, error) {
		list, err := listPods(ctx, f.Client, ns)
		if err != nil {
			return false, err
		}
		byName := map[string]*v1.Pod{}
		for i := range list {
			byName[list[i].Name] = &list[i]
		}
		pending = pending[:0]
		for _, name := range finNames {
			if p := byName[name]; p == nil || p.Status.Phase != v1.PodSucceeded {
				pending = append(pending, name+" not Succeeded")
			}
		}
		for _, name := range delNames {
			if byName[name] != nil {
				pending = append(pending, name+" not gone")
			}
		}
		for _, name := range runNames {
			if p := byName[name]; p == nil || p.Status.Phase != v1.PodRunning || !framework.IsPodReady(p) {
				pending = append(pending, name+" not Running+Ready")
			}
		}
		return len(pending) == 0, nil
	})
	caughtUp := time.Since(upAt)
	if err != nil {
		t.Fatalf("%v: %s", err, firstN(pending, 10))
	}
	figure(t, "statuses_caught_up_after_return", caughtUp)
	if caughtUp > 30*time.Second {
		t.Errorf("the pods' statuses reached the API %v after the API server's return; want within 30s", caughtUp.Round(10*time.Millisecond))
	}

	// The deleted pods are gone from containerd too.
	var left []string
	err = framework.WaitFor(ctx, time.Minute, "the deleted pods' sandboxes gone from containerd", func(ctx context.Context) (bool, error) {
		left = left[:0]
		for _, name := range delNames {
			sbs, err := f.CRI.PodSandboxesOf(ctx, uids[name])
			if err != nil {
				return false, err
			}
			ctrs, err := f.CRI.PodContainers(ctx, uids[name])
			if err != nil {
				return false, err
			}
			if len(sbs)+len(ctrs) > 0 {
				left = append(left, fmt.Sprintf("%s (%d sandboxes, %d containers)", name, len(sbs), len(ctrs)))
			}
		}
		return len(left) == 0, nil
	})
	figure(t, "deleted_pods_gone_from_runtime_after_return", time.Since(upAt))
	if err != nil {
		t.Errorf("%v: %s", err, strings.Join(left, ", "))
	}

	// No running pod was killed: the same containers, still running, no restarts.
	checkContainersRunning(t, ctx, f, before, runNames, "after the outage")
	list, err := listPods(ctx, cs, ns)
	if err != nil {
		t.Fatal(err)
	}
	after := podContainers(list)
	var changed []string
	for _, name := range runNames {
		if after[name] != before[name] {
			changed = append(changed, fmt.Sprintf("%s: %+v -> %+v", name, before[name], after[name]))
		}
	}
	figure(t, "running_pods_changed", len(changed))
	if len(changed) > 0 {
		sort.Strings(changed)
		t.Errorf("running pods' containers changed across the outage:\n%s", strings.Join(changed, "\n"))
	}
	if !n.Running() {
		t.Errorf("nodelet exited during the outage: %v", n.ExitError())
	}
	t.Logf("CHAOS %s load=%s", t.Name(), loadavg())
}

// leaseRenewTime is the node Lease's renewTime now.
func leaseRenewTime(t testing.TB, ctx context.Context, f *framework.Framework) time.Time {
	t.Helper()
	l, err := f.Client.CoordinationV1().Leases("kube-node-lease").Get(ctx, f.Env.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading the node Lease: %v", err)
	}
	if l.Spec.RenewTime == nil {
		t.Fatalf("the node Lease has no renewTime")
	}
	return l.Spec.RenewTime.Time
}

// checkContainersRunning fails the test unless every named pod's container (from want) is
// still running in containerd.
func checkContainersRunning(t testing.TB, ctx context.Context, f *framework.Framework, want map[string]podContainer, names []string, when string) {
	t.Helper()
	for _, name := range names {
		id := strings.TrimPrefix(want[name].id, "containerd://")
		st, err := f.CRI.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
		switch {
		case err != nil:
			t.Errorf("%s: status of pod %s's container %s: %v", when, name, id, err)
		case st.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING:
			t.Errorf("%s: pod %s's container %s is %s (exit %d, %s)", when, name, id, st.GetStatus().GetState(), st.GetStatus().GetExitCode(), st.GetStatus().GetReason())
		}
	}
}
