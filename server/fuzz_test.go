package server

import (
	"testing"
)

// FuzzRouteAuthorization sends a random method and raw request target (escapes and
// all) through the authenticated API over the server's own route table. Invariant
// (routeViolation): the request reaches no handler and is refused, or reaches exactly
// one after the authorizer was asked about exactly that route's upstream
// subresources; a caller granted only nodes/metrics or nodes/stats never reaches a
// pods or proxy handler. Seeds: testdata/fuzz/FuzzRouteAuthorization and below.
func FuzzRouteAuthorization(f *testing.F) {
	h, routes := tracingAPI(f)
	want := upstreamSubresources()
	for _, rt := range routes {
		f.Add("GET", concretePath(rt.pattern))
		f.Add("POST", concretePath(rt.pattern))
	}
	f.Fuzz(func(t *testing.T, method, target string) {
		if v := routeViolation(h, want, method, target); v != "" {
			t.Fatal(v)
		}
	})
}
