package server

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/testsupport/golden"
	"github.com/nodelet/nodelet/internal/testsupport/statstest"
	"github.com/nodelet/nodelet/stats"
)

// Measurement and scrape times of the cAdvisor tests.
var (
	cadvisorMeasuredAt = time.Unix(2000, 0)
	cadvisorScrapedAt  = time.Unix(2005, 0)
)

// cadvisorNode is a fake node of n pods behind a stats cache that has
// measured it once (at cadvisorMeasuredAt), and a server scraping it at
// cadvisorScrapedAt.
func cadvisorNode(tb testing.TB, n int) (*Server, *statstest.Node, *stats.Cache) {
	tb.Helper()
	dir := tb.TempDir()
	nd := statstest.NewNode(tb, dir, n)
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		tb.Fatal(err)
	}
	cfg := stats.Config{RootDir: root, PodLogsDir: filepath.Join(dir, "logs"), ProcRoot: nd.ProcRoot, SysRoot: nd.SysRoot,
		CgroupRoot: nd.CgroupRoot, Unified: true, PodsCgroup: "/kubepods.slice", PodCgroup: statstest.PodCgroupPath, SandboxImage: statstest.PauseImage}
	pods := nd.Pods
	clk := clocktesting.NewFakeClock(cadvisorMeasuredAt)
	cache := stats.NewCache(stats.New(cfg, nd.Runtime, func() []*v1.Pod { return pods }, clk), time.Minute, clk)
	if _, err := cache.Snapshot(context.Background()); err != nil {
		tb.Fatal(err)
	}
	clk.SetTime(cadvisorScrapedAt)
	s := New(Config{NodeName: "node-1"}, Deps{
		Authenticator: &UnionAuthenticator{Anonymous: true}, Authorizer: AlwaysAllow{},
		Cadvisor: cache, Clock: clk,
		Machine: &MachineInfo{NumCores: 4, MemoryCapacity: 8 << 30, MachineID: "m-1", SystemUUID: "u-1", BootID: "b-1"},
	})
	return s, nd, cache
}

type goldenFamily struct{ typ, labels, help string }

func readCadvisorGolden(t *testing.T) map[string]goldenFamily {
	t.Helper()
	out := map[string]goldenFamily{}
	// Name, type, labels and help.
	for _, p := range golden.Rows(t, "testdata/cadvisor-metrics.golden", 4, 4) {
		out[p[0]] = goldenFamily{typ: p[1], labels: p[2], help: p[3]}
	}
	return out
}

// lintExposition checks the promtool-style rules: HELP and TYPE on every
// family, counters named _total, no series twice.
func lintExposition(t *testing.T, body string) {
	t.Helper()
	help, typ := map[string]bool{}, map[string]string{}
	seen := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(body), "\n") {
		switch f := strings.Fields(l); {
		case strings.HasPrefix(l, "# HELP "):
			if len(f) < 4 {
				t.Errorf("empty HELP: %q", l)
			}
			help[f[2]] = true
		case strings.HasPrefix(l, "# TYPE "):
			typ[f[2]] = f[3]
		case strings.HasPrefix(l, "#"):
		default:
			// The series is the name and label set: up to the last "}" (value and
			// timestamp are numbers), else the name.
			series := f[0]
			if i := strings.LastIndex(l, "}"); strings.Contains(f[0], "{") && i > 0 {
				series = l[:i+1]
			}
			if seen[series] {
				t.Errorf("duplicate series %s", series)
			}
			seen[series] = true
		}
	}
	for name, ty := range typ {
		if !help[name] {
			t.Errorf("%s has no HELP", name)
		}
		if ty == "counter" && !strings.HasSuffix(name, "_total") {
			t.Errorf("counter %s does not end in _total", name)
		}
		if ty != "counter" && strings.HasSuffix(name, "_total") {
			t.Errorf("%s %s ends in _total", ty, name)
		}
	}
}

func parseExposition(t *testing.T, body string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parsing the exposition: %v\n%s", err, body)
	}
	return mfs
}

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, lp := range m.GetLabel() {
		out[lp.GetName()] = lp.GetValue()
	}
	return out
}

// TestCadvisorMetricsMatchGolden scrapes a fake node and checks every family
// against the golden list: name, type, label names and HELP.
func TestCadvisorMetricsMatchGolden(t *testing.T) {
	s, _, _ := cadvisorNode(t, 2)
	w := get(t, s.Handler(), "/metrics/cadvisor")
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	body := w.Body.String()
	lintExposition(t, body)
	mfs := parseExposition(t, body)
	golden := readCadvisorGolden(t)
	for name, g := range golden {
		mf := mfs[name]
		if mf == nil {
			t.Errorf("family %s missing", name)
			continue
		}
		if got := strings.ToLower(mf.GetType().String()); got != g.typ {
			t.Errorf("%s type %s, want %s", name, got, g.typ)
		}
		if mf.GetHelp() != g.help {
			t.Errorf("%s help %q, want %q", name, mf.GetHelp(), g.help)
		}
		for _, m := range mf.GetMetric() {
			var names []string
			for n := range labelsOf(m) {
				names = append(names, n)
			}
			sort.Strings(names)
			if got := strings.Join(names, ","); got != g.labels {
				t.Errorf("%s labels %s, want %s", name, got, g.labels)
				break
			}
		}
	}
	for name := range mfs {
		if _, ok := golden[name]; !ok {
			t.Errorf("family %s is not in the golden list", name)
		}
	}
}

// TestCadvisorMetricsValues: the fake cgroups' files give exactly the
// expected samples, labelled as the kubelet labels them, with the
// measurement's timestamp in milliseconds.
func TestCadvisorMetricsValues(t *testing.T) {
	s, nd, _ := cadvisorNode(t, 1)
	body := get(t, s.Handler(), "/metrics/cadvisor").Body.String()
	mfs := parseExposition(t, body)
	podID := statstest.PodCgroupPath(nd.Pods[0])
	ctrID := statstest.ContainerID(0)
	ctr := map[string]string{"container": "app", "id": podID + "/cri-containerd-" + ctrID + ".scope", "image": "registry.example/app:1",
		"name": ctrID, "namespace": "ns", "pod": "pod-0"}
	pod := map[string]string{"container": "", "id": podID, "image": "", "name": "", "namespace": "ns", "pod": "pod-0"}
	// The pause container: no container name, the pause image, its ID; the pod's network.
	sbID := statstest.SandboxID(0)
	sandbox := map[string]string{"container": "", "id": podID + "/cri-containerd-" + sbID + ".scope", "image": statstest.PauseImage,
		"name": sbID, "namespace": "ns", "pod": "pod-0"}
	with := func(base map[string]string, k, v string) map[string]string {
		out := map[string]string{k: v}
		for a, b := range base {
			out[a] = b
		}
		return out
	}
	measured, scraped := cadvisorMeasuredAt.UnixMilli(), cadvisorScrapedAt.UnixMilli()
	tests := []struct {
		name   string
		labels map[string]string
		value  float64
		ts     int64 // 0: no timestamp
	}{
		{"container_cpu_usage_seconds_total", with(ctr, "cpu", "total"), 1.5, measured},
		{"container_cpu_usage_seconds_total", with(pod, "cpu", "total"), 3, measured},
		{"container_cpu_cfs_periods_total", ctr, 10, measured},
		{"container_cpu_cfs_throttled_periods_total", ctr, 4, measured},
		{"container_cpu_cfs_throttled_seconds_total", ctr, 0.25, measured},
		{"container_memory_usage_bytes", ctr, 10485760, measured},
		{"container_memory_working_set_bytes", ctr, 10485760 - 2097152, measured},
		{"container_memory_working_set_bytes", pod, 20971520 - 4194304, measured},
		{"container_memory_rss", ctr, 6291456, measured},
		{"container_memory_cache", ctr, 3145728, measured},
		{"container_memory_swap", ctr, 4096, measured},
		{"container_oom_events_total", ctr, 1, measured},
		{"container_oom_events_total", pod, 2, measured},
		{"container_fs_reads_bytes_total", with(ctr, "device", "/dev/sda"), 4096, measured},
		{"container_fs_writes_bytes_total", with(ctr, "device", "/dev/sda"), 8192, measured},
		{"container_fs_writes_bytes_total", with(pod, "device", "/dev/sda"), 16384, measured},
		{"container_processes", ctr, 2, measured},
		{"container_processes", pod, 3, measured},
		{"container_network_receive_bytes_total", with(sandbox, "interface", "eth0"), 1000, measured},
		{"container_network_transmit_bytes_total", with(sandbox, "interface", "eth0"), 2000, measured},
		{"container_memory_working_set_bytes", sandbox, 4096, measured},
		{"container_processes", sandbox, 1, measured},
		{"container_start_time_seconds", sandbox, 1700000000, 0},
		{"container_last_seen", ctr, float64(cadvisorScrapedAt.Unix()), scraped},
		{"container_start_time_seconds", ctr, 1700000001, 0},
		{"container_start_time_seconds", pod, 1700000000, 0},
		{"machine_cpu_cores", map[string]string{"boot_id": "b-1", "machine_id": "m-1", "system_uuid": "u-1"}, 4, scraped},
		{"machine_memory_bytes", map[string]string{"boot_id": "b-1", "machine_id": "m-1", "system_uuid": "u-1"}, 8 << 30, scraped},
		{"container_scrape_error", map[string]string{}, 0, 0},
	}
	// Only the pause container has network series (cAdvisor's raw pod cgroup and the
	// containers sharing its namespace have none).
	for _, fam := range []string{"container_network_receive_bytes_total", "container_network_transmit_bytes_total"} {
		for _, m := range mfs[fam].GetMetric() {
			if l := labelsOf(m); l["name"] != sbID {
				t.Errorf("%s%v: network series on other than the pause container", fam, l)
			}
		}
	}
	for _, tc := range tests {
		var found *dto.Metric
		for _, m := range mfs[tc.name].GetMetric() {
			if fmt.Sprint(labelsOf(m)) == fmt.Sprint(tc.labels) {
				found = m
			}
		}
		if found == nil {
			t.Errorf("%s%v missing", tc.name, tc.labels)
			continue
		}
		v := found.GetCounter().GetValue() + found.GetGauge().GetValue()
		if v != tc.value || found.GetTimestampMs() != tc.ts {
			t.Errorf("%s%v = %v @%d, want %v @%d", tc.name, tc.labels, v, found.GetTimestampMs(), tc.value, tc.ts)
		}
	}
	// The pod has no CPU limit: no throttling series, as cAdvisor.
	for _, m := range mfs["container_cpu_cfs_periods_total"].GetMetric() {
		if labelsOf(m)["container"] == "" {
			t.Errorf("throttling series for the pod cgroup, which has no quota: %v", labelsOf(m))
		}
	}
	// Loopback is not a pod interface.
	for _, m := range mfs["container_network_receive_bytes_total"].GetMetric() {
		if labelsOf(m)["interface"] == "lo" {
			t.Errorf("loopback reported: %v", labelsOf(m))
		}
	}
}

// TestCadvisorMetricsReadTheCache: a scrape reads the cache's last
// measurement, not the cgroups: changed files show only after the next one.
func TestCadvisorMetricsReadTheCache(t *testing.T) {
	s, nd, _ := cadvisorNode(t, 1)
	ctrDir := statstest.PodCgroupPath(nd.Pods[0]) + "/cri-containerd-" + statstest.ContainerID(0) + ".scope"
	statstest.WriteFile(t, nd.CgroupRoot, ctrDir+"/memory.current", "99999999\n")
	if body := get(t, s.Handler(), "/metrics/cadvisor").Body.String(); strings.Contains(body, "9.9999999e+07") {
		t.Errorf("a scrape re-read the cgroup instead of the cached measurement")
	}
}

func TestCadvisorMetricsErrors(t *testing.T) {
	s := newTestServer(t, Deps{})
	if w := get(t, s.Handler(), "/metrics/cadvisor"); w.Code != http.StatusServiceUnavailable {
		t.Errorf("without stats: status %d, want 503", w.Code)
	}
	s = newTestServer(t, Deps{Cadvisor: failingSnapshot{}})
	w := get(t, s.Handler(), "/metrics/cadvisor")
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "\ncontainer_scrape_error 1\n") {
		t.Errorf("a failed measurement: status %d body %q, want container_scrape_error 1", w.Code, w.Body)
	}
}

type failingSnapshot struct{}

func (failingSnapshot) Snapshot(context.Context) (*stats.Snapshot, error) {
	return nil, fmt.Errorf("cri down")
}

// TestCadvisorMetricsAuthorization: /metrics/cadvisor is authorized as
// upstream's: get on nodes/metrics, and nothing else admits it.
func TestCadvisorMetricsAuthorization(t *testing.T) {
	for _, grant := range []string{"metrics", "proxy", "stats", "log", "spec"} {
		var asked []Attributes
		authz := authorizerFunc(func(_ context.Context, a Attributes) (bool, string, error) {
			asked = append(asked, a)
			return a.Subresource == grant, "", nil
		})
		s := New(Config{NodeName: "node-1"}, Deps{Authenticator: &UnionAuthenticator{Anonymous: true}, Authorizer: authz,
			Cadvisor: failingSnapshot{}})
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics/cadvisor", nil))
		want := http.StatusForbidden
		if grant == "metrics" {
			want = http.StatusOK
		}
		if w.Code != want {
			t.Errorf("granted nodes/%s: status %d, want %d", grant, w.Code, want)
		}
		var subs []string
		for _, a := range asked {
			subs = append(subs, a.Subresource)
			if a.Verb != "get" || a.Resource != "nodes" || a.Name != "node-1" {
				t.Errorf("asked %+v, want get on nodes/node-1", a)
			}
		}
		if !slices.Equal(subs, []string{"metrics"}) {
			t.Errorf("granted nodes/%s: asked about %v, want [metrics]", grant, subs)
		}
	}
}

// BenchmarkCadvisorScrape110Pods is one /metrics/cadvisor scrape at the
// default maxPods: "cached" reads the stats cache's last measurement (what a
// scrape costs on a node), "measured" measures each time (the background
// measurement's cost added).
func BenchmarkCadvisorScrape110Pods(b *testing.B) {
	for _, mode := range []string{"cached", "measured"} {
		b.Run(mode, func(b *testing.B) {
			s, nd, _ := cadvisorNode(b, 110)
			if mode == "measured" {
				dir := b.TempDir()
				cfg := stats.Config{RootDir: dir, PodLogsDir: dir, ProcRoot: nd.ProcRoot, SysRoot: nd.SysRoot,
					CgroupRoot: nd.CgroupRoot, Unified: true, PodsCgroup: "/kubepods.slice", PodCgroup: statstest.PodCgroupPath}
				pods := nd.Pods
				s.deps.Cadvisor = stats.New(cfg, nd.Runtime, func() []*v1.Pod { return pods }, s.deps.Clock)
			}
			h := s.Handler()
			var size, series int
			b.ReportAllocs()
			// Process CPU (GC included) is reported beside wall time: on the
			// shared test machines the wall time mostly measures the load.
			cpu0 := processCPU(b)
			n := 0
			for b.Loop() {
				n++
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest("GET", "/metrics/cadvisor", nil))
				if w.Code != http.StatusOK {
					b.Fatalf("status %d", w.Code)
				}
				size = w.Body.Len()
				series = strings.Count(w.Body.String(), "\n") - 2*strings.Count(w.Body.String(), "# HELP ")
			}
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(n)/1e6, "cpu-ms/scrape")
			b.ReportMetric(float64(size), "bytes/scrape")
			b.ReportMetric(float64(series), "series/scrape")
		})
	}
}

// processCPU is the process's user and system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
