//go:build chaos

package chaos

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

var (
	slowDelay = flag.Duration("chaos.slow-delay", 2*time.Second, "TestSlowRuntime: delay of every CRI call")
	slowFor   = flag.Duration("chaos.slow-for", 30*time.Second, "TestSlowRuntime: how long the runtime stays slow")
)

const (
	// slowProbePeriod is the probes' periodSeconds: above the delay, so that a probe that
	// waits for the runtime still fits its period.
	slowProbePeriod = 5
	// slowGrace is the graceful pod's terminationGracePeriodSeconds.
	slowGrace = 10
	// plegUnhealthyMessage is upstream's words for a PLEG that has not relisted in time.
	plegUnhealthyMessage = "PLEG is not healthy"
)

// TestSlowRuntime puts a CRI proxy that delays every call by 2 s between nodelet and
// containerd, with pods whose exec and HTTP readiness probes stamp the time of each run on the
// host, and a pod that records the SIGTERM it gets and keeps beating until it is killed. The
// user checks that the node stays Ready (or says upstream's "PLEG is not healthy", never
// anything else), that /healthz answers every second within 2 s (the loop is never blocked),
// that both probes keep their period and the pods stay Ready, that a pod created meanwhile
// still starts, and that deleting the graceful pod sends it SIGTERM and kills it no earlier
// than its grace period.
func TestSlowRuntime(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	if err := os.MkdirAll(f.Env.NodeletRootBase, 0o755); err != nil {
		t.Fatal(err)
	}
	hits, err := os.MkdirTemp(f.Env.NodeletRootBase, "slowruntime-hits-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(hits) })
	proxy := framework.StartCRIProxy(t, f.Env.ContainerRuntimeEndpoint)
	n := startNode(t, f, 10, func(c *kubeletconfigv1beta1.KubeletConfiguration) {
		c.ContainerRuntimeEndpoint = proxy.Endpoint
	})
	// Before nodelet's own cleanup stops it: a fast runtime again.
	t.Cleanup(func() { proxy.SetDelay(0) })
	delay := *slowDelay
	t.Logf("CHAOS %s load=%s delay=%v", t.Name(), loadavg(), delay)

	withHits := func(p *v1.Pod) *v1.Pod {
		dir := filepath.Join(hits, p.Name)
		if err := os.MkdirAll(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		p.Spec.Volumes = append(p.Spec.Volumes, v1.Volume{Name: "hits", VolumeSource: v1.VolumeSource{
			HostPath: &v1.HostPathVolumeSource{Path: dir, Type: ptr.To(v1.HostPathDirectory)}}})
		p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, v1.VolumeMount{Name: "hits", MountPath: "/hits"})
		return p
	}
	execPod := withHits(sleepPod(f, ns, "exec-probe"))
	execPod.Spec.Containers[0].ReadinessProbe = &v1.Probe{
		ProbeHandler:  v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"sh", "-c", uptimeStamp + " >> /hits/stamps"}}},
		PeriodSeconds: slowProbePeriod,
	}
	httpPod := withHits(sleepPod(f, ns, "http-probe"))
	cgi := "#!/bin/sh\n" + uptimeStamp + " >> /hits/stamps\necho 'Content-Type: text/plain'\necho\necho ok\n"
	httpPod.Spec.Containers[0].Command = []string{"sh", "-c",
		`mkdir -p /www/cgi-bin && printf '%s' "$CGI" > /www/cgi-bin/hit && chmod +x /www/cgi-bin/hit && exec httpd -f -p 8080 -h /www`}
	httpPod.Spec.Containers[0].Env = []v1.EnvVar{{Name: "CGI", Value: cgi}}
	httpPod.Spec.Containers[0].ReadinessProbe = &v1.Probe{
		ProbeHandler:  v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/cgi-bin/hit", Port: intstr.FromInt32(8080)}},
		PeriodSeconds: slowProbePeriod,
	}
	gracePod := withHits(sleepPod(f, ns, "graceful"))
	gracePod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](slowGrace)
	gracePod.Spec.Containers[0].Command = []string{"sh", "-c", "trap '" + uptimeStamp + " > /hits/term' TERM; " +
		"while true; do " + uptimeStamp + " > /hits/beat.tmp && mv /hits/beat.tmp /hits/beat; sleep 0.2 & wait $!; done"}
	for _, p := range []*v1.Pod{execPod, httpPod, gracePod} {
		f.CreatePod(ctx, p)
	}
	waitAllReady(t, ctx, f.Client, ns, 3, 2*time.Minute)

	// The runtime turns slow.
	slowU := hostUptime(t)
	slowAt := time.Now()
	proxy.SetDelay(delay)
	hz := watchHealthz(n, time.Second, 2*time.Second)
	defer hz.end()
	obs := watchSlowNode(ctx, f, ns, []string{"exec-probe", "http-probe"})
	defer obs.end()

	time.Sleep(5 * time.Second)
	lateAt := time.Now()
	f.CreatePod(ctx, sleepPod(f, ns, "late"))

	time.Sleep(10 * time.Second)
	delU := hostUptime(t)
	delAt := time.Now()
	f.DeletePod(ctx, ns, "graceful", nil)

	f.WaitForPodReady(ctx, ns, "late", 2*time.Minute)
	figure(t, "late_pod_ready_under_delay", time.Since(lateAt))
	f.WaitForPodGone(ctx, ns, "graceful", 2*time.Minute)
	figure(t, "graceful_pod_gone_after_delete", time.Since(delAt))
	time.Sleep(time.Until(slowAt.Add(*slowFor)))
	endU := hostUptime(t)
	proxy.SetDelay(0)
	hz.end()
	obs.end()

	// The loop never blocked: /healthz answered each second, and only PLEG may have failed it.
	figure(t, "healthz_ok", hz.ok)
	figure(t, "healthz_failed", hz.bad)
	figure(t, "healthz_unanswered", hz.errs)
	figure(t, "healthz_max_latency", hz.maxLatency)
	if hz.errs > 0 {
		t.Errorf("/healthz went unanswered (2 s) %d times under a slow runtime: %s", hz.errs, strings.Join(hz.samples, "; "))
	}
	for _, s := range hz.samples {
		if !strings.Contains(s, "pleg") && !strings.Contains(s, "Timeout") && !strings.Contains(s, "deadline") {
			t.Errorf("/healthz failed for something else than PLEG under a slow runtime: %s", s)
		}
	}
	// The node stayed Ready, or said PLEG is not healthy.
	figure(t, "node_not_ready_samples", len(obs.notReady))
	for _, m := range obs.notReady {
		if !strings.Contains(m, plegUnhealthyMessage) {
			t.Errorf("the node was not Ready under a slow runtime, and not for PLEG (%q): %s", plegUnhealthyMessage, m)
			break
		}
	}
	figure(t, "probe_pods_not_ready_samples", len(obs.podsNotReady))
	if len(obs.podsNotReady) > 0 {
		t.Errorf("probe pods not Ready under a slow runtime (%d samples), first: %s", len(obs.podsNotReady), obs.podsNotReady[0])
	}

	// Probes keep their period.
	for _, name := range []string{"exec-probe", "http-probe"} {
		checkProbePeriod(t, name, readStamps(t, filepath.Join(hits, name, "stamps")), slowU, endU)
	}

	// Deletion honoured the grace period: SIGTERM arrived, the container beat on until the
	// grace period was over.
	term := readStamps(t, filepath.Join(hits, "graceful", "term"))
	beat := readStamps(t, filepath.Join(hits, "graceful", "beat"))
	switch {
	case len(term) == 0:
		t.Errorf("the graceful pod never got SIGTERM (no %s)", filepath.Join(hits, "graceful", "term"))
	case len(beat) == 0:
		t.Errorf("the graceful pod left no heartbeat")
	default:
		figure(t, "sigterm_after_delete", time.Duration((term[0]-delU)*float64(time.Second)))
		lived := time.Duration((beat[len(beat)-1] - term[0]) * float64(time.Second))
		figure(t, "alive_after_sigterm", lived)
		// The last beat is at most one beat (0.2 s) and a write before the kill.
		if lived < slowGrace*time.Second-time.Second {
			t.Errorf("the graceful pod was killed %v after SIGTERM; its grace period is %ds", lived.Round(10*time.Millisecond), slowGrace)
		}
	}
	t.Logf("CHAOS %s load=%s", t.Name(), loadavg())
}

// checkProbePeriod checks the probe runs stamped in [from, to] (uptime seconds): enough of
// them, and their gaps near the period: a mean within 10 % (20 % above), none above 1.8
// periods (a probe skipped) or below half of one (probes bunched up).
func checkProbePeriod(t *testing.T, name string, stamps []float64, from, to float64) {
	t.Helper()
	var in []float64
	for _, s := range stamps {
		if s >= from && s <= to {
			in = append(in, s)
		}
	}
	sort.Float64s(in)
	period := float64(slowProbePeriod)
	want := int((to-from)/period) - 1
	figure(t, name+"_runs", len(in))
	if len(in) < max(2, want) {
		t.Errorf("%s: %d probe runs in %.1fs with a %ds period; want at least %d", name, len(in), to-from, slowProbePeriod, max(2, want))
		return
	}
	var sum, lo, hi float64
	lo = 1e9
	for i := 1; i < len(in); i++ {
		g := in[i] - in[i-1]
		sum += g
		lo, hi = min(lo, g), max(hi, g)
	}
	mean := sum / float64(len(in)-1)
	t.Logf("CHAOS %s %s_gap mean=%.2fs min=%.2fs max=%.2fs", t.Name(), name, mean, lo, hi)
	if mean < 0.9*period || mean > 1.2*period || hi > 1.8*period || lo < 0.5*period {
		t.Errorf("%s: probe gaps mean %.2fs, min %.2fs, max %.2fs under a slow runtime; want the %ds period kept", name, mean, lo, hi, slowProbePeriod)
	}
}

// slowNodeWatch samples, each second, the node's Ready condition and the readiness of some pods.
type slowNodeWatch struct {
	stop, done   chan struct{}
	mu           sync.Mutex
	notReady     []string // the node's Ready messages when not True
	podsNotReady []string // "<time> <pod>" when a watched pod was not Ready
}

func watchSlowNode(ctx context.Context, f *framework.Framework, ns string, pods []string) *slowNodeWatch {
	w := &slowNodeWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			c, err := nodeReady(ctx, f)
			now := time.Now().UTC().Format("15:04:05")
			w.mu.Lock()
			if err == nil && c != nil && c.Status != v1.ConditionTrue {
				w.notReady = append(w.notReady, fmt.Sprintf("%s %s %s: %s", now, c.Status, c.Reason, c.Message))
			}
			w.mu.Unlock()
			for _, name := range pods {
				p, err := f.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
				if err == nil && !framework.IsPodReady(p) {
					w.mu.Lock()
					w.podsNotReady = append(w.podsNotReady, now+" "+framework.DescribePod(p))
					w.mu.Unlock()
				}
			}
			select {
			case <-w.stop:
				return
			case <-time.After(time.Second):
			}
		}
	}()
	return w
}

func (w *slowNodeWatch) end() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}
