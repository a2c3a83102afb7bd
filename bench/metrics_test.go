package bench

// Prometheus text exposition helpers of the benches. No build tag: the pure functions and
// their tests run with a plain `go test ./bench/`, without the rig.

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// promLabels parses the inside of a Prometheus text exposition's {...}: name="value" pairs
// separated by commas (values with \" and \\ escapes).
func promLabels(s string) map[string]string {
	out := map[string]string{}
	for s != "" {
		name, rest, ok := strings.Cut(s, `="`)
		if !ok {
			break
		}
		var v strings.Builder
		i := 0
		for ; i < len(rest) && rest[i] != '"'; i++ {
			if rest[i] == '\\' && i+1 < len(rest) {
				i++
			}
			v.WriteByte(rest[i])
		}
		out[strings.TrimSpace(name)] = v.String()
		s = strings.TrimPrefix(rest[min(i+1, len(rest)):], ",")
	}
	return out
}

// metricValue is the value of an unlabelled series (a counter or a gauge) in a text
// exposition, NaN when absent.
func metricValue(exposition, name string) float64 {
	for _, line := range strings.Split(exposition, "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				if v, err := strconv.ParseFloat(f[0], 64); err == nil {
					return v
				}
			}
		}
	}
	return math.NaN()
}

// histBucket is one cumulative bucket of a histogram: how many observations were ≤ le.
type histBucket struct {
	le    float64
	count float64
}

// histogram is one unlabelled Prometheus histogram as exposed: cumulative buckets sorted by
// upper bound (+Inf last), the sum and the count of the observations.
type histogram struct {
	buckets    []histBucket
	sum, count float64
}

// parseHistogram reads the histogram name (its _bucket, _sum and _count series) from a text
// exposition. Series with labels other than le are refused: the relist histogram has none,
// and summing label sets silently would measure something else.
func parseHistogram(exposition, name string) (histogram, error) {
	var h histogram
	var haveSum, haveCount bool
	for _, line := range strings.Split(exposition, "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		series, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		metric, labelText, _ := strings.Cut(strings.TrimSuffix(series, "}"), "{")
		var dst *float64
		switch metric {
		case name + "_bucket":
			labels := promLabels(labelText)
			if len(labels) != 1 || labels["le"] == "" {
				return histogram{}, fmt.Errorf("%s: bucket with labels %v, want le only", name, labels)
			}
			le, err := strconv.ParseFloat(labels["le"], 64)
			if err != nil {
				return histogram{}, fmt.Errorf("%s: bucket bound %q: %w", name, labels["le"], err)
			}
			h.buckets = append(h.buckets, histBucket{le: le})
			dst = &h.buckets[len(h.buckets)-1].count
		case name + "_sum":
			dst, haveSum = &h.sum, true
		case name + "_count":
			dst, haveCount = &h.count, true
		default:
			continue
		}
		if labelText != "" && metric != name+"_bucket" {
			return histogram{}, fmt.Errorf("%s: labelled series %q", name, series)
		}
		// A timestamp may follow the value.
		v, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
		if err != nil {
			return histogram{}, fmt.Errorf("%s: value of %q: %w", name, line, err)
		}
		*dst = v
	}
	if len(h.buckets) == 0 || !haveSum || !haveCount {
		return histogram{}, fmt.Errorf("no histogram %s (buckets, _sum and _count) in the exposition", name)
	}
	sort.Slice(h.buckets, func(i, j int) bool { return h.buckets[i].le < h.buckets[j].le })
	if !math.IsInf(h.buckets[len(h.buckets)-1].le, 1) {
		return histogram{}, fmt.Errorf("%s: no +Inf bucket", name)
	}
	return h, nil
}

// sub is the histogram of the observations made between before and h: bucket by bucket
// differences. It fails when the bounds differ or a count went down (the process restarted
// in between).
func (h histogram) sub(before histogram) (histogram, error) {
	if len(h.buckets) != len(before.buckets) {
		return histogram{}, fmt.Errorf("histograms with %d and %d buckets", len(h.buckets), len(before.buckets))
	}
	out := histogram{sum: h.sum - before.sum, count: h.count - before.count}
	if out.count < 0 {
		return histogram{}, fmt.Errorf("count went down from %v to %v (restarted?)", before.count, h.count)
	}
	for i, b := range h.buckets {
		if b.le != before.buckets[i].le {
			return histogram{}, fmt.Errorf("bucket %d bound %v, was %v", i, b.le, before.buckets[i].le)
		}
		d := b.count - before.buckets[i].count
		if d < 0 {
			return histogram{}, fmt.Errorf("bucket le=%v went down from %v to %v (restarted?)", b.le, before.buckets[i].count, b.count)
		}
		out.buckets = append(out.buckets, histBucket{le: b.le, count: d})
	}
	return out, nil
}

// histogramQuantile estimates the q-quantile (0 ≤ q ≤ 1) of the observations in h as
// Prometheus' histogram_quantile does: find the bucket the rank q·count falls in and
// interpolate linearly between its bounds (the first bucket's lower bound is 0). A rank in
// the +Inf bucket gives the highest finite bound: the estimate is then a lower bound. NaN
// when h holds no observation.
func histogramQuantile(q float64, h histogram) float64 {
	if len(h.buckets) == 0 || q < 0 || q > 1 {
		return math.NaN()
	}
	total := h.buckets[len(h.buckets)-1].count
	if total == 0 {
		return math.NaN()
	}
	rank := q * total
	lower, below := 0.0, 0.0
	for i, b := range h.buckets {
		if b.count >= rank && b.count > below {
			if math.IsInf(b.le, 1) {
				if i == 0 {
					return math.NaN()
				}
				return h.buckets[i-1].le
			}
			return lower + (b.le-lower)*(rank-below)/(b.count-below)
		}
		lower, below = b.le, b.count
	}
	return lower
}

func TestHistogramQuantile(t *testing.T) {
	// Prometheus' default buckets up to 0.1 s, as kubelet_pleg_relist_duration_seconds has.
	h := func(counts ...float64) histogram {
		bounds := []float64{0.005, 0.01, 0.025, 0.05, 0.1, math.Inf(1)}
		var out histogram
		for i, c := range counts {
			out.buckets = append(out.buckets, histBucket{le: bounds[i], count: c})
		}
		return out
	}
	for _, tc := range []struct {
		name string
		q    float64
		h    histogram
		want float64
	}{
		// 100 observations, all in (0.01, 0.025]: the median is halfway through the bucket.
		{"one bucket p50", .5, h(0, 0, 100, 100, 100, 100), 0.0175},
		{"one bucket p99", .99, h(0, 0, 100, 100, 100, 100), 0.01 + 0.015*.99},
		// First bucket: interpolated from 0.
		{"first bucket", .5, h(10, 10, 10, 10, 10, 10), 0.0025},
		// 90 in (0, 0.005], 10 in (0.05, 0.1]: p50 in the first, p99 90 % through the last finite.
		{"two modes p50", .5, h(90, 90, 90, 90, 100, 100), 0.005 * 50 / 90},
		{"two modes p99", .99, h(90, 90, 90, 90, 100, 100), 0.05 + 0.05*9/10},
		// A rank on a bucket's upper edge: that bucket's bound, not the next (empty) one's.
		{"edge", .9, h(90, 90, 90, 90, 100, 100), 0.005},
		// Past the last finite bound: that bound (a lower bound of the truth).
		{"+Inf bucket", .99, h(0, 0, 0, 0, 50, 100), 0.1},
		{"empty", .5, h(0, 0, 0, 0, 0, 0), math.NaN()},
		{"q out of range", 1.5, h(0, 0, 100, 100, 100, 100), math.NaN()},
	} {
		got := histogramQuantile(tc.q, tc.h)
		if math.IsNaN(tc.want) != math.IsNaN(got) || (!math.IsNaN(got) && math.Abs(got-tc.want) > 1e-12) {
			t.Errorf("%s: histogramQuantile(%v) = %v, want %v", tc.name, tc.q, got, tc.want)
		}
	}
}

func TestParseHistogramAndSub(t *testing.T) {
	const name = "kubelet_pleg_relist_duration_seconds"
	expo := func(b1, b2, inf, sum float64) string {
		return fmt.Sprintf(`# HELP kubelet_pleg_relist_duration_seconds [ALPHA] Duration in seconds for relisting pods in PLEG.
# TYPE kubelet_pleg_relist_duration_seconds histogram
kubelet_pleg_relist_duration_seconds_bucket{le="0.01"} %v
kubelet_pleg_relist_duration_seconds_bucket{le="+Inf"} %v
kubelet_pleg_relist_duration_seconds_bucket{le="0.005"} %v
kubelet_pleg_relist_duration_seconds_sum %v
kubelet_pleg_relist_duration_seconds_count %v
kubelet_pleg_relist_interval_seconds_bucket{le="0.005"} 7
kubelet_pleg_relist_interval_seconds_count 7
`, b2, inf, b1, sum, inf)
	}
	before, err := parseHistogram(expo(5, 8, 10, 0.05), name)
	if err != nil {
		t.Fatal(err)
	}
	if len(before.buckets) != 3 || before.buckets[0].le != 0.005 || before.buckets[0].count != 5 || !math.IsInf(before.buckets[2].le, 1) {
		t.Fatalf("buckets %+v, want sorted 0.005:5, 0.01:8, +Inf:10", before.buckets)
	}
	if before.count != 10 || before.sum != 0.05 {
		t.Errorf("count %v sum %v, want 10 and 0.05", before.count, before.sum)
	}
	after, err := parseHistogram(expo(5, 18, 30, 0.25), name)
	if err != nil {
		t.Fatal(err)
	}
	d, err := after.sub(before)
	if err != nil {
		t.Fatal(err)
	}
	// The window's 20 relists: none ≤ 5 ms, 10 in (5, 10] ms, 10 above.
	if d.count != 20 || math.Abs(d.sum-0.2) > 1e-12 || d.buckets[0].count != 0 || d.buckets[1].count != 10 || d.buckets[2].count != 20 {
		t.Errorf("delta %+v, want count 20, sum 0.2, buckets 0/10/20", d)
	}
	if got := histogramQuantile(.25, d); math.Abs(got-0.0075) > 1e-12 {
		t.Errorf("p25 of the delta = %v, want 0.0075", got)
	}
	if _, err := before.sub(after); err == nil {
		t.Error("a histogram whose counts went down subtracted without error")
	}
	if _, err := parseHistogram("# nothing\n", name); err == nil {
		t.Error("an exposition without the histogram parsed without error")
	}
	if _, err := parseHistogram(`x_bucket{le="1",pod="a"} 1
x_bucket{le="+Inf",pod="a"} 1
x_sum 1
x_count 1
`, "x"); err == nil {
		t.Error("a labelled histogram parsed without error")
	}
	if _, err := parseHistogram(`x_bucket{le="1"} 1
x_sum 1
x_count 1
`, "x"); err == nil {
		t.Error("a histogram without +Inf bucket parsed without error")
	}
}

func TestMetricValue(t *testing.T) {
	const expo = `# HELP kubelet_evented_pleg_connection_success_count x
kubelet_evented_pleg_connection_success_count 2
kubelet_evented_pleg_connection_success_count_total 9
kubelet_running_pods 250 1700000000000
`
	if v := metricValue(expo, "kubelet_evented_pleg_connection_success_count"); v != 2 {
		t.Errorf("success count %v, want 2", v)
	}
	if v := metricValue(expo, "kubelet_running_pods"); v != 250 {
		t.Errorf("running pods (with a timestamp) %v, want 250", v)
	}
	if v := metricValue(expo, "kubelet_missing"); !math.IsNaN(v) {
		t.Errorf("an absent series gave %v, want NaN", v)
	}
}

func TestPromLabels(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want map[string]string
	}{
		{``, map[string]string{}},
		{`a="1"`, map[string]string{"a": "1"}},
		{`a="1",b=""`, map[string]string{"a": "1", "b": ""}},
		{`a="x,y",b="q\"uo\\te"`, map[string]string{"a": "x,y", "b": `q"uo\te`}},
	} {
		got := promLabels(tc.in)
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("promLabels(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
