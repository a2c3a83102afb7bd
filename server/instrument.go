package server

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// httpMetrics are upstream's kubelet_http_* request metrics.
type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	inflight *prometheus.GaugeVec
}

func newHTTPMetrics(reg prometheus.Registerer) *httpMetrics {
	labels := []string{"method", "path", "server_type", "long_running"}
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: "kubelet", Name: "http_requests_total",
			Help: "Number of the http requests received since the server started"}, labels),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Subsystem: "kubelet", Name: "http_requests_duration_seconds",
			Help: "Duration in seconds to serve http requests", Buckets: prometheus.DefBuckets}, labels),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: "kubelet", Name: "http_inflight_requests",
			Help: "Number of the inflight http requests"}, labels),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.requests, m.duration, m.inflight} {
			// A second server in one process (tests) shares the first one's collectors.
			if err := reg.Register(c); err != nil {
				if are, ok := err.(prometheus.AlreadyRegisteredError); ok {
					switch existing := are.ExistingCollector.(type) {
					case *prometheus.CounterVec:
						m.requests = existing
					case *prometheus.HistogramVec:
						m.duration = existing
					case *prometheus.GaugeVec:
						m.inflight = existing
					}
				}
			}
		}
	}
	return m
}

// metricPaths are the path buckets: the handlers' root paths (and metrics/<x>), as
// upstream; anything else is "other", so arbitrary paths cannot grow the label set.
var metricPaths = map[string]bool{
	"healthz": true, "pods": true, "stats": true, "metrics": true, "metrics/resource": true, "metrics/probes": true, "metrics/cadvisor": true,
	"containerLogs": true, "exec": true, "attach": true, "portForward": true, "run": true,
	"logs": true, "debug": true,
}

// longRunning is upstream's list; its "portforward" never matches the "portForward" root,
// so upstream labels port-forwards long_running=false, and so does this.
var longRunning = map[string]bool{"exec": true, "attach": true, "portforward": true, "debug": true}

func metricPath(p string) string {
	parts := strings.SplitN(strings.TrimPrefix(p, "/"), "/", 3)
	root := parts[0]
	if root == "metrics" && len(parts) > 1 {
		root += "/" + parts[1]
	}
	if metricPaths[root] {
		return root
	}
	return "other"
}

func metricMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodHead, http.MethodOptions:
		return m
	}
	return "other"
}

func (m *httpMetrics) instrument(next http.Handler, serverType string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path := metricPath(r.URL.Path)
		lv := []string{metricMethod(r.Method), path, serverType, strconv.FormatBool(longRunning[path])}
		m.requests.WithLabelValues(lv...).Inc()
		g := m.inflight.WithLabelValues(lv...)
		g.Inc()
		defer g.Dec()
		start := time.Now()
		defer func() { m.duration.WithLabelValues(lv...).Observe(time.Since(start).Seconds()) }()
		next.ServeHTTP(w, r)
	})
}
