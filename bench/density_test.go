//go:build bench

package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

// relistHistogram is the PLEG relist duration both agents serve on /metrics.
const relistHistogram = "kubelet_pleg_relist_duration_seconds"

// densityWindow is how long the agent's footprint and relists are sampled with all pods
// running; densitySettle is the pause before it (two housekeeping periods, so the start's
// trailing work — status writes, the first stats — is over).
const (
	densityWindow = 60 * time.Second
	densitySettle = 20 * time.Second
)

// densityPods is BENCH_DENSITY_PODS, default 250 (issue 19's density).
func densityPods() int {
	if n, err := strconv.Atoi(os.Getenv("BENCH_DENSITY_PODS")); err == nil && n > 0 {
		return n
	}
	return 250
}

// TestDensity starts BENCH_DENSITY_PODS pods (default 250; busybox `sleep`, pod network,
// created 20 at a time through the API server) on a node with maxPods = the pods, and
// reports: first create → all Ready; with all running and settled, over 60 s, the agent's
// RSS (mean and max of one sample a second of /proc/<pid>/status) and CPU (utime+stime
// over the window), and the PLEG relist duration p50/p99 (from the agent's
// kubelet_pleg_relist_duration_seconds buckets, the window's deltas) and mean; then the
// latency of /stats/summary through the API server's node proxy (summaryRequests one after
// the other); then all deleted at once (grace 1 s) → all gone from the API.
func TestDensity(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	count := densityPods()
	n, cs, w := startFullNode(t, f, ns, count, nil)
	if n.Config.MaxPods != int32(max(110, count)) {
		t.Fatalf("maxPods %d, want %d", n.Config.MaxPods, max(110, count))
	}

	names := make([]string, count)
	for i := range names {
		names[i] = fmt.Sprintf("density-%03d", i)
	}
	start := time.Now()
	createErrs := concurrently(names, func(name string) error {
		_, err := cs.CoreV1().Pods(ns).Create(ctx, sleepPod(f, ns, name), metav1.CreateOptions{})
		return err
	})
	ready := map[string]bool{}
	waitWatch(t, w, 10*time.Minute, fmt.Sprintf("%d pods Ready", count), func(ev watch.Event) bool {
		if p, ok := ev.Object.(*v1.Pod); ok && ev.Type != watch.Deleted && framework.IsPodReady(p) {
			ready[p.Name] = true
		}
		return len(ready) == count
	}, createErrs)
	allReady := time.Since(start)
	fmt.Printf("BENCH density pods=%d maxPods=%d all Ready after %v (created %d at a time)\n",
		count, n.Config.MaxPods, allReady.Round(time.Millisecond), burstConcurrency)
	time.Sleep(densitySettle)

	// The steady state.
	h0 := agentHistogram(t, ctx, f, relistHistogram)
	rss, cpu0 := procStats(t, n.Pid())
	t0 := time.Now()
	var rssSum, rssMax int64
	samples := 0
	for time.Since(t0) < densityWindow {
		time.Sleep(time.Second)
		rss, _ = procStats(t, n.Pid())
		rssSum += rss
		rssMax = max(rssMax, rss)
		samples++
	}
	_, cpu1 := procStats(t, n.Pid())
	window := time.Since(t0)
	h1 := agentHistogram(t, ctx, f, relistHistogram)
	if out := os.Getenv("BENCH_PROFILE"); out != "" {
		<-agentProfile(t, ctx, cs, f.Env.NodeName, "heap", nil, out+".heap") // what the RSS holds
	}
	const mib = 1 << 20
	fmt.Printf("BENCH density pods=%d agent RSS mean=%.1fMiB max=%.1fMiB, CPU mean=%.2f%% of a core (%.2fs over %v)\n",
		count, float64(rssSum)/float64(samples)/mib, float64(rssMax)/mib,
		100*(cpu1-cpu0).Seconds()/window.Seconds(), (cpu1 - cpu0).Seconds(), window.Round(time.Second))
	relists, err := h1.sub(h0)
	if err != nil {
		t.Fatalf("%s over the window: %v", relistHistogram, err)
	}
	if relists.count == 0 {
		t.Errorf("no relist in %v with %d pods", window, count)
	} else {
		sec := func(s float64) time.Duration {
			return time.Duration(s * float64(time.Second)).Round(100 * time.Microsecond)
		}
		fmt.Printf("BENCH density pods=%d PLEG relist p50=%v p99=%v mean=%v (%.0f relists in %v; quantiles interpolated in the %s buckets)\n",
			count, sec(histogramQuantile(.5, relists)), sec(histogramQuantile(.99, relists)), sec(relists.sum/relists.count),
			relists.count, window.Round(time.Second), relistHistogram)
	}

	// /stats/summary, after the window so that its cost is not in the steady state's CPU.
	_, cpu2 := procStats(t, n.Pid())
	lat, size, pods := summaryLatencies(t, ctx, cs, f.Env.NodeName, summaryRequests)
	_, cpu3 := procStats(t, n.Pid())
	fmt.Printf("BENCH density pods=%d /stats/summary x%d (%d pods, %d bytes): p50=%v p99=%v, agent CPU %.3fs\n", count, summaryRequests,
		pods, size, percentile(lat, .5).Round(100*time.Microsecond), percentile(lat, .99).Round(100*time.Microsecond), (cpu3 - cpu2).Seconds())
	if pods < count {
		t.Errorf("the Summary has %d pods, want at least %d", pods, count)
	}

	start = time.Now()
	deleteErrs := concurrently(names, func(name string) error {
		return cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](deleteGrace)})
	})
	gone := map[string]bool{}
	waitWatch(t, w, 10*time.Minute, fmt.Sprintf("%d pods gone", count), func(ev watch.Event) bool {
		if p, ok := ev.Object.(*v1.Pod); ok && ev.Type == watch.Deleted {
			gone[p.Name] = true
		}
		return len(gone) == count
	}, deleteErrs)
	fmt.Printf("BENCH density pods=%d deleted at once (grace %ds): all gone from the API after %v\n",
		count, deleteGrace, time.Since(start).Round(time.Millisecond))
}

// agentMetrics is the node agent's /metrics, read through the API server's node proxy
// with the admin client.
func agentMetrics(t *testing.T, ctx context.Context, f *framework.Framework) string {
	t.Helper()
	raw, err := f.Client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes/" + f.Env.NodeName + "/proxy/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatalf("reading the agent's /metrics: %v", err)
	}
	return string(raw)
}

// agentHistogram is the histogram name from the agent's /metrics.
func agentHistogram(t *testing.T, ctx context.Context, f *framework.Framework, name string) histogram {
	t.Helper()
	h, err := parseHistogram(agentMetrics(t, ctx, f), name)
	if err != nil {
		t.Fatalf("the agent's /metrics: %v", err)
	}
	return h
}
