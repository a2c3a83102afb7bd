package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

type failingSummary struct{}

func (failingSummary) Summary(context.Context) (*statsv1alpha1.Summary, error) {
	return nil, errors.New("no stats in this test")
}

// TestShowHiddenMetricsForVersion: only the previous minor version is accepted, as
// upstream, anything else is refused naming the field; set, it serves the metrics
// upstream hides in 1.37 (scrape_error on /metrics/resource).
func TestShowHiddenMetricsForVersion(t *testing.T) {
	for _, tc := range []struct {
		value   string
		show    bool
		wantErr bool
	}{
		{value: "", show: false},
		{value: "1.36", show: true},
		{value: "1.37", wantErr: true},
		{value: "1.35", wantErr: true},
		{value: "v1.36", wantErr: true},
		{value: "1.36.0", wantErr: true},
		{value: "yes", wantErr: true},
	} {
		show, err := showHiddenMetrics(tc.value)
		if tc.wantErr {
			if err == nil || !strings.Contains(err.Error(), "showHiddenMetricsForVersion") || !strings.Contains(err.Error(), "'1.36'") {
				t.Errorf("%q: err = %v, want one naming showHiddenMetricsForVersion and the allowed 1.36", tc.value, err)
			}
			continue
		}
		if err != nil || show != tc.show {
			t.Errorf("%q: show = %v, %v; want %v", tc.value, show, err, tc.show)
		}
	}

	scrape := func(show bool) string {
		t.Helper()
		ro := freePort(t)
		d := serverTestDeps()
		d.summary, d.showHiddenMetrics = failingSummary{}, show
		l, err := newTestAPIServer(context.Background(), serverTestConfig(false, 0, ro), d)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		served := make(chan struct{})
		go func() { l.Serve(ctx); close(served) }()
		defer func() { cancel(); <-served }()
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics/resource", ro))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if b := scrape(false); !strings.Contains(b, "\nresource_scrape_error 1\n") || strings.Contains(b, "\nscrape_error ") {
		t.Errorf("hidden metrics not shown: want resource_scrape_error only:\n%s", b)
	}
	if b := scrape(true); !strings.Contains(b, "\nresource_scrape_error 1\n") || !strings.Contains(b, "\nscrape_error 1\n") {
		t.Errorf("hidden metrics shown: want scrape_error too:\n%s", b)
	}
}
