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
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

// TestCPUManagerStaticPinsGuaranteedPods: on the rig's 2 CPUs with
// cpuManagerPolicy static and reservedSystemCPUs "0", a Guaranteed 1-CPU pod
// runs on CPU 1 and a BestEffort pod on the shared pool, CPU 0; a second
// Guaranteed pod finds no CPU and is refused with upstream's reason; once
// the first is deleted the BestEffort pod gets both CPUs back, and the
// checkpoint is upstream's cpu_manager_state; the kubelet_cpu_manager_*
// metrics follow.
func TestCPUManagerStaticPinsGuaranteedPods(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	n := startNode(t, f, framework.NodeletOptions{Config: func(c *kubeletconfigv1beta1.KubeletConfiguration) {
		c.CPUManagerPolicy = "static"
		c.ReservedSystemCPUs = "0"
		c.CPUManagerReconcilePeriod = metav1.Duration{Duration: time.Second}
	}})
	// Each container prints the CPUs it may run on, every second.
	mk := func(name string, cpu string) *v1.Pod {
		p := f.BusyboxPod(ns, name, "sh", "-c", "while true; do grep Cpus_allowed_list /proc/self/status; sleep 1; done")
		if cpu != "" {
			r := v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse("32Mi")}
			p.Spec.Containers[0].Resources = v1.ResourceRequirements{Requests: r, Limits: r}
		}
		return p
	}
	cpusOf := func(name string, want string) {
		t.Helper()
		var last string
		err := framework.WaitFor(ctx, time.Minute, name+" on CPUs "+want, func(ctx context.Context) (bool, error) {
			raw, err := f.Client.CoreV1().Pods(ns).GetLogs(name, &v1.PodLogOptions{TailLines: ptr.To[int64](1)}).DoRaw(ctx)
			if err != nil {
				return false, nil
			}
			last = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(raw)), "Cpus_allowed_list:"))
			return last == want, nil
		})
		if err != nil {
			t.Fatalf("pod %s runs on CPUs %q, want %q: %v", name, last, want, err)
		}
	}

	f.CreatePod(ctx, mk("guaranteed", "1"))
	f.CreatePod(ctx, mk("besteffort", ""))
	f.WaitForPodReady(ctx, ns, "guaranteed", 2*time.Minute)
	f.WaitForPodReady(ctx, ns, "besteffort", 2*time.Minute)
	cpusOf("guaranteed", "1")
	cpusOf("besteffort", "0")

	f.CreatePod(ctx, mk("no-cpu-left", "1"))
	got := f.WaitForPod(ctx, ns, "no-cpu-left", time.Minute, "refused", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
	if got.Status.Reason != "UnexpectedAdmissionError" || !strings.Contains(got.Status.Message, "not enough cpus available to satisfy request") {
		t.Errorf("refusal %q %q, want UnexpectedAdmissionError: not enough cpus", got.Status.Reason, got.Status.Message)
	}

	b, err := os.ReadFile(filepath.Join(n.RootDir, "cpu_manager_state"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"policyName":"static"`, `"defaultCpuSet":"0"`, `"main":"1"`, `"checksum":`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("checkpoint %s lacks %s", b, want)
		}
	}

	// The CPU manager's metrics say the same: two pinning requests, one
	// refused, CPU 1 exclusive and nothing left in the shared pool but the
	// reserved CPU 0 (which upstream's gauge does not count).
	m := nodeMetrics(t, ctx, f)
	for name, want := range map[string]float64{
		"kubelet_cpu_manager_pinning_requests_total":             2,
		"kubelet_cpu_manager_pinning_errors_total":               1,
		"kubelet_cpu_manager_exclusive_cpu_allocation_count":     1,
		"kubelet_cpu_manager_shared_pool_size_millicores":        0,
		`kubelet_cpu_manager_allocation_per_numa{numa_node="0"}`: 1,
	} {
		if got := metricValue(m, name); got != want {
			t.Errorf("%s = %v, want %v:\n%s", name, got, want, grepLines(m, "cpu_manager"))
		}
	}
	if got := metricValue(m, "kubelet_topology_manager_admission_requests_total"); got < 3 {
		t.Errorf("kubelet_topology_manager_admission_requests_total = %v, want at least the 3 pods", got)
	}

	f.DeletePod(ctx, ns, "guaranteed", ptr.To[int64](0))
	f.WaitForPodGone(ctx, ns, "guaranteed", time.Minute)
	cpusOf("besteffort", "0-1")
	m = nodeMetrics(t, ctx, f)
	if got := metricValue(m, "kubelet_cpu_manager_exclusive_cpu_allocation_count"); got != 0 {
		t.Errorf("exclusive CPUs after the delete = %v, want 0", got)
	}
	if got := metricValue(m, "kubelet_cpu_manager_shared_pool_size_millicores"); got != 1000 {
		t.Errorf("shared pool after the delete = %v millicores, want 1000 (CPU 1)", got)
	}
}
