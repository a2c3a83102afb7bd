// Package prober runs container probes (startup, liveness, readiness: exec
// through CRI ExecSync, httpGet, tcpSocket, grpc) and lifecycle hooks
// (postStart, preStop; RunHook) with the upstream kubelet's semantics: one
// worker per (pod, container, probe type) with start-up jitter, thresholds,
// initial results, and result caches whose changes reach the sync loop on
// their own channels.
//
// A container the API shows running and ready since before this nodelet
// started keeps Ready until its readiness probe decides (the pure
// CarriedReady), so a restart of nodelet does not flap running pods.
package prober

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	grpcstatus "google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Result is a probe's verdict.
type Result int

const (
	// Unknown means no verdict yet (or the probe could not run).
	Unknown Result = iota
	// Success means the container passed.
	Success
	// Failure means the container failed.
	Failure
	// Warning is a Success the user should hear about (an HTTP probe that
	// ended on a redirect). Only Handler returns it: workers record a
	// ProbeWarning event and count it as Success, as upstream does.
	Warning
)

func (r Result) String() string {
	switch r {
	case Success:
		return "success"
	case Failure:
		return "failure"
	case Warning:
		return "warning"
	default:
		return "unknown"
	}
}

// Execer runs a command in a container (CRI ExecSync). A non-zero exit must be
// returned as an error with an ExitStatus() int method (cri.ExitError).
type Execer interface {
	ExecSync(ctx context.Context, containerID string, cmd []string, timeout time.Duration) (stdout, stderr []byte, err error)
}

// maxRespBody is how much of an HTTP probe's body is read (10 KiB, as upstream).
const maxRespBody = 10 * 1024

// userAgent is what probes send, with the Kubernetes minor nodelet implements.
const userAgent = "kube-probe/1.37"

// Handler runs the actions probes and hooks share.
type Handler struct {
	exec Execer
	http *http.Client
	// dialer is used for tcpSocket probes.
	dialer net.Dialer
}

// NewHandler returns a Handler running exec actions through exec.
func NewHandler(exec Execer) *Handler {
	tr := &http.Transport{
		// Probes do not verify serving certificates and never reuse connections,
		// so a probe per second does not keep a socket open per container.
		TLSClientConfig:    &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // upstream probes skip verification
		DisableKeepAlives:  true,
		DisableCompression: true,
		Proxy:              nil,
	}
	return &Handler{exec: exec, http: &http.Client{Transport: tr, CheckRedirect: sameHostRedirects}}
}

// sameHostRedirects follows redirects to the probed host only, as upstream:
// a redirect elsewhere is not followed, its 3xx response is the answer (a
// Warning), and the 11th redirect on the same host is an error.
func sameHostRedirects(req *http.Request, via []*http.Request) error {
	if req.URL.Hostname() != via[0].URL.Hostname() {
		return http.ErrUseLastResponse
	}
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	return nil
}

// Target says where network actions go and how names resolve.
type Target struct {
	// PodIP is the default host for httpGet, tcpSocket and grpc actions.
	PodIP string
	// Container resolves named ports.
	Container *v1.Container
	// ContainerID is the CRI ID for exec actions.
	ContainerID string
}

// Exec runs cmd in the container. Exit 0 is Success; another exit code is
// Failure with the output; a timeout is Failure; anything else is an error.
func (h *Handler) Exec(ctx context.Context, t Target, cmd []string, timeout time.Duration) (Result, string, error) {
	stdout, stderr, err := h.exec.ExecSync(ctx, t.ContainerID, cmd, timeout)
	out := string(stdout) + string(stderr)
	if err == nil {
		return Success, out, nil
	}
	var exit interface{ ExitStatus() int }
	if errors.As(err, &exit) {
		return Failure, out, nil
	}
	if errors.Is(err, context.DeadlineExceeded) || grpcstatus.Code(err) == codes.DeadlineExceeded {
		return Failure, fmt.Sprintf("command %q timed out", strings.Join(cmd, " ")), nil
	}
	return Unknown, "", err
}

// HTTPGet requests the action's URL. 2xx is Success; a 3xx left unfollowed (a
// redirect to another host) is Warning with upstream's "Probe terminated
// redirects" output; anything else is Failure. At most 10 KiB of the body is read.
func (h *Handler) HTTPGet(ctx context.Context, t Target, a *v1.HTTPGetAction, timeout time.Duration) (Result, string, error) {
	req, err := newHTTPRequest(ctx, t, a)
	if err != nil {
		return Unknown, "", err
	}
	if timeout > 0 {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		req = req.WithContext(cctx)
	}
	resp, err := h.http.Do(req)
	if err != nil {
		// Connection refused, timeouts, resets, too many redirects: the container is not serving.
		return Failure, err.Error(), nil
	}
	defer resp.Body.Close()
	// A longer body is cut, not an error: the status code decides.
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxRespBody))
	if resp.StatusCode >= http.StatusMultipleChoices && resp.StatusCode < http.StatusBadRequest {
		return Warning, "Probe terminated redirects, Response body: " + string(body), nil
	}
	if resp.StatusCode >= http.StatusOK && resp.StatusCode < http.StatusBadRequest {
		return Success, string(body), nil
	}
	return Failure, fmt.Sprintf("HTTP probe failed with statuscode: %d", resp.StatusCode), nil
}

func newHTTPRequest(ctx context.Context, t Target, a *v1.HTTPGetAction) (*http.Request, error) {
	port, err := resolvePort(a.Port, t.Container)
	if err != nil {
		return nil, err
	}
	host := a.Host
	if host == "" {
		host = t.PodIP
	}
	scheme := strings.ToLower(string(a.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	path := a.Path
	if path != "" && !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	u, err := url.Parse(fmt.Sprintf("%s://%s%s", scheme, net.JoinHostPort(host, strconv.Itoa(port)), path))
	if err != nil {
		return nil, fmt.Errorf("building probe URL: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("building probe request: %w", err)
	}
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set("Accept", "*/*")
	for _, hd := range a.HTTPHeaders {
		if strings.EqualFold(hd.Name, "Host") {
			req.Host = hd.Value
			continue
		}
		req.Header.Del(hd.Name)
	}
	for _, hd := range a.HTTPHeaders {
		if !strings.EqualFold(hd.Name, "Host") {
			req.Header.Add(hd.Name, hd.Value)
		}
	}
	return req, nil
}

// TCP opens and closes a connection: connecting is Success.
func (h *Handler) TCP(ctx context.Context, t Target, a *v1.TCPSocketAction, timeout time.Duration) (Result, string, error) {
	port, err := resolvePort(a.Port, t.Container)
	if err != nil {
		return Unknown, "", err
	}
	host := a.Host
	if host == "" {
		host = t.PodIP
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	conn, err := h.dialer.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return Failure, err.Error(), nil
	}
	_ = conn.Close()
	return Success, "", nil
}

// GRPC asks the grpc.health.v1 service; SERVING is Success.
func (h *Handler) GRPC(ctx context.Context, t Target, a *v1.GRPCAction, timeout time.Duration) (Result, string, error) {
	addr := net.JoinHostPort(t.PodIP, strconv.Itoa(int(a.Port)))
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithUserAgent(userAgent))
	if err != nil {
		return Failure, fmt.Sprintf("failed to connect service %q: %v", addr, err), nil
	}
	defer conn.Close()
	service := ""
	if a.Service != nil {
		service = *a.Service
	}
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		switch grpcstatus.Code(err) {
		case codes.Unimplemented:
			return Failure, fmt.Sprintf("this server does not implement the grpc health protocol (grpc.health.v1.Health): %v", err), nil
		case codes.DeadlineExceeded:
			return Failure, fmt.Sprintf("timeout: health rpc did not complete within %v", timeout), nil
		default:
			return Failure, fmt.Sprintf("health rpc probe failed: %v", err), nil
		}
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return Failure, fmt.Sprintf("service unhealthy (responded with %q)", resp.GetStatus()), nil
	}
	return Success, "", nil
}

// resolvePort turns a port number or a container port name into a number.
func resolvePort(p intstr.IntOrString, c *v1.Container) (int, error) {
	if p.Type == intstr.Int {
		if p.IntVal <= 0 || p.IntVal > 65535 {
			return 0, fmt.Errorf("invalid port number: %d", p.IntVal)
		}
		return int(p.IntVal), nil
	}
	if c != nil {
		for _, cp := range c.Ports {
			if cp.Name == p.StrVal {
				return int(cp.ContainerPort), nil
			}
		}
	}
	if n, err := strconv.Atoi(p.StrVal); err == nil && n > 0 && n <= 65535 {
		return n, nil
	}
	return 0, fmt.Errorf("couldn't find port: %v in container %s", p.StrVal, containerName(c))
}

func containerName(c *v1.Container) string {
	if c == nil {
		return ""
	}
	return c.Name
}

// Probe runs one probe's action.
func (h *Handler) Probe(ctx context.Context, t Target, p *v1.Probe) (Result, string, error) {
	timeout := time.Duration(p.TimeoutSeconds) * time.Second
	if timeout <= 0 {
		timeout = time.Second
	}
	switch {
	case p.Exec != nil:
		return h.Exec(ctx, t, p.Exec.Command, timeout)
	case p.HTTPGet != nil:
		return h.HTTPGet(ctx, t, p.HTTPGet, timeout)
	case p.TCPSocket != nil:
		return h.TCP(ctx, t, p.TCPSocket, timeout)
	case p.GRPC != nil:
		return h.GRPC(ctx, t, p.GRPC, timeout)
	}
	return Unknown, "", errors.New("missing probe handler")
}
