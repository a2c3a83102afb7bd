package server

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// route is one kubelet API endpoint: the ServeMux pattern it is registered under and
// the handler that serves it. The table is the single list of what the API serves, so
// that authorization and its tests see every route.
type route struct {
	pattern string
	handler http.Handler
}

// routes returns the default endpoints and, with debugging, the debugging handlers
// (logs, exec, attach, portForward, run, configz).
func (s *Server) routes(debugging bool) []route {
	var rs []route
	add := func(pattern string, h http.HandlerFunc) { rs = append(rs, route{pattern: pattern, handler: h}) }
	add("/healthz", s.healthz)
	add("/healthz/", s.healthz)
	add("GET /pods", s.pods)
	add("GET /pods/", s.pods)
	if s.deps.Metrics != nil {
		rs = append(rs, route{pattern: "GET /metrics", handler: promhttp.HandlerFor(s.deps.Metrics, promhttp.HandlerOpts{})})
	}
	if s.deps.ProbeMetrics != nil {
		rs = append(rs, route{pattern: "GET /metrics/probes", handler: promhttp.HandlerFor(s.deps.ProbeMetrics, promhttp.HandlerOpts{})})
	}
	add("GET /metrics/resource", s.resourceMetrics)
	add("GET /stats/summary", s.statsSummary)
	add("POST /stats/summary", s.statsSummary)
	if !debugging {
		return rs
	}
	add("GET /containerLogs/{ns}/{pod}/{container}", s.containerLogs)
	for _, verb := range []string{"exec", "attach"} {
		for _, m := range []string{"GET", "POST"} {
			add(m+" /"+verb+"/{ns}/{pod}/{container}", s.stream(verb))
			add(m+" /"+verb+"/{ns}/{pod}/{uid}/{container}", s.stream(verb))
		}
	}
	for _, m := range []string{"GET", "POST"} {
		add(m+" /portForward/{ns}/{pod}", s.portForward)
		add(m+" /portForward/{ns}/{pod}/{uid}", s.portForward)
	}
	add("GET /configz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{"kubeletconfig": s.cfg.Configz})
	})
	add("POST /run/{ns}/{pod}/{container}", s.run)
	add("POST /run/{ns}/{pod}/{uid}/{container}", s.run)
	return rs
}

// newAPIHandler serves routes behind authentication and authorization.
func newAPIHandler(routes []route, nodeName string, authn Authenticator, authz Authorizer, logf func(msg string, kv ...any)) http.Handler {
	mux := http.NewServeMux()
	for _, rt := range routes {
		mux.Handle(rt.pattern, rt.handler)
	}
	return withAuth(mux, nodeName, authn, authz, logf)
}
