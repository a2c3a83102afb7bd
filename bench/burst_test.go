//go:build bench

package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

// burstConcurrency is how many creators (and deleters, and CRI clients for the floor) work at
// once: issue 19's "20 concurrent creates".
const burstConcurrency = 20

// deleteGrace is the grace period of the delete-all. Not 0: with 0 the API server removes the
// pod at once, and "gone from the API" would measure the API server instead of the node agent
// (which kills the container, SIGKILL after 1 s since `sleep` as PID 1 ignores SIGTERM, and
// then sends the final delete).
const deleteGrace = 1

// idleWindow is how long the API server's request counters are sampled on the idle node, to
// subtract the background (leases of the controllers, the scheduler and the node agent).
const idleWindow = 10 * time.Second

// settle is the pause before the idle window and after each phase, before the request
// counters are read, for the agent's trailing writes.
const settle = 5 * time.Second

// TestBurst creates BENCH_PODS pods (default 110; busybox `sleep`, pod network, no volumes)
// at once through the API server with 20 concurrent creators, and reports what a watch sees:
// create → Ready p50/p90/p99, first create → all Ready, the node agent's CPU time during the
// burst and the API requests it sent per pod; then deletes all at once (20 concurrent
// deleters, grace 1 s) and reports until all are gone from the API and from the runtime.
//
// Requests per pod: neither the agents' client metrics (nodelet has none) nor
// apiserver_request_total (no user label) name the agent's requests, so they are estimated
// from kube-apiserver's apiserver_request_total, summed over resource series except WATCH:
// (after − before) − the test's own requests (counted on its client's transport) − the idle
// rate (sampled for 10 s before the burst on the same node) × the burst's duration, divided
// by the pods. The error is the idle background's variation over the burst (about ±1 lease
// renewal per 2 s) plus whatever the controllers do about the pods (the rig runs none that
// write pods), printed as ± per pod.
func TestBurst(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	count := fullNodePods()
	// The test's own client counts every request it sends except watches, which the API
	// server's counters are read without.
	var own atomic.Int64
	n, cs, w := startFullNode(t, f, ns, count, func(rt http.RoundTripper) http.RoundTripper { return &countingTransport{rt: rt, n: &own} })

	// Idle background: the same node, nothing happening (after the registration's last writes).
	time.Sleep(settle)
	idle0 := apiRequests(t, ctx, f)
	time.Sleep(idleWindow)
	idle1 := apiRequests(t, ctx, f)
	idleRate := idle1.total() - idle0.total() // requests per idleWindow
	fmt.Printf("BENCH burst idle API requests: %.0f in %v\n", idleRate, idleWindow)

	// Burst.
	names := make([]string, count)
	for i := range names {
		names[i] = fmt.Sprintf("burst-%03d", i)
	}
	var mu sync.Mutex
	created := map[string]time.Time{}
	var lastCreated time.Duration // when the last create was answered, since start
	own.Store(0)
	req0 := apiRequests(t, ctx, f)
	_, cpu0 := procStats(t, n.Pid())
	split0 := mustSampleCPU(t, n.Pid())
	profiled := profileAgent(t, ctx, cs, f.Env.NodeName)
	start := time.Now()
	createErrs := concurrently(names, func(name string) error {
		p := sleepPod(f, ns, name)
		mu.Lock()
		created[name] = time.Now()
		mu.Unlock()
		_, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		mu.Lock()
		lastCreated = max(lastCreated, time.Since(start))
		mu.Unlock()
		return err
	})
	readyAt := map[string]time.Time{}
	waitWatch(t, w, 5*time.Minute, fmt.Sprintf("%d pods Ready", count), func(ev watch.Event) bool {
		if p, ok := ev.Object.(*v1.Pod); ok && ev.Type != watch.Deleted && framework.IsPodReady(p) {
			if _, seen := readyAt[p.Name]; !seen {
				readyAt[p.Name] = time.Now()
			}
		}
		return len(readyAt) == count
	}, createErrs)
	allReady := time.Since(start)
	_, cpu1 := procStats(t, n.Pid())
	printCPUSplit(fmt.Sprintf("burst pods=%d start", count), split0, mustSampleCPU(t, n.Pid()), allReady)
	<-profiled
	time.Sleep(settle) // status writes the agent still had queued belong to the start
	req1 := apiRequests(t, ctx, f)
	ownStart := own.Load()
	mu.Lock()
	var lat []time.Duration
	for name, at := range readyAt {
		lat = append(lat, at.Sub(created[name]))
	}
	mu.Unlock()
	fmt.Printf("BENCH burst pods=%d concurrency=%d all Ready after %v\n", count, burstConcurrency, allReady.Round(time.Millisecond))
	fmt.Printf("BENCH burst pods=%d create->Ready p50=%v p90=%v p99=%v\n", count,
		percentile(lat, .5).Round(time.Millisecond), percentile(lat, .9).Round(time.Millisecond), percentile(lat, .99).Round(time.Millisecond))
	fmt.Printf("BENCH burst pods=%d agent CPU during the burst: %.2fs\n", count, (cpu1 - cpu0).Seconds())
	printRequests("start", count, req0, req1, ownStart, idleRate, allReady+settle)
	printTimeline(t, ctx, f.CRI, ns, start, lastCreated, allReady)

	sbs, err := f.CRI.PodSandboxes(ctx, map[string]string{framework.LabelPodNamespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	if len(sbs) != count {
		t.Errorf("%d sandboxes in the runtime for %d Ready pods", len(sbs), count)
	}

	// Delete all at once.
	own.Store(0)
	req2 := apiRequests(t, ctx, f)
	_, cpu2 := procStats(t, n.Pid())
	split2 := mustSampleCPU(t, n.Pid())
	start = time.Now()
	sbCtx, stopSB := context.WithCancel(ctx)
	runtimeGone := watchSandboxes(sbCtx, f.CRI, ns, start)
	defer func() { // joined before the CRI connection closes, also when the test fails early
		stopSB()
		for range runtimeGone {
		}
	}()
	deleteErrs := concurrently(names, func(name string) error {
		return cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](deleteGrace)})
	})
	gone := map[string]bool{}
	waitWatch(t, w, 5*time.Minute, fmt.Sprintf("%d pods gone from the API", count), func(ev watch.Event) bool {
		if p, ok := ev.Object.(*v1.Pod); ok && ev.Type == watch.Deleted {
			gone[p.Name] = true
		}
		return len(gone) == count
	}, deleteErrs)
	goneAPI := time.Since(start)
	_, cpu3 := procStats(t, n.Pid())
	printCPUSplit(fmt.Sprintf("burst pods=%d delete", count), split2, mustSampleCPU(t, n.Pid()), goneAPI)
	time.Sleep(settle)
	req3 := apiRequests(t, ctx, f)
	ownDelete := own.Load()
	fmt.Printf("BENCH burst pods=%d deleted at once (grace %ds): all gone from the API after %v\n", count, deleteGrace, goneAPI.Round(time.Millisecond))
	fmt.Printf("BENCH burst pods=%d agent CPU during the delete: %.2fs\n", count, (cpu3 - cpu2).Seconds())
	printRequests("delete", count, req2, req3, ownDelete, idleRate, goneAPI+settle)

	rt := <-runtimeGone
	if rt.err != nil {
		t.Fatal(rt.err)
	}
	if rt.stopped > 0 {
		fmt.Printf("BENCH burst pods=%d deleted at once: all sandboxes stopped after %v\n", count, rt.stopped.Round(time.Millisecond))
	} else {
		fmt.Printf("BENCH burst pods=%d deleted at once: sandboxes still running after %v\n", count, runtimeWait)
	}
	if rt.left == 0 {
		fmt.Printf("BENCH burst pods=%d deleted at once: all gone from the runtime after %v\n", count, rt.removed.Round(time.Millisecond))
	} else {
		fmt.Printf("BENCH burst pods=%d deleted at once: %d sandboxes still in the runtime after %v\n", count, rt.left, runtimeWait)
	}
}

// agentProfile writes the node agent's pprof profile kind (with params) to out, fetched through
// the API server's nodes/proxy as an operator would (both agents serve /debug/pprof with
// enableProfilingHandler, on by default); nothing when out is "". The channel is closed when
// the profile is written or failed (logged: the bench goes on).
func agentProfile(t *testing.T, ctx context.Context, cs kubernetes.Interface, node, kind string, params map[string]string, out string) <-chan struct{} {
	t.Helper()
	done := make(chan struct{})
	if out == "" {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		req := cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", node, "proxy/debug/pprof", kind).Timeout(2 * time.Minute)
		for k, v := range params {
			req = req.Param(k, v)
		}
		b, err := req.DoRaw(ctx)
		if err == nil {
			err = os.WriteFile(out, b, 0o644)
		}
		if err != nil {
			t.Logf("%s profile of the agent: %v", kind, err)
			return
		}
		t.Logf("%s profile of the agent %v: %s", kind, params, out)
	}()
	return done
}

// profileAgent takes a CPU profile of the agent's next BENCH_PROFILE_SECONDS (default 30) into
// BENCH_PROFILE, if set.
func profileAgent(t *testing.T, ctx context.Context, cs kubernetes.Interface, node string) <-chan struct{} {
	secs := os.Getenv("BENCH_PROFILE_SECONDS")
	if _, err := strconv.Atoi(secs); err != nil {
		secs = "30"
	}
	return agentProfile(t, ctx, cs, node, "profile", map[string]string{"seconds": secs}, os.Getenv("BENCH_PROFILE"))
}

// printTimeline prints where the burst's time went: when the API server had answered
// every create, when the runtime had made the last sandbox and container and started
// the last container (its own timestamps), and when the last pod was seen Ready.
func printTimeline(t *testing.T, ctx context.Context, c *framework.CRIClient, ns string, start time.Time, lastCreated, allReady time.Duration) {
	t.Helper()
	labels := map[string]string{framework.LabelPodNamespace: ns}
	sbs, err := c.PodSandboxes(ctx, labels)
	if err != nil {
		t.Fatal(err)
	}
	var lastSandbox, lastCreate, lastStart time.Duration
	for _, sb := range sbs {
		lastSandbox = max(lastSandbox, time.Unix(0, sb.CreatedAt).Sub(start))
	}
	ctrs, err := c.Containers(ctx, labels)
	if err != nil {
		t.Fatal(err)
	}
	for _, ctr := range ctrs {
		lastCreate = max(lastCreate, time.Unix(0, ctr.CreatedAt).Sub(start))
		st, err := c.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ctr.Id})
		if err != nil {
			t.Fatalf("status of container %s: %v", ctr.Id, err)
		}
		lastStart = max(lastStart, time.Unix(0, st.Status.StartedAt).Sub(start))
	}
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Millisecond) }
	fmt.Printf("BENCH burst pods=%d timeline: last create answered +%v, last sandbox created +%v, last container created +%v, last container started +%v, last pod Ready +%v\n",
		len(sbs), r(lastCreated), r(lastSandbox), r(lastCreate), r(lastStart), r(allReady))
}

// startFullNode starts nodelet with maxPods for count pods, waits for the node to be Ready
// and returns the test's client (unthrottled: the creators must not wait on it; its
// transport wrapped by wrap, if set) and a watch of the pods in ns, stopped when the test ends.
func startFullNode(t *testing.T, f *framework.Framework, ns string, count int, wrap func(http.RoundTripper) http.RoundTripper) (*framework.Nodelet, kubernetes.Interface, watch.Interface) {
	t.Helper()
	ctx := context.Background()
	n := f.StartNodelet(framework.NodeletOptions{Config: func(c *kubeletconfigv1beta1.KubeletConfiguration) {
		c.MaxPods = int32(max(110, count))
	}})
	f.WaitForNodeReady(ctx, 2*time.Minute)
	cfg := rest.CopyConfig(f.RestConfig)
	cfg.QPS, cfg.Burst = 1000, 1000
	if wrap != nil {
		cfg.Wrap(wrap)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("building the test's client: %v", err)
	}
	w := watchPods(t, ctx, cs, ns)
	t.Cleanup(w.Stop)
	return n, cs, w
}

// sleepPod is the full-node benches' pod: busybox `sleep`, pod network, no volumes, bound
// to the node (the rig runs no scheduler for us).
func sleepPod(f *framework.Framework, ns, name string) *v1.Pod {
	p := f.BusyboxPod(ns, name, "sleep", "3600")
	p.Spec.NodeName = f.Env.NodeName
	p.Spec.AutomountServiceAccountToken = ptr.To(false)
	return p
}

// runtimeWait bounds the wait for the sandboxes of deleted pods to leave the runtime: the
// upstream kubelet removes them in its container GC (every minute), so "stopped" and
// "removed" are told apart.
const runtimeWait = 150 * time.Second

// sandboxesGone is what watchSandboxes saw: when none of the sandboxes was ready any more,
// when none was left (0: not within runtimeWait), how many were left at the end.
type sandboxesGone struct {
	stopped, removed time.Duration
	left             int
	err              error
}

// watchSandboxes polls the runtime for the sandboxes labelled with namespace ns, from start
// until none is left, runtimeWait has passed or ctx ends, sends what it saw and closes the
// channel.
func watchSandboxes(ctx context.Context, c *framework.CRIClient, ns string, start time.Time) <-chan sandboxesGone {
	out := make(chan sandboxesGone, 1)
	go func() {
		defer close(out)
		var r sandboxesGone
		for time.Since(start) < runtimeWait && ctx.Err() == nil {
			sbs, err := c.PodSandboxes(ctx, map[string]string{framework.LabelPodNamespace: ns})
			if err != nil {
				r.err = err
				break
			}
			ready := 0
			for _, sb := range sbs {
				if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
					ready++
				}
			}
			if ready == 0 && r.stopped == 0 {
				r.stopped = time.Since(start)
			}
			if r.left = len(sbs); r.left == 0 {
				r.removed = time.Since(start)
				break
			}
			select {
			case <-ctx.Done():
			case <-time.After(framework.Poll):
			}
		}
		out <- r
	}()
	return out
}

// TestBurstCRIFloor is the runtime's own time for TestBurst's pods: BENCH_PODS sandboxes
// (pod network: the rig's CNI; the rig's pause image) each with one busybox `sleep`
// container, started straight over CRI (RunPodSandbox + CreateContainer + StartContainer),
// 20 at a time, then all stopped and removed (StopPodSandbox + RemovePodSandbox), 20 at a time.
func TestBurstCRIFloor(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	count := fullNodePods()
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
	names := make([]string, count)
	for i := range names {
		names[i] = fmt.Sprintf("floor-%03d", i)
	}
	var mu sync.Mutex
	sandboxes := map[string]string{}
	var lat []time.Duration
	// BENCH_FLOOR_CONCURRENCY: how many pods the floor starts at once (default: as many as
	// the burst's creators; the agent itself starts every pod it is given at once).
	conc := burstConcurrency
	if n, err := strconv.Atoi(os.Getenv("BENCH_FLOOR_CONCURRENCY")); err == nil && n > 0 {
		conc = n
	}
	split0 := mustSampleCPU(t, 0)
	start := time.Now()
	for err := range concurrentlyN(conc, names, func(name string) error {
		t0 := time.Now()
		sb, _, err := f.CRI.RunBusyboxPod(ctx, name, f.Env.BusyboxImage, logDir, false, "sleep", "3600")
		mu.Lock()
		defer mu.Unlock()
		if sb != "" {
			sandboxes[name] = sb
		}
		lat = append(lat, time.Since(t0))
		return err
	}) {
		t.Error(err)
	}
	allStarted := time.Since(start)
	printCPUSplit(fmt.Sprintf("floor pods=%d start", count), split0, mustSampleCPU(t, 0), allStarted)
	if t.Failed() {
		t.FailNow()
	}
	ctrs, err := f.CRI.Containers(ctx, map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	running := 0
	for _, c := range ctrs {
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			running++
		}
	}
	if running != count {
		t.Fatalf("%d containers running, want %d", running, count)
	}
	fmt.Printf("BENCH floor pods=%d concurrency=%d all started over CRI after %v\n", count, conc, allStarted.Round(time.Millisecond))
	fmt.Printf("BENCH floor pods=%d RunPodSandbox->StartContainer done p50=%v p90=%v p99=%v\n", count,
		percentile(lat, .5).Round(time.Millisecond), percentile(lat, .9).Round(time.Millisecond), percentile(lat, .99).Round(time.Millisecond))

	split1 := mustSampleCPU(t, 0)
	start = time.Now()
	for err := range concurrently(names, func(name string) error {
		id := sandboxes[name] // read-only now
		if _, err := f.CRI.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
			return fmt.Errorf("stopping sandbox of %s: %w", name, err)
		}
		if _, err := f.CRI.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
			return fmt.Errorf("removing sandbox of %s: %w", name, err)
		}
		return nil
	}) {
		t.Error(err)
	}
	allRemoved := time.Since(start)
	printCPUSplit(fmt.Sprintf("floor pods=%d remove", count), split1, mustSampleCPU(t, 0), allRemoved)
	sbs, err := f.CRI.PodSandboxes(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(sbs) != 0 {
		t.Errorf("%d sandboxes left after removing all", len(sbs))
	}
	fmt.Printf("BENCH floor pods=%d all stopped and removed over CRI after %v\n", count, allRemoved.Round(time.Millisecond))
}

// concurrently runs fn for every name, burstConcurrency at a time, and returns a channel that
// yields fn's errors and is closed when all have returned.
func concurrently(names []string, fn func(name string) error) <-chan error {
	return concurrentlyN(burstConcurrency, names, fn)
}

// concurrentlyN is concurrently with n workers.
func concurrentlyN(n int, names []string, fn func(name string) error) <-chan error {
	errs := make(chan error, len(names))
	jobs := make(chan string)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range jobs {
				if err := fn(name); err != nil {
					errs <- fmt.Errorf("%s: %w", name, err)
				}
			}
		}()
	}
	go func() {
		for _, name := range names {
			jobs <- name
		}
		close(jobs)
		wg.Wait()
		close(errs)
	}()
	return errs
}

// watchPods watches the pods in ns from now on, re-establishing the watch from the last
// event seen when the API server closes it (watches have a server-side timeout).
func watchPods(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns string) watch.Interface {
	t.Helper()
	list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing pods in %s: %v", ns, err)
	}
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return cs.CoreV1().Pods(ns).Watch(ctx, o)
		},
	})
	if err != nil {
		t.Fatalf("watching pods in %s: %v", ns, err)
	}
	return w
}

// waitWatch feeds w's events to done until it returns true; it fails the test on a watch
// error, on timeout or on an error from errs (the requests running meanwhile), and returns
// only once errs is closed (every request has returned).
func waitWatch(t *testing.T, w watch.Interface, timeout time.Duration, what string, done func(watch.Event) bool, errs <-chan error) {
	t.Helper()
	deadline := time.After(timeout)
	finished := false
	for !finished || errs != nil {
		select {
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			t.Fatal(err)
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch closed while waiting for %s", what)
			}
			if ev.Type == watch.Error {
				t.Fatalf("watch error while waiting for %s: %v", what, ev.Object)
			}
			if !finished && done(ev) {
				finished = true
			}
		case <-deadline:
			t.Fatalf("waiting %v for %s", timeout, what)
		}
	}
}

// countingTransport counts the requests a client sends, except watches.
type countingTransport struct {
	rt http.RoundTripper
	n  *atomic.Int64
}

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Query().Get("watch") != "true" {
		c.n.Add(1)
	}
	return c.rt.RoundTrip(req)
}

// requestCounts is kube-apiserver's apiserver_request_total summed per "VERB resource[/sub]",
// without WATCH (a watch is counted when it ends, not when it starts) and without non-resource
// requests (the test's own reads of /metrics).
type requestCounts map[string]float64

func (r requestCounts) total() float64 {
	var s float64
	for _, v := range r {
		s += v
	}
	return s
}

// apiRequests reads kube-apiserver's /metrics with the admin client (not the counted one).
func apiRequests(t *testing.T, ctx context.Context, f *framework.Framework) requestCounts {
	t.Helper()
	raw, err := f.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatalf("reading kube-apiserver /metrics: %v", err)
	}
	out, err := parseRequestCounts(string(raw))
	if err != nil {
		t.Fatalf("kube-apiserver /metrics: %v", err)
	}
	return out
}

// parseRequestCounts reads the apiserver_request_total series of a Prometheus text exposition
// into requestCounts.
func parseRequestCounts(exposition string) (requestCounts, error) {
	out := requestCounts{}
	for _, line := range strings.Split(exposition, "\n") {
		rest, ok := strings.CutPrefix(line, "apiserver_request_total{")
		if !ok {
			continue
		}
		labelText, value, ok := strings.Cut(rest, "} ")
		if !ok {
			return nil, fmt.Errorf("apiserver_request_total: no value in %q", line)
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return nil, fmt.Errorf("apiserver_request_total: value of %q: %w", line, err)
		}
		labels := promLabels(labelText)
		if labels["verb"] == "WATCH" || labels["resource"] == "" {
			continue
		}
		key := labels["verb"] + " " + labels["resource"]
		if sub := labels["subresource"]; sub != "" {
			key += "/" + sub
		}
		out[key] += v
	}
	if len(out) == 0 {
		return nil, errors.New("no apiserver_request_total series")
	}
	return out, nil
}

// printRequests prints the estimate of the agent's API requests per pod for a phase (see
// TestBurst) and the five largest request kinds of the phase (the test's own included).
func printRequests(phase string, count int, before, after requestCounts, own int64, idlePerWindow float64, d time.Duration) {
	delta := requestCounts{}
	for k, v := range after {
		if dv := v - before[k]; dv > 0 {
			delta[k] = dv
		}
	}
	background := idlePerWindow * d.Seconds() / idleWindow.Seconds()
	agent := delta.total() - float64(own) - background
	// The background's error: about a Poisson count's standard deviation, from the idle
	// window and again from the phase.
	errPerPod := 2 * (math.Sqrt(background) + 1) / float64(count)
	fmt.Printf("BENCH burst pods=%d %s: API requests %.0f, test's own %d, idle background %.0f => agent %.1f per pod (±%.1f)\n",
		count, phase, delta.total(), own, background, agent/float64(count), errPerPod)
	keys := make([]string, 0, len(delta))
	for k := range delta {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return delta[keys[i]] > delta[keys[j]] })
	var top []string
	for _, k := range keys[:min(5, len(keys))] {
		top = append(top, fmt.Sprintf("%s %.0f", k, delta[k]))
	}
	fmt.Printf("BENCH burst pods=%d %s: largest request kinds: %s\n", count, phase, strings.Join(top, ", "))
}

func TestParseRequestCounts(t *testing.T) {
	const exposition = `# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 110
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 220
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="WATCH",version="v1"} 7
apiserver_request_total{code="200",component="",dry_run="",group="",resource="",scope="",subresource="/metrics",verb="GET",version=""} 5
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 1.5e+01
apiserver_request_totally_different{verb="GET",resource="pods"} 9
`
	got, err := parseRequestCounts(exposition)
	if err != nil {
		t.Fatal(err)
	}
	want := requestCounts{"POST pods": 110, "PATCH pods/status": 223, "PUT leases": 15}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	if got.total() != 348 {
		t.Errorf("total %v, want 348", got.total())
	}
	if _, err := parseRequestCounts("# nothing\n"); err == nil {
		t.Error("an exposition without apiserver_request_total parsed without error")
	}
}
