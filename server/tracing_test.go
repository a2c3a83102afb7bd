package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	oteltrace "go.opentelemetry.io/otel/trace"
	v1 "k8s.io/api/core/v1"
	"k8s.io/component-base/tracing"

	"github.com/nodelet/nodelet/internal/testsupport/spantest"
)

// TestRequestsAreTraced: with a tracer provider each request a route serves
// is a server span named after the route's path; on the authenticated port it
// joins the caller's trace, on the read-only port it starts its own, linked to
// the caller's (a public endpoint). A request no route serves (refused before
// any handler) has no span.
func TestRequestsAreTraced(t *testing.T) {
	tp, exp := spantest.New(t)
	s := newTestServer(t, Deps{TracerProvider: tp, Pods: noPods})
	caller, parent := tp.Tracer("test").Start(context.Background(), "caller")
	parent.End()
	request := func(h http.Handler, path string) {
		t.Helper()
		exp.Reset()
		r := httptest.NewRequest("GET", path, nil)
		tracing.Propagators().Inject(caller, propagation.HeaderCarrier(r.Header))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK && path == "/pods" {
			t.Fatalf("GET %s: %d %s", path, w.Code, w.Body.String())
		}
	}
	only := func(exp *tracetest.InMemoryExporter) tracetest.SpanStub {
		t.Helper()
		spans := exp.GetSpans()
		if len(spans) != 1 {
			t.Fatalf("%d spans, want 1: %v", len(spans), spans)
		}
		return spans[0]
	}

	request(s.Handler(), "/pods")
	got := only(exp)
	if got.Name != "/pods" || got.SpanKind != oteltrace.SpanKindServer {
		t.Errorf("span %q of kind %v, want /pods, server", got.Name, got.SpanKind)
	}
	if got.Parent.SpanID() != parent.SpanContext().SpanID() || !got.Parent.IsRemote() {
		t.Errorf("authenticated request's span has parent %v, want the caller's span %s", got.Parent, parent.SpanContext().SpanID())
	}

	request(s.ReadOnlyHandler(), "/pods")
	got = only(exp)
	if got.Parent.IsValid() {
		t.Errorf("read-only request's span has parent %v, want a new trace", got.Parent)
	}
	if len(got.Links) != 1 || got.Links[0].SpanContext.SpanID() != parent.SpanContext().SpanID() {
		t.Errorf("read-only request's span links %v, want the caller's span", got.Links)
	}

	request(s.Handler(), "/nowhere")
	if spans := exp.GetSpans(); len(spans) != 0 {
		t.Errorf("a request no route serves made spans %v", spans)
	}
}

func noPods() []*v1.Pod { return nil }
