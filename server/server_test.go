package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	certutil "k8s.io/client-go/util/cert"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/cri"
	"github.com/nodelet/nodelet/internal/testsupport/eventually"
)

func TestParseCRILogLine(t *testing.T) {
	tests := []struct {
		line    string
		stream  string
		partial bool
		msg     string
		wantErr bool
	}{
		{line: "2016-10-06T00:17:09.669794202Z stdout F log content 1", stream: "stdout", msg: "log content 1"},
		{line: "2016-10-06T00:17:09.669794203Z stderr P part", stream: "stderr", partial: true, msg: "part"},
		{line: "2016-10-06T00:17:09.669794203Z stdout F", stream: "stdout", msg: ""},
		{line: "2016-10-06T00:17:09.669794203Z stdout F ", stream: "stdout", msg: ""},
		{line: "2016-10-06T00:17:09.669794203Z stdout F:x  two spaces", stream: "stdout", msg: " two spaces"},
		{line: "garbage", wantErr: true},
		{line: "2016-10-06T00:17:09Z stdin F x", wantErr: true},
		{line: "2016-10-06T00:17:09Z stdout X x", wantErr: true},
		{line: "yesterday stdout F x", wantErr: true},
	}
	for _, tc := range tests {
		e, err := parseCRILogLine([]byte(tc.line))
		if (err != nil) != tc.wantErr {
			t.Errorf("%q: err = %v, wantErr %v", tc.line, err, tc.wantErr)
			continue
		}
		if err == nil && (e.stream != tc.stream || e.partial != tc.partial || string(e.msg) != tc.msg) {
			t.Errorf("%q: got %+v (msg %q)", tc.line, e, e.msg)
		}
	}
}

const testLog = `2024-01-01T00:00:01.000000000Z stdout F one
2024-01-01T00:00:02.000000000Z stderr F two
not a log line
2024-01-01T00:00:03.000000000Z stdout P thr
2024-01-01T00:00:03.500000000Z stdout F ee
2024-01-01T00:00:04.000000000Z stdout F four
`

func writeLog(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "0.log")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadLogs(t *testing.T) {
	path := writeLog(t, testLog)
	ts := func(s string) time.Time { v, _ := time.Parse(time.RFC3339, s); return v }
	tests := []struct {
		name string
		opts LogOptions
		want string
	}{
		{"all", LogOptions{Tail: -1}, "one\ntwo\nthree\nfour\n"},
		{"tail 1", LogOptions{Tail: 1}, "four\n"},
		{"tail 2 joins nothing across the cut", LogOptions{Tail: 2}, "ee\nfour\n"},
		{"tail 0", LogOptions{Tail: 0}, ""},
		{"tail more than there is", LogOptions{Tail: 100}, "one\ntwo\nthree\nfour\n"},
		{"since", LogOptions{Tail: -1, Since: ts("2024-01-01T00:00:02Z")}, "two\nthree\nfour\n"},
		{"since excludes older", LogOptions{Tail: -1, Since: ts("2024-01-01T00:00:03.2Z")}, "ee\nfour\n"},
		// Fixed-width nanoseconds, as the kubelet writes them (upstream's RFC3339NanoFixed).
		{"timestamps", LogOptions{Tail: 1, Timestamps: true}, "2024-01-01T00:00:04.000000000Z four\n"},
		// A line the runtime wrote in pieces gets the timestamp of its first piece only.
		{"timestamps of a line in pieces", LogOptions{Tail: -1, Timestamps: true},
			"2024-01-01T00:00:01.000000000Z one\n2024-01-01T00:00:02.000000000Z two\n2024-01-01T00:00:03.000000000Z three\n2024-01-01T00:00:04.000000000Z four\n"},
		{"limitBytes", LogOptions{Tail: -1, LimitBytes: 6}, "one\ntw"},
		{"limitBytes exact", LogOptions{Tail: -1, LimitBytes: 4}, "one\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := ReadLogs(context.Background(), path, tc.opts, &b, logFollower{}); err != nil {
				t.Fatal(err)
			}
			if b.String() != tc.want {
				t.Errorf("got %q, want %q", b.String(), tc.want)
			}
		})
	}
}

func TestTailStartLargeFile(t *testing.T) {
	var sb strings.Builder
	for i := 0; i < 3000; i++ {
		fmt.Fprintf(&sb, "2024-01-01T00:00:00Z stdout F line-%04d\n", i)
	}
	path := writeLog(t, sb.String())
	var b bytes.Buffer
	if err := ReadLogs(context.Background(), path, LogOptions{Tail: 1500}, &b, logFollower{}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 1500 || lines[0] != "line-1500" || lines[1499] != "line-2999" {
		t.Errorf("got %d lines, first %q last %q", len(lines), lines[0], lines[len(lines)-1])
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestReadLogsFollowRotationAndExit(t *testing.T) {
	path := writeLog(t, "2024-01-01T00:00:01Z stdout F first\n")
	var running sync.Mutex
	isRunning := true
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- ReadLogs(context.Background(), path, LogOptions{Follow: true, Tail: -1}, &out, logFollower{
			running: func(context.Context) bool { running.Lock(); defer running.Unlock(); return isRunning },
			clock:   clock.RealClock{}, poll: 5 * time.Millisecond,
		})
	}()
	eventually.True(t, "the first line", func() bool { return out.String() == "first\n" })
	appendTo := func(p, s string) {
		f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = f.WriteString(s)
		f.Close()
	}
	// A line written in two pieces is emitted once complete.
	appendTo(path, "2024-01-01T00:00:02Z stdout F sec")
	time.Sleep(30 * time.Millisecond)
	appendTo(path, "ond\n")
	eventually.True(t, "the second line", func() bool { return out.String() == "first\nsecond\n" })
	// Rotation: the old file moves away, a new one takes its name.
	if err := os.Rename(path, path+".20240101"); err != nil {
		t.Fatal(err)
	}
	appendTo(path, "2024-01-01T00:00:03Z stdout F third\n")
	eventually.True(t, "the line in the rotated file", func() bool { return out.String() == "first\nsecond\nthird\n" })
	running.Lock()
	isRunning = false
	running.Unlock()
	appendTo(path, "2024-01-01T00:00:04Z stdout F last words\n")
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("follow did not end after the container stopped")
	}
	if got := out.String(); got != "first\nsecond\nthird\nlast words\n" {
		t.Errorf("got %q", got)
	}
}

// TestFollowRunning: a followed log ends when its container stops or is a
// previous instance; a runtime that does not answer (Unavailable, as while it
// restarts) leaves the container running, as upstream's ReadLogs assumes.
func TestFollowRunning(t *testing.T) {
	ctx := context.Background()
	f := &fakeRuntime{containers: []*runtimeapi.Container{
		{Id: "up", State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		{Id: "down", State: runtimeapi.ContainerState_CONTAINER_EXITED},
	}}
	for _, tc := range []struct {
		rt       Runtime
		id       string
		previous bool
		want     bool
	}{
		{f, "up", false, true},
		{f, "up", true, false},
		{f, "down", false, false},
		{f, "gone", false, false},
		{unavailableRuntime{f}, "up", false, true},
	} {
		if got := followRunning(tc.rt, tc.id, tc.previous)(ctx); got != tc.want {
			t.Errorf("followRunning(%T, %s, previous %v) = %v, want %v", tc.rt, tc.id, tc.previous, got, tc.want)
		}
	}
}

// unavailableRuntime is a runtime whose CRI server is down.
type unavailableRuntime struct{ *fakeRuntime }

func (unavailableRuntime) ContainerStatus(context.Context, string, bool) (*runtimeapi.ContainerStatusResponse, error) {
	return nil, fmt.Errorf("getting status of container x: %w", status.Error(codes.Unavailable, "connection refused"))
}

// ---------------------------------------------------------------- fake runtime

type fakeRuntime struct {
	mu         sync.Mutex
	sandboxes  []*runtimeapi.PodSandbox
	containers []*runtimeapi.Container
	logPaths   map[string]string
	streamURL  string
	execReqs   []*runtimeapi.ExecRequest
	pfReqs     []*runtimeapi.PortForwardRequest
}

func matches(labels, sel map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func (f *fakeRuntime) ListPodSandbox(_ context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*runtimeapi.PodSandbox
	for _, s := range f.sandboxes {
		if matches(s.Labels, filter.GetLabelSelector()) && (filter.GetState() == nil || filter.GetState().State == s.State) {
			out = append(out, s)
		}
	}
	return out, nil
}

func (f *fakeRuntime) ListContainers(_ context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*runtimeapi.Container
	for _, c := range f.containers {
		if matches(c.Labels, filter.GetLabelSelector()) {
			out = append(out, c)
		}
	}
	return out, nil
}

func (f *fakeRuntime) ContainerStatus(_ context.Context, id string, _ bool) (*runtimeapi.ContainerStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.containers {
		if c.Id == id {
			return &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{Id: id, State: c.State, LogPath: f.logPaths[id]}}, nil
		}
	}
	return nil, fmt.Errorf("no container %s", id)
}

func (f *fakeRuntime) ExecSync(_ context.Context, id string, cmd []string, _ time.Duration) ([]byte, []byte, error) {
	return []byte("ran " + strings.Join(cmd, " ") + " in " + id + "\n"), nil, nil
}

func (f *fakeRuntime) Exec(_ context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.execReqs = append(f.execReqs, req)
	return &runtimeapi.ExecResponse{Url: f.streamURL + "/exec/tok"}, nil
}

func (f *fakeRuntime) Attach(context.Context, *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	return &runtimeapi.AttachResponse{Url: f.streamURL + "/attach/tok"}, nil
}

func (f *fakeRuntime) PortForward(_ context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pfReqs = append(f.pfReqs, req)
	return &runtimeapi.PortForwardResponse{Url: f.streamURL + "/portforward/tok"}, nil
}

// newFakePod adds a pod with one container "c" that ran twice: the first instance
// exited (log 0.log), the second runs (log 1.log).
func newFakePod(t *testing.T, f *fakeRuntime) {
	dir := t.TempDir()
	write := func(n, content string) string {
		p := filepath.Join(dir, n)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	labels := map[string]string{cri.LabelPodNamespace: "ns", cri.LabelPodName: "web", cri.LabelPodUID: "uid-1"}
	f.sandboxes = append(f.sandboxes, &runtimeapi.PodSandbox{Id: "sb1", Labels: labels, State: runtimeapi.PodSandboxState_SANDBOX_READY, CreatedAt: 1,
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "ns", Uid: "uid-1"}})
	cl := map[string]string{cri.LabelPodUID: "uid-1", cri.LabelContainerName: "c"}
	f.containers = append(f.containers,
		&runtimeapi.Container{Id: "c0", Labels: cl, State: runtimeapi.ContainerState_CONTAINER_EXITED, CreatedAt: 10},
		&runtimeapi.Container{Id: "c1", Labels: cl, State: runtimeapi.ContainerState_CONTAINER_RUNNING, CreatedAt: 20})
	f.logPaths = map[string]string{
		"c0": write("0.log", "2024-01-01T00:00:01Z stdout F before the restart\n"),
		"c1": write("1.log", "2024-01-01T00:00:02Z stdout F after the restart\n2024-01-01T00:00:03Z stderr F oops\n"),
	}
}

type fakeSummary struct {
	sum *statsv1alpha1.Summary
	err error
}

func (f fakeSummary) Summary(context.Context) (*statsv1alpha1.Summary, error) { return f.sum, f.err }

type healthy struct{ err error }

func (h healthy) Healthy() error { return h.err }

func newTestServer(t *testing.T, deps Deps) *Server {
	t.Helper()
	if deps.Authenticator == nil {
		deps.Authenticator = &UnionAuthenticator{Anonymous: true}
	}
	if deps.Authorizer == nil {
		deps.Authorizer = AlwaysAllow{}
	}
	s := New(Config{NodeName: "node-1", EnableDebuggingHandlers: true}, deps)
	s.logPoll = 5 * time.Millisecond
	return s
}

func get(t *testing.T, h http.Handler, path string) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
	return w
}

func TestContainerLogsHandler(t *testing.T) {
	rt := &fakeRuntime{}
	newFakePod(t, rt)
	h := newTestServer(t, Deps{Runtime: rt}).Handler()
	tests := []struct {
		path string
		code int
		body string
	}{
		{"/containerLogs/ns/web/c", 200, "after the restart\noops\n"},
		{"/containerLogs/ns/web/c?previous=true", 200, "before the restart\n"},
		{"/containerLogs/ns/web/c?tailLines=1&timestamps=true", 200, "2024-01-01T00:00:03.000000000Z oops\n"},
		{"/containerLogs/ns/web/c?sinceTime=2024-01-01T00:00:03Z", 200, "oops\n"},
		{"/containerLogs/ns/web/c?limitBytes=5", 200, "after"},
		// follow on a running container would block; a stopped previous one ends.
		{"/containerLogs/ns/web/c?previous=true&follow=true", 200, "before the restart\n"},
		{"/containerLogs/ns/web/nope", 404, `container "nope" not found in pod "web"`},
		{"/containerLogs/ns/nope/c", 404, `pod "nope" does not exist`},
		{"/containerLogs/ns/web/c?sinceSeconds=1&sinceTime=2024-01-01T00:00:03Z", 422, `{"message": "Invalid request."}`},
		{"/containerLogs/ns/web/c?tailLines=x", 400, `{"message": "Unable to decode query."}`},
	}
	for _, tc := range tests {
		w := get(t, h, tc.path)
		if w.Code != tc.code || strings.TrimSuffix(w.Body.String(), "\n") != strings.TrimSuffix(tc.body, "\n") {
			t.Errorf("%s: %d %q, want %d %q", tc.path, w.Code, w.Body.String(), tc.code, tc.body)
		}
	}
	// previous with a single instance is a 400, as upstream.
	rt.containers = rt.containers[1:]
	if w := get(t, h, "/containerLogs/ns/web/c?previous=true"); w.Code != 400 || !strings.Contains(w.Body.String(), "previous terminated container") {
		t.Errorf("previous without one: %d %q", w.Code, w.Body.String())
	}
}

func TestPodsHandler(t *testing.T) {
	pods := []*v1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "x", UID: "2"}, Status: v1.PodStatus{Phase: v1.PodRunning}},
		{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "x", UID: "1"}},
	}
	h := newTestServer(t, Deps{Pods: func() []*v1.Pod { return pods }}).Handler()
	w := get(t, h, "/pods")
	if w.Code != 200 || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("%d %s", w.Code, w.Header())
	}
	var list v1.PodList
	if err := json.Unmarshal(w.Body.Bytes(), &list); err != nil {
		t.Fatal(err)
	}
	if list.Kind != "PodList" || list.APIVersion != "v1" || len(list.Items) != 2 || list.Items[0].Name != "a" || list.Items[1].Status.Phase != v1.PodRunning {
		t.Errorf("list = %+v", list)
	}
	// No pods: an empty list, not null.
	h = newTestServer(t, Deps{Pods: func() []*v1.Pod { return nil }}).Handler()
	if w := get(t, h, "/pods"); !strings.Contains(w.Body.String(), `"items":[]`) {
		t.Errorf("empty list body = %s", w.Body.String())
	}
}

func TestHealthz(t *testing.T) {
	bad := healthy{err: fmt.Errorf("loop stuck")}
	tests := []struct {
		checks []HealthCheck
		path   string
		code   int
		body   string
	}{
		{[]HealthCheck{{"pleg", healthy{}}, {"syncloop", healthy{}}}, "/healthz", 200, "ok"},
		{[]HealthCheck{{"pleg", healthy{}}, {"syncloop", healthy{}}}, "/healthz?verbose", 200, "[+]ping ok\n[+]pleg ok\n[+]syncloop ok\nhealthz check passed\n"},
		{[]HealthCheck{{"pleg", healthy{}}, {"syncloop", bad}}, "/healthz", 500, "[+]ping ok\n[+]pleg ok\n[-]syncloop failed: loop stuck\nhealthz check failed\n"},
	}
	for _, tc := range tests {
		w := get(t, newTestServer(t, Deps{Health: tc.checks}).Handler(), tc.path)
		if w.Code != tc.code || w.Body.String() != tc.body {
			t.Errorf("%s: %d %q, want %d %q", tc.path, w.Code, w.Body.String(), tc.code, tc.body)
		}
	}
}

func TestMetricsResource(t *testing.T) {
	at := metav1.NewTime(time.Unix(1700000000, 0))
	start := metav1.NewTime(time.Unix(1699999000, 500000000))
	sum := &statsv1alpha1.Summary{
		Node: statsv1alpha1.NodeStats{NodeName: "node-1",
			CPU:    &statsv1alpha1.CPUStats{Time: at, UsageCoreNanoSeconds: ptr.To[uint64](2_500_000_000)},
			Memory: &statsv1alpha1.MemoryStats{Time: at, WorkingSetBytes: ptr.To[uint64](1024)}},
		Pods: []statsv1alpha1.PodStats{{
			PodRef: statsv1alpha1.PodReference{Name: "web", Namespace: "ns", UID: "u"},
			CPU:    &statsv1alpha1.CPUStats{Time: at, UsageCoreNanoSeconds: ptr.To[uint64](1_000_000_000)},
			Memory: &statsv1alpha1.MemoryStats{Time: at, WorkingSetBytes: ptr.To[uint64](512)},
			Containers: []statsv1alpha1.ContainerStats{{Name: "c", StartTime: start,
				CPU:    &statsv1alpha1.CPUStats{Time: at, UsageCoreNanoSeconds: ptr.To[uint64](500_000_000)},
				Memory: &statsv1alpha1.MemoryStats{Time: at, WorkingSetBytes: ptr.To[uint64](256)},
				Swap:   &statsv1alpha1.SwapStats{Time: at, SwapUsageBytes: ptr.To[uint64](100), SwapAvailableBytes: ptr.To[uint64](900)}}},
		}},
	}
	w := get(t, newTestServer(t, Deps{Summary: fakeSummary{sum: sum}}).Handler(), "/metrics/resource")
	if w.Code != 200 {
		t.Fatalf("%d %s", w.Code, w.Body.String())
	}
	body := w.Body.String()
	for _, want := range []string{
		"# TYPE node_cpu_usage_seconds_total counter",
		"node_cpu_usage_seconds_total 2.5 1700000000000",
		"node_memory_working_set_bytes 1024 1700000000000",
		`container_cpu_usage_seconds_total{container="c",namespace="ns",pod="web"} 0.5 1700000000000`,
		`container_memory_working_set_bytes{container="c",namespace="ns",pod="web"} 256 1700000000000`,
		`container_start_time_seconds{container="c",namespace="ns",pod="web"} 1.6999990005e+09 1699999000500`,
		`container_swap_usage_bytes{container="c",namespace="ns",pod="web"} 100 1700000000000`,
		"# TYPE container_swap_limit_bytes gauge",
		`container_swap_limit_bytes{container="c",namespace="ns",pod="web"} 1000 1700000000000`,
		`pod_cpu_usage_seconds_total{namespace="ns",pod="web"} 1 1700000000000`,
		`pod_memory_working_set_bytes{namespace="ns",pod="web"} 512 1700000000000`,
		"resource_scrape_error 0",
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("missing %q in\n%s", want, body)
		}
	}
	// scrape_error (deprecated in 1.29) is hidden, as upstream 1.37 hides it...
	if strings.Contains(body, "\nscrape_error ") {
		t.Errorf("the hidden scrape_error is served without ShowHiddenMetrics:\n%s", body)
	}
	// ... unless hidden metrics are shown (showHiddenMetricsForVersion).
	shown := newTestServer(t, Deps{Summary: fakeSummary{sum: sum}})
	shown.cfg.ShowHiddenMetrics = true
	if b := get(t, shown.Handler(), "/metrics/resource").Body.String(); !strings.Contains(b, "\nscrape_error 0\n") || !strings.Contains(b, "(Deprecated since 1.29.0)") {
		t.Errorf("scrape_error is not served with ShowHiddenMetrics:\n%s", b)
	}
	w = get(t, newTestServer(t, Deps{Summary: fakeSummary{err: fmt.Errorf("cri down")}}).Handler(), "/metrics/resource")
	if !strings.Contains(w.Body.String(), "resource_scrape_error 1\n") || strings.Contains(w.Body.String(), "node_cpu") {
		t.Errorf("failed scrape body:\n%s", w.Body.String())
	}
	// No provider: 503 on both stats endpoints.
	for _, p := range []string{"/metrics/resource", "/stats/summary"} {
		if w := get(t, newTestServer(t, Deps{}).Handler(), p); w.Code != 503 || !strings.Contains(w.Body.String(), "no stats provider") {
			t.Errorf("%s without a provider: %d %q", p, w.Code, w.Body.String())
		}
	}
	// The summary as JSON, and only_cpu_and_memory.
	sum.Node.Fs = &statsv1alpha1.FsStats{CapacityBytes: ptr.To[uint64](9)}
	w = get(t, newTestServer(t, Deps{Summary: fakeSummary{sum: sum}}).Handler(), "/stats/summary")
	var got statsv1alpha1.Summary
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || got.Node.Fs == nil || got.Pods[0].Containers[0].Name != "c" {
		t.Errorf("summary: %v %s", err, w.Body.String())
	}
	w = get(t, newTestServer(t, Deps{Summary: fakeSummary{sum: sum}}).Handler(), "/stats/summary?only_cpu_and_memory=true")
	got = statsv1alpha1.Summary{}
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || got.Node.Fs != nil || got.Node.CPU == nil || *got.Pods[0].Memory.WorkingSetBytes != 512 {
		t.Errorf("only_cpu_and_memory: %v %s", err, w.Body.String())
	}
}

func TestMetricsFromRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "kubelet_running_pods", Help: "x"})
	g.Set(3)
	reg.MustRegister(g)
	probes := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "prober_probe_total", Help: "x"})
	c.Inc()
	probes.MustRegister(c)
	h := newTestServer(t, Deps{Metrics: reg, ProbeMetrics: probes}).Handler()
	w := get(t, h, "/metrics")
	if !strings.Contains(w.Body.String(), "kubelet_running_pods 3\n") || strings.Contains(w.Body.String(), "prober_probe_total") {
		t.Errorf("/metrics:\n%s", w.Body.String())
	}
	w = get(t, h, "/metrics/probes")
	if !strings.Contains(w.Body.String(), "prober_probe_total 1\n") || strings.Contains(w.Body.String(), "kubelet_running_pods") {
		t.Errorf("/metrics/probes:\n%s", w.Body.String())
	}
}

// TestStreamingProxy runs exec and portForward through the server to a fake streaming
// server that speaks a trivial upgraded protocol: it echoes what it reads.
func TestStreamingProxy(t *testing.T) {
	var gotPath, gotAuth string
	stream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotPath, gotAuth = r.URL.Path, r.Header.Get("Authorization")
		if r.Header.Get("Upgrade") != "echo" {
			http.Error(w, "no upgrade", 400)
			return
		}
		w.Header().Set("Connection", "Upgrade")
		w.Header().Set("Upgrade", "echo")
		w.WriteHeader(http.StatusSwitchingProtocols)
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		line, _ := brw.ReadString('\n')
		_, _ = brw.WriteString("echo: " + line)
		_ = brw.Flush()
	}))
	defer stream.Close()
	rt := &fakeRuntime{streamURL: stream.URL}
	newFakePod(t, rt)
	srv := httptest.NewServer(newTestServer(t, Deps{Runtime: rt}).Handler())
	defer srv.Close()

	dial := func(method, path string, upgrade bool) (string, int) {
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		hdr := ""
		if upgrade {
			hdr = "Connection: Upgrade\r\nUpgrade: echo\r\n"
		}
		fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer secret\r\n%sContent-Length: 0\r\n\r\n", method, path, hdr)
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusSwitchingProtocols {
			b, _ := io.ReadAll(resp.Body)
			return string(b), resp.StatusCode
		}
		fmt.Fprintf(conn, "hello\n")
		line, _ := br.ReadString('\n')
		return line, resp.StatusCode
	}
	if got, code := dial("POST", "/exec/ns/web/c?command=echo&command=hi&output=1&error=1", true); code != 101 || got != "echo: hello\n" {
		t.Fatalf("exec: %d %q", code, got)
	}
	if gotPath != "/exec/tok" || gotAuth != "" {
		t.Errorf("runtime saw path %q auth %q; want /exec/tok and no credentials", gotPath, gotAuth)
	}
	if r := rt.execReqs[0]; r.ContainerId != "c1" || strings.Join(r.Cmd, " ") != "echo hi" || !r.Stdout || !r.Stderr || r.Stdin || r.Tty {
		t.Errorf("exec request = %+v", r)
	}
	if got, code := dial("POST", "/portForward/ns/web", true); code != 101 || got != "echo: hello\n" {
		t.Fatalf("portForward: %d %q", code, got)
	}
	if rt.pfReqs[0].PodSandboxId != "sb1" {
		t.Errorf("portForward request = %+v", rt.pfReqs[0])
	}
	if got, code := dial("POST", "/exec/ns/web/c?command=true&output=1", false); code != 400 || !strings.Contains(got, "Upgrade request required") {
		t.Errorf("exec without upgrade: %d %q", code, got)
	}
	if got, code := dial("POST", "/exec/ns/web/c?command=true", true); code != 400 || !strings.Contains(got, "at least 1 of stdin") {
		t.Errorf("exec without streams: %d %q", code, got)
	}
	if _, code := dial("POST", "/exec/ns/web/gone?command=true&output=1", true); code != 404 {
		t.Errorf("exec in a missing container: %d", code)
	}
	// /run answers with the output.
	resp, err := http.Post(srv.URL+"/run/ns/web/c?cmd=ls+-l", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "ran ls -l in c1\n" {
		t.Errorf("run: %q", b)
	}
}

func TestReadOnlyHandlerHasNoDebugging(t *testing.T) {
	rt := &fakeRuntime{}
	newFakePod(t, rt)
	s := newTestServer(t, Deps{Runtime: rt, Pods: func() []*v1.Pod { return nil }})
	ro := s.ReadOnlyHandler()
	if w := get(t, ro, "/pods"); w.Code != 200 {
		t.Errorf("/pods on the read-only port: %d", w.Code)
	}
	if w := get(t, ro, "/containerLogs/ns/web/c"); w.Code != 404 {
		t.Errorf("containerLogs on the read-only port: %d, want 404", w.Code)
	}
}

func TestListenServesTLSAndClosesOnCancel(t *testing.T) {
	crt, key, err := certutil.GenerateSelfSignedCertKey("node-1", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		t.Fatal(err)
	}
	getCert := func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &pair, nil }
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s := New(Config{NodeName: "node-1", Address: "127.0.0.1", Port: int32(port), GetCertificate: getCert},
		Deps{Authenticator: &UnionAuthenticator{}, Authorizer: AlwaysAllow{}, Clock: clocktesting.NewFakeClock(time.Now())})
	ctx, cancel := context.WithCancel(context.Background())
	ports, err := s.Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The port is taken now: a second server fails at Listen.
	if _, err := New(Config{Address: "127.0.0.1", Port: int32(port)}, Deps{}).Listen(ctx); err == nil {
		t.Error("a second Listen on the same port succeeded")
	}
	served := make(chan struct{})
	go func() { ports.Serve(ctx); close(served) }()
	for _, h2 := range []bool{false, true} {
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: insecureTLS(), ForceAttemptHTTP2: h2}}
		resp, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d/healthz", port))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 || resp.TLS == nil || !strings.HasPrefix(resp.TLS.PeerCertificates[0].Subject.CommonName, "node-1@") {
			t.Errorf("h2=%v: status %d, TLS %v: want 401 over TLS without credentials", h2, resp.StatusCode, resp.TLS != nil)
		}
		if h2 && resp.ProtoMajor != 2 {
			t.Errorf("an HTTP/2 client got %s", resp.Proto)
		}
	}
	cancel()
	select {
	case <-served:
	case <-time.After(5 * time.Second):
		t.Fatal("serve did not return after cancel")
	}
}

func insecureTLS() *tls.Config { return &tls.Config{InsecureSkipVerify: true} } //nolint:gosec // a test of a self-signed server

func TestHTTPRequestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := newTestServer(t, Deps{Registerer: reg, Metrics: reg, Pods: func() []*v1.Pod { return nil }})
	h := s.Handler()
	for _, p := range []string{"/pods", "/pods", "/no/such/path", "/metrics/resource"} {
		get(t, h, p)
	}
	get(t, s.ReadOnlyHandler(), "/pods")
	body := get(t, h, "/metrics").Body.String()
	for _, want := range []string{
		`kubelet_http_requests_total{long_running="false",method="GET",path="pods",server_type="readwrite"} 2`,
		`kubelet_http_requests_total{long_running="false",method="GET",path="other",server_type="readwrite"} 1`,
		`kubelet_http_requests_total{long_running="false",method="GET",path="metrics/resource",server_type="readwrite"} 1`,
		`kubelet_http_requests_total{long_running="false",method="GET",path="pods",server_type="readonly"} 1`,
		// The scrape itself is in flight while it is gathered.
		`kubelet_http_inflight_requests{long_running="false",method="GET",path="metrics",server_type="readwrite"} 1`,
		`kubelet_http_requests_duration_seconds_count{long_running="false",method="GET",path="pods",server_type="readwrite"} 2`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("missing %s", want)
		}
	}
	// A denied request is counted too (the instrumentation wraps authentication).
	s2 := New(Config{NodeName: "n"}, Deps{Authenticator: &UnionAuthenticator{}, Authorizer: AlwaysAllow{}, Registerer: reg})
	get(t, s2.Handler(), "/exec/ns/p/c")
	if !strings.Contains(get(t, h, "/metrics").Body.String(), `kubelet_http_requests_total{long_running="true",method="GET",path="exec",server_type="readwrite"} 1`) {
		t.Error("the unauthenticated exec request was not counted")
	}
}

func TestConfigz(t *testing.T) {
	s := New(Config{NodeName: "n", EnableDebuggingHandlers: true, Configz: map[string]int{"port": 10250}},
		Deps{Authenticator: &UnionAuthenticator{Anonymous: true}, Authorizer: AlwaysAllow{}})
	if w := get(t, s.Handler(), "/configz"); w.Code != 200 || strings.TrimSpace(w.Body.String()) != `{"kubeletconfig":{"port":10250}}` {
		t.Errorf("/configz: %d %s", w.Code, w.Body.String())
	}
	if w := get(t, s.ReadOnlyHandler(), "/configz"); w.Code != 404 {
		t.Errorf("/configz on the read-only port: %d", w.Code)
	}
}

// blockingSummary answers only when the request's context ends, and says when it returned.
type blockingSummary struct{ entered, returned chan struct{} }

func (b blockingSummary) Summary(ctx context.Context) (*statsv1alpha1.Summary, error) {
	close(b.entered)
	<-ctx.Done()
	close(b.returned)
	return nil, ctx.Err()
}

// TestServeJoinsHandlers: Serve returns only once every request handler returned, and
// a stop ends the requests in flight, so nothing the handlers use (runtime, stats) is
// used after it. Before, serve returned after closing the ports while handlers ran on.
func TestServeJoinsHandlers(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	sum := blockingSummary{entered: make(chan struct{}), returned: make(chan struct{})}
	s := New(Config{NodeName: "node-1", Address: "127.0.0.1", ReadOnlyPort: int32(port)},
		Deps{Summary: sum, Clock: clocktesting.NewFakeClock(time.Now())})
	ctx, cancel := context.WithCancel(context.Background())
	ports, err := s.Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { ports.Serve(ctx); close(served) }()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	go func() {
		resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/stats/summary", port))
		if err == nil {
			resp.Body.Close()
		}
	}()
	<-sum.entered
	cancel()
	select {
	case <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
	select {
	case <-sum.returned:
	default:
		t.Error("Serve returned while a request handler was still running")
	}
}

// A log file that is a symlink or a FIFO, or a container log directory that is a
// symlink (a pod mounting the log directory could make any of them), is refused,
// and the FIFO does not hang the reader.
func TestReadLogsRefusesLinksAndFIFOs(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "pods", "ns_p_uid", "c")
	host := filepath.Join(base, "host")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(host, "c"), 0o755); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(host, "secret")
	for _, f := range []string{secret, filepath.Join(host, "c", "0.log")} {
		if err := os.WriteFile(f, []byte("2024-01-01T00:00:01Z stdout F host secret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(dir, "0.log")
	if err := os.Symlink(secret, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "1.log")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// The container's log directory swapped for a link to a host directory.
	if err := os.Symlink(filepath.Join(host, "c"), filepath.Join(base, "pods", "ns_p_uid", "linked")); err != nil {
		t.Fatal(err)
	}
	dirLink := filepath.Join(base, "pods", "ns_p_uid", "linked", "0.log")
	for _, path := range []string{link, fifo, dirLink} {
		var out strings.Builder
		err := ReadLogs(context.Background(), path, LogOptions{Tail: -1}, &out, logFollower{})
		if err == nil || out.Len() != 0 {
			t.Errorf("%s: read %q, err %v; want an error and nothing read", filepath.Base(path), out.String(), err)
		}
	}
}
