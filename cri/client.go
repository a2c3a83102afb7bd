// Package cri is nodelet's client for the Container Runtime Interface (CRI v1)
// over a unix socket, plus an in-memory CRI server (FakeRuntime) for tests.
package cri

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"k8s.io/component-base/tracing"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

const (
	// CRIVersion is the only CRI API version nodelet speaks.
	CRIVersion = "v1"

	// maxMsgSize is the largest gRPC message nodelet accepts from the runtime;
	// ListContainers on a busy node can exceed gRPC's 4 MiB default.
	maxMsgSize = 16 * 1024 * 1024

	// DefaultTimeout is runtimeRequestTimeout's upstream default.
	DefaultTimeout = 2 * time.Minute
)

var (
	_ criapi.RuntimeService      = (*Client)(nil)
	_ criapi.ImageManagerService = (*Client)(nil)
)

// Option configures a Client.
type Option func(*clientOptions)

type clientOptions struct {
	registerer prometheus.Registerer
	tracer     trace.TracerProvider
}

// WithMetrics registers the kubelet_runtime_operations_* metrics on reg.
func WithMetrics(reg prometheus.Registerer) Option {
	return func(o *clientOptions) { o.registerer = reg }
}

// WithTracerProvider makes a span of every CRI call, a child of the span in
// the call's context, and sends the trace context to the runtime in the
// call's metadata (W3C traceparent and baggage), as upstream's CRI client
// does when tracing is on. Without it no handler is installed: upstream
// adds the instrumentation only when tracing is enabled.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *clientOptions) { o.tracer = tp }
}

// Client talks CRI v1 to a container runtime. It is safe for concurrent use.
type Client struct {
	runtimeEndpoint string
	imageEndpoint   string
	timeout         time.Duration

	runtimeConn *grpc.ClientConn
	imageConn   *grpc.ClientConn // may be runtimeConn
	runtime     runtimeapi.RuntimeServiceClient
	image       runtimeapi.ImageServiceClient

	metrics *clientMetrics // nil when metrics are off
}

// New connects to the runtime (and image) service and checks that the runtime
// answers CRI v1. imageEndpoint "" means the runtime endpoint. timeout is the
// runtimeRequestTimeout applied to most calls (0 means DefaultTimeout).
func New(ctx context.Context, runtimeEndpoint, imageEndpoint string, timeout time.Duration, opts ...Option) (*Client, error) {
	var o clientOptions
	for _, opt := range opts {
		opt(&o)
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if imageEndpoint == "" {
		imageEndpoint = runtimeEndpoint
	}
	c := &Client{runtimeEndpoint: runtimeEndpoint, imageEndpoint: imageEndpoint, timeout: timeout}
	conn, err := dial(runtimeEndpoint, o.tracer)
	if err != nil {
		return nil, err
	}
	c.runtimeConn, c.imageConn = conn, conn
	if imageEndpoint != runtimeEndpoint {
		if c.imageConn, err = dial(imageEndpoint, o.tracer); err != nil {
			_ = conn.Close()
			return nil, err
		}
	}
	c.runtime = runtimeapi.NewRuntimeServiceClient(c.runtimeConn)
	c.image = runtimeapi.NewImageServiceClient(c.imageConn)

	if err := c.validateRuntime(ctx); err != nil {
		_ = c.Close(ctx)
		return nil, err
	}
	if imageEndpoint != runtimeEndpoint {
		if err := c.validateImage(ctx); err != nil {
			_ = c.Close(ctx)
			return nil, err
		}
	}
	// Metrics are registered only once the runtime answered, so a caller may retry
	// New with the same registry while the runtime starts.
	if o.registerer != nil {
		m, err := newClientMetrics(o.registerer)
		if err != nil {
			_ = c.Close(ctx)
			return nil, fmt.Errorf("registering CRI client metrics: %w", err)
		}
		c.metrics = m
	}
	return c, nil
}

// socketPath turns "unix:///run/x.sock" or "/run/x.sock" into "/run/x.sock".
func socketPath(endpoint string) (string, error) {
	if endpoint == "" {
		return "", errors.New("container runtime endpoint is empty")
	}
	if !strings.Contains(endpoint, "://") {
		if !filepath.IsAbs(endpoint) {
			return "", fmt.Errorf("container runtime endpoint %q: want unix:///path or an absolute socket path", endpoint)
		}
		return endpoint, nil
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", fmt.Errorf("parsing container runtime endpoint %q: %w", endpoint, err)
	}
	if u.Scheme != "unix" {
		return "", fmt.Errorf("container runtime endpoint %q: only unix sockets are supported, not %q", endpoint, u.Scheme)
	}
	p := u.Path
	if p == "" { // unix://relative/path parses the first element as host
		p = u.Host + u.Path
	} else if u.Host != "" {
		p = u.Host + u.Path
	}
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("container runtime endpoint %q: socket path must be absolute", endpoint)
	}
	return p, nil
}

func dial(endpoint string, tp trace.TracerProvider) (*grpc.ClientConn, error) {
	path, err := socketPath(endpoint)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("container runtime socket %s (endpoint %s) is not usable: is containerd running? %w", path, endpoint, err)
	}
	var traced []grpc.DialOption
	if tp != nil {
		traced = append(traced, grpc.WithStatsHandler(otelgrpc.NewClientHandler(
			otelgrpc.WithTracerProvider(tp),
			// Explicit, so that neither comes from OTel's globals: the
			// global propagator is a no-op and nodelet's metrics are
			// Prometheus's, not OTel's. W3C trace context and baggage,
			// as upstream.
			otelgrpc.WithPropagators(tracing.Propagators()),
			otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
			otelgrpc.WithMessageEvents(otelgrpc.ReceivedEvents, otelgrpc.SentEvents),
		)))
	}
	conn, err := grpc.NewClient("unix://"+path, append(traced,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithAuthority("localhost"),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsgSize)),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay:  100 * time.Millisecond,
				Multiplier: backoff.DefaultConfig.Multiplier,
				Jitter:     backoff.DefaultConfig.Jitter,
				MaxDelay:   3 * time.Second,
			},
			MinConnectTimeout: 5 * time.Second,
		}),
	)...)
	if err != nil {
		return nil, fmt.Errorf("creating gRPC client for container runtime at %s: %w", endpoint, err)
	}
	return conn, nil
}

// validateRuntime refuses runtimes that do not answer CRI v1, with a message an
// operator can act on.
func (c *Client) validateRuntime(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := c.runtime.Version(ctx, &runtimeapi.VersionRequest{Version: CRIVersion})
	switch {
	case status.Code(err) == codes.Unimplemented:
		return fmt.Errorf("container runtime at %s does not speak CRI v1 (runtime.v1.RuntimeService is not served): upgrade containerd to >= 1.6: %w", c.runtimeEndpoint, err)
	case status.Code(err) == codes.Unavailable:
		return fmt.Errorf("cannot reach the container runtime at %s: is containerd running? %w", c.runtimeEndpoint, err)
	case err != nil:
		return fmt.Errorf("checking CRI version of the container runtime at %s: %w", c.runtimeEndpoint, err)
	}
	if resp.GetVersion() == "" || resp.GetRuntimeName() == "" || resp.GetRuntimeApiVersion() == "" || resp.GetRuntimeVersion() == "" {
		return fmt.Errorf("container runtime at %s gave an incomplete CRI version answer (version %q, runtime %q %q, API %q): it does not speak CRI v1; upgrade containerd to >= 1.6",
			c.runtimeEndpoint, resp.GetVersion(), resp.GetRuntimeName(), resp.GetRuntimeVersion(), resp.GetRuntimeApiVersion())
	}
	if api := resp.GetRuntimeApiVersion(); api != CRIVersion && !strings.HasPrefix(api, CRIVersion+".") {
		return fmt.Errorf("container runtime at %s does not speak CRI v1 (runtime %q API %q): upgrade containerd to >= 1.6",
			c.runtimeEndpoint, resp.GetRuntimeName(), api)
	}
	klog.InfoS("Connected to container runtime", "endpoint", c.runtimeEndpoint, "runtimeName", resp.GetRuntimeName(),
		"runtimeVersion", resp.GetRuntimeVersion(), "apiVersion", resp.GetRuntimeApiVersion())
	return nil
}

// validateImage checks a separate image service: it has no Version call, so
// ImageFsInfo (which every CRI v1 image service serves) stands in.
func (c *Client) validateImage(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	_, err := c.image.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
	switch {
	case status.Code(err) == codes.Unimplemented:
		return fmt.Errorf("image service at %s does not speak CRI v1 (runtime.v1.ImageService is not served): upgrade containerd to >= 1.6: %w", c.imageEndpoint, err)
	case status.Code(err) == codes.Unavailable:
		return fmt.Errorf("cannot reach the image service at %s: is containerd running? %w", c.imageEndpoint, err)
	case err != nil:
		return fmt.Errorf("checking the image service at %s: %w", c.imageEndpoint, err)
	}
	return nil
}

// IsNotFound reports whether err (possibly wrapped) carries gRPC code NotFound.
func IsNotFound(err error) bool { return status.Code(err) == codes.NotFound }

// IsContainerBusy reports whether err is containerd refusing to remove a
// container another call is starting or removing now ("container is in
// starting state, can't be removed", "container is already in removing
// state"): the same request succeeds once that call ended. containerd sends
// these with no particular gRPC code, so the message is all there is.
func IsContainerBusy(err error) bool {
	if err == nil {
		return false
	}
	msg := status.Convert(err).Message()
	return strings.Contains(msg, "is in starting state") || strings.Contains(msg, "already in removing state")
}

// IsUnimplemented reports whether err (possibly wrapped) carries gRPC code
// Unimplemented: the runtime does not have the method.
func IsUnimplemented(err error) bool { return status.Code(err) == codes.Unimplemented }

// Code returns the gRPC code carried by err (possibly wrapped); codes.OK for nil.
func Code(err error) codes.Code { return status.Code(err) }

// ExitError is returned by ExecSync when the command ran but exited non-zero.
type ExitError struct {
	ContainerID string
	Cmd         []string
	Code        int32
	Stderr      []byte
}

func (e *ExitError) Error() string {
	return fmt.Sprintf("command %q in container %s exited with %d: %s", strings.Join(e.Cmd, " "), e.ContainerID, e.Code, e.Stderr)
}

// ExitStatus returns the exit code (the k8s.io/utils/exec ExitError shape).
func (e *ExitError) ExitStatus() int { return int(e.Code) }

// call runs one CRI operation under a timeout (0 = none) and records metrics.
func (c *Client) call(ctx context.Context, op string, timeout time.Duration, fn func(ctx context.Context) error) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	start := time.Now()
	err := fn(ctx)
	c.metrics.observe(op, time.Since(start), err)
	return err
}

// Version returns the runtime's name and versions.
func (c *Client) Version(ctx context.Context, apiVersion string) (*runtimeapi.VersionResponse, error) {
	var resp *runtimeapi.VersionResponse
	err := c.call(ctx, "version", c.timeout, func(ctx context.Context) (err error) {
		resp, err = c.runtime.Version(ctx, &runtimeapi.VersionRequest{Version: apiVersion})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("getting runtime version: %w", err)
	}
	return resp, nil
}

// RunPodSandbox creates and starts a sandbox; it gets twice the timeout because
// network setup (CNI) is slow.
func (c *Client) RunPodSandbox(ctx context.Context, config *runtimeapi.PodSandboxConfig, runtimeHandler string) (string, error) {
	var resp *runtimeapi.RunPodSandboxResponse
	err := c.call(ctx, "run_podsandbox", 2*c.timeout, func(ctx context.Context) (err error) {
		resp, err = c.runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: config, RuntimeHandler: runtimeHandler})
		return err
	})
	if err != nil {
		return "", fmt.Errorf("running pod sandbox %s: %w", sandboxName(config), err)
	}
	if resp.GetPodSandboxId() == "" {
		return "", fmt.Errorf("running pod sandbox %s: runtime returned an empty sandbox ID", sandboxName(config))
	}
	return resp.GetPodSandboxId(), nil
}

func sandboxName(config *runtimeapi.PodSandboxConfig) string {
	m := config.GetMetadata()
	return fmt.Sprintf("%s/%s (uid %s, attempt %d)", m.GetNamespace(), m.GetName(), m.GetUid(), m.GetAttempt())
}

// StopPodSandbox stops the sandbox and its containers.
func (c *Client) StopPodSandbox(ctx context.Context, podSandboxID string) error {
	err := c.call(ctx, "stop_podsandbox", c.timeout, func(ctx context.Context) error {
		_, err := c.runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: podSandboxID})
		return err
	})
	if err != nil {
		return fmt.Errorf("stopping pod sandbox %s: %w", podSandboxID, err)
	}
	return nil
}

// RemovePodSandbox removes the sandbox and its containers.
func (c *Client) RemovePodSandbox(ctx context.Context, podSandboxID string) error {
	err := c.call(ctx, "remove_podsandbox", c.timeout, func(ctx context.Context) error {
		_, err := c.runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: podSandboxID})
		return err
	})
	if err != nil {
		return fmt.Errorf("removing pod sandbox %s: %w", podSandboxID, err)
	}
	return nil
}

// PodSandboxStatus returns the sandbox's status.
func (c *Client) PodSandboxStatus(ctx context.Context, podSandboxID string, verbose bool) (*runtimeapi.PodSandboxStatusResponse, error) {
	var resp *runtimeapi.PodSandboxStatusResponse
	err := c.call(ctx, "podsandbox_status", c.timeout, func(ctx context.Context) (err error) {
		resp, err = c.runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: podSandboxID, Verbose: verbose})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("getting status of pod sandbox %s: %w", podSandboxID, err)
	}
	if resp.GetStatus() == nil {
		return nil, fmt.Errorf("getting status of pod sandbox %s: runtime returned no status", podSandboxID)
	}
	return resp, nil
}

// ListPodSandbox lists sandboxes matching filter (nil = all).
func (c *Client) ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	var resp *runtimeapi.ListPodSandboxResponse
	err := c.call(ctx, "list_podsandbox", c.timeout, func(ctx context.Context) (err error) {
		resp, err = c.runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: filter})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listing pod sandboxes: %w", err)
	}
	return resp.GetItems(), nil
}

// PortForward asks the runtime for a port-forward streaming URL.
func (c *Client) PortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	var resp *runtimeapi.PortForwardResponse
	err := c.call(ctx, "port_forward", c.timeout, func(ctx context.Context) (err error) {
		resp, err = c.runtime.PortForward(ctx, req)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("port-forwarding to pod sandbox %s: %w", req.GetPodSandboxId(), err)
	}
	return resp, nil
}

// UpdatePodSandboxResources updates pod-level resources (best effort upstream).
func (c *Client) UpdatePodSandboxResources(ctx context.Context, req *runtimeapi.UpdatePodSandboxResourcesRequest) (*runtimeapi.UpdatePodSandboxResourcesResponse, error) {
	var resp *runtimeapi.UpdatePodSandboxResourcesResponse
	err := c.call(ctx, "update_podsandbox_resources", c.timeout, func(ctx context.Context) (err error) {
		resp, err = c.runtime.UpdatePodSandboxResources(ctx, req)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("updating resources of pod sandbox %s: %w", req.GetPodSandboxId(), err)
	}
	return resp, nil
}

// CheckpointPod checkpoints a whole pod; the caller's deadline, if any, applies.
func (c *Client) CheckpointPod(ctx context.Context, options *runtimeapi.CheckpointPodRequest) error {
	err := c.call(ctx, "checkpoint_pod", c.timeout, func(ctx context.Context) error {
		_, err := c.runtime.CheckpointPod(ctx, options)
		return err
	})
	if err != nil {
		return fmt.Errorf("checkpointing pod sandbox %s: %w", options.GetPodSandboxId(), err)
	}
	return nil
}

// RestorePod restores a pod from a checkpoint.
func (c *Client) RestorePod(ctx context.Context, options *runtimeapi.RestorePodRequest) (*runtimeapi.RestorePodResponse, error) {
	var resp *runtimeapi.RestorePodResponse
	err := c.call(ctx, "restore_pod", c.timeout, func(ctx context.Context) (err error) {
		resp, err = c.runtime.RestorePod(ctx, options)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("restoring pod from checkpoint: %w", err)
	}
	return resp, nil
}

// CreateContainer creates a container in a sandbox.
func (c *Client) CreateContainer(ctx context.Context, podSandboxID string, config *runtimeapi.ContainerConfig, sandboxConfig *runtimeapi.PodSandboxConfig) (string, error) {
	var resp *runtimeapi.CreateContainerResponse
	err := c.call(ctx, "create_container", c.timeout, func(ctx context.Context) (err error) {
		resp, err = c.runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
			PodSandboxId: podSandboxID, Config: config, SandboxConfig: sandboxConfig,
		})
		return err
	})
	name := config.GetMetadata().GetName()
	if err != nil {
		return "", fmt.Errorf("creating container %q in pod sandbox %s: %w", name, podSandboxID, err)
	}
	if resp.GetContainerId() == "" {
		return "", fmt.Errorf("creating container %q in pod sandbox %s: runtime returned an empty container ID", name, podSandboxID)
	}
	return resp.GetContainerId(), nil
}

// StartContainer starts a created container.
func (c *Client) StartContainer(ctx context.Context, containerID string) error {
	err := c.call(ctx, "start_container", c.timeout, func(ctx context.Context) error {
		_, err := c.runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: containerID})
		return err
	})
	if err != nil {
		return fmt.Errorf("starting container %s: %w", containerID, err)
	}
	return nil
}

// StopContainer stops a container, giving it timeout seconds before SIGKILL;
// the call's own deadline is the request timeout plus that grace period.
func (c *Client) StopContainer(ctx context.Context, containerID string, timeout int64) error {
	if timeout < 0 {
		timeout = 0
	}
	err := c.call(ctx, "stop_container", c.timeout+time.Duration(timeout)*time.Second, func(ctx context.Context) error {
		_, err := c.runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: containerID, Timeout: timeout})
		return err
	})
	if err != nil {
		return fmt.Errorf("stopping container %s: %w", containerID, err)
	}
	return nil
}

// RemoveContainer removes a container.
func (c *Client) RemoveContainer(ctx context.Context, containerID string) error {
	err := c.call(ctx, "remove_container", c.timeout, func(ctx context.Context) error {
		_, err := c.runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: containerID})
		return err
	})
	if err != nil {
		return fmt.Errorf("removing container %s: %w", containerID, err)
	}
	return nil
}

// ListContainers lists containers matching filter (nil = all).
func (c *Client) ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	var resp *runtimeapi.ListContainersResponse
	err := c.call(ctx, "list_containers", c.timeout, func(ctx context.Context) (err error) {
		resp, err = c.runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: filter})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listing containers: %w", err)
	}
	return resp.GetContainers(), nil
}

// ContainerStatus returns a container's status.
func (c *Client) ContainerStatus(ctx context.Context, containerID string, verbose bool) (*runtimeapi.ContainerStatusResponse, error) {
	var resp *runtimeapi.ContainerStatusResponse
	err := c.call(ctx, "container_status", c.timeout, func(ctx context.Context) (err error) {
		resp, err = c.runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: containerID, Verbose: verbose})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("getting status of container %s: %w", containerID, err)
	}
	if resp.GetStatus() == nil {
		return nil, fmt.Errorf("getting status of container %s: runtime returned no status", containerID)
	}
	return resp, nil
}

// UpdateContainerResources updates a container's resources.
func (c *Client) UpdateContainerResources(ctx context.Context, containerID string, resources *runtimeapi.ContainerResources) error {
	err := c.call(ctx, "update_container", c.timeout, func(ctx context.Context) error {
		_, err := c.runtime.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{
			ContainerId: containerID, Linux: resources.GetLinux(), Windows: resources.GetWindows(),
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("updating resources of container %s: %w", containerID, err)
	}
	return nil
}

// ExecSync runs cmd in the container. timeout bounds the command (0 = none); the
// call's deadline is timeout plus the request timeout, as upstream's client sets it,
// so the runtime has time to stop the command at timeout and answer itself (a
// deadline at timeout alone would race that answer). Without a timeout (lifecycle
// hooks) only ctx ends the call. A non-zero exit is returned as *ExitError.
func (c *Client) ExecSync(ctx context.Context, containerID string, cmd []string, timeout time.Duration) ([]byte, []byte, error) {
	var resp *runtimeapi.ExecSyncResponse
	deadline := time.Duration(0)
	if timeout > 0 {
		deadline = c.timeout + timeout
	}
	err := c.call(ctx, "exec_sync", deadline, func(ctx context.Context) (err error) {
		resp, err = c.runtime.ExecSync(ctx, &runtimeapi.ExecSyncRequest{
			ContainerId: containerID, Cmd: cmd, Timeout: int64(timeout.Seconds()),
		})
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("exec %q in container %s: %w", strings.Join(cmd, " "), containerID, err)
	}
	if resp.GetExitCode() != 0 {
		return resp.GetStdout(), resp.GetStderr(), &ExitError{ContainerID: containerID, Cmd: cmd, Code: resp.GetExitCode(), Stderr: resp.GetStderr()}
	}
	return resp.GetStdout(), resp.GetStderr(), nil
}

// Exec asks the runtime for an exec streaming URL.
func (c *Client) Exec(ctx context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	var resp *runtimeapi.ExecResponse
	err := c.call(ctx, "exec", c.timeout, func(ctx context.Context) (err error) {
		resp, err = c.runtime.Exec(ctx, req)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("preparing exec in container %s: %w", req.GetContainerId(), err)
	}
	return resp, nil
}

// Attach asks the runtime for an attach streaming URL.
func (c *Client) Attach(ctx context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	var resp *runtimeapi.AttachResponse
	err := c.call(ctx, "attach", c.timeout, func(ctx context.Context) (err error) {
		resp, err = c.runtime.Attach(ctx, req)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("preparing attach to container %s: %w", req.GetContainerId(), err)
	}
	return resp, nil
}

// ReopenContainerLog asks the runtime to reopen a container's log file.
func (c *Client) ReopenContainerLog(ctx context.Context, containerID string) error {
	err := c.call(ctx, "reopen_container_log", c.timeout, func(ctx context.Context) error {
		_, err := c.runtime.ReopenContainerLog(ctx, &runtimeapi.ReopenContainerLogRequest{ContainerId: containerID})
		return err
	})
	if err != nil {
		return fmt.Errorf("reopening log of container %s: %w", containerID, err)
	}
	return nil
}

// CheckpointContainer checkpoints a container; options.Timeout (seconds), when
// set, replaces the request timeout.
func (c *Client) CheckpointContainer(ctx context.Context, options *runtimeapi.CheckpointContainerRequest) error {
	timeout := c.timeout
	if options.GetTimeout() > 0 {
		timeout = time.Duration(options.GetTimeout()) * time.Second
	}
	err := c.call(ctx, "checkpoint_container", timeout, func(ctx context.Context) error {
		_, err := c.runtime.CheckpointContainer(ctx, options)
		return err
	})
	if err != nil {
		return fmt.Errorf("checkpointing container %s: %w", options.GetContainerId(), err)
	}
	return nil
}

// GetContainerEvents streams container events into containerEventsCh until ctx
// is done or the stream fails. connectionEstablishedCallback, if set, is called
// once the stream is open. It has no timeout: the stream is long-lived.
func (c *Client) GetContainerEvents(ctx context.Context, containerEventsCh chan *runtimeapi.ContainerEventResponse, connectionEstablishedCallback func(runtimeapi.RuntimeService_GetContainerEventsClient)) error {
	stream, err := c.runtime.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	c.metrics.observe("get_container_events", 0, err)
	if err != nil {
		return fmt.Errorf("opening container event stream: %w", err)
	}
	if connectionEstablishedCallback != nil {
		connectionEstablishedCallback(stream)
	}
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("container event stream closed by the runtime: %w", err)
		}
		if err != nil {
			return fmt.Errorf("receiving container events: %w", err)
		}
		if ev == nil {
			continue
		}
		select {
		case containerEventsCh <- ev:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// ContainerStats returns a container's stats.
func (c *Client) ContainerStats(ctx context.Context, containerID string) (*runtimeapi.ContainerStats, error) {
	var resp *runtimeapi.ContainerStatsResponse
	err := c.call(ctx, "container_stats", c.timeout, func(ctx context.Context) (err error) {
		resp, err = c.runtime.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: containerID})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("getting stats of container %s: %w", containerID, err)
	}
	return resp.GetStats(), nil
}

// ListContainerStats returns stats of containers matching filter.
func (c *Client) ListContainerStats(ctx context.Context, filter *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error) {
	var resp *runtimeapi.ListContainerStatsResponse
	err := c.call(ctx, "list_container_stats", c.timeout, func(ctx context.Context) (err error) {
		resp, err = c.runtime.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{Filter: filter})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listing container stats: %w", err)
	}
	return resp.GetStats(), nil
}

// PodSandboxStats returns a sandbox's stats.
func (c *Client) PodSandboxStats(ctx context.Context, podSandboxID string) (*runtimeapi.PodSandboxStats, error) {
	var resp *runtimeapi.PodSandboxStatsResponse
	err := c.call(ctx, "podsandbox_stats", c.timeout, func(ctx context.Context) (err error) {
		resp, err = c.runtime.PodSandboxStats(ctx, &runtimeapi.PodSandboxStatsRequest{PodSandboxId: podSandboxID})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("getting stats of pod sandbox %s: %w", podSandboxID, err)
	}
	return resp.GetStats(), nil
}

// ListPodSandboxStats returns stats of sandboxes matching filter.
func (c *Client) ListPodSandboxStats(ctx context.Context, filter *runtimeapi.PodSandboxStatsFilter) ([]*runtimeapi.PodSandboxStats, error) {
	var resp *runtimeapi.ListPodSandboxStatsResponse
	err := c.call(ctx, "list_podsandbox_stats", c.timeout, func(ctx context.Context) (err error) {
		resp, err = c.runtime.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{Filter: filter})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listing pod sandbox stats: %w", err)
	}
	return resp.GetStats(), nil
}

// ListMetricDescriptors returns the descriptors of ListPodSandboxMetrics' metrics.
func (c *Client) ListMetricDescriptors(ctx context.Context) ([]*runtimeapi.MetricDescriptor, error) {
	var resp *runtimeapi.ListMetricDescriptorsResponse
	err := c.call(ctx, "list_metric_descriptors", c.timeout, func(ctx context.Context) (err error) {
		resp, err = c.runtime.ListMetricDescriptors(ctx, &runtimeapi.ListMetricDescriptorsRequest{})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listing metric descriptors: %w", err)
	}
	return resp.GetDescriptors(), nil
}

// ListPodSandboxMetrics returns metrics of all running pods.
func (c *Client) ListPodSandboxMetrics(ctx context.Context) ([]*runtimeapi.PodSandboxMetrics, error) {
	var resp *runtimeapi.ListPodSandboxMetricsResponse
	err := c.call(ctx, "list_podsandbox_metrics", c.timeout, func(ctx context.Context) (err error) {
		resp, err = c.runtime.ListPodSandboxMetrics(ctx, &runtimeapi.ListPodSandboxMetricsRequest{})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listing pod sandbox metrics: %w", err)
	}
	return resp.GetPodMetrics(), nil
}

// UpdateRuntimeConfig pushes runtime configuration (the pod CIDR) to the runtime.
func (c *Client) UpdateRuntimeConfig(ctx context.Context, runtimeConfig *runtimeapi.RuntimeConfig) error {
	err := c.call(ctx, "update_runtime_config", c.timeout, func(ctx context.Context) error {
		_, err := c.runtime.UpdateRuntimeConfig(ctx, &runtimeapi.UpdateRuntimeConfigRequest{RuntimeConfig: runtimeConfig})
		return err
	})
	if err != nil {
		return fmt.Errorf("updating runtime config: %w", err)
	}
	return nil
}

// Status returns the runtime's conditions (RuntimeReady, NetworkReady).
func (c *Client) Status(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error) {
	var resp *runtimeapi.StatusResponse
	err := c.call(ctx, "status", c.timeout, func(ctx context.Context) (err error) {
		resp, err = c.runtime.Status(ctx, &runtimeapi.StatusRequest{Verbose: verbose})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("getting runtime status: %w", err)
	}
	if resp.GetStatus() == nil {
		return nil, errors.New("getting runtime status: runtime returned no status")
	}
	return resp, nil
}

// RuntimeConfig returns the runtime's configuration (e.g. its cgroup driver).
func (c *Client) RuntimeConfig(ctx context.Context) (*runtimeapi.RuntimeConfigResponse, error) {
	var resp *runtimeapi.RuntimeConfigResponse
	err := c.call(ctx, "runtime_config", c.timeout, func(ctx context.Context) (err error) {
		resp, err = c.runtime.RuntimeConfig(ctx, &runtimeapi.RuntimeConfigRequest{})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("getting runtime config: %w", err)
	}
	return resp, nil
}

// ListImages lists images matching filter (nil = all).
func (c *Client) ListImages(ctx context.Context, filter *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	var resp *runtimeapi.ListImagesResponse
	err := c.call(ctx, "list_images", c.timeout, func(ctx context.Context) (err error) {
		resp, err = c.image.ListImages(ctx, &runtimeapi.ListImagesRequest{Filter: filter})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listing images: %w", err)
	}
	return resp.GetImages(), nil
}

// ImageStatus returns the image's status; resp.Image is nil when it is absent.
func (c *Client) ImageStatus(ctx context.Context, image *runtimeapi.ImageSpec, verbose bool) (*runtimeapi.ImageStatusResponse, error) {
	var resp *runtimeapi.ImageStatusResponse
	err := c.call(ctx, "image_status", c.timeout, func(ctx context.Context) (err error) {
		resp, err = c.image.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: image, Verbose: verbose})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("getting status of image %s: %w", image.GetImage(), err)
	}
	if img := resp.GetImage(); img != nil && (img.GetId() == "" || img.GetSize() == 0) {
		// Upstream rejects these too: an image without ID/size breaks image GC.
		return nil, fmt.Errorf("getting status of image %s: runtime returned an image without id or size", image.GetImage())
	}
	return resp, nil
}

// PullImage pulls an image. It has no timeout: pulls of big images take as long
// as they take, and the caller cancels ctx to give up.
func (c *Client) PullImage(ctx context.Context, image *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, podSandboxConfig *runtimeapi.PodSandboxConfig) (string, error) {
	var resp *runtimeapi.PullImageResponse
	err := c.call(ctx, "pull_image", 0, func(ctx context.Context) (err error) {
		resp, err = c.image.PullImage(ctx, &runtimeapi.PullImageRequest{Image: image, Auth: auth, SandboxConfig: podSandboxConfig})
		return err
	})
	if err != nil {
		return "", fmt.Errorf("pulling image %s: %w", image.GetImage(), err)
	}
	if resp.GetImageRef() == "" {
		return "", fmt.Errorf("pulling image %s: runtime returned an empty image reference", image.GetImage())
	}
	return resp.GetImageRef(), nil
}

// RemoveImage removes an image (and every tag sharing its ID).
func (c *Client) RemoveImage(ctx context.Context, image *runtimeapi.ImageSpec) error {
	err := c.call(ctx, "remove_image", c.timeout, func(ctx context.Context) error {
		_, err := c.image.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: image})
		return err
	})
	if err != nil {
		return fmt.Errorf("removing image %s: %w", image.GetImage(), err)
	}
	return nil
}

// ImageFsInfo returns usage of the image and container filesystems.
func (c *Client) ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	var resp *runtimeapi.ImageFsInfoResponse
	err := c.call(ctx, "image_fs_info", c.timeout, func(ctx context.Context) (err error) {
		resp, err = c.image.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("getting image filesystem info: %w", err)
	}
	return resp, nil
}

// Close closes the gRPC connections.
func (c *Client) Close(_ context.Context) error {
	var errs []error
	if c.runtimeConn != nil {
		errs = append(errs, c.runtimeConn.Close())
	}
	if c.imageConn != nil && c.imageConn != c.runtimeConn {
		errs = append(errs, c.imageConn.Close())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("closing CRI connections: %w", err)
	}
	return nil
}
