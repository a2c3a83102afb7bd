package cri

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/nodelet/nodelet/internal/testsupport/fakecri"
	"github.com/nodelet/nodelet/internal/testsupport/spantest"
)

// TestTracerProviderSpansAndPropagates: with a tracer provider each CRI call
// is a client span, child of the caller's span, and the runtime receives that
// span's W3C trace context; without one the runtime receives none.
func TestTracerProviderSpansAndPropagates(t *testing.T) {
	tp, exp := spantest.New(t)
	f := fakecri.New(t)
	c := newTestClient(t, f, 0, WithTracerProvider(tp))

	ctx, parent := tp.Tracer("test").Start(context.Background(), "syncPod")
	if _, err := c.RunPodSandbox(ctx, sandboxConfig("web", "uid-1", false), ""); err != nil {
		t.Fatal(err)
	}
	parent.End()

	var call sdktrace.ReadOnlySpan
	for _, s := range exp.GetSpans().Snapshots() {
		if s.Name() == "runtime.v1.RuntimeService/RunPodSandbox" {
			call = s
		}
	}
	if call == nil {
		t.Fatalf("no span for RunPodSandbox among %v", spanNames(exp))
	}
	if got, want := call.Parent().SpanID(), parent.SpanContext().SpanID(); got != want {
		t.Errorf("RunPodSandbox span's parent is %s, want the caller's span %s", got, want)
	}
	if got, want := call.SpanContext().TraceID(), parent.SpanContext().TraceID(); got != want {
		t.Errorf("RunPodSandbox span is in trace %s, want %s", got, want)
	}
	want := "00-" + call.SpanContext().TraceID().String() + "-" + call.SpanContext().SpanID().String() + "-01"
	if got := f.TraceParents("RunPodSandbox"); len(got) != 1 || got[0] != want {
		t.Errorf("the runtime received traceparent %q, want [%s]", got, want)
	}

	plain := fakecri.New(t)
	pc := newTestClient(t, plain, 0)
	if _, err := pc.RunPodSandbox(ctx, sandboxConfig("web", "uid-2", false), ""); err != nil {
		t.Fatal(err)
	}
	if got := plain.TraceParents("RunPodSandbox"); len(got) != 0 {
		t.Errorf("a client without a tracer provider sent traceparent %q", got)
	}
}

func spanNames(exp *tracetest.InMemoryExporter) []string {
	var names []string
	for _, s := range exp.GetSpans().Snapshots() {
		names = append(names, s.Name())
	}
	return names
}
