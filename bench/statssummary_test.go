//go:build bench

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

// summaryRequests is how many /stats/summary requests TestStatsSummaryLatency times.
const summaryRequests = 50

// TestStatsSummaryLatency starts BENCH_PODS pods (default 110; busybox `sleep`, pod network,
// created 20 at a time as TestBurst does), lets the node settle (20 s: two housekeeping
// periods), then times summaryRequests GETs of /stats/summary one after the other through
// the API server's node proxy and prints p50/p99 and the agent's CPU over them. It deletes
// the pods at the end, so it can run again on the same rig with another NODELET_BIN.
func TestStatsSummaryLatency(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	count := fullNodePods()
	n, cs, w := startFullNode(t, f, ns, count, nil)

	names := make([]string, count)
	for i := range names {
		names[i] = fmt.Sprintf("stats-%03d", i)
	}
	createErrs := concurrently(names, func(name string) error {
		_, err := cs.CoreV1().Pods(ns).Create(ctx, sleepPod(f, ns, name), metav1.CreateOptions{})
		return err
	})
	ready := map[string]bool{}
	waitWatch(t, w, 5*time.Minute, fmt.Sprintf("%d pods Ready", count), func(ev watch.Event) bool {
		if p, ok := ev.Object.(*v1.Pod); ok && ev.Type != watch.Deleted && framework.IsPodReady(p) {
			ready[p.Name] = true
		}
		return len(ready) == count
	}, createErrs)
	time.Sleep(20 * time.Second)

	_, cpu0 := procStats(t, n.Pid())
	lat, size, pods := summaryLatencies(t, ctx, cs, f.Env.NodeName, summaryRequests)
	_, cpu1 := procStats(t, n.Pid())
	fmt.Printf("BENCH stats pods=%d /stats/summary x%d (%d pods, %d bytes): p50=%v p99=%v, agent CPU %.3fs\n", count, summaryRequests,
		pods, size, percentile(lat, .5).Round(100*time.Microsecond), percentile(lat, .99).Round(100*time.Microsecond), (cpu1 - cpu0).Seconds())
	if pods < count {
		t.Errorf("the Summary has %d pods, want at least %d", pods, count)
	}
	// Which CRI call measured the pods: a fallback from ListPodSandboxStats is logged.
	if b, err := os.ReadFile(n.LogPath); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "ListPodSandboxStats") {
				fmt.Printf("BENCH stats nodelet log: %s\n", l)
			}
		}
	}

	deleteErrs := concurrently(names, func(name string) error {
		return cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](1)})
	})
	gone := map[string]bool{}
	waitWatch(t, w, 5*time.Minute, fmt.Sprintf("%d pods gone", count), func(ev watch.Event) bool {
		if p, ok := ev.Object.(*v1.Pod); ok && ev.Type == watch.Deleted {
			gone[p.Name] = true
		}
		return len(gone) == count
	}, deleteErrs)
}

// summaryLatencies GETs the node's /stats/summary through the API server's node proxy n
// times and returns each request's latency, the last body's size and its pod count.
func summaryLatencies(t *testing.T, ctx context.Context, cs kubernetes.Interface, node string, n int) (lat []time.Duration, size, pods int) {
	t.Helper()
	path := "/api/v1/nodes/" + node + "/proxy/stats/summary"
	for range n {
		start := time.Now()
		body, err := cs.CoreV1().RESTClient().Get().AbsPath(path).DoRaw(ctx)
		lat = append(lat, time.Since(start))
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		var s statsapi.Summary
		if err := json.Unmarshal(body, &s); err != nil {
			t.Fatalf("decoding the Summary: %v", err)
		}
		size, pods = len(body), len(s.Pods)
	}
	return lat, size, pods
}
