package agent

import (
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/nodelet/nodelet/config"
	"github.com/nodelet/nodelet/internal/testsupport/golden"
)

// metricsGolden is nodelet's own /metrics families: name, type and label
// names, as upstream's kubelet exposes them.
const metricsGolden = "testdata/metrics.golden"

// goldenMetric is one row of the golden list.
type goldenMetric struct {
	typ    string
	labels string // sorted, comma-separated
	// upstreamName: a counter whose upstream name has no _total suffix,
	// kept so that the kubelet's dashboards and alerts find it.
	upstreamName bool
	// when names the configuration that registers the family, "" for the
	// test's (standalone, graceful node shutdown on).
	when string
}

func readMetricsGolden(t *testing.T) map[string]goldenMetric {
	t.Helper()
	out := map[string]goldenMetric{}
	// Name, type, labels, then optionally notes.
	for _, p := range golden.Rows(t, metricsGolden, 3, 4) {
		if _, dup := out[p[0]]; dup {
			t.Fatalf("golden lists %s twice", p[0])
		}
		g := goldenMetric{typ: p[1], labels: p[2]}
		if len(p) == 4 {
			for _, note := range strings.Split(p[3], " ") {
				switch {
				case note == "upstream-name":
					g.upstreamName = true
				case strings.HasPrefix(note, "when="):
					g.when = strings.TrimPrefix(note, "when=")
				default:
					t.Fatalf("golden row %q: unknown note %q", p, note)
				}
			}
		}
		out[p[0]] = g
	}
	return out
}

// ownFamily: the Go runtime's and the process's families come from
// client_golang's collectors, as upstream's do, and change with the Go version.
func ownFamily(name string) bool {
	return !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_")
}

var descPattern = regexp.MustCompile(`^Desc\{fqName: "([^"]+)", .*variableLabels: \{([^}]*)\}\}$`)

// registered returns every family the registry can expose, with its label
// names: a vector's family is exposed only once it has a series, so a
// scrape alone does not show them all.
func registered(t *testing.T, reg *prometheus.Registry) map[string]string {
	t.Helper()
	ch := make(chan *prometheus.Desc)
	go func() {
		defer close(ch)
		reg.Describe(ch)
	}()
	out := map[string]string{}
	for d := range ch {
		m := descPattern.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read %s", d)
		}
		if !ownFamily(m[1]) {
			continue
		}
		var labels []string
		if m[2] != "" {
			labels = strings.Split(m[2], ",")
		}
		slices.Sort(labels)
		out[m[1]] = strings.Join(labels, ",")
	}
	return out
}

// TestMetricsGolden scrapes /metrics (on the read-only port) of nodelet run
// on the fake runtime until its static pod is probed, parses it with expfmt
// and checks it against testdata/metrics.golden, written from the kubelet's
// documented metrics: every registered family is listed with its label
// names and no listed family is missing (those of another configuration,
// marked when=, are checked in theirs), every scraped family has the listed
// type; and lints the exposition: HELP on every family, counters named
// _total (but upstream's own names), no series twice, histograms with buckets.
func TestMetricsGolden(t *testing.T) {
	golden := readMetricsGolden(t)
	for _, tc := range []struct {
		when      string
		configure func(*config.Options)
	}{
		{when: ""},
		{when: "EventedPLEG", configure: func(opts *config.Options) { opts.Config.FeatureGates = map[string]bool{"EventedPLEG": true} }},
	} {
		t.Run("when="+tc.when, func(t *testing.T) {
			var (
				families map[string]*dto.MetricFamily
				regd     map[string]string
				port     int32
			)
			buildRunStopWhile(t, func(opts *config.Options) {
				port = freePort(t)
				opts.Config.ReadOnlyPort = port
				if tc.configure != nil {
					tc.configure(opts)
				}
			}, func(a *agent) {
				families = scrape(t, fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
				regd = registered(t, a.metrics)
			}, "kubelet API ports", "logind D-Bus connection", "DRA driver connections", "event broadcaster", "container runtime client")
			checkGolden(t, golden, tc.when, regd, families)
		})
	}
}

// checkGolden checks what one configuration (when) registered and exposed.
func checkGolden(t *testing.T, golden map[string]goldenMetric, when string, regd map[string]string, families map[string]*dto.MetricFamily) {
	t.Helper()
	for _, name := range slices.Sorted(maps.Keys(regd)) {
		g, ok := golden[name]
		switch {
		case !ok:
			t.Errorf("%s (labels %q) is registered but not in %s: check it against upstream's and list it", name, regd[name], metricsGolden)
		case g.labels != regd[name]:
			t.Errorf("%s has labels %q, golden %q", name, regd[name], g.labels)
		case g.when != "" && g.when != when:
			t.Errorf("%s is registered without %s", name, g.when)
		}
	}
	for name, g := range golden {
		if _, ok := regd[name]; !ok && (g.when == "" || g.when == when) {
			t.Errorf("%s is in %s but not registered", name, metricsGolden)
		}
	}
	for name, f := range families {
		if !ownFamily(name) {
			continue
		}
		if g, ok := golden[name]; ok && g.typ != strings.ToLower(f.GetType().String()) {
			t.Errorf("%s is a %s, golden %s", name, strings.ToLower(f.GetType().String()), g.typ)
		}
		lintFamily(t, f, golden[name].upstreamName)
	}
	for _, want := range []string{"kubelet_node_name", "kubelet_runtime_operations_total", "kubelet_pod_worker_duration_seconds", "kubelet_running_pods"} {
		if _, ok := families[want]; !ok {
			t.Errorf("the scrape has no %s after a pod was started and probed", want)
		}
	}
}

func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing %s: %v", url, err)
	}
	return families
}

// lintFamily is promtool's checks that apply to one family.
func lintFamily(t *testing.T, f *dto.MetricFamily, upstreamName bool) {
	t.Helper()
	name := f.GetName()
	if f.GetHelp() == "" {
		t.Errorf("%s has no HELP", name)
	}
	if f.GetType() == dto.MetricType_COUNTER && !strings.HasSuffix(name, "_total") && !upstreamName {
		t.Errorf("counter %s is not named _total (or marked upstream-name in the golden list)", name)
	}
	seen := map[string]bool{}
	for _, m := range f.GetMetric() {
		var pairs []string
		for _, lp := range m.GetLabel() {
			pairs = append(pairs, lp.GetName()+"="+lp.GetValue())
		}
		slices.Sort(pairs)
		key := strings.Join(pairs, ",")
		if seen[key] {
			t.Errorf("%s{%s} is exposed twice", name, key)
		}
		seen[key] = true
		if f.GetType() == dto.MetricType_HISTOGRAM && len(m.GetHistogram().GetBucket()) == 0 {
			t.Errorf("histogram %s{%s} has no buckets", name, key)
		}
	}
}
