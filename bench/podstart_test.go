//go:build bench

// Package bench measures nodelet against the real rig (test/rig/up.sh must be up):
//
//	NODELET_BIN=_output/nodelet go test -tags bench -run TestPodStartup -v ./bench/
//
// It prints figures; it asserts only that the pods ran. Speed targets are read from
// its output, never enforced by a timed test.
package bench

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

func pods() int {
	if n, err := strconv.Atoi(os.Getenv("BENCH_PODS")); err == nil && n > 0 {
		return n
	}
	return 20
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	idx := int(float64(len(s)-1) * p)
	return s[idx]
}

// TestPodStartup creates N pods (pod network, one busybox container each) one after
// another, and reports: API create → Ready seen through a watch, and the runtime part
// (sandbox created → container started, from CRI timestamps); then nodelet's RSS and
// CPU time with the pods running.
func TestPodStartup(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	n := f.StartNodelet(framework.NodeletOptions{})
	f.WaitForNodeReady(ctx, 2*time.Minute)
	count := pods()

	w, err := f.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	created := map[string]time.Time{}
	ready := map[string]time.Duration{}
	for i := 0; i < count; i++ {
		name := fmt.Sprintf("bench-%02d", i)
		p := f.BusyboxPod(ns, name, "sleep", "3600")
		start := time.Now()
		f.CreatePod(ctx, p)
		created[name] = start
		// One at a time, as the SIG Scalability "sequence of pods" test does.
		deadline := time.After(2 * time.Minute)
	wait:
		for {
			select {
			case ev := <-w.ResultChan():
				if ev.Type == watch.Error {
					t.Fatalf("watch error: %v", ev.Object)
				}
				pod, ok := ev.Object.(*v1.Pod)
				if !ok {
					continue
				}
				if _, done := ready[pod.Name]; !done && framework.IsPodReady(pod) {
					ready[pod.Name] = time.Since(created[pod.Name])
					if pod.Name == name {
						break wait
					}
				}
			case <-deadline:
				t.Fatalf("pod %s not Ready within 2m", name)
			}
		}
	}
	var e2e, runtimePart []time.Duration
	for name, d := range ready {
		e2e = append(e2e, d)
		p, err := f.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sbs, err := f.CRI.PodSandboxesOf(ctx, string(p.UID))
		if err != nil || len(sbs) != 1 {
			t.Fatalf("sandboxes of %s: %v %v", name, sbs, err)
		}
		cs, err := f.CRI.PodContainers(ctx, string(p.UID))
		if err != nil || len(cs) != 1 {
			t.Fatalf("containers of %s: %v %v", name, cs, err)
		}
		resp, err := f.CRI.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: cs[0].Id})
		if err != nil || resp.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Fatalf("container status of %s: %v %v", name, resp, err)
		}
		st := resp.GetStatus()
		runtimePart = append(runtimePart, time.Duration(st.StartedAt-sbs[0].CreatedAt))
	}
	time.Sleep(15 * time.Second) // let the node settle: steady-state figures
	rss, cpu := procStats(t, n.Pid())
	fmt.Printf("BENCH pods=%d create->Ready p50=%v p99=%v max=%v\n", count, percentile(e2e, .5).Round(time.Millisecond), percentile(e2e, .99).Round(time.Millisecond), percentile(e2e, 1).Round(time.Millisecond))
	fmt.Printf("BENCH pods=%d sandbox-created->container-started p50=%v p99=%v\n", count, percentile(runtimePart, .5).Round(time.Millisecond), percentile(runtimePart, .99).Round(time.Millisecond))
	fmt.Printf("BENCH nodelet RSS with %d pods: %.1f MiB; CPU time since start: %.2fs\n", count, float64(rss)/(1<<20), cpu.Seconds())
	before := cpu
	time.Sleep(30 * time.Second)
	_, after := procStats(t, n.Pid())
	fmt.Printf("BENCH nodelet idle CPU with %d pods: %.2f%% of one core (30s window)\n", count, 100*(after-before).Seconds()/30)
}

// TestPodStartupCRIFloor is TestPodStartup's floor: the same pods (pod network, one busybox
// container) started one after another straight over CRI (RunPodSandbox, CreateContainer,
// StartContainer), no agent. compare.sh runs it once beside TestPodStartup.
func TestPodStartupCRIFloor(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	if k, err := f.CRI.RemoveAllPodSandboxes(ctx); err != nil {
		t.Fatalf("clearing the runtime: %v", err)
	} else if k > 0 {
		t.Logf("removed %d pod sandboxes left by an earlier test", k)
	}
	t.Cleanup(func() {
		if _, err := f.CRI.RemoveAllPodSandboxes(context.Background()); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	logDir := t.TempDir()
	count := pods()
	var lat []time.Duration
	for i := range count {
		start := time.Now()
		if _, _, err := f.CRI.RunBusyboxPod(ctx, fmt.Sprintf("floor-%02d", i), f.Env.BusyboxImage, logDir, false, "sleep", "3600"); err != nil {
			t.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	fmt.Printf("BENCH floor pods=%d RunPodSandbox->StartContainer one after another p50=%v p99=%v max=%v\n", count,
		percentile(lat, .5).Round(time.Millisecond), percentile(lat, .99).Round(time.Millisecond), percentile(lat, 1).Round(time.Millisecond))
}

// procStats reads VmRSS and utime+stime of pid.
func procStats(t *testing.T, pid int) (rss int64, cpu time.Duration) {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			f := strings.Fields(line)
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			rss = kb << 10
		}
	}
	_, cpu, err = procCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	return rss, cpu
}
