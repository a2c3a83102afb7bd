//go:build e2e

package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	tracingapi "k8s.io/component-base/tracing/api/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/testsupport/spantest"
	"github.com/nodelet/nodelet/test/e2e/framework"
)

// Issue 22's observability checks on the rig: CPU metrics of a busy pod through the API
// server, the profiling and node log endpoints with and without their grants, path
// traversal on /logs/, and spans reaching an OTLP receiver.

// proxyGet is GET path (with a leading "/", kept as written, a trailing "/" included) on
// nodelet through the API server's nodes/proxy, as the rig's admin.
func proxyGet(ctx context.Context, f *framework.Framework, path string, params map[string]string) ([]byte, error) {
	// One AbsPath segment keeps a trailing slash (/logs/ is not /logs).
	req := f.Client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes/" + f.Env.NodeName + "/proxy" + path)
	for k, v := range params {
		req = req.Param(k, v)
	}
	return req.DoRaw(ctx)
}

// sample is one sample of a text exposition: its value and its timestamp (zero when the line
// has none).
type sample struct {
	value float64
	at    time.Time
}

// shadowLine matches /etc/shadow's first line.
var shadowLine = regexp.MustCompile(`(?m)^root:`)

var labelRE = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// findSample returns the first sample of metric whose labels include want.
func findSample(exposition, metric string, want map[string]string) (sample, bool) {
	for _, line := range strings.Split(exposition, "\n") {
		rest, ok := strings.CutPrefix(line, metric+"{")
		if !ok {
			continue
		}
		labels, values, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		got := map[string]string{}
		for _, m := range labelRE.FindAllStringSubmatch(labels, -1) {
			got[m[1]] = m[2]
		}
		match := true
		for k, v := range want {
			match = match && got[k] == v
		}
		fields := strings.Fields(values)
		if !match || len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		s := sample{value: v}
		if len(fields) > 1 {
			if ms, err := strconv.ParseInt(fields[1], 10, 64); err == nil {
				s.at = time.UnixMilli(ms)
			}
		}
		return s, true
	}
	return sample{}, false
}

// cpuRates scrapes path through nodes/proxy until container_cpu_usage_seconds_total has a
// sample for each of the pod's containers, then until each has one measured at least 5s
// later, and returns each container's CPU use between the two in cores (seconds per second).
// Samples without a timestamp are placed at the scrape's time.
func cpuRates(t *testing.T, ctx context.Context, f *framework.Framework, path, ns, pod string, containers ...string) map[string]float64 {
	t.Helper()
	first := map[string]sample{}
	rates := map[string]float64{}
	var last string
	err := framework.WaitFor(ctx, 2*time.Minute, path+" container_cpu_usage_seconds_total of "+strings.Join(containers, ", ")+" twice, 5s apart",
		func(ctx context.Context) (bool, error) {
			b, err := proxyGet(ctx, f, path, nil)
			if err != nil {
				return false, fmt.Errorf("%w: %.300s", err, b)
			}
			now := time.Now()
			last = string(b)
			for _, c := range containers {
				s, ok := findSample(last, "container_cpu_usage_seconds_total", map[string]string{"container": c, "namespace": ns, "pod": pod})
				if !ok {
					continue
				}
				if s.at.IsZero() {
					s.at = now
				}
				s0, seen := first[c]
				switch {
				case !seen:
					first[c] = s
				case s.at.Sub(s0.at) >= 5*time.Second:
					rates[c] = (s.value - s0.value) / s.at.Sub(s0.at).Seconds()
				}
			}
			return len(rates) == len(containers), nil
		})
	if err != nil {
		t.Fatalf("%v\nlast scrape's container_cpu_usage_seconds_total:\n%s", err, grepLines(last, "container_cpu_usage_seconds_total"))
	}
	return rates
}

// TestCPUBurnerMetricsRise: a pod whose container "burn" spins under a 250m CPU limit and whose
// container "idle" sleeps. Through the API server's nodes/proxy, container_cpu_usage_seconds_total
// of "burn" rises between two background measurements at more than 0.02 cores and at most the
// limit with slack (the node's or the pod's whole CPU would not fit under it), while "idle"'s
// stays under 0.02 cores: on /metrics/resource (metrics-server's) and on /metrics/cadvisor
// (read from cgroup v2, or v1's cpuacct on the rig's hybrid host).
func TestCPUBurnerMetricsRise(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	startNode(t, f, framework.NodeletOptions{})
	const limit = 0.25
	pod := f.BusyboxPod(ns, "cpu-burner", "sh", "-c", "while :; do :; done")
	pod.Spec.Containers[0].Name = "burn"
	cpu := v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m")}
	pod.Spec.Containers[0].Resources = v1.ResourceRequirements{Requests: cpu, Limits: cpu}
	idle := pod.Spec.Containers[0]
	idle.Name, idle.Command, idle.Resources = "idle", []string{"sleep", "3600"}, v1.ResourceRequirements{}
	pod.Spec.Containers = append(pod.Spec.Containers, idle)
	f.CreatePod(ctx, pod)
	f.WaitForPodReady(ctx, ns, pod.Name, 2*time.Minute)

	check := func(t *testing.T, path string) {
		rates := cpuRates(t, ctx, f, path, ns, pod.Name, "burn", "idle")
		t.Logf("%s: burn %.3f cores, idle %.4f cores", path, rates["burn"], rates["idle"])
		if r := rates["burn"]; r < 0.02 || r > 1.5*limit {
			t.Errorf("%s: burn used %.3f cores, want a rise between 0.02 and %.3f (its limit %.2f with slack)", path, r, 1.5*limit, limit)
		}
		if r := rates["idle"]; r < 0 || r >= 0.02 {
			t.Errorf("%s: idle used %.4f cores, want under 0.02 and no fall", path, r)
		}
	}
	t.Run("metrics/resource", func(t *testing.T) { check(t, "/metrics/resource") })
	t.Run("metrics/cadvisor", func(t *testing.T) {
		b, err := proxyGet(ctx, f, "/metrics/cadvisor", nil)
		if err != nil {
			t.Fatalf("%v: %.300s", err, b)
		}
		for _, m := range []string{"\nmachine_cpu_cores{", "\ncontainer_scrape_error 0\n"} {
			if !bytes.Contains(b, []byte(m)) {
				t.Errorf("/metrics/cadvisor has no %q", strings.TrimSpace(m))
			}
		}
		check(t, "/metrics/cadvisor")

		// The rest of the families from the same cgroups (v1's cpu, memory controllers on
		// the rig): "burn" has a CFS quota, so throttling series, and memory in use.
		b, err = proxyGet(ctx, f, "/metrics/cadvisor", nil)
		if err != nil {
			t.Fatalf("%v: %.300s", err, b)
		}
		exp := string(b)
		burn := map[string]string{"container": "burn", "namespace": ns, "pod": pod.Name}
		for _, m := range []string{"container_cpu_cfs_periods_total", "container_memory_working_set_bytes", "container_memory_usage_bytes", "container_processes"} {
			if s, ok := findSample(exp, m, burn); !ok || s.value <= 0 {
				t.Errorf("/metrics/cadvisor %s of burn: %v (found %v), want above 0\n%s", m, s.value, ok, grepLines(exp, m+`{container="burn"`))
			}
		}
		// The pause container: container "", the runtime's sandbox image, name its ID; the
		// pod's network series are its.
		sb, ok := findSample(exp, "container_memory_working_set_bytes", map[string]string{"container": "", "image": f.Env.PauseImage, "namespace": ns, "pod": pod.Name})
		if !ok || sb.value <= 0 {
			t.Errorf("/metrics/cadvisor has no pause container working set for %s (image %s): %v\n%s", pod.Name, f.Env.PauseImage, sb, grepLines(exp, "container_memory_working_set_bytes"))
		}
		if _, ok := findSample(exp, "container_network_receive_bytes_total", map[string]string{"container": "", "image": f.Env.PauseImage, "namespace": ns, "pod": pod.Name, "interface": "eth0"}); !ok {
			t.Errorf("/metrics/cadvisor has no eth0 receive series on %s's pause container\n%s", pod.Name, grepLines(exp, "container_network_receive_bytes_total"))
		}
	})
}

// checkHeapProfile says why b is not what /debug/pprof/heap serves: a gzipped profile.proto
// whose string table names the heap profile's sample types.
func checkHeapProfile(b []byte) error {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("not gzip (%v): %d bytes %.80q", err, len(b), b)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		return fmt.Errorf("ungzipping: %w", err)
	}
	if !bytes.Contains(raw, []byte("inuse_space")) || !bytes.Contains(raw, []byte("alloc_objects")) {
		return fmt.Errorf("a %d-byte profile without the heap's sample types inuse_space and alloc_objects", len(raw))
	}
	return nil
}

// TestDebugAndLogEndpoints: on nodelet's :10250, /debug/pprof/heap needs nodes/proxy and
// /logs/ (the node log query, enableSystemLogQuery) nodes/log: a service account bound to a
// ClusterRole with one of them gets that endpoint and 403 for the other; through the API
// server's nodes/proxy both work for the admin, and the profile is nodelet's own. /logs/
// refuses path traversal, plain and encoded, in the path and in the query, even to identities
// that may read the node's logs.
func TestDebugAndLogEndpoints(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	n := startNode(t, f, framework.NodeletOptions{Config: func(c *kubeletconfigv1beta1.KubeletConfiguration) {
		c.EnableSystemLogQuery = ptr.To(true)
		// A denial cached before RBAC caught up with the bindings must not outlive the wait below.
		c.Authorization.Webhook.CacheUnauthorizedTTL = metav1.Duration{Duration: time.Second}
	}})

	// A log of a "service" no journal knows: the query falls back to /var/log/<service>.log,
	// as upstream's. The namespace's name is unique, so it names the service.
	svc := ns
	marker := "log-line-of-" + svc
	logFile := filepath.Join("/var/log", svc+".log")
	writeFile(t, logFile, marker+"\n")

	proxyToken := grantedToken(t, ctx, f, ns, "proxy-only", "nodes/proxy", "get")
	logToken := grantedToken(t, ctx, f, ns, "log-only", "nodes/log", "get")
	api := newKubeletClient(t, f, nil)
	get := func(ctx context.Context, token, target string) (int, string, error) {
		return api.do(ctx, token, http.MethodGet, target)
	}
	// waitOK waits for RBAC to catch up with the binding: until target answers 200 holding want.
	waitOK := func(t *testing.T, c *kubeletClient, token, target, want string) string {
		t.Helper()
		var body string
		err := framework.WaitFor(ctx, time.Minute, "GET "+target+" = 200", func(ctx context.Context) (bool, error) {
			code, b, err := c.do(ctx, token, http.MethodGet, target)
			body = b
			if err == nil && (code != http.StatusOK || !strings.Contains(b, want)) {
				err = fmt.Errorf("%d %.200q", code, b)
			}
			return err == nil, err
		})
		if err != nil {
			t.Fatal(err)
		}
		return body
	}
	forbidden := func(t *testing.T, token, who, target, subresource string) {
		t.Helper()
		code, body, err := get(ctx, token, target)
		want := fmt.Sprintf("Forbidden (user=system:serviceaccount:%s:%s, verb=get, resource=nodes, subresource=%s)", ns, who, subresource)
		if err != nil || code != http.StatusForbidden || strings.TrimSpace(body) != want {
			t.Errorf("GET %s as %s: %d %.200q %v, want 403 %q", target, who, code, body, err, want)
		}
	}

	t.Run("pprof heap with nodes/proxy only", func(t *testing.T) {
		body := waitOK(t, api, proxyToken, "/debug/pprof/heap", "")
		if err := checkHeapProfile([]byte(body)); err != nil {
			t.Errorf("/debug/pprof/heap with nodes/proxy: %v", err)
		}
		forbidden(t, logToken, "log-only", "/debug/pprof/heap", "proxy")
		forbidden(t, logToken, "log-only", "/debug/pprof/", "proxy")

		// Through the API server: the profile and the command line are this nodelet's.
		b, err := proxyGet(ctx, f, "/debug/pprof/heap", nil)
		if err != nil {
			t.Fatalf("/debug/pprof/heap through nodes/proxy: %v", err)
		}
		if err := checkHeapProfile(b); err != nil {
			t.Errorf("/debug/pprof/heap through nodes/proxy: %v", err)
		}
		b, err = proxyGet(ctx, f, "/debug/pprof/heap", map[string]string{"debug": "1"})
		if err != nil || !bytes.HasPrefix(b, []byte("heap profile: ")) || !bytes.Contains(b, []byte("\n# runtime.MemStats\n")) {
			t.Errorf("/debug/pprof/heap?debug=1 through nodes/proxy: %v %.200q", err, b)
		}
		b, err = proxyGet(ctx, f, "/debug/pprof/cmdline", nil)
		if err != nil || !bytes.Contains(b, []byte("--config="+n.ConfigPath)) {
			t.Errorf("/debug/pprof/cmdline through nodes/proxy is not this nodelet's (--config=%s): %v %.300q", n.ConfigPath, err, b)
		}
	})

	t.Run("log query with nodes/log only", func(t *testing.T) {
		q := "/logs/?query=" + svc
		waitOK(t, api, logToken, q, marker)
		waitOK(t, api, logToken, "/logs/?query=/"+svc+".log", marker) // a file, named with a slash
		forbidden(t, proxyToken, "proxy-only", q, "log")
		forbidden(t, proxyToken, "proxy-only", "/logs/"+svc+".log", "log")

		b, err := proxyGet(ctx, f, "/logs/", map[string]string{"query": svc})
		if err != nil || !strings.Contains(string(b), marker) {
			t.Errorf("GET %s through nodes/proxy: %v %.300q, want %q", q, err, b, marker)
		}
	})

	t.Run("traversal refused", func(t *testing.T) {
		// A file one level above /var/log and a link in /var/log to it: neither may be read
		// through /logs/, nor /etc/shadow (whose first line starts "root:").
		secret := "secret-of-" + svc
		outside := filepath.Join("/var", svc+"-secret")
		writeFile(t, outside, secret+"\n")
		link := filepath.Join("/var/log", svc+"-link")
		if err := os.Symlink(outside, link); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Remove(link) })
		up := svc + "-secret"
		paths := []string{
			"/logs/../../etc/shadow", "/logs/%2e%2e/%2e%2e/etc/shadow", "/logs/%2E%2E%2F%2E%2E%2Fetc%2Fshadow",
			"/logs/..%2F..%2Fetc%2Fshadow", "/logs/%252e%252e/%252e%252e/etc/shadow", "/logs//etc/shadow",
			"/logs/%2Fetc%2Fshadow", "/logs/..%5C..%5Cetc%5Cshadow", "/logs/" + svc + ".log/../../../etc/shadow",
			"/logs/../" + up, "/logs/%2e%2e/" + up, "/logs/.%2e/" + up, "/logs/..%2f" + up, "/logs/./../" + up,
			"/logs/" + svc + "-link", "/logs/?query=/" + svc + "-link",
			"/logs/?query=/../../etc/shadow", "/logs/?query=/%2e%2e/%2e%2e/etc/shadow", "/logs/?query=..%2F..%2Fetc%2Fshadow",
			"/logs/?query=%2F..%2F" + up, "/logs/?query=..&query=" + up,
		}
		leaked := func(body string) bool { return strings.Contains(body, secret) || shadowLine.MatchString(body) }

		// Straight to :10250 with the apiserver's client certificate (every grant) and with
		// nodes/log only: each reads a log, so a refusal is the path's, not authorization's.
		apiCert, err := tls.LoadX509KeyPair(f.Env.All["KUBELET_CLIENT_CERT"], f.Env.All["KUBELET_CLIENT_KEY"])
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []struct {
			who   string
			c     *kubeletClient
			token string
		}{{"the apiserver's client certificate", newKubeletClient(t, f, &apiCert), ""}, {"nodes/log only", api, logToken}} {
			waitOK(t, id.c, id.token, "/logs/"+svc+".log", marker)
			for _, p := range paths {
				code, body, err := id.c.do(ctx, id.token, http.MethodGet, p)
				if err != nil {
					t.Errorf("GET %s as %s: %v", p, id.who, err)
					continue
				}
				t.Logf("GET %s as %s: %d", p, id.who, code)
				if code == http.StatusOK || leaked(body) {
					t.Errorf("GET %s as %s: %d %.200q, want it refused", p, id.who, code, body)
				}
			}
		}
		// A service name that is a link out: the query's file fallback opens it as /logs/
		// does, refusing the link; the answer is a 200 that says so.
		if _, body, err := get(ctx, logToken, "/logs/?query="+svc+"-link"); err != nil || leaked(body) {
			t.Errorf("GET /logs/?query=%s-link: %v %.200q, want no secret", svc, err, body)
		}

		// Through the API server as the admin, the request sent as written.
		rt, err := rest.TransportFor(f.RestConfig)
		if err != nil {
			t.Fatal(err)
		}
		hc := &http.Client{Transport: rt, Timeout: 20 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		prefix := "/api/v1/nodes/" + f.Env.NodeName + "/proxy"
		for _, p := range paths {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.RestConfig.Host+prefix+p, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := req.URL.RequestURI(); got != prefix+p {
				t.Fatalf("the client would send %q, not %q", got, prefix+p)
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Errorf("GET %s through the API server: %v", prefix+p, err)
				continue
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			t.Logf("GET %s through the API server: %d", prefix+p, resp.StatusCode)
			if resp.StatusCode == http.StatusOK || leaked(string(body)) {
				t.Errorf("GET %s through the API server: %d %.200q, want it refused", prefix+p, resp.StatusCode, body)
			}
		}
	})
}

// writeFile writes data to path (mode 0644) and removes it at cleanup.
func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(path) })
}

// TestTracingReachesOTLPReceiver: nodelet started with tracing: {endpoint: <an OTLP gRPC
// receiver in this test>, samplingRatePerMillion: 1000000} exports, as service "kubelet" on
// host <node name>, the syncPod span of a pod created through the API server (upstream's
// k8s.pod attributes, the pod's UID) with the CRI RunPodSandbox call it made as its child in
// the same trace, and a server span named after the route for a kubelet API request made
// through the API server's nodes/proxy.
func TestTracingReachesOTLPReceiver(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	// Started before nodelet: the cleanups stop nodelet (and flush its spans) first.
	recv := spantest.StartOTLPReceiver(t)
	startNode(t, f, framework.NodeletOptions{Config: func(c *kubeletconfigv1beta1.KubeletConfiguration) {
		c.Tracing = &tracingapi.TracingConfiguration{Endpoint: ptr.To(recv.Addr), SamplingRatePerMillion: ptr.To[int32](1000000)}
	}})
	pod := f.CreatePod(ctx, f.BusyboxPod(ns, "traced", "sleep", "3600"))
	f.WaitForPodReady(ctx, ns, pod.Name, 2*time.Minute)
	if b, err := proxyGet(ctx, f, "/pods", nil); err != nil {
		t.Fatalf("GET /pods through nodes/proxy: %v %.200s", err, b)
	}

	var syncPod, runSandbox, served *spantest.ReceivedSpan
	var spans []spantest.ReceivedSpan
	err := framework.WaitFor(ctx, time.Minute, "the syncPod, RunPodSandbox and /pods spans", func(context.Context) (bool, error) {
		spans = recv.Spans()
		syncs := map[string]*spantest.ReceivedSpan{} // this pod's syncPod spans, by span ID
		for i := range spans {
			s := &spans[i]
			a := spantest.StringAttrs(s.Span.GetAttributes())
			if s.Span.GetName() == "syncPod" && a["k8s.pod.uid"] == string(pod.UID) {
				syncs[string(s.Span.GetSpanId())] = s
				if a["k8s.pod.name"] != pod.Name || a["k8s.namespace.name"] != ns || a["k8s.pod"] != ns+"/"+pod.Name {
					return false, &framework.StopError{Err: fmt.Errorf("syncPod span of %s/%s has attributes %v", ns, pod.Name, a)}
				}
			}
			if s.Span.GetName() == "/pods" && s.Span.GetKind() == tracepb.Span_SPAN_KIND_SERVER {
				served = s
			}
		}
		for i := range spans {
			s := &spans[i]
			if p, ok := syncs[string(s.Span.GetParentSpanId())]; ok && s.Span.GetName() == "runtime.v1.RuntimeService/RunPodSandbox" &&
				bytes.Equal(s.Span.GetTraceId(), p.Span.GetTraceId()) {
				syncPod, runSandbox = p, s
			}
		}
		return syncPod != nil && runSandbox != nil && served != nil, nil
	})
	if err != nil {
		t.Fatalf("%v: syncPod %v, its RunPodSandbox child %v, /pods server span %v among %d spans: %v",
			err, syncPod != nil, runSandbox != nil, served != nil, len(spans), spantest.SpanNames(spans))
	}
	for _, s := range []*spantest.ReceivedSpan{syncPod, runSandbox, served} {
		if s.Resource["service.name"] != "kubelet" || s.Resource["host.name"] != f.Env.NodeName {
			t.Errorf("span %q has resource %v, want service.name kubelet and host.name %s", s.Span.GetName(), s.Resource, f.Env.NodeName)
		}
	}
	t.Logf("%d spans received; syncPod %x has RunPodSandbox %x as a child in trace %x",
		len(spans), syncPod.Span.GetSpanId(), runSandbox.Span.GetSpanId(), syncPod.Span.GetTraceId())
}
