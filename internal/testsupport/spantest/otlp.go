package spantest

import (
	"context"
	"net"
	"slices"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
)

// OTLPReceiver is an in-process OTLP gRPC trace collector (insecure, on
// 127.0.0.1): it keeps every span it is sent, with its resource's attributes.
// A process under test exports to Addr as to any collector.
type OTLPReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	// Addr is host:port, the tracing endpoint to configure.
	Addr string

	mu    sync.Mutex
	spans []ReceivedSpan
}

// ReceivedSpan is one span and the attributes of the resource it came with
// (service.name, host.name, ...).
type ReceivedSpan struct {
	Resource map[string]string
	Span     *tracepb.Span
}

// StartOTLPReceiver listens on a free port of 127.0.0.1 until the test ends.
// Start it before what exports to it: the cleanups then stop the exporter
// first, so its last flush is received.
func StartOTLPReceiver(t testing.TB) *OTLPReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &OTLPReceiver{Addr: ln.Addr().String()}
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

// Export is the TraceService's one call: it keeps the spans.
func (r *OTLPReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		res := StringAttrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, ReceivedSpan{Resource: res, Span: s})
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// Spans is every span received so far, in the order received.
func (r *OTLPReceiver) Spans() []ReceivedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.spans)
}

// StringAttrs is the string-valued attributes (others read as "").
func StringAttrs(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[kv.GetKey()] = kv.GetValue().GetStringValue()
	}
	return m
}

// SpanNames lists the spans' names, for failure messages.
func SpanNames(spans []ReceivedSpan) []string {
	var names []string
	for _, s := range spans {
		names = append(names, s.Span.GetName())
	}
	return names
}
