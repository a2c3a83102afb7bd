package agent

import (
	"fmt"
	"strings"
	"testing"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"k8s.io/utils/ptr"

	tracingapi "k8s.io/component-base/tracing/api/v1"

	"github.com/nodelet/nodelet/config"
	"github.com/nodelet/nodelet/internal/testsupport/spantest"
)

func tracingTo(r *spantest.OTLPReceiver, ratePerMillion int32) func(*config.Options) {
	return func(opts *config.Options) {
		opts.Config.Tracing = &tracingapi.TracingConfiguration{Endpoint: ptr.To(r.Addr), SamplingRatePerMillion: ptr.To(ratePerMillion)}
	}
}

// TestBuildRunStopTracing is TestBuildRunStop with tracing at every span
// sampled: the collector receives, from service "kubelet", a syncPod span of
// the static pod and the CRI RunPodSandbox span as its child, flushed on
// stop by the tracer provider's closer, which runs after the runtime
// client's (its last calls' spans are in) and leaves no goroutine.
func TestBuildRunStopTracing(t *testing.T) {
	recv := spantest.StartOTLPReceiver(t)
	buildRunStop(t, tracingTo(recv, 1000000), "kubelet API ports", "logind D-Bus connection", "DRA driver connections", "event broadcaster", "container runtime client", "tracer provider")

	spans := recv.Spans()
	syncs := map[string]*tracepb.Span{} // by span ID
	for _, s := range spans {
		if got := s.Resource["service.name"]; got != "kubelet" {
			t.Fatalf("span %q has service.name %q, want kubelet", s.Span.GetName(), got)
		}
		if s.Resource["host.name"] != "node-1" {
			t.Errorf("span %q has host.name %q, want the node's name node-1", s.Span.GetName(), s.Resource["host.name"])
		}
		if s.Span.GetName() != "syncPod" {
			continue
		}
		attrs := spantest.StringAttrs(s.Span.GetAttributes())
		if attrs["k8s.pod.name"] != "web-node-1" || attrs["k8s.namespace.name"] != "default" || attrs["k8s.pod"] != "default/web-node-1" || attrs["k8s.pod.uid"] == "" {
			t.Errorf("syncPod span has attributes %v, want the static pod's", attrs)
		}
		syncs[string(s.Span.GetSpanId())] = s.Span
	}
	if len(syncs) == 0 {
		t.Fatalf("the collector received no syncPod span among %d spans: %v", len(spans), spantest.SpanNames(spans))
	}
	var child bool
	for _, s := range spans {
		if s.Span.GetName() != "runtime.v1.RuntimeService/RunPodSandbox" {
			continue
		}
		parent, ok := syncs[string(s.Span.GetParentSpanId())]
		if !ok {
			t.Errorf("the RunPodSandbox span's parent %x is no syncPod span", s.Span.GetParentSpanId())
			continue
		}
		if string(parent.GetTraceId()) != string(s.Span.GetTraceId()) {
			t.Errorf("the RunPodSandbox span is in trace %x, its syncPod parent in %x", s.Span.GetTraceId(), parent.GetTraceId())
		}
		child = true
	}
	if !child {
		t.Errorf("the collector received no RunPodSandbox span: %v", spantest.SpanNames(spans))
	}
}

// TestBuildRunStopTracingWithAPIServer: with a kubeconfig, every API request
// is a span of its own that the collector receives, and the API server
// receives that span's W3C trace context, as upstream's API client does.
func TestBuildRunStopTracingWithAPIServer(t *testing.T) {
	recv := spantest.StartOTLPReceiver(t)
	api := newFakeAPIServer(t)
	buildRunStop(t, func(opts *config.Options) {
		tracingTo(recv, 1000000)(opts)
		opts.Kubeconfig = api.kubeconfig(t)
		opts.Config.ContentType = "application/json"
		opts.Config.RotateCertificates = false
	}, "kubelet API ports", "logind D-Bus connection", "DRA driver connections", "event broadcaster", "API client connections", "container runtime client", "tracer provider")

	byID := map[string]*tracepb.Span{}
	for _, s := range recv.Spans() {
		byID[fmt.Sprintf("%x", s.Span.GetSpanId())] = s.Span
	}
	traced := api.tracedRequests()
	if len(traced) == 0 {
		t.Fatalf("none of the %d API requests carried a traceparent", api.requests())
	}
	for _, tp := range traced {
		f := strings.Split(tp, "-") // version-trace-span-flags
		if len(f) != 4 || f[3] != "01" {
			t.Errorf("API request traceparent %q is not a sampled W3C trace context", tp)
			continue
		}
		s, ok := byID[f[2]]
		if !ok {
			t.Errorf("the collector has no span %s that the API request with traceparent %q was sent under", f[2], tp)
			continue
		}
		if got := fmt.Sprintf("%x", s.GetTraceId()); got != f[1] {
			t.Errorf("span %s is in trace %s, the request's traceparent says %s", f[2], got, f[1])
		}
		if s.GetKind() != tracepb.Span_SPAN_KIND_CLIENT {
			t.Errorf("span %q of an API request is a %v, want a client span", s.GetName(), s.GetKind())
		}
	}
}

// TestBuildRunStopTracingSampledNone: at samplingRatePerMillion 0 no span
// has a sampled parent, so none is sampled and the collector receives none.
func TestBuildRunStopTracingSampledNone(t *testing.T) {
	recv := spantest.StartOTLPReceiver(t)
	buildRunStop(t, tracingTo(recv, 0), "kubelet API ports", "logind D-Bus connection", "DRA driver connections", "event broadcaster", "container runtime client", "tracer provider")
	if spans := recv.Spans(); len(spans) != 0 {
		t.Errorf("at sampling rate 0 the collector received %d spans: %v", len(spans), spantest.SpanNames(spans))
	}
}
