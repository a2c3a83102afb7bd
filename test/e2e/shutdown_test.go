//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/testsupport/dbustest"
	"github.com/nodelet/nodelet/test/e2e/framework"
)

// TestGracefulNodeShutdown drives nodelet's graceful node shutdown through a fake logind on
// a private D-Bus: the delay raised through the drop-in, the lock held, three pods of three
// priorities stopped in priority order on containerd, the lock released once they are down,
// new pods refused, and everything back after the shutdown is cancelled.
func TestGracefulNodeShutdown(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	bus := dbustest.Start(t, 5*time.Second)

	const groupGrace = 8
	groups := []kubeletconfigv1beta1.ShutdownGracePeriodByPodPriority{
		{Priority: 0, ShutdownGracePeriodSeconds: groupGrace},
		{Priority: 100000, ShutdownGracePeriodSeconds: groupGrace},
		{Priority: 1000000000, ShutdownGracePeriodSeconds: groupGrace},
	}
	const total = 3 * groupGrace * time.Second

	for name, value := range map[string]int32{"e2e-mid": 100000, "e2e-high": 1000000000} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
		err := f.Client.SchedulingV1().PriorityClasses().Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("deleting priority class %s left by an earlier run: %v", name, err)
		}
		if _, err := f.Client.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating priority class %s: %v", name, err)
		}
		t.Cleanup(func() {
			if err := f.Client.SchedulingV1().PriorityClasses().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Logf("cleanup: deleting priority class %s: %v", name, err)
			}
		})
	}

	n := startNode(t, f, framework.NodeletOptions{
		Env: bus.NodeletEnv(),
		Config: func(c *kubeletconfigv1beta1.KubeletConfiguration) {
			c.ShutdownGracePeriodByPodPriority = groups
		},
	})

	// At start: logind's 5s was too small for 24s, so nodelet wrote the drop-in and had
	// systemd reload logind.
	b, err := os.ReadFile(bus.DropIn)
	if err != nil {
		t.Fatalf("reading the logind drop-in nodelet should have written: %v", err)
	}
	if !strings.Contains(string(b), "[Login]\nInhibitDelayMaxSec=24\n") {
		t.Errorf("drop-in %s = %q, want [Login] InhibitDelayMaxSec=24", bus.DropIn, b)
	}
	if k := bus.Systemd.KillUnits(); len(k) != 1 || k[0] != (dbustest.KillUnitCall{Unit: "systemd-logind.service", Whom: "all", Signal: 1}) {
		t.Errorf("KillUnit calls = %+v, want one SIGHUP to systemd-logind.service", k)
	}
	if d := bus.Logind.Delay(); d != total {
		t.Errorf("logind's InhibitDelayMax after the reload = %s, want %s", d, total)
	}
	lock := waitLockHeld(t, f, bus, n, 1)

	// Three pods, lowest priority first.
	names := []string{"low", "mid", "high"}
	classes := map[string]string{"mid": "e2e-mid", "high": "e2e-high"}
	uids := map[string]string{}
	for _, name := range names {
		pod := f.BusyboxPod(ns, name, "sh", "-c", `trap "echo TERM; sleep 1; exit 0" TERM; while true; do sleep 0.2; done`)
		pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
		pod.Spec.PriorityClassName = classes[name]
		p := f.CreatePod(ctx, pod)
		uids[name] = string(p.UID)
	}
	for _, name := range names {
		f.WaitForPodReady(ctx, ns, name, 2*time.Minute)
	}

	// What a person would see before the reboot, from the same config and bus.
	planCmd := exec.CommandContext(ctx, n.Bin, "shutdown", "plan", "--config="+n.ConfigPath,
		"--kubeconfig="+f.Env.NodeKubeconfig, "--hostname-override="+f.Env.NodeName, "--root-dir="+n.RootDir)
	planCmd.Env = append(os.Environ(), bus.NodeletEnv()...)
	var stderr strings.Builder
	planCmd.Stderr = &stderr
	out, err := planCmd.Output()
	t.Logf("nodelet shutdown plan:\n%s", out)
	if err != nil || stderr.Len() > 0 {
		t.Logf("nodelet shutdown plan stderr:\n%s", stderr.String())
	}
	if err != nil {
		t.Fatalf("nodelet shutdown plan: %v", err)
	}
	if !strings.Contains(string(out), "logind InhibitDelayMaxSec: 24s: OK") {
		t.Errorf("plan does not say logind allows the 24s")
	}
	// /healthz?verbose tells an operator whether logind gives the shutdown its time.
	hz, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz?verbose", f.Env.NodeletHealthzPort))
	if err != nil {
		t.Fatalf("healthz: %v", err)
	}
	body, _ := io.ReadAll(hz.Body)
	hz.Body.Close()
	t.Logf("healthz?verbose:\n%s", body)
	if !strings.Contains(string(body), "covers the needed 24s; inhibitor lock held") {
		t.Errorf("healthz?verbose lacks the logind delay detail: %q", body)
	}
	checkPlan(t, string(out), ns, map[string]string{"low": "1", "mid": "2", "high": "3"})

	// The shutdown.
	signalled := time.Now()
	if err := bus.Logind.PrepareForShutdown(true); err != nil {
		t.Fatal(err)
	}
	waitNodeReady(t, f, v1.ConditionFalse, "node is shutting down")
	t.Logf("node Ready=False %.2fs after PrepareForShutdown(true)", time.Since(signalled).Seconds())

	// A pod arriving now is refused, even though the node is still there.
	late := f.BusyboxPod(ns, "late", "sleep", "3600")
	f.CreatePod(ctx, late)
	got := f.WaitForPodPhase(ctx, ns, "late", v1.PodFailed, time.Minute)
	if got.Status.Reason != "NodeShutdown" {
		t.Errorf("late pod: reason %q (message %q), want NodeShutdown", got.Status.Reason, got.Status.Message)
	}

	finished := map[string]time.Time{}
	for _, name := range names {
		p := f.WaitForPodPhase(ctx, ns, name, v1.PodFailed, 2*total)
		if p.Status.Reason != "Terminated" || p.Status.Message != "Pod was terminated in response to imminent node shutdown." {
			t.Errorf("pod %s: reason %q message %q, want Terminated / the shutdown message", name, p.Status.Reason, p.Status.Message)
		}
		var disrupted bool
		for _, c := range p.Status.Conditions {
			disrupted = disrupted || (c.Type == v1.DisruptionTarget && c.Status == v1.ConditionTrue)
		}
		if !disrupted {
			t.Errorf("pod %s: no DisruptionTarget=True condition: %+v", name, p.Status.Conditions)
		}
		finished[name] = containerFinishedAt(t, f, uids[name])
	}
	for i := 1; i < len(names); i++ {
		if !finished[names[i-1]].Before(finished[names[i]]) {
			t.Errorf("container of %s finished at %s, not before %s's at %s", names[i-1], finished[names[i-1]].Format(time.RFC3339Nano),
				names[i], finished[names[i]].Format(time.RFC3339Nano))
		}
	}

	// The lock goes once the pods are down, well before the 24s logind would allow.
	select {
	case <-lock.Closed():
	case <-time.After(total):
		t.Fatalf("nodelet still holds the inhibitor lock %s after PrepareForShutdown(true)", time.Since(signalled).Round(time.Millisecond))
	}
	released := lock.ClosedAt()
	for _, name := range names {
		t.Logf("pod %-4s container finished %.2fs after PrepareForShutdown(true)", name, finished[name].Sub(signalled).Seconds())
	}
	t.Logf("inhibitor lock released %.2fs after PrepareForShutdown(true) (total grace %s)", released.Sub(signalled).Seconds(), total)
	if last := finished[names[len(names)-1]]; released.Before(last) {
		t.Errorf("lock released at +%.2fs, before the last pod's container finished at +%.2fs", released.Sub(signalled).Seconds(), last.Sub(signalled).Seconds())
	}
	if released.Sub(signalled) >= total {
		t.Errorf("lock released %s after the signal, want before the total grace %s", released.Sub(signalled), total)
	}

	// Cancelled: Ready again, the lock taken again.
	cancelled := time.Now()
	if err := bus.Logind.PrepareForShutdown(false); err != nil {
		t.Fatal(err)
	}
	waitNodeReady(t, f, v1.ConditionTrue, "")
	t.Logf("node Ready=True %.2fs after PrepareForShutdown(false)", time.Since(cancelled).Seconds())
	waitLockHeld(t, f, bus, n, 2)
}

// waitLockHeld waits for the want-th Inhibit call, checks it is a delay lock for shutdown
// held by nodelet's process and drops the fake's own copy so that its closing is nodelet's.
func waitLockHeld(t *testing.T, f *framework.Framework, bus *dbustest.Env, n *framework.Nodelet, want int) *dbustest.Inhibit {
	t.Helper()
	var in *dbustest.Inhibit
	err := framework.WaitFor(context.Background(), 30*time.Second, fmt.Sprintf("Inhibit call %d, its fd held by nodelet", want), func(context.Context) (bool, error) {
		ins := bus.Logind.Inhibits()
		if len(ins) < want {
			return false, nil
		}
		in = ins[want-1]
		return in.HeldBy(n.Pid()), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(bus.Logind.Inhibits()); n != want {
		t.Errorf("%d Inhibit calls, want %d", n, want)
	}
	if in.What != "shutdown" || in.Mode != "delay" {
		t.Errorf("Inhibit(what=%q, mode=%q), want shutdown/delay", in.What, in.Mode)
	}
	bus.Logind.DropOwnCopies()
	select {
	case <-in.Closed():
		t.Fatal("the inhibitor lock is closed although nodelet should hold it")
	case <-time.After(200 * time.Millisecond):
	}
	return in
}

// waitNodeReady waits for the Node's Ready condition to have status and, if msg is set, a
// message containing it.
func waitNodeReady(t *testing.T, f *framework.Framework, status v1.ConditionStatus, msg string) {
	t.Helper()
	var last v1.NodeCondition
	err := framework.WaitFor(context.Background(), 30*time.Second, fmt.Sprintf("node Ready=%s %q", status, msg), func(ctx context.Context) (bool, error) {
		node, err := f.Client.CoreV1().Nodes().Get(ctx, f.Env.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == v1.NodeReady {
				last = c
				return c.Status == status && strings.Contains(c.Message, msg), nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%v; Ready was %s/%s %q", err, last.Status, last.Reason, last.Message)
	}
}

// containerFinishedAt is when the pod's one container exited, as the runtime reports it.
func containerFinishedAt(t *testing.T, f *framework.Framework, uid string) time.Time {
	t.Helper()
	ctx := context.Background()
	cs, err := f.CRI.PodContainers(ctx, uid)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 {
		t.Fatalf("pod %s has %d containers in the runtime, want 1", uid, len(cs))
	}
	st, err := f.CRI.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: cs[0].Id})
	if err != nil {
		t.Fatalf("container status of %s: %v", cs[0].Id, err)
	}
	if st.Status.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.Status.FinishedAt == 0 {
		t.Fatalf("container %s of pod %s: state %s finishedAt %d, want exited", cs[0].Id, uid, st.Status.State, st.Status.FinishedAt)
	}
	if st.Status.ExitCode != 0 {
		t.Errorf("container %s of pod %s exited %d, want 0 (its TERM trap)", cs[0].Id, uid, st.Status.ExitCode)
	}
	return time.Unix(0, st.Status.FinishedAt)
}

// checkPlan finds each pod's line in `nodelet shutdown plan` output and checks its step.
func checkPlan(t *testing.T, out, ns string, steps map[string]string) {
	t.Helper()
	for name, step := range steps {
		found := false
		for _, line := range strings.Split(out, "\n") {
			fields := strings.Fields(line)
			if len(fields) >= 6 && fields[3] == ns+"/"+name {
				found = true
				if fields[0] != step || fields[5] != "8s" {
					t.Errorf("plan line for %s: %q, want step %s with grace 8s", name, line, step)
				}
			}
		}
		if !found {
			t.Errorf("plan lacks pod %s/%s", ns, name)
		}
	}
}
