package agent

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"k8s.io/utils/ptr"

	tracingapi "k8s.io/component-base/tracing/api/v1"

	"github.com/nodelet/nodelet/config"
)

// otlpReceiver is an in-process OTLP gRPC trace collector: it keeps every
// span it is sent, with its resource's attributes.
type otlpReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	addr string

	mu    sync.Mutex
	spans []receivedSpan
}

type receivedSpan struct {
	resource map[string]string
	span     *tracepb.Span
}

func startOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &otlpReceiver{addr: ln.Addr().String()}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, r)
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := srv.Serve(ln); err != nil {
			t.Errorf("OTLP receiver: %v", err)
		}
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-served
	})
	return r
}

func (r *otlpReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		res := stringAttrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, receivedSpan{resource: res, span: s})
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (r *otlpReceiver) received() []receivedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.spans)
}

func stringAttrs(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[kv.GetKey()] = kv.GetValue().GetStringValue()
	}
	return m
}

func tracingTo(r *otlpReceiver, ratePerMillion int32) func(*config.Options) {
	return func(opts *config.Options) {
		opts.Config.Tracing = &tracingapi.TracingConfiguration{Endpoint: ptr.To(r.addr), SamplingRatePerMillion: ptr.To(ratePerMillion)}
	}
}

// TestBuildRunStopTracing is TestBuildRunStop with tracing at every span
// sampled: the collector receives, from service "kubelet", a syncPod span of
// the static pod and the CRI RunPodSandbox span as its child, flushed on
// stop by the tracer provider's closer, which runs after the runtime
// client's (its last calls' spans are in) and leaves no goroutine.
func TestBuildRunStopTracing(t *testing.T) {
	recv := startOTLPReceiver(t)
	buildRunStop(t, tracingTo(recv, 1000000), "kubelet API ports", "logind D-Bus connection", "event broadcaster", "container runtime client", "tracer provider")

	spans := recv.received()
	syncs := map[string]*tracepb.Span{} // by span ID
	for _, s := range spans {
		if got := s.resource["service.name"]; got != "kubelet" {
			t.Fatalf("span %q has service.name %q, want kubelet", s.span.GetName(), got)
		}
		if s.resource["host.name"] != "node-1" {
			t.Errorf("span %q has host.name %q, want the node's name node-1", s.span.GetName(), s.resource["host.name"])
		}
		if s.span.GetName() != "syncPod" {
			continue
		}
		attrs := stringAttrs(s.span.GetAttributes())
		if attrs["k8s.pod.name"] != "web-node-1" || attrs["k8s.namespace.name"] != "default" || attrs["k8s.pod"] != "default/web-node-1" || attrs["k8s.pod.uid"] == "" {
			t.Errorf("syncPod span has attributes %v, want the static pod's", attrs)
		}
		syncs[string(s.span.GetSpanId())] = s.span
	}
	if len(syncs) == 0 {
		t.Fatalf("the collector received no syncPod span among %d spans: %v", len(spans), spanNamesOf(spans))
	}
	var child bool
	for _, s := range spans {
		if s.span.GetName() != "runtime.v1.RuntimeService/RunPodSandbox" {
			continue
		}
		parent, ok := syncs[string(s.span.GetParentSpanId())]
		if !ok {
			t.Errorf("the RunPodSandbox span's parent %x is no syncPod span", s.span.GetParentSpanId())
			continue
		}
		if string(parent.GetTraceId()) != string(s.span.GetTraceId()) {
			t.Errorf("the RunPodSandbox span is in trace %x, its syncPod parent in %x", s.span.GetTraceId(), parent.GetTraceId())
		}
		child = true
	}
	if !child {
		t.Errorf("the collector received no RunPodSandbox span: %v", spanNamesOf(spans))
	}
}

// TestBuildRunStopTracingWithAPIServer: with a kubeconfig, every API request
// is a span of its own that the collector receives, and the API server
// receives that span's W3C trace context, as upstream's API client does.
func TestBuildRunStopTracingWithAPIServer(t *testing.T) {
	recv := startOTLPReceiver(t)
	api := newFakeAPIServer(t)
	buildRunStop(t, func(opts *config.Options) {
		tracingTo(recv, 1000000)(opts)
		opts.Kubeconfig = api.kubeconfig(t)
		opts.Config.ContentType = "application/json"
		opts.Config.RotateCertificates = false
	}, "kubelet API ports", "logind D-Bus connection", "event broadcaster", "API client connections", "container runtime client", "tracer provider")

	byID := map[string]*tracepb.Span{}
	for _, s := range recv.received() {
		byID[fmt.Sprintf("%x", s.span.GetSpanId())] = s.span
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
	recv := startOTLPReceiver(t)
	buildRunStop(t, tracingTo(recv, 0), "kubelet API ports", "logind D-Bus connection", "event broadcaster", "container runtime client", "tracer provider")
	if spans := recv.received(); len(spans) != 0 {
		t.Errorf("at sampling rate 0 the collector received %d spans: %v", len(spans), spanNamesOf(spans))
	}
}

func spanNamesOf(spans []receivedSpan) []string {
	var names []string
	for _, s := range spans {
		names = append(names, s.span.GetName())
	}
	return names
}
