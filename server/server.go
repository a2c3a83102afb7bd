// Package server is the kubelet API: HTTPS on port (10250) with x509/webhook
// authentication and webhook authorization (nodes/proxy, stats, log,
// metrics... as upstream maps paths to subresources), and the optional
// read-only port (10255). It serves /healthz, /pods, /metrics,
// /metrics/probes, /metrics/resource, /metrics/cadvisor (cAdvisor's
// container_* and machine_* series from the stats cache), /stats/summary,
// /configz, container logs from the CRI log files (/containerLogs), and /exec,
// /attach, /portForward and /run by proxying to the runtime's CRI streaming
// server.
package server

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	oteltrace "go.opentelemetry.io/otel/trace"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"
)

// Runtime is the part of CRI the API needs: finding containers and their log files,
// and the streaming calls.
type Runtime interface {
	ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error)
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
	ContainerStatus(ctx context.Context, containerID string, verbose bool) (*runtimeapi.ContainerStatusResponse, error)
	ExecSync(ctx context.Context, containerID string, cmd []string, timeout time.Duration) ([]byte, []byte, error)
	Exec(ctx context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error)
	Attach(ctx context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error)
	PortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error)
}

// SummaryProvider returns the node and pod stats (/stats/summary,
// /metrics/resource): the agent's is the last background measurement
// (stats.Cache), shared by every reader, so handlers must not change it.
type SummaryProvider interface {
	Summary(ctx context.Context) (*statsv1alpha1.Summary, error)
}

// HealthChecker says whether one part of the node agent is healthy.
type HealthChecker interface{ Healthy() error }

// HealthCheck is a named /healthz check.
type HealthCheck struct {
	Name    string
	Checker HealthChecker
}

// Config is the server's configuration (from the KubeletConfiguration).
type Config struct {
	NodeName string
	// Address and Port are the authenticated HTTPS endpoint; Port 0 disables it.
	Address string
	Port    int32
	// ReadOnlyPort, when non-zero, serves the read-only endpoints over plain HTTP
	// without authentication, on Address.
	ReadOnlyPort int32
	// GetCertificate returns the serving certificate (static, self-signed or rotated).
	GetCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	CipherSuites   []uint16
	MinVersion     uint16
	// CurvePreferences are the key exchanges offered (tlsCurvePreferences); nil is
	// Go's defaults.
	CurvePreferences []tls.CurveID
	// EnableDebuggingHandlers serves logs, exec, attach, portForward, run and configz
	// (default on upstream).
	EnableDebuggingHandlers bool
	// EnableProfilingHandler serves /debug/pprof/ and EnableContentionProfiling turns
	// on the block profile it shows; EnableDebugFlagsHandler serves PUT
	// /debug/flags/v (klog's verbosity); EnableSystemLogHandler serves SystemLogDir
	// (default /var/log) under /logs/. As upstream, each needs
	// EnableDebuggingHandlers too, and none is on the read-only port.
	EnableProfilingHandler    bool
	EnableContentionProfiling bool
	EnableDebugFlagsHandler   bool
	EnableSystemLogHandler    bool
	SystemLogDir              string
	// EnableSystemLogQuery answers /logs/?query=<service>|<file> (upstream's
	// NodeLogQuery) from the journal through JournalctlPath (default "journalctl")
	// or from the log files.
	EnableSystemLogQuery bool
	JournalctlPath       string
	// Configz is what /configz shows under "kubeletconfig" (the effective configuration).
	Configz any
	// ShowHiddenMetrics serves the metrics upstream hides in this version (deprecated
	// before the previous minor version), as showHiddenMetricsForVersion does upstream.
	ShowHiddenMetrics bool
}

// Deps are the parts the handlers read.
type Deps struct {
	Authenticator Authenticator
	Authorizer    Authorizer
	Runtime       Runtime
	// Pods returns the pods this node runs (for /pods).
	Pods    func() []*v1.Pod
	Health  []HealthCheck
	Metrics prometheus.Gatherer
	// ProbeMetrics, if set, is served on /metrics/probes (prober_probe_total, ...).
	ProbeMetrics prometheus.Gatherer
	// Summary may be nil: /stats/summary and /metrics/resource then answer 503.
	Summary SummaryProvider
	// Cadvisor may be nil: /metrics/cadvisor then answers 503. Machine, if set,
	// gives its machine_* series.
	Cadvisor CadvisorSource
	Machine  *MachineInfo
	Clock    clock.WithTicker
	// Registerer, if set, gets the kubelet_http_* request metrics.
	Registerer prometheus.Registerer
	// TracerProvider, if set, traces each request a route serves.
	TracerProvider oteltrace.TracerProvider
}

// Server is the kubelet API.
type Server struct {
	cfg  Config
	deps Deps
	// logPoll is how often a followed log is checked for more.
	logPoll time.Duration
	metrics *httpMetrics
	// logQueries holds one token per node log query running journalctl.
	logQueries chan struct{}
}

// New returns a server; Listen opens its ports.
func New(cfg Config, deps Deps) *Server {
	if deps.Clock == nil {
		deps.Clock = clock.RealClock{}
	}
	if cfg.SystemLogDir == "" {
		cfg.SystemLogDir = DefaultSystemLogDir
	}
	if cfg.JournalctlPath == "" {
		cfg.JournalctlPath = "journalctl"
	}
	return &Server{cfg: cfg, deps: deps, logPoll: 250 * time.Millisecond, metrics: newHTTPMetrics(deps.Registerer),
		logQueries: make(chan struct{}, maxConcurrentLogQueries)}
}

// Handler is the authenticated API: every request is authenticated and authorized
// before it reaches a handler.
func (s *Server) Handler() http.Handler {
	if s.cfg.EnableDebuggingHandlers && s.cfg.EnableProfilingHandler && s.cfg.EnableContentionProfiling {
		enableContentionProfiling()
	}
	logf := func(msg string, kv ...any) { klog.V(2).InfoS(msg, kv...) }
	routes := tracedRoutes(s.routes(s.cfg.EnableDebuggingHandlers), s.deps.TracerProvider, false)
	return s.metrics.instrument(newAPIHandler(routes, s.cfg.NodeName, s.deps.Authenticator, s.deps.Authorizer, logf), "readwrite")
}

// ReadOnlyHandler is the read-only port's API: no authentication, read-only endpoints.
func (s *Server) ReadOnlyHandler() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range tracedRoutes(s.routes(false), s.deps.TracerProvider, true) {
		mux.Handle(rt.pattern, rt.handler)
	}
	return s.metrics.instrument(mux, "readonly")
}

// Listeners are the kubelet API's open ports (made by Listen), served by Serve.
type Listeners struct {
	ports []port

	// mu guards closed; a request handler counts itself in inFlight only while the
	// ports are open, so Serve's final Wait never races an Add.
	mu       sync.RWMutex
	closed   bool
	inFlight sync.WaitGroup
}

// port is one open port and its server.
type port struct {
	what, addr string
	ln         net.Listener
	srv        *http.Server
	serve      func(*http.Server, net.Listener) error
}

// Listen opens the configured ports, so that a port in use is an error at start-up.
// Nothing is served until Serve; Close releases the ports of a start that fails first.
// Nil (and no error) when both ports are 0.
func (s *Server) Listen(ctx context.Context) (*Listeners, error) {
	if s.cfg.Port == 0 && s.cfg.ReadOnlyPort == 0 {
		return nil, nil
	}
	l := &Listeners{}
	if s.cfg.Port != 0 {
		addr := net.JoinHostPort(s.cfg.Address, fmt.Sprint(s.cfg.Port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("listening on the kubelet API address %s: %w", addr, err)
		}
		tc := &tls.Config{
			GetCertificate: s.cfg.GetCertificate,
			// Client certificates are verified by the x509 authenticator, so a request
			// without one (or with a foreign one) can still authenticate with a token.
			ClientAuth:       tls.RequestClientCert,
			CipherSuites:     s.cfg.CipherSuites,
			MinVersion:       s.cfg.MinVersion,
			CurvePreferences: s.cfg.CurvePreferences,
		}
		if tc.MinVersion == 0 {
			tc.MinVersion = tls.VersionTLS12
		}
		srv := newHTTPServer(l.track(s.Handler()))
		srv.TLSConfig = tc
		// ServeTLS (not Serve on a TLS listener) sets up HTTP/2 next to HTTP/1.1.
		l.ports = append(l.ports, port{what: "the kubelet API", addr: addr, ln: ln, srv: srv,
			serve: func(srv *http.Server, ln net.Listener) error { return srv.ServeTLS(ln, "", "") }})
	}
	if s.cfg.ReadOnlyPort != 0 {
		addr := net.JoinHostPort(s.cfg.Address, fmt.Sprint(s.cfg.ReadOnlyPort))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			_ = l.Close()
			return nil, fmt.Errorf("listening on the read-only port %s: %w", addr, err)
		}
		l.ports = append(l.ports, port{what: "the read-only kubelet API", addr: addr, ln: ln, srv: newHTTPServer(l.track(s.ReadOnlyHandler())),
			serve: (*http.Server).Serve})
	}
	klog.FromContext(ctx).V(2).Info("Kubelet API ports open", "ports", len(l.ports))
	return l, nil
}

// track counts h's requests in flight, and refuses those that arrive once the
// ports are closing.
func (l *Listeners) track(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.RLock()
		if l.closed {
			l.mu.RUnlock()
			http.Error(w, "nodelet is stopping", http.StatusServiceUnavailable)
			return
		}
		l.inFlight.Add(1)
		l.mu.RUnlock()
		defer l.inFlight.Done()
		h.ServeHTTP(w, r)
	})
}

// Serve serves the ports until ctx ends, then closes them and returns once every
// request handler has returned. Every request's context ends with ctx, so streams
// (logs that follow, exec, attach, port-forward) end too: nothing uses the runtime
// or the stats provider once Serve returned.
func (l *Listeners) Serve(ctx context.Context) {
	logger := klog.FromContext(ctx)
	var wg sync.WaitGroup
	for _, p := range l.ports {
		p.srv.BaseContext = func(net.Listener) context.Context { return ctx }
		wg.Go(func() {
			logger.Info("Serving "+p.what, "address", p.addr)
			if err := p.serve(p.srv, p.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error(err, "Serving "+p.what, "address", p.addr)
			}
		})
	}
	<-ctx.Done()
	_ = l.Close()
	wg.Wait()
	// Hijacked connections (streams) are not the servers' any more: wait for their handlers.
	l.inFlight.Wait()
}

// Close closes the ports (and the servers' connections) and refuses requests still
// arriving. Serve calls it; call it for ports that will never be served.
func (l *Listeners) Close() error {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	var errs []error
	for _, p := range l.ports {
		errs = append(errs, p.srv.Close())
		// A server that never served does not own its listener yet.
		if err := p.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// newHTTPServer has upstream's limits: streams and follows may last hours.
func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 30 * time.Second,
		ReadTimeout:       4 * time.Hour,
		WriteTimeout:      4 * time.Hour,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    1 << 20,
	}
}

// ---------------------------------------------------------------- handlers

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	var lines []string
	failed := false
	lines = append(lines, "[+]ping ok")
	for _, c := range s.deps.Health {
		if err := c.Checker.Healthy(); err != nil {
			failed = true
			lines = append(lines, fmt.Sprintf("[-]%s failed: %v", c.Name, err))
		} else {
			lines = append(lines, fmt.Sprintf("[+]%s ok", c.Name))
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if failed {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = fmt.Fprintf(w, "%s\nhealthz check failed\n", strings.Join(lines, "\n"))
		return
	}
	if r.URL.Query().Has("verbose") {
		_, _ = fmt.Fprintf(w, "%s\nhealthz check passed\n", strings.Join(lines, "\n"))
		return
	}
	_, _ = w.Write([]byte("ok"))
}

func (s *Server) pods(w http.ResponseWriter, _ *http.Request) {
	list := v1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}, Items: []v1.Pod{}}
	if s.deps.Pods != nil {
		for _, p := range s.deps.Pods() {
			list.Items = append(list.Items, *p)
		}
	}
	sort.Slice(list.Items, func(i, j int) bool {
		a, b := list.Items[i], list.Items[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	writeJSON(w, list)
}

func writeJSON(w http.ResponseWriter, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		http.Error(w, fmt.Sprintf("encoding the response: %v", err), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(data)
}

const noStatsMessage = "stats are not available: this node agent has no stats provider"

func (s *Server) statsSummary(w http.ResponseWriter, r *http.Request) {
	if s.deps.Summary == nil {
		http.Error(w, noStatsMessage, http.StatusServiceUnavailable)
		return
	}
	sum, err := s.deps.Summary.Summary(r.Context())
	if err != nil {
		http.Error(w, fmt.Sprintf("failed to get the stats summary: %v", err), http.StatusInternalServerError)
		return
	}
	if r.URL.Query().Get("only_cpu_and_memory") == "true" {
		sum = cpuAndMemoryOnly(sum)
	}
	writeJSON(w, sum)
}

// cpuAndMemoryOnly keeps what upstream's only_cpu_and_memory=true keeps.
func cpuAndMemoryOnly(in *statsv1alpha1.Summary) *statsv1alpha1.Summary {
	out := &statsv1alpha1.Summary{Node: statsv1alpha1.NodeStats{
		NodeName: in.Node.NodeName, StartTime: in.Node.StartTime, CPU: in.Node.CPU, Memory: in.Node.Memory,
	}}
	for _, sc := range in.Node.SystemContainers {
		out.Node.SystemContainers = append(out.Node.SystemContainers, statsv1alpha1.ContainerStats{Name: sc.Name, StartTime: sc.StartTime, CPU: sc.CPU, Memory: sc.Memory})
	}
	for _, p := range in.Pods {
		op := statsv1alpha1.PodStats{PodRef: p.PodRef, StartTime: p.StartTime, CPU: p.CPU, Memory: p.Memory}
		for _, c := range p.Containers {
			op.Containers = append(op.Containers, statsv1alpha1.ContainerStats{Name: c.Name, StartTime: c.StartTime, CPU: c.CPU, Memory: c.Memory})
		}
		out.Pods = append(out.Pods, op)
	}
	return out
}
