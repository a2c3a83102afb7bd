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
	"k8s.io/apimachinery/pkg/util/intstr"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

// lifecycle is what the pod lifecycle subtests share: one nodelet, one namespace,
// and a host directory per test mounted into its pod (the test flips files in it).
type lifecycle struct {
	f   *framework.Framework
	ns  string
	dir string
}

// hostDir makes a host directory for one subtest's pod.
func (l *lifecycle) hostDir(t *testing.T, name string) string {
	d := filepath.Join(l.dir, name)
	if err := os.MkdirAll(d, 0o777); err != nil {
		t.Fatal(err)
	}
	return d
}

// pod is a busybox pod mounting dir at /data, with a container that stops at once on TERM.
func (l *lifecycle) pod(name, dir, script string) *v1.Pod {
	p := l.f.BusyboxPod(l.ns, name, "sh", "-c", "trap 'exit 0' TERM; "+script)
	p.Spec.NodeName = l.f.Env.NodeName
	p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](10)
	p.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: dir}}}}
	p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	return p
}

func (l *lifecycle) create(ctx context.Context, t *testing.T, p *v1.Pod) {
	t.Helper()
	if _, err := l.f.Client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", p.Name, err)
	}
}

func (l *lifecycle) wait(ctx context.Context, t *testing.T, name string, timeout time.Duration, what string, cond func(*v1.Pod) bool) *v1.Pod {
	t.Helper()
	var last *v1.Pod
	err := framework.WaitFor(ctx, timeout, name+" "+what, func(ctx context.Context) (bool, error) {
		p, err := l.f.Client.CoreV1().Pods(l.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = p
		return cond(p), nil
	})
	if err != nil {
		t.Fatalf("%v\nlast seen: %s", err, framework.DescribePod(last))
	}
	return last
}

// events returns "Reason: message" of the pod's events.
func (l *lifecycle) events(ctx context.Context, name string) []string {
	list, err := l.f.Client.CoreV1().Events(l.ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range list.Items {
		out = append(out, e.Reason+": "+e.Message)
	}
	return out
}

func (l *lifecycle) waitEvent(ctx context.Context, t *testing.T, name, reason, substr string) {
	t.Helper()
	err := framework.WaitFor(ctx, time.Minute, fmt.Sprintf("event %s %q on %s", reason, substr, name), func(ctx context.Context) (bool, error) {
		for _, e := range l.events(ctx, name) {
			if strings.HasPrefix(e, reason+": ") && strings.Contains(e, substr) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%v; events: %q", err, l.events(ctx, name))
	}
}

func podCondition(p *v1.Pod, typ v1.PodConditionType) v1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == typ {
			return c.Status
		}
	}
	return ""
}

func readyIs(want v1.ConditionStatus) func(*v1.Pod) bool {
	return func(p *v1.Pod) bool {
		return podCondition(p, v1.PodReady) == want && podCondition(p, v1.ContainersReady) == want &&
			len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].Ready == (want == v1.ConditionTrue) &&
			p.Status.ContainerStatuses[0].State.Running != nil
	}
}

// TestPodLifecycle runs probes, hooks, activeDeadlineSeconds and Job-style pods on one
// nodelet, each subtest in its own pod, in parallel.
func TestPodLifecycle(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	l := &lifecycle{f: f, ns: f.NewNamespace(), dir: t.TempDir()}
	if err := os.Chmod(l.dir, 0o777); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, f, framework.NodeletOptions{})

	t.Run("ReadinessExecFlips", func(t *testing.T) {
		t.Parallel()
		dir := l.hostDir(t, "readiness")
		p := l.pod("readiness", dir, "sleep 3600 & wait")
		p.Spec.Containers[0].ReadinessProbe = &v1.Probe{
			ProbeHandler:  v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"cat", "/data/ready"}}},
			PeriodSeconds: 1, FailureThreshold: 1,
		}
		l.create(ctx, t, p)
		// Readiness starts as Failure: running but not ready while the file is missing.
		l.wait(ctx, t, "readiness", time.Minute, "running and not ready", readyIs(v1.ConditionFalse))
		time.Sleep(2 * time.Second)
		got := l.wait(ctx, t, "readiness", time.Second, "still not ready", func(p *v1.Pod) bool { return true })
		if podCondition(got, v1.PodReady) != v1.ConditionFalse {
			t.Fatalf("pod turned Ready without its readiness file: %s", framework.DescribePod(got))
		}
		for i := 0; i < 2; i++ {
			start := time.Now()
			if err := os.WriteFile(filepath.Join(dir, "ready"), []byte("ok"), 0o644); err != nil {
				t.Fatal(err)
			}
			l.wait(ctx, t, "readiness", 30*time.Second, "Ready", readyIs(v1.ConditionTrue))
			t.Logf("Ready %.1fs after the file appeared", time.Since(start).Seconds())
			start = time.Now()
			if err := os.Remove(filepath.Join(dir, "ready")); err != nil {
				t.Fatal(err)
			}
			l.wait(ctx, t, "readiness", 30*time.Second, "not Ready", readyIs(v1.ConditionFalse))
			t.Logf("not Ready %.1fs after the file went", time.Since(start).Seconds())
		}
		l.waitEvent(ctx, t, "readiness", "Unhealthy", "Readiness probe failed")
		if got := l.wait(ctx, t, "readiness", time.Second, "", func(*v1.Pod) bool { return true }); got.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("a failing readiness probe restarted the container: %s", framework.DescribePod(got))
		}
	})

	t.Run("LivenessExecRestarts", func(t *testing.T) {
		t.Parallel()
		dir := l.hostDir(t, "liveness")
		if err := os.WriteFile(filepath.Join(dir, "alive"), []byte("ok"), 0o644); err != nil {
			t.Fatal(err)
		}
		p := l.pod("liveness", dir, "sleep 3600 & wait")
		p.Spec.Containers[0].LivenessProbe = &v1.Probe{
			ProbeHandler:  v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"cat", "/data/alive"}}},
			PeriodSeconds: 1, FailureThreshold: 2,
		}
		l.create(ctx, t, p)
		l.wait(ctx, t, "liveness", time.Minute, "Ready", readyIs(v1.ConditionTrue))
		time.Sleep(3 * time.Second)
		if got := l.wait(ctx, t, "liveness", time.Second, "", func(*v1.Pod) bool { return true }); got.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Fatalf("a passing liveness probe restarted the container: %s", framework.DescribePod(got))
		}
		start := time.Now()
		if err := os.Remove(filepath.Join(dir, "alive")); err != nil {
			t.Fatal(err)
		}
		got := l.wait(ctx, t, "liveness", time.Minute, "restarted", func(p *v1.Pod) bool {
			return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount >= 1
		})
		t.Logf("restarted %.1fs after the liveness file went", time.Since(start).Seconds())
		if lt := got.Status.ContainerStatuses[0].LastTerminationState.Terminated; lt == nil {
			t.Errorf("restarted container has no last termination state: %s", framework.DescribePod(got))
		}
		l.waitEvent(ctx, t, "liveness", "Unhealthy", "Liveness probe failed")
		l.waitEvent(ctx, t, "liveness", "Killing", "Container main failed liveness probe, will be restarted")
	})

	t.Run("HTTPGetAndTCPSocket", func(t *testing.T) {
		t.Parallel()
		dir := l.hostDir(t, "web")
		if err := os.WriteFile(filepath.Join(dir, "healthz"), []byte("ok"), 0o644); err != nil {
			t.Fatal(err)
		}
		p := l.pod("web", dir, "httpd -f -p 8080 -h /data & wait")
		c := &p.Spec.Containers[0]
		c.Ports = []v1.ContainerPort{{Name: "http", ContainerPort: 8080}}
		c.ReadinessProbe = &v1.Probe{
			ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{
				Path: "/healthz", Port: intstr.FromString("http"), Scheme: v1.URISchemeHTTP,
				HTTPHeaders: []v1.HTTPHeader{{Name: "X-Probe", Value: "nodelet"}},
			}},
			PeriodSeconds: 1, FailureThreshold: 1,
		}
		c.LivenessProbe = &v1.Probe{
			ProbeHandler:  v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(8080)}},
			PeriodSeconds: 1, FailureThreshold: 3,
		}
		l.create(ctx, t, p)
		l.wait(ctx, t, "web", time.Minute, "Ready over httpGet", readyIs(v1.ConditionTrue))
		// A 404 makes it unready; the tcpSocket liveness probe keeps passing.
		if err := os.Remove(filepath.Join(dir, "healthz")); err != nil {
			t.Fatal(err)
		}
		l.wait(ctx, t, "web", 30*time.Second, "not Ready after a 404", readyIs(v1.ConditionFalse))
		l.waitEvent(ctx, t, "web", "Unhealthy", "HTTP probe failed with statuscode: 404")
		if got := l.wait(ctx, t, "web", time.Second, "", func(*v1.Pod) bool { return true }); got.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("the tcpSocket liveness probe failed against a listening httpd: %s; events %q", framework.DescribePod(got), l.events(ctx, "web"))
		}
	})

	t.Run("TCPSocketLivenessFailure", func(t *testing.T) {
		t.Parallel()
		dir := l.hostDir(t, "tcpdead")
		// Nothing listens on 9000: the tcpSocket liveness probe fails and the container restarts.
		p := l.pod("tcpdead", dir, "sleep 3600 & wait")
		p.Spec.Containers[0].LivenessProbe = &v1.Probe{
			ProbeHandler:  v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(9000)}},
			PeriodSeconds: 1, FailureThreshold: 2,
		}
		l.create(ctx, t, p)
		l.wait(ctx, t, "tcpdead", time.Minute, "restarted", func(p *v1.Pod) bool {
			return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount >= 1
		})
		l.waitEvent(ctx, t, "tcpdead", "Unhealthy", "Liveness probe failed")
	})

	t.Run("StartupGatesLiveness", func(t *testing.T) {
		t.Parallel()
		dir := l.hostDir(t, "startup")
		p := l.pod("startup", dir, "sleep 3600 & wait")
		c := &p.Spec.Containers[0]
		c.StartupProbe = &v1.Probe{
			ProbeHandler:  v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"cat", "/data/started"}}},
			PeriodSeconds: 1, FailureThreshold: 60,
		}
		// Would fail at once; it must not run before the startup probe passed.
		c.LivenessProbe = &v1.Probe{
			ProbeHandler:  v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"cat", "/data/alive"}}},
			PeriodSeconds: 1, FailureThreshold: 1,
		}
		l.create(ctx, t, p)
		got := l.wait(ctx, t, "startup", time.Minute, "running, not started", func(p *v1.Pod) bool {
			cs := p.Status.ContainerStatuses
			return len(cs) == 1 && cs[0].State.Running != nil && cs[0].Started != nil && !*cs[0].Started && !cs[0].Ready
		})
		time.Sleep(4 * time.Second)
		got = l.wait(ctx, t, "startup", time.Second, "", func(*v1.Pod) bool { return true })
		if cs := got.Status.ContainerStatuses[0]; cs.RestartCount != 0 || (cs.Started != nil && *cs.Started) {
			t.Fatalf("liveness ran before startup passed, or started without the file: %s", framework.DescribePod(got))
		}
		if err := os.WriteFile(filepath.Join(dir, "alive"), []byte("ok"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "started"), []byte("ok"), 0o644); err != nil {
			t.Fatal(err)
		}
		l.wait(ctx, t, "startup", 30*time.Second, "started and Ready", func(p *v1.Pod) bool {
			cs := p.Status.ContainerStatuses
			return len(cs) == 1 && cs[0].Started != nil && *cs[0].Started && cs[0].Ready && cs[0].RestartCount == 0
		})
	})

	t.Run("PostStartAndPreStopHooks", func(t *testing.T) {
		t.Parallel()
		dir := l.hostDir(t, "hooks")
		p := l.pod("hooks", dir, "while [ ! -f /data/poststart ]; do sleep 0.1; done; echo seen > /data/seen; sleep 3600 & wait")
		p.Spec.Containers[0].Lifecycle = &v1.Lifecycle{
			PostStart: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"sh", "-c", "echo started > /data/poststart"}}},
			PreStop:   &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"sh", "-c", "sleep 2; date +%s > /data/prestop"}}},
		}
		l.create(ctx, t, p)
		l.wait(ctx, t, "hooks", time.Minute, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
		if err := framework.WaitFor(ctx, 30*time.Second, "the container to see the postStart file", func(context.Context) (bool, error) {
			_, err := os.Stat(filepath.Join(dir, "seen"))
			return err == nil, nil
		}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := f.Client.CoreV1().Pods(l.ns).Delete(ctx, "hooks", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := framework.WaitFor(ctx, time.Minute, "hooks pod gone", func(ctx context.Context) (bool, error) {
			_, err := f.Client.CoreV1().Pods(l.ns).Get(ctx, "hooks", metav1.GetOptions{})
			return err != nil && strings.Contains(err.Error(), "not found"), nil
		}); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		data, err := os.ReadFile(filepath.Join(dir, "prestop"))
		if err != nil {
			t.Fatalf("preStop hook did not run before the container stopped: %v", err)
		}
		t.Logf("deletion with a 2s preStop hook (grace 10s) took %.1fs; preStop wrote %s", took.Seconds(), strings.TrimSpace(string(data)))
		if took < 2*time.Second || took > 20*time.Second {
			t.Errorf("deletion took %s; want the preStop's 2s and well under grace+10s", took)
		}
	})

	t.Run("FailedPostStartHook", func(t *testing.T) {
		t.Parallel()
		dir := l.hostDir(t, "badhook")
		p := l.pod("badhook", dir, "sleep 3600 & wait")
		p.Spec.Containers[0].Lifecycle = &v1.Lifecycle{
			PostStart: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"sh", "-c", "exit 3"}}},
		}
		l.create(ctx, t, p)
		l.waitEvent(ctx, t, "badhook", "FailedPostStartHook", "PostStartHook failed")
		l.wait(ctx, t, "badhook", time.Minute, "killed and restarted", func(p *v1.Pod) bool {
			return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount >= 1
		})
	})

	t.Run("ActiveDeadlineSeconds", func(t *testing.T) {
		t.Parallel()
		dir := l.hostDir(t, "deadline")
		p := l.pod("deadline", dir, "sleep 3600 & wait")
		p.Spec.ActiveDeadlineSeconds = ptr.To[int64](5)
		l.create(ctx, t, p)
		got := l.wait(ctx, t, "deadline", time.Minute, "Failed", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
		if got.Status.Reason != "DeadlineExceeded" || got.Status.Message != "Pod was active on the node longer than the specified deadline" {
			t.Errorf("reason/message = %q/%q", got.Status.Reason, got.Status.Message)
		}
		if got.Status.StartTime != nil {
			t.Logf("Failed %.1fs after startTime (deadline 5s)", time.Since(got.Status.StartTime.Time).Seconds())
		}
		l.waitEvent(ctx, t, "deadline", "DeadlineExceeded", "Pod was active on the node longer than the specified deadline")
		waitNoRunning(ctx, t, f, got)
	})

	jobs := []struct {
		name   string
		policy v1.RestartPolicy
		exit   int
		want   v1.PodPhase
	}{
		{"job-never-ok", v1.RestartPolicyNever, 0, v1.PodSucceeded},
		{"job-never-fail", v1.RestartPolicyNever, 1, v1.PodFailed},
		{"job-onfailure-ok", v1.RestartPolicyOnFailure, 0, v1.PodSucceeded},
	}
	for _, j := range jobs {
		t.Run("JobPodWithInitAndSidecar/"+j.name, func(t *testing.T) {
			t.Parallel()
			dir := l.hostDir(t, j.name)
			p := l.pod(j.name, dir, fmt.Sprintf("sleep 2; exit %d", j.exit))
			p.Spec.RestartPolicy = j.policy
			mounts := p.Spec.Containers[0].VolumeMounts
			p.Spec.InitContainers = []v1.Container{
				{Name: "init", Image: f.Env.BusyboxImage, ImagePullPolicy: v1.PullNever, VolumeMounts: mounts,
					Command: []string{"sh", "-c", "echo init > /data/init"}},
				{Name: "sidecar", Image: f.Env.BusyboxImage, ImagePullPolicy: v1.PullNever, VolumeMounts: mounts,
					RestartPolicy: ptr.To(v1.ContainerRestartPolicyAlways),
					Command:       []string{"sh", "-c", "trap 'date +%s > /data/sidecar-stopped; exit 0' TERM; sleep 3600 & wait"}},
			}
			l.create(ctx, t, p)
			got := l.wait(ctx, t, j.name, 2*time.Minute, string(j.want), func(p *v1.Pod) bool { return p.Status.Phase == j.want })
			if len(got.Status.InitContainerStatuses) != 2 || got.Status.InitContainerStatuses[0].State.Terminated == nil ||
				got.Status.InitContainerStatuses[0].State.Terminated.ExitCode != 0 {
				t.Errorf("init container did not complete: %s", framework.DescribePod(got))
			}
			if cs := got.Status.ContainerStatuses; len(cs) != 1 || cs[0].State.Terminated == nil || cs[0].State.Terminated.ExitCode != int32(j.exit) || cs[0].RestartCount != 0 {
				t.Errorf("main container: %s", framework.DescribePod(got))
			}
			waitNoRunning(ctx, t, f, got)
			if _, err := os.Stat(filepath.Join(dir, "sidecar-stopped")); err != nil {
				t.Errorf("the sidecar was not stopped with TERM after the main container finished: %v", err)
			}
			got = l.wait(ctx, t, j.name, 30*time.Second, "sidecar terminated in status", func(p *v1.Pod) bool {
				return len(p.Status.InitContainerStatuses) == 2 && p.Status.InitContainerStatuses[1].State.Terminated != nil
			})
			if got.Status.Phase != j.want {
				t.Errorf("phase changed to %s after the sidecar stopped", got.Status.Phase)
			}
		})
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("nodelet log tail:\n%s", lifecycleTail(n.Logs(), 60))
		}
	})
}

// waitNoRunning waits until the runtime runs nothing of the pod any more.
func waitNoRunning(ctx context.Context, t *testing.T, f *framework.Framework, p *v1.Pod) {
	t.Helper()
	err := framework.WaitFor(ctx, time.Minute, "no running containers of "+p.Name, func(ctx context.Context) (bool, error) {
		list, err := f.CRI.PodContainers(ctx, string(p.UID))
		if err != nil {
			return false, err
		}
		for _, c := range list {
			if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Error(err)
	}
}

func lifecycleTail(s string, lines int) string {
	parts := strings.Split(s, "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}
