// Package spantest records the spans a test makes, in memory (New) or as an
// OTLP collector would (StartOTLPReceiver). It imports testing, so only tests
// may import it.
package spantest

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// New returns a tracer provider that samples every span and records it, as
// it ends, in the exporter returned; both are shut down when the test ends.
func New(t testing.TB) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() {
		if err := tp.Shutdown(context.Background()); err != nil {
			t.Errorf("shutting the test tracer provider down: %v", err)
		}
	})
	return tp, exp
}
