package server

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// upstreamSubresources is what the upstream kubelet (KubeletFineGrainedAuthz) authorizes
// each route against, in order: any allowed record admits the request. It is written
// out here rather than derived, so that the tests do not share the mapping they check.
func upstreamSubresources() map[string][]string {
	proxy := []string{"proxy"}
	return map[string][]string{
		"/healthz":              {"healthz", "proxy"},
		"/healthz/":             {"healthz", "proxy"},
		"GET /pods":             {"pods", "proxy"},
		"GET /pods/":            {"pods", "proxy"},
		"GET /configz":          {"configz", "proxy"},
		"GET /metrics":          {"metrics"},
		"GET /metrics/probes":   {"metrics"},
		"GET /metrics/resource": {"metrics"},
		"GET /metrics/cadvisor": {"metrics"},
		"GET /stats/summary":    {"stats"},
		"POST /stats/summary":   {"stats"},

		"GET /containerLogs/{ns}/{pod}/{container}": proxy,
		"GET /exec/{ns}/{pod}/{container}":          proxy,
		"POST /exec/{ns}/{pod}/{container}":         proxy,
		"GET /exec/{ns}/{pod}/{uid}/{container}":    proxy,
		"POST /exec/{ns}/{pod}/{uid}/{container}":   proxy,
		"GET /attach/{ns}/{pod}/{container}":        proxy,
		"POST /attach/{ns}/{pod}/{container}":       proxy,
		"GET /attach/{ns}/{pod}/{uid}/{container}":  proxy,
		"POST /attach/{ns}/{pod}/{uid}/{container}": proxy,
		"GET /portForward/{ns}/{pod}":               proxy,
		"POST /portForward/{ns}/{pod}":              proxy,
		"GET /portForward/{ns}/{pod}/{uid}":         proxy,
		"POST /portForward/{ns}/{pod}/{uid}":        proxy,
		"POST /run/{ns}/{pod}/{container}":          proxy,
		"POST /run/{ns}/{pod}/{uid}/{container}":    proxy,

		"GET /debug/pprof/{$}":     proxy,
		"GET /debug/pprof/cmdline": proxy,
		"GET /debug/pprof/profile": proxy,
		"GET /debug/pprof/symbol":  proxy,
		"GET /debug/pprof/trace":   proxy,
		"GET /debug/pprof/{name}":  proxy,
		"/debug/flags/v":           proxy,
		"GET /logs/":               {"log"},
	}
}

// trace is what one request did: the subresources the authorizer was asked about and
// the routes whose handler ran. It travels in the request's context, so requests
// checked in parallel (fuzzing) do not share it.
type trace struct {
	asked []string
	ran   []string
}

type traceKey struct{}

func traceOf(ctx context.Context) *trace {
	tr, _ := ctx.Value(traceKey{}).(*trace)
	return tr
}

// grantAuthorizer allows the subresources in grant ("*": all) and records every question.
type grantAuthorizer struct{}

type grantKey struct{}

func (grantAuthorizer) Authorize(ctx context.Context, a Attributes) (bool, string, error) {
	tr := traceOf(ctx)
	tr.asked = append(tr.asked, a.Subresource)
	grant, _ := ctx.Value(grantKey{}).(string)
	return grant == "*" || grant == a.Subresource, "", nil
}

// tracingAPI is the authenticated API over the server's own route table, with every
// handler replaced by one that records which route ran.
func tracingAPI(t testing.TB) (http.Handler, []route) {
	t.Helper()
	reg := prometheus.NewRegistry()
	s := New(Config{NodeName: "node-1", EnableDebuggingHandlers: true, EnableProfilingHandler: true, EnableDebugFlagsHandler: true,
		EnableSystemLogHandler: true}, Deps{Metrics: reg, ProbeMetrics: reg})
	routes := s.routes(true)
	traced := make([]route, len(routes))
	for i, rt := range routes {
		pattern := rt.pattern
		traced[i] = route{pattern: pattern, handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tr := traceOf(r.Context())
			tr.ran = append(tr.ran, pattern)
			if r.Pattern != pattern {
				tr.ran = append(tr.ran, "mux matched "+r.Pattern)
			}
			w.WriteHeader(http.StatusOK)
		})}
	}
	h := newAPIHandler(traced, "node-1", &UnionAuthenticator{Anonymous: true}, grantAuthorizer{}, func(string, ...any) {})
	return h, routes
}

// rawRequest parses method and target exactly as the HTTP server would, escapes and
// all; ok=false when the server would reject the request line before any handler.
func rawRequest(method, target string) (*http.Request, bool) {
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(method + " " + target + " HTTP/1.1\r\nHost: node-1:10250\r\n\r\n")))
	if err != nil {
		return nil, false
	}
	return r, true
}

// serveTraced sends one request with the given grant and returns its trace and status.
func serveTraced(h http.Handler, r *http.Request, grant string) (*trace, int) {
	tr := &trace{}
	ctx := context.WithValue(context.WithValue(r.Context(), traceKey{}, tr), grantKey{}, grant)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r.Clone(ctx))
	return tr, w.Code
}

// routeViolation checks the invariant for one request and describes how it was broken
// ("" when it holds): the request either reaches no handler (and is refused), or
// reaches exactly one, after the authorizer was asked about exactly that route's
// upstream subresources; a caller granted only metrics or stats reaches only a route
// that grant allows.
func routeViolation(h http.Handler, want map[string][]string, method, target string) string {
	r, ok := rawRequest(method, target)
	if !ok {
		return ""
	}
	all, code := serveTraced(h, r, "*")
	switch {
	case len(all.ran) > 1:
		return fmt.Sprintf("%s %s ran %v", method, target, all.ran)
	case len(all.ran) == 0:
		// Refused: not routed to any handler, and never redirected to another path.
		if code != http.StatusNotFound {
			return fmt.Sprintf("%s %s reached no handler but answered %d, want 404", method, target, code)
		}
		if !slices.Equal(all.asked, []string{"proxy"}) {
			return fmt.Sprintf("%s %s (not routed) asked the authorizer for %v, want [proxy] as upstream for unknown paths", method, target, all.asked)
		}
	default:
		ran := all.ran[0]
		subs, known := want[ran]
		if !known {
			return fmt.Sprintf("%s %s ran %q, which has no upstream subresources in the test table", method, target, ran)
		}
		if !slices.Equal(all.asked, subs[:1]) {
			return fmt.Sprintf("%s %s ran %q after asking for %v, want %v", method, target, ran, all.asked, subs[:1])
		}
		denied, code := serveTraced(h, r, "")
		if len(denied.ran) != 0 || code != http.StatusForbidden || !slices.Equal(denied.asked, subs) {
			return fmt.Sprintf("%s %s denied: ran %v, status %d, asked %v; want no handler, 403, asked %v", method, target, denied.ran, code, denied.asked, subs)
		}
	}
	for _, grant := range []string{"metrics", "stats"} {
		tr, _ := serveTraced(h, r, grant)
		for _, ran := range tr.ran {
			if !slices.Contains(want[ran], grant) {
				return fmt.Sprintf("%s %s with only nodes/%s reached %q (needs %v)", method, target, grant, ran, want[ran])
			}
		}
	}
	return ""
}

// concretePath is a request path the pattern matches.
func concretePath(pattern string) string {
	_, p, _ := strings.Cut(pattern, " ")
	if p == "" {
		p = pattern
	}
	return strings.NewReplacer("{ns}", "ns", "{pod}", "web", "{uid}", "uid-1", "{container}", "c", "{name}", "heap", "{$}", "").Replace(p)
}

// encodedVariants are paths that spell "." and "/" in the ways routers, decoders and
// path cleaners disagree on, from each route path towards every other one.
func encodedVariants(paths []string) []string {
	dots := []string{"..", "%2E%2E", "%2e%2E", ".%2E", "%2e.", "%252E%252E", "%2e%2e"}
	seps := []string{"/", "%2F", "%2f", "%252F", "//", "/./"}
	set := map[string]bool{}
	add := func(ps ...string) {
		for _, p := range ps {
			set[p] = true
		}
	}
	for _, p := range paths {
		trimmed := strings.TrimSuffix(p, "/")
		add(p, trimmed, trimmed+"/", trimmed+"/x", strings.ReplaceAll(p, "/", "//"), "/."+p, trimmed+"/.", trimmed+"/%2E",
			trimmed+";x=y", trimmed+"%3Bx=y", strings.ToUpper(p), mixedCase(p), trimmed+"%2F", trimmed+"%00", trimmed+"%20",
			strings.Replace(p, "/", "/./", 2), strings.Replace(p, "/", "/%2E/", 2))
		for _, q := range paths {
			rest := strings.TrimPrefix(q, "/")
			for _, d := range dots {
				for _, s := range seps {
					add(trimmed + s + d + s + rest)
				}
				add("/"+d+q, trimmed+"/"+d+"/"+d+q, trimmed+"/x/"+d+"/"+d+q)
			}
			add(trimmed+"/..;/"+rest, trimmed+";/../"+rest, trimmed+"/%2E%2E;x=y/"+rest, trimmed+"/%2E%2E/"+strings.ToUpper(rest))
		}
	}
	out := make([]string, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func mixedCase(s string) string {
	b := []byte(s)
	for i := range b {
		if i%2 == 1 && b[i] >= 'a' && b[i] <= 'z' {
			b[i] -= 'a' - 'A'
		}
	}
	return string(b)
}

// TestEveryRouteHasUpstreamSubresources keeps the table above in step with the
// server's route table, so a new route cannot be left out of the checks below.
func TestEveryRouteHasUpstreamSubresources(t *testing.T) {
	_, routes := tracingAPI(t)
	want := upstreamSubresources()
	for _, rt := range routes {
		if _, ok := want[rt.pattern]; !ok {
			t.Errorf("route %q is not in upstreamSubresources: add what upstream authorizes it against", rt.pattern)
		}
		delete(want, rt.pattern)
	}
	for p := range want {
		t.Errorf("upstreamSubresources has %q, which the server does not register", p)
	}
}

// TestRouteAuthorizationEncodedVariants sends every registered route, and paths from
// each route to every other one with encoded "." and "/", and checks each request is
// refused or authorized for exactly the route whose handler ran.
func TestRouteAuthorizationEncodedVariants(t *testing.T) {
	h, routes := tracingAPI(t)
	want := upstreamSubresources()
	var paths []string
	for _, rt := range routes {
		if p := concretePath(rt.pattern); !slices.Contains(paths, p) {
			paths = append(paths, p)
		}
	}
	variants := encodedVariants(paths)
	var violations []string
	for _, target := range variants {
		for _, method := range []string{"GET", "POST", "PUT", "CONNECT"} {
			if v := routeViolation(h, want, method, target); v != "" {
				violations = append(violations, v)
			}
		}
	}
	// The reported case first, then a sample: the full list runs to thousands.
	slices.SortStableFunc(violations, func(a, b string) int {
		return cmp.Compare(btoi(!strings.Contains(a, "/pods/%2E%2E/metrics ")), btoi(!strings.Contains(b, "/pods/%2E%2E/metrics ")))
	})
	for i, v := range violations {
		if i == 20 {
			t.Errorf("... %d violations in all", len(violations))
			break
		}
		t.Error(v)
	}
	// Every route itself is reached and authorized as upstream.
	for _, rt := range routes {
		method, _, found := strings.Cut(rt.pattern, " ")
		if !found {
			method = "GET"
		}
		r, _ := rawRequest(method, concretePath(rt.pattern))
		tr, code := serveTraced(h, r, "*")
		if code != http.StatusOK || !slices.Equal(tr.ran, []string{rt.pattern}) {
			t.Errorf("%s %s: status %d, ran %v, want %q", method, concretePath(rt.pattern), code, tr.ran, rt.pattern)
		}
	}
	t.Logf("checked %d paths × 4 methods", len(variants))
}

// TestEncodedPathCannotEscapeMetricsGrant is the reported case end to end, through
// Handler and the real pods handler: a caller with only nodes/metrics (what
// Prometheus and metrics-server hold) must not get the pod list, env values included.
func TestEncodedPathCannotEscapeMetricsGrant(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"}, Spec: v1.PodSpec{Containers: []v1.Container{
		{Name: "c", Env: []v1.EnvVar{{Name: "DB_PASSWORD", Value: "hunter2"}}}}}}
	reg := prometheus.NewRegistry()
	metricsOnly := authorizerFunc(func(_ context.Context, a Attributes) (bool, string, error) {
		return a.Subresource == "metrics" && a.Verb == "get", "", nil
	})
	s := New(Config{NodeName: "node-1", EnableDebuggingHandlers: true}, Deps{
		Authenticator: &UnionAuthenticator{Anonymous: true}, Authorizer: metricsOnly,
		Pods: func() []*v1.Pod { return []*v1.Pod{pod} }, Metrics: reg,
	})
	h := s.Handler()
	if w := get(t, h, "/metrics"); w.Code != http.StatusOK {
		t.Fatalf("/metrics with nodes/metrics: %d %s", w.Code, w.Body)
	}
	for _, p := range []string{"/pods/%2E%2E/metrics", "/pods/%2e%2e/metrics", "/pods/..%2Fmetrics", "/pods/%252E%252E/metrics",
		"/containerLogs/ns/web/c/%2E%2E/%2E%2E/%2E%2E/%2E%2E/metrics", "/configz/%2E%2E/metrics"} {
		r, _ := rawRequest("GET", p)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code == http.StatusOK || strings.Contains(w.Body.String(), "hunter2") {
			t.Errorf("GET %s with only nodes/metrics: %d %q", p, w.Code, w.Body.String())
		}
	}
}

type authorizerFunc func(ctx context.Context, a Attributes) (bool, string, error)

func (f authorizerFunc) Authorize(ctx context.Context, a Attributes) (bool, string, error) {
	return f(ctx, a)
}
