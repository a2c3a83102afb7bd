//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

// sidecarPod is a pod whose init container "side" (restartPolicy Always) and app
// container "main" both wait for TERM; side mounts dir at /data.
func (l *lifecycle) sidecarPod(name, dir string) *v1.Pod {
	p := l.pod(name, dir, "sleep 3600 & wait")
	side := p.Spec.Containers[0]
	side.Name = "side"
	side.RestartPolicy = ptr.To(v1.ContainerRestartPolicyAlways)
	p.Spec.InitContainers = []v1.Container{side}
	p.Spec.Containers[0].VolumeMounts = nil
	return p
}

func initStatus(p *v1.Pod, name string) *v1.ContainerStatus {
	for i := range p.Status.InitContainerStatuses {
		if p.Status.InitContainerStatuses[i].Name == name {
			return &p.Status.InitContainerStatuses[i]
		}
	}
	return nil
}

func sidecarRunning(p *v1.Pod) bool {
	s := initStatus(p, "side")
	return s != nil && s.State.Running != nil
}

// notStarted says a container has neither run nor is running.
func notStarted(s *v1.ContainerStatus) bool {
	return s == nil || (s.State.Running == nil && s.State.Terminated == nil)
}

// TestProbesAndAdmission covers, as a user sees them, the probes of sidecars
// (readiness, startup, initial delay), HTTP probes that end on a redirect, and
// the node's refusal of unsafe sysctls and of pods for another OS: what the
// upstream NodeConformance suite found missing.
func TestProbesAndAdmission(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	l := &lifecycle{f: f, ns: f.NewNamespace(), dir: t.TempDir()}
	if err := os.Chmod(l.dir, 0o777); err != nil {
		t.Fatal(err)
	}
	startNode(t, f, framework.NodeletOptions{Config: func(c *kubeletconfigv1beta1.KubeletConfiguration) {
		c.AllowedUnsafeSysctls = []string{"kernel.msgmax", "fs.mqueue.*"}
	}})
	// The node is Ready: nodelet's probe manager was made before this.
	started := time.Now()

	t.Run("SidecarReadinessGatesPodReady", func(t *testing.T) {
		t.Parallel()
		dir := l.hostDir(t, "sidecar-ready")
		p := l.sidecarPod("sidecar-ready", dir)
		p.Spec.InitContainers[0].ReadinessProbe = &v1.Probe{
			ProbeHandler:  v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"cat", "/data/ready"}}},
			PeriodSeconds: 1, FailureThreshold: 1,
		}
		l.create(ctx, t, p)
		l.wait(ctx, t, p.Name, time.Minute, "main running", func(p *v1.Pod) bool {
			return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil && sidecarRunning(p)
		})
		// The app container is ready; the sidecar is not, so neither is the pod.
		time.Sleep(3 * time.Second)
		got := l.wait(ctx, t, p.Name, time.Second, "", func(*v1.Pod) bool { return true })
		if podCondition(got, v1.PodReady) != v1.ConditionFalse || podCondition(got, v1.ContainersReady) != v1.ConditionFalse || initStatus(got, "side").Ready {
			t.Fatalf("pod or sidecar Ready while the sidecar's readiness probe fails: %s", framework.DescribePod(got))
		}
		for _, c := range got.Status.Conditions {
			if c.Type == v1.PodReady && c.Message != "containers with unready status: [side]" {
				t.Errorf("Ready message %q, want the sidecar named", c.Message)
			}
		}
		start := time.Now()
		if err := os.WriteFile(filepath.Join(dir, "ready"), []byte("ok"), 0o644); err != nil {
			t.Fatal(err)
		}
		l.wait(ctx, t, p.Name, 30*time.Second, "Ready with its sidecar", func(p *v1.Pod) bool {
			return framework.IsPodReady(p) && initStatus(p, "side").Ready
		})
		t.Logf("Ready %.1fs after the sidecar's readiness file appeared", time.Since(start).Seconds())
		if err := os.Remove(filepath.Join(dir, "ready")); err != nil {
			t.Fatal(err)
		}
		got = l.wait(ctx, t, p.Name, 30*time.Second, "not Ready again", func(p *v1.Pod) bool {
			return !framework.IsPodReady(p) && !initStatus(p, "side").Ready
		})
		if rc := initStatus(got, "side").RestartCount; rc != 0 {
			t.Errorf("a failing readiness probe restarted the sidecar %d times", rc)
		}
	})

	t.Run("SidecarReadinessInitialDelay", func(t *testing.T) {
		t.Parallel()
		const delay = 10
		p := l.sidecarPod("sidecar-delay", l.hostDir(t, "sidecar-delay"))
		p.Spec.InitContainers[0].ReadinessProbe = &v1.Probe{
			ProbeHandler:        v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}},
			InitialDelaySeconds: delay, PeriodSeconds: 1, FailureThreshold: 1,
		}
		l.create(ctx, t, p)
		got := l.wait(ctx, t, p.Name, time.Minute, "Ready", framework.IsPodReady)
		side := initStatus(got, "side")
		var readyAt time.Time
		for _, c := range got.Status.Conditions {
			if c.Type == v1.PodReady {
				readyAt = c.LastTransitionTime.Time
			}
		}
		if side == nil || side.State.Running == nil || !side.Ready {
			t.Fatalf("pod Ready without a ready sidecar: %s", framework.DescribePod(got))
		}
		after := readyAt.Sub(side.State.Running.StartedAt.Time)
		t.Logf("sidecar started at %s, pod Ready at %s: %.0fs later", side.State.Running.StartedAt.Format(time.TimeOnly), readyAt.Format(time.TimeOnly), after.Seconds())
		if after < delay*time.Second {
			t.Errorf("pod Ready %v after its sidecar started, before the sidecar's %ds initial delay", after, delay)
		}
		if rc := side.RestartCount; rc != 0 {
			t.Errorf("sidecar restarted %d times", rc)
		}
	})

	t.Run("SidecarStartupProbe", func(t *testing.T) {
		t.Parallel()
		// The readiness probe's period is long: the pod must turn Ready right after
		// the startup probe passes, not a period later. Probe workers made within one
		// period of nodelet's start begin at a random point of it (as upstream); a pod
		// created later has no such delay, so the timing below holds.
		const readinessPeriod = 60
		if wait := time.Until(started.Add(readinessPeriod*time.Second + 2*time.Second)); wait > 0 {
			t.Logf("waiting %.0fs so that probe workers start without start-up jitter", wait.Seconds())
			time.Sleep(wait)
		}
		dir := l.hostDir(t, "sidecar-startup")
		p := l.sidecarPod("sidecar-startup", dir)
		side := &p.Spec.InitContainers[0]
		side.StartupProbe = &v1.Probe{
			ProbeHandler:  v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"cat", "/data/started"}}},
			PeriodSeconds: 1, FailureThreshold: 600,
		}
		side.ReadinessProbe = &v1.Probe{
			ProbeHandler:  v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}},
			PeriodSeconds: readinessPeriod, FailureThreshold: 1,
		}
		// A regular init container after the sidecar starts only once the sidecar has.
		after := f.BusyboxPod(l.ns, "x", "true").Spec.Containers[0]
		after.Name = "after"
		p.Spec.InitContainers = append(p.Spec.InitContainers, after)
		l.create(ctx, t, p)
		l.wait(ctx, t, p.Name, time.Minute, "sidecar running", sidecarRunning)
		time.Sleep(5 * time.Second)
		got := l.wait(ctx, t, p.Name, time.Second, "", func(*v1.Pod) bool { return true })
		s := initStatus(got, "side")
		if s.Started == nil || *s.Started || s.Ready {
			t.Errorf("sidecar started or ready before its startup probe passed: %s", framework.DescribePod(got))
		}
		if !notStarted(initStatus(got, "after")) || (len(got.Status.ContainerStatuses) > 0 && !notStarted(&got.Status.ContainerStatuses[0])) {
			t.Fatalf("a container after the sidecar ran before the sidecar's startup probe passed: %s", framework.DescribePod(got))
		}
		if podCondition(got, v1.PodInitialized) != v1.ConditionFalse || framework.IsPodReady(got) {
			t.Errorf("pod initialized or Ready before its sidecar started: %s", framework.DescribePod(got))
		}
		start := time.Now()
		if err := os.WriteFile(filepath.Join(dir, "started"), []byte("ok"), 0o644); err != nil {
			t.Fatal(err)
		}
		got = l.wait(ctx, t, p.Name, time.Duration(readinessPeriod)*time.Second, "Ready", func(p *v1.Pod) bool {
			return framework.IsPodReady(p) && initStatus(p, "side").Ready
		})
		readyIn := time.Since(start)
		t.Logf("Ready %.1fs after the startup file appeared (readiness period %ds)", readyIn.Seconds(), readinessPeriod)
		// The conformance spec allows 25s against a 30s period.
		if readyIn > 25*time.Second {
			t.Errorf("Ready %v after the startup probe could pass: readiness waited for its period", readyIn)
		}
		if a := initStatus(got, "after"); a == nil || a.State.Terminated == nil || a.State.Terminated.ExitCode != 0 {
			t.Errorf("the init container after the sidecar did not complete: %s", framework.DescribePod(got))
		}
	})

	t.Run("HTTPRedirects", func(t *testing.T) {
		t.Parallel()
		dir := l.hostDir(t, "redirect")
		// busybox httpd: a CGI script answering a redirect to another host, and a
		// directory /hz that it redirects to /hz/ on the same host.
		cgi := filepath.Join(dir, "cgi-bin")
		if err := os.MkdirAll(filepath.Join(dir, "hz"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(cgi, 0o755); err != nil {
			t.Fatal(err)
		}
		script := "#!/bin/sh\nprintf 'HTTP/1.0 302 Found\\r\\nLocation: http://0.0.0.0/\\r\\nContent-Type: text/html\\r\\n\\r\\n<a href=\"http://0.0.0.0/\">Found</a>.\\n'\n"
		if err := os.WriteFile(filepath.Join(cgi, "redirect"), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "hz", "index.html"), []byte("ok"), 0o644); err != nil {
			t.Fatal(err)
		}
		p := l.pod("redirect", dir, "httpd -f -p 8080 -h /data & wait")
		p.Spec.Containers[0].Name = "other-host"
		p.Spec.Containers[0].LivenessProbe = &v1.Probe{
			ProbeHandler:        v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/cgi-bin/redirect", Port: intstr.FromInt32(8080)}},
			InitialDelaySeconds: 3, PeriodSeconds: 1, FailureThreshold: 1, // httpd listening first

		}
		local := l.pod("x", dir, "httpd -f -p 8081 -h /data & wait").Spec.Containers[0]
		local.Name = "same-host"
		local.LivenessProbe = &v1.Probe{
			ProbeHandler:        v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/hz", Port: intstr.FromInt32(8081)}},
			InitialDelaySeconds: 3, PeriodSeconds: 1, FailureThreshold: 1,
		}
		p.Spec.Containers = append(p.Spec.Containers, local)
		l.create(ctx, t, p)
		l.wait(ctx, t, p.Name, time.Minute, "Ready", framework.IsPodReady)
		// Upstream's wording, which the conformance spec waits for.
		l.waitEvent(ctx, t, p.Name, "ProbeWarning", `Liveness probe warning: Probe terminated redirects, Response body: <a href="http://0.0.0.0/">Found</a>.`)
		time.Sleep(5 * time.Second)
		got := l.wait(ctx, t, p.Name, time.Second, "", func(*v1.Pod) bool { return true })
		for _, cs := range got.Status.ContainerStatuses {
			if cs.RestartCount != 0 {
				t.Fatalf("container %s restarted: a redirect was taken for a failure: %s; events %q", cs.Name, framework.DescribePod(got), l.events(ctx, p.Name))
			}
		}
		// The same-host redirect is followed: once /hz/ is a 404 the liveness probe fails.
		if err := os.Remove(filepath.Join(dir, "hz", "index.html")); err != nil {
			t.Fatal(err)
		}
		got = l.wait(ctx, t, p.Name, time.Minute, "same-host restarted", func(p *v1.Pod) bool {
			return len(p.Status.ContainerStatuses) == 2 && p.Status.ContainerStatuses[1].RestartCount >= 1
		})
		if rc := got.Status.ContainerStatuses[0].RestartCount; rc != 0 {
			t.Errorf("other-host restarted %d times", rc)
		}
		l.waitEvent(ctx, t, p.Name, "Unhealthy", "Liveness probe failed: HTTP probe failed with statuscode: 404")
	})

	// (A net.* sysctl with hostNetwork, which nodelet refuses too, never gets past
	// the API server's validation; the unit tests cover it.)

	sysctlPod := func(name string, sysctls ...string) *v1.Pod {
		p := f.BusyboxPod(l.ns, name, "sh", "-c", "cat /proc/sys/kernel/msgmax")
		p.Spec.RestartPolicy = v1.RestartPolicyNever
		p.Spec.NodeName = f.Env.NodeName
		p.Spec.SecurityContext = &v1.PodSecurityContext{}
		for _, s := range sysctls {
			name, value, _ := strings.Cut(s, "=")
			p.Spec.SecurityContext.Sysctls = append(p.Spec.SecurityContext.Sysctls, v1.Sysctl{Name: name, Value: value})
		}
		return p
	}

	t.Run("UnsafeSysctlRejected", func(t *testing.T) {
		t.Parallel()
		l.rejected(ctx, t, sysctlPod("unsafe-sysctl", "kernel.shm_rmid_forced=1", "kernel.msgmnb=65536"),
			"SysctlForbidden", `forbidden sysctl: "kernel.msgmnb" not allowlisted`)
	})

	t.Run("AllowedSysctlsRun", func(t *testing.T) {
		t.Parallel()
		// kernel.msgmax is in the config's allowedUnsafeSysctls, the others are safe.
		p := sysctlPod("allowed-sysctls", "kernel.msgmax=10000", "net.ipv4.ip_local_port_range=32768 60999", "kernel.shm_rmid_forced=1")
		l.create(ctx, t, p)
		got := l.wait(ctx, t, p.Name, time.Minute, "finished", func(p *v1.Pod) bool {
			return p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed
		})
		if got.Status.Phase != v1.PodSucceeded {
			t.Fatalf("a pod with allowed sysctls did not run: %s; events %q", framework.DescribePod(got), l.events(ctx, p.Name))
		}
		logs, err := f.Client.CoreV1().Pods(l.ns).GetLogs(p.Name, &v1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(string(logs)) != "10000" {
			t.Errorf("kernel.msgmax in the pod = %q, want 10000", logs)
		}
	})

	t.Run("PodForAnotherOS", func(t *testing.T) {
		t.Parallel()
		p := f.BusyboxPod(l.ns, "windows-os-field", "true")
		p.Spec.OS = &v1.PodOS{Name: v1.Windows}
		l.rejected(ctx, t, p, "PodOSNotSupported", "Failed to admit pod as the OS field doesn't match node OS")
	})

	t.Run("PodLabelledForAnotherOS", func(t *testing.T) {
		t.Parallel()
		p := f.BusyboxPod(l.ns, "windows-os-label", "true")
		p.Labels = map[string]string{v1.LabelOSStable: "windows"}
		l.rejected(ctx, t, p, "PodOSSelectorNodeLabelDoesNotMatch", "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label")
	})
}

// rejected creates p bound to the node, waits for it to fail admission and checks
// upstream's reason, message and event.
func (l *lifecycle) rejected(ctx context.Context, t *testing.T, p *v1.Pod, reason, message string) {
	t.Helper()
	p.Spec.NodeName = l.f.Env.NodeName
	l.create(ctx, t, p)
	got := l.wait(ctx, t, p.Name, time.Minute, "rejected", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
	if got.Status.Reason != reason || got.Status.Message != "Pod was rejected: "+message {
		t.Errorf("status reason %q message %q, want %q %q", got.Status.Reason, got.Status.Message, reason, "Pod was rejected: "+message)
	}
	if len(got.Status.ContainerStatuses) > 0 && got.Status.ContainerStatuses[0].State.Running != nil {
		t.Errorf("a rejected pod runs: %s", framework.DescribePod(got))
	}
	l.waitEvent(ctx, t, p.Name, reason, message)
	t.Logf("%s: %s", got.Status.Reason, got.Status.Message)
}
