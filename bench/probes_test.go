//go:build bench

package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

// probeKind is BENCH_PROBE: tcp (default), exec, or none (the same pods unprobed,
// for the baseline).
func probeKind() string {
	if k := os.Getenv("BENCH_PROBE"); k != "" {
		return k
	}
	return "tcp"
}

// fullNodePods is BENCH_PODS, by default 110 (the kubelet's default maxPods): a full node.
func fullNodePods() int {
	if n, err := strconv.Atoi(os.Getenv("BENCH_PODS")); err == nil && n > 0 {
		return n
	}
	return 110 // the kubelet's default maxPods
}

// TestProbeCPU starts BENCH_PODS pods (default 110) whose busybox httpd container has a
// readiness and a liveness probe every 1s (tcpSocket, or exec `true`), waits for all to be
// Ready, lets the node settle, and prints nodelet's CPU (utime+stime from /proc/<pid>/stat)
// over 60s, plus containerd's for comparison (exec probes cost the runtime most).
func TestProbeCPU(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	n := f.StartNodelet(framework.NodeletOptions{})
	f.WaitForNodeReady(ctx, 2*time.Minute)
	count, kind := fullNodePods(), probeKind()

	start := time.Now()
	for i := 0; i < count; i++ {
		p := f.BusyboxPod(ns, fmt.Sprintf("probe-%03d", i), "httpd", "-f", "-p", "8080")
		var handler v1.ProbeHandler
		switch kind {
		case "exec":
			handler = v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}}
		case "tcp":
			handler = v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(8080)}}
		}
		if kind != "none" {
			p.Spec.Containers[0].ReadinessProbe = &v1.Probe{ProbeHandler: handler, PeriodSeconds: 1, TimeoutSeconds: 1}
			p.Spec.Containers[0].LivenessProbe = &v1.Probe{ProbeHandler: handler, PeriodSeconds: 1, TimeoutSeconds: 1, FailureThreshold: 3}
		}
		f.CreatePod(ctx, p)
	}
	err := framework.WaitFor(ctx, 10*time.Minute, fmt.Sprintf("%d pods Ready", count), func(ctx context.Context) (bool, error) {
		list, err := f.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		ready := 0
		for i := range list.Items {
			if framework.IsPodReady(&list.Items[i]) {
				ready++
			}
		}
		return ready == count, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("BENCH probes=%s pods=%d all Ready after %.1fs\n", kind, count, time.Since(start).Seconds())
	time.Sleep(20 * time.Second) // steady state

	ctrd := containerdPid()
	_, before := procStats(t, n.Pid())
	var ctrdBefore time.Duration
	if ctrd > 0 {
		_, ctrdBefore = procStats(t, ctrd)
	}
	const window = 60 * time.Second
	time.Sleep(window)
	_, after := procStats(t, n.Pid())
	fmt.Printf("BENCH probes=%s pods=%d probes/s=%d nodelet CPU %.2f%% of one core (%s window)\n",
		kind, count, probesPerSecond(kind, count), 100*(after-before).Seconds()/window.Seconds(), window)
	if ctrd > 0 {
		_, ctrdAfter := procStats(t, ctrd)
		fmt.Printf("BENCH probes=%s pods=%d containerd CPU %.2f%% of one core (shims not counted)\n",
			kind, count, 100*(ctrdAfter-ctrdBefore).Seconds()/window.Seconds())
	}
	list, err := f.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	restarts := 0
	for _, p := range list.Items {
		for _, cs := range p.Status.ContainerStatuses {
			restarts += int(cs.RestartCount)
		}
	}
	fmt.Printf("BENCH probes=%s pods=%d container restarts during the run: %d\n", kind, count, restarts)
}

func probesPerSecond(kind string, pods int) int {
	if kind == "none" {
		return 0
	}
	return 2 * pods
}

// containerdPid finds the rig's containerd (by its pidfile), 0 if unknown.
func containerdPid() int {
	data, err := os.ReadFile("/var/lib/nodelet-rig/run/containerd.pid")
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	return pid
}
