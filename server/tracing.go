package server

import (
	"net/http"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	oteltrace "go.opentelemetry.io/otel/trace"
	"k8s.io/component-base/tracing"
)

// tracedRoutes makes each route's requests a server span named after its
// path ("/pods", "/containerLogs/{ns}/{pod}/{container}"), as upstream's
// otelrestful filter names them by route. It runs after authentication and
// authorization, as upstream's filter is installed after its auth filter. A
// public endpoint (the read-only port) starts its own trace, linked to the
// caller's, rather than joining an unauthenticated caller's. Nil tp: routes.
func tracedRoutes(routes []route, tp oteltrace.TracerProvider, public bool) []route {
	if tp == nil {
		return routes
	}
	opts := []otelhttp.Option{
		otelhttp.WithTracerProvider(tp),
		// Explicit, so that neither comes from OTel's globals (see cri's).
		otelhttp.WithPropagators(tracing.Propagators()),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
		// The route's path alone, as upstream's spans are named (otelhttp's
		// default puts the method first).
		otelhttp.WithSpanNameFormatter(func(operation string, _ *http.Request) string { return operation }),
	}
	if public {
		opts = append(opts, otelhttp.WithPublicEndpointFn(func(*http.Request) bool { return true }))
	}
	out := make([]route, len(routes))
	for i, rt := range routes {
		out[i] = route{pattern: rt.pattern, handler: otelhttp.NewHandler(rt.handler, routePath(rt.pattern), opts...)}
	}
	return out
}

// routePath is a ServeMux pattern without its method.
func routePath(pattern string) string {
	if _, path, ok := strings.Cut(pattern, " "); ok {
		return path
	}
	return pattern
}
