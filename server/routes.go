package server

import (
	"context"
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
// (logs, exec, attach, portForward, run, configz) and those of them that are on: the
// profiling, verbosity and system log handlers (debugRoutes).
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
	add("GET /metrics/cadvisor", s.cadvisorMetrics)
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
	return append(rs, s.debugRoutes()...)
}

// apiHandler is the authenticated API. Authorization is decided from the route the
// mux matched, never from the request path: the mux routes on the escaped path
// (%2E%2E is not "..", %2F is not "/"), so any other reading of the path can name a
// different endpoint than the one that runs.
type apiHandler struct {
	mux      *http.ServeMux
	nodeName string
	authn    Authenticator
	authz    Authorizer
	logf     func(msg string, kv ...any)
}

// guardedRoute is what the mux dispatches to: it authorizes the request for its own
// route's subresources, so the handler that runs is the one that was authorized.
type guardedRoute struct {
	api          *apiHandler
	pattern      string
	subresources []string
	next         http.Handler
}

type userKey struct{}

// newAPIHandler serves routes behind authentication and authorization.
func newAPIHandler(routes []route, nodeName string, authn Authenticator, authz Authorizer, logf func(msg string, kv ...any)) http.Handler {
	a := &apiHandler{mux: http.NewServeMux(), nodeName: nodeName, authn: authn, authz: authz, logf: logf}
	for _, rt := range routes {
		a.mux.Handle(rt.pattern, &guardedRoute{api: a, pattern: rt.pattern, subresources: subresourcesFor(rt.pattern), next: rt.handler})
	}
	return a
}

// ServeHTTP answers 401 without valid credentials. A request the mux would not hand
// to a route (unknown path, wrong method, or a path it would redirect to a cleaned
// one) is refused: 403 without nodes/proxy, as upstream for unknown paths, else 404;
// it is never redirected, so no second reading of the path is ever served.
func (a *apiHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	user, ok, err := a.authn.Authenticate(r)
	if err != nil || !ok {
		if err != nil {
			a.logf("Unable to authenticate the request", "path", r.URL.EscapedPath(), "err", err)
		}
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	if h, _ := a.mux.Handler(r); !a.owns(h) {
		if a.authorize(w, r, user, []string{"proxy"}) {
			http.NotFound(w, r)
		}
		return
	}
	a.mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, user)))
}

func (a *apiHandler) owns(h http.Handler) bool {
	g, ok := h.(*guardedRoute)
	return ok && g.api == a
}

func (g *guardedRoute) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	user, _ := r.Context().Value(userKey{}).(*User)
	if user == nil || r.Pattern != g.pattern {
		// Only apiHandler.ServeHTTP authenticates and routes to this; a request that
		// reached it any other way is not served.
		http.Error(w, "Forbidden", http.StatusForbidden)
		return
	}
	if g.api.authorize(w, r, user, g.subresources) {
		g.next.ServeHTTP(w, r)
	}
}
