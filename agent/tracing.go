package agent

import (
	"context"
	"fmt"
	"time"

	sdkresource "go.opentelemetry.io/otel/sdk/resource"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/tracing"
	tracingapi "k8s.io/component-base/tracing/api/v1"

	"github.com/nodelet/nodelet/certificate"
)

// serviceName is the OTel service.name of nodelet's spans: upstream's
// ("kubelet"), so that dashboards and queries written for the kubelet find
// them; the node is told by host.name.
const serviceName = "kubelet"

// tracerShutdownTimeout bounds the flush of the last spans on stop: a
// collector that is down must not hold the stop up (the exporter retries).
const tracerShutdownTimeout = 10 * time.Second

// newTracerProvider is upstream's provider for the tracing configuration
// (KubeletTracing is GA and locked on): an OTLP gRPC exporter to
// tc.endpoint (localhost:4317 when unset), insecure, batching, with a
// parent-based sampler at samplingRatePerMillion (unset or 0: a span is
// sampled only when its parent was). Nil tc: nil, nothing is traced and the
// CRI client gets no instrumentation, as upstream.
func newTracerProvider(ctx context.Context, tc *tracingapi.TracingConfiguration, hostname string) (tracing.TracerProvider, error) {
	if tc == nil {
		return nil, nil
	}
	tp, err := tracing.NewProvider(ctx, tc, nil, []sdkresource.Option{
		sdkresource.WithAttributes(semconv.ServiceName(serviceName), semconv.HostName(hostname)),
	})
	if err != nil {
		return nil, fmt.Errorf("setting up the tracer provider (tracing): %w", err)
	}
	return tp, nil
}

// shutdownTracer flushes the spans still batched and stops the exporter and
// its goroutines.
func shutdownTracer(tp tracing.TracerProvider) error {
	ctx, cancel := context.WithTimeout(context.Background(), tracerShutdownTimeout)
	defer cancel()
	if err := tp.Shutdown(ctx); err != nil {
		return fmt.Errorf("flushing and stopping the span exporter: %w", err)
	}
	return nil
}

// apiConfig is a fresh API client configuration from c whose requests are
// traced when tp is set, as upstream's: a client span each, with its W3C
// trace context sent to the API server.
func apiConfig(c *certificate.Client, tp trace.TracerProvider) *rest.Config {
	rc := c.RESTConfig()
	if tp != nil {
		rc.Wrap(tracing.WrapperFor(tp))
	}
	return rc
}
