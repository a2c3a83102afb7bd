package framework

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// CRIProxy sits between a node agent and the runtime: it forwards every CRI call
// (runtime and image services, unary and streaming) as raw bytes, and can hold one
// call so that a test stops the agent at an exact point of a pod's start, such as
// between an init container's CreateContainer and its StartContainer, or delay
// every call (SetDelay) to play a slow runtime. Give the agent Endpoint as its
// containerRuntimeEndpoint.
type CRIProxy struct {
	Endpoint string

	conn   *grpc.ClientConn
	server *grpc.Server
	// delay is how long each call waits before it is relayed (a time.Duration).
	delay atomic.Int64

	mu    sync.Mutex
	holds []*startHold
}

// startHold is a StartContainer to hold: that of the container CreateContainer
// makes for (namespace, pod, name).
type startHold struct {
	namespace, pod, name string
	id                   string        // the container's ID, once created
	held                 chan struct{} // closed when its StartContainer arrives
	once                 sync.Once
}

const (
	methodCreateContainer = "/runtime.v1.RuntimeService/CreateContainer"
	methodStartContainer  = "/runtime.v1.RuntimeService/StartContainer"
)

// StartCRIProxy serves a proxy to target (a unix:// CRI endpoint) on a socket in
// a fresh temp dir, until the test ends.
func StartCRIProxy(t testing.TB, target string) *CRIProxy {
	t.Helper()
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("CRI proxy: dialing %s: %v", target, err)
	}
	// Not t.TempDir(): long test names overflow the 108-byte sun_path limit.
	dir, err := os.MkdirTemp("", "criproxy")
	if err != nil {
		t.Fatalf("CRI proxy: %v", err)
	}
	sock := filepath.Join(dir, "cri.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatalf("CRI proxy: listening on %s: %v", sock, err)
	}
	p := &CRIProxy{Endpoint: "unix://" + sock, conn: conn}
	p.server = grpc.NewServer(grpc.ForceServerCodecV2(rawCodec{}), grpc.UnknownServiceHandler(p.forward))
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = p.server.Serve(lis)
	}()
	t.Cleanup(func() {
		p.server.Stop()
		<-served
		conn.Close()
		os.RemoveAll(dir)
	})
	return p
}

// HoldStart makes the proxy hold the StartContainer of the container that the
// agent creates next under the name container for the pod namespace/pod (by
// name, so a test can ask before the pod exists): the call never reaches the
// runtime, and fails once the agent gives up on it (or dies). The returned
// channel is closed when the call arrives.
func (p *CRIProxy) HoldStart(namespace, pod, container string) <-chan struct{} {
	h := &startHold{namespace: namespace, pod: pod, name: container, held: make(chan struct{})}
	p.mu.Lock()
	p.holds = append(p.holds, h)
	p.mu.Unlock()
	return h.held
}

// SetDelay makes every call that arrives from now on wait d before it is relayed
// to the runtime (0: none), as a slow runtime would answer it: calls wait side by
// side, not one after another; a streaming call waits once, before it opens. A
// caller that gives up while its call waits gets its context's error.
func (p *CRIProxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// created notes the ID of a container a hold waits for.
func (p *CRIProxy) created(req, resp []byte) {
	var in runtimeapi.CreateContainerRequest
	var out runtimeapi.CreateContainerResponse
	if proto.Unmarshal(req, &in) != nil || proto.Unmarshal(resp, &out) != nil {
		return
	}
	cfg := in.GetConfig()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, h := range p.holds {
		l := cfg.GetLabels()
		if h.id == "" && cfg.GetMetadata().GetName() == h.name && l[LabelPodNamespace] == h.namespace && l[LabelPodName] == h.pod {
			h.id = out.GetContainerId()
			return
		}
	}
}

// heldStart is the hold for a StartContainer request, if any.
func (p *CRIProxy) heldStart(req []byte) *startHold {
	var in runtimeapi.StartContainerRequest
	if proto.Unmarshal(req, &in) != nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, h := range p.holds {
		if h.id != "" && h.id == in.GetContainerId() {
			return h
		}
	}
	return nil
}

// forward relays one call, whatever its kind, message by message.
func (p *CRIProxy) forward(_ any, ss grpc.ServerStream) error {
	method, ok := grpc.MethodFromServerStream(ss)
	if !ok {
		return status.Error(codes.Internal, "CRI proxy: no method")
	}
	ctx := ss.Context()
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		ctx = metadata.NewOutgoingContext(ctx, md.Copy())
	}
	if d := time.Duration(p.delay.Load()); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return status.FromContextError(ctx.Err()).Err()
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cs, err := p.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method, grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		return err
	}
	var mu sync.Mutex
	var lastReq []byte
	sendErr := make(chan error, 1)
	go func() {
		for {
			var req []byte
			if err := ss.RecvMsg(&req); err != nil {
				if errors.Is(err, io.EOF) {
					sendErr <- cs.CloseSend()
					return
				}
				sendErr <- err
				return
			}
			if method == methodStartContainer {
				if h := p.heldStart(req); h != nil {
					h.once.Do(func() { close(h.held) })
					<-ctx.Done()
					sendErr <- status.Error(codes.Unavailable, "CRI proxy: StartContainer held by the test")
					cancel()
					return
				}
			}
			mu.Lock()
			lastReq = req
			mu.Unlock()
			if err := cs.SendMsg(&req); err != nil {
				sendErr <- err
				return
			}
		}
	}()
	for first := true; ; first = false {
		var resp []byte
		if err := cs.RecvMsg(&resp); err != nil {
			ss.SetTrailer(cs.Trailer())
			if errors.Is(err, io.EOF) {
				return nil
			}
			select {
			case e := <-sendErr:
				if e != nil && status.Code(e) == codes.Unavailable {
					return e
				}
			default:
			}
			return err
		}
		if first {
			if md, err := cs.Header(); err == nil {
				_ = ss.SendHeader(md)
			}
		}
		if method == methodCreateContainer {
			mu.Lock()
			req := lastReq
			mu.Unlock()
			p.created(req, resp)
		}
		if err := ss.SendMsg(&resp); err != nil {
			return fmt.Errorf("CRI proxy: answering %s: %w", method, err)
		}
	}
}

// rawCodec passes messages through as the bytes on the wire.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("CRI proxy: cannot marshal %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(*b)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("CRI proxy: cannot unmarshal into %T", v)
	}
	*b = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }
