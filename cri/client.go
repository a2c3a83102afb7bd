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
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"
	"k8s.io/klog/v2"
	utilexec "k8s.io/utils/exec"
)

const (
	// CRIVersion is the only CRI API version nodelet speaks.
	CRIVersion = "v1"

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

// Client talks CRI v1 to a container runtime through k8s.io/cri-client,
// adding nodelet's metrics, its error context and its endpoint checks. It is
// safe for concurrent use.
type Client struct {
	runtimeEndpoint string
	imageEndpoint   string

	runtime criapi.RuntimeService
	image   criapi.ImageManagerService

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
	c := &Client{runtimeEndpoint: runtimeEndpoint, imageEndpoint: imageEndpoint}
	rtTarget, err := usableSocket(runtimeEndpoint)
	if err != nil {
		return nil, err
	}
	imgTarget, err := usableSocket(imageEndpoint)
	if err != nil {
		return nil, err
	}
	// An explicit nil tracer provider installs no gRPC stats handler at all;
	// cri-client's default would install one with a no-op provider.
	c.runtime, err = remote.NewRemoteRuntimeServiceBuilder().WithEndpoint(rtTarget).
		WithConnectionTimeout(timeout).WithTracerProvider(o.tracer).Build(ctx)
	if err != nil {
		return nil, connectError("container runtime", "RuntimeService", runtimeEndpoint, err)
	}
	if err := c.checkRuntimeVersion(ctx); err != nil {
		_ = c.Close(ctx)
		return nil, err
	}
	// cri-client checks the image service with ImageFsInfo (it has no Version
	// call), on its own connection even when it shares the runtime's socket.
	c.image, err = remote.NewRemoteImageServiceBuilder().WithEndpoint(imgTarget).
		WithConnectionTimeout(timeout).WithTracerProvider(o.tracer).Build(ctx)
	if err != nil {
		_ = c.Close(ctx)
		return nil, connectError("image service", "ImageService", imageEndpoint, err)
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

// usableSocket checks endpoint names an existing unix socket path and returns
// it as the unix:///path target cri-client parses.
func usableSocket(endpoint string) (string, error) {
	path, err := socketPath(endpoint)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("container runtime socket %s (endpoint %s) is not usable: is containerd running? %w", path, endpoint, err)
	}
	return "unix://" + path, nil
}

// connectError words cri-client's failed connection check (Version for the
// runtime service, ImageFsInfo for the image service) for an operator. what
// is "container runtime" or "image service", service the gRPC service's name.
func connectError(what, service, endpoint string, err error) error {
	switch status.Code(err) {
	case codes.Unimplemented:
		return fmt.Errorf("%s at %s does not speak CRI v1 (runtime.v1.%s is not served): upgrade containerd to >= 1.6: %w", what, endpoint, service, err)
	case codes.Unavailable:
		return fmt.Errorf("cannot reach the %s at %s: is containerd running? %w", what, endpoint, err)
	}
	return fmt.Errorf("checking the %s at %s: %w", what, endpoint, err)
}

// checkRuntimeVersion refuses runtimes that do not answer CRI v1, with a
// message an operator can act on. cri-client's own check only sees that
// Version answers; it does not look at the API version the runtime names.
func (c *Client) checkRuntimeVersion(ctx context.Context) error {
	resp, err := c.runtime.Version(ctx, CRIVersion)
	if err != nil {
		if _, isStatus := status.FromError(err); !isStatus {
			// cri-client's "not all fields are set in VersionResponse".
			return fmt.Errorf("container runtime at %s gave an incomplete CRI version answer: %w: it does not speak CRI v1; upgrade containerd to >= 1.6", c.runtimeEndpoint, err)
		}
		return connectError("container runtime", "RuntimeService", c.runtimeEndpoint, err)
	}
	if api := resp.GetRuntimeApiVersion(); api != CRIVersion && !strings.HasPrefix(api, CRIVersion+".") {
		return fmt.Errorf("container runtime at %s does not speak CRI v1 (runtime %q API %q): upgrade containerd to >= 1.6",
			c.runtimeEndpoint, resp.GetRuntimeName(), api)
	}
	klog.InfoS("Connected to container runtime", "endpoint", c.runtimeEndpoint, "runtimeName", resp.GetRuntimeName(),
		"runtimeVersion", resp.GetRuntimeVersion(), "apiVersion", resp.GetRuntimeApiVersion())
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

// call runs one CRI operation and records its metrics; the timeouts are
// cri-client's (the request timeout, twice it for RunPodSandbox, plus the
// grace period for StopContainer, none for PullImage).
func call[T any](c *Client, op string, fn func() (T, error)) (T, error) {
	start := time.Now()
	v, err := fn()
	c.metrics.observe(op, time.Since(start), err)
	return v, err
}

// call0 is call for operations that return only an error.
func call0(c *Client, op string, fn func() error) error {
	_, err := call(c, op, func() (struct{}, error) { return struct{}{}, fn() })
	return err
}

// Version returns the runtime's name and versions.
func (c *Client) Version(ctx context.Context, apiVersion string) (*runtimeapi.VersionResponse, error) {
	resp, err := call(c, "version", func() (*runtimeapi.VersionResponse, error) { return c.runtime.Version(ctx, apiVersion) })
	if err != nil {
		return nil, fmt.Errorf("getting runtime version: %w", err)
	}
	return resp, nil
}

// RunPodSandbox creates and starts a sandbox; it gets twice the timeout because
// network setup (CNI) is slow.
func (c *Client) RunPodSandbox(ctx context.Context, config *runtimeapi.PodSandboxConfig, runtimeHandler string) (string, error) {
	id, err := call(c, "run_podsandbox", func() (string, error) { return c.runtime.RunPodSandbox(ctx, config, runtimeHandler) })
	if err != nil {
		return "", fmt.Errorf("running pod sandbox %s: %w", sandboxName(config), err)
	}
	return id, nil
}

func sandboxName(config *runtimeapi.PodSandboxConfig) string {
	m := config.GetMetadata()
	return fmt.Sprintf("%s/%s (uid %s, attempt %d)", m.GetNamespace(), m.GetName(), m.GetUid(), m.GetAttempt())
}

// StopPodSandbox stops the sandbox and its containers.
func (c *Client) StopPodSandbox(ctx context.Context, podSandboxID string) error {
	if err := call0(c, "stop_podsandbox", func() error { return c.runtime.StopPodSandbox(ctx, podSandboxID) }); err != nil {
		return fmt.Errorf("stopping pod sandbox %s: %w", podSandboxID, err)
	}
	return nil
}

// RemovePodSandbox removes the sandbox and its containers.
func (c *Client) RemovePodSandbox(ctx context.Context, podSandboxID string) error {
	if err := call0(c, "remove_podsandbox", func() error { return c.runtime.RemovePodSandbox(ctx, podSandboxID) }); err != nil {
		return fmt.Errorf("removing pod sandbox %s: %w", podSandboxID, err)
	}
	return nil
}

// PodSandboxStatus returns the sandbox's status.
func (c *Client) PodSandboxStatus(ctx context.Context, podSandboxID string, verbose bool) (*runtimeapi.PodSandboxStatusResponse, error) {
	resp, err := call(c, "podsandbox_status", func() (*runtimeapi.PodSandboxStatusResponse, error) {
		return c.runtime.PodSandboxStatus(ctx, podSandboxID, verbose)
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
	items, err := call(c, "list_podsandbox", func() ([]*runtimeapi.PodSandbox, error) { return c.runtime.ListPodSandbox(ctx, filter) })
	if err != nil {
		return nil, fmt.Errorf("listing pod sandboxes: %w", err)
	}
	return items, nil
}

// PortForward asks the runtime for a port-forward streaming URL.
func (c *Client) PortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	resp, err := call(c, "port_forward", func() (*runtimeapi.PortForwardResponse, error) { return c.runtime.PortForward(ctx, req) })
	if err != nil {
		return nil, fmt.Errorf("port-forwarding to pod sandbox %s: %w", req.GetPodSandboxId(), err)
	}
	return resp, nil
}

// UpdatePodSandboxResources updates pod-level resources (best effort upstream).
func (c *Client) UpdatePodSandboxResources(ctx context.Context, req *runtimeapi.UpdatePodSandboxResourcesRequest) (*runtimeapi.UpdatePodSandboxResourcesResponse, error) {
	resp, err := call(c, "update_podsandbox_resources", func() (*runtimeapi.UpdatePodSandboxResourcesResponse, error) {
		return c.runtime.UpdatePodSandboxResources(ctx, req)
	})
	if err != nil {
		return nil, fmt.Errorf("updating resources of pod sandbox %s: %w", req.GetPodSandboxId(), err)
	}
	return resp, nil
}

// CheckpointPod checkpoints a whole pod; the caller's deadline, if any, applies.
func (c *Client) CheckpointPod(ctx context.Context, options *runtimeapi.CheckpointPodRequest) error {
	if err := call0(c, "checkpoint_pod", func() error { return c.runtime.CheckpointPod(ctx, options) }); err != nil {
		return fmt.Errorf("checkpointing pod sandbox %s: %w", options.GetPodSandboxId(), err)
	}
	return nil
}

// RestorePod restores a pod from a checkpoint.
func (c *Client) RestorePod(ctx context.Context, options *runtimeapi.RestorePodRequest) (*runtimeapi.RestorePodResponse, error) {
	resp, err := call(c, "restore_pod", func() (*runtimeapi.RestorePodResponse, error) { return c.runtime.RestorePod(ctx, options) })
	if err != nil {
		return nil, fmt.Errorf("restoring pod from checkpoint: %w", err)
	}
	return resp, nil
}

// CreateContainer creates a container in a sandbox.
func (c *Client) CreateContainer(ctx context.Context, podSandboxID string, config *runtimeapi.ContainerConfig, sandboxConfig *runtimeapi.PodSandboxConfig) (string, error) {
	id, err := call(c, "create_container", func() (string, error) {
		return c.runtime.CreateContainer(ctx, podSandboxID, config, sandboxConfig)
	})
	if err != nil {
		return "", fmt.Errorf("creating container %q in pod sandbox %s: %w", config.GetMetadata().GetName(), podSandboxID, err)
	}
	return id, nil
}

// StartContainer starts a created container.
func (c *Client) StartContainer(ctx context.Context, containerID string) error {
	if err := call0(c, "start_container", func() error { return c.runtime.StartContainer(ctx, containerID) }); err != nil {
		return fmt.Errorf("starting container %s: %w", containerID, err)
	}
	return nil
}

// StopContainer stops a container, giving it timeout seconds before SIGKILL;
// the call's own deadline is the request timeout plus that grace period.
func (c *Client) StopContainer(ctx context.Context, containerID string, timeout int64) error {
	timeout = max(timeout, 0)
	if err := call0(c, "stop_container", func() error { return c.runtime.StopContainer(ctx, containerID, timeout) }); err != nil {
		return fmt.Errorf("stopping container %s: %w", containerID, err)
	}
	return nil
}

// RemoveContainer removes a container.
func (c *Client) RemoveContainer(ctx context.Context, containerID string) error {
	if err := call0(c, "remove_container", func() error { return c.runtime.RemoveContainer(ctx, containerID) }); err != nil {
		return fmt.Errorf("removing container %s: %w", containerID, err)
	}
	return nil
}

// ListContainers lists containers matching filter (nil = all).
func (c *Client) ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	items, err := call(c, "list_containers", func() ([]*runtimeapi.Container, error) { return c.runtime.ListContainers(ctx, filter) })
	if err != nil {
		return nil, fmt.Errorf("listing containers: %w", err)
	}
	return items, nil
}

// ContainerStatus returns a container's status.
func (c *Client) ContainerStatus(ctx context.Context, containerID string, verbose bool) (*runtimeapi.ContainerStatusResponse, error) {
	resp, err := call(c, "container_status", func() (*runtimeapi.ContainerStatusResponse, error) {
		return c.runtime.ContainerStatus(ctx, containerID, verbose)
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
	if err := call0(c, "update_container", func() error { return c.runtime.UpdateContainerResources(ctx, containerID, resources) }); err != nil {
		return fmt.Errorf("updating resources of container %s: %w", containerID, err)
	}
	return nil
}

// ExecSync runs cmd in the container. timeout bounds the command (0 = none); the
// call's deadline is timeout plus the request timeout, as upstream's client sets it,
// so the runtime has time to stop the command at timeout and answer itself (a
// deadline at timeout alone would race that answer). Without a timeout (lifecycle
// hooks) only ctx ends the call. A non-zero exit is returned as *ExitError; a call
// cut by its deadline wraps both cri-client's ErrCommandTimedOut and a gRPC
// DeadlineExceeded status (cri-client replaces the latter with the former).
func (c *Client) ExecSync(ctx context.Context, containerID string, cmd []string, timeout time.Duration) ([]byte, []byte, error) {
	var stderr []byte
	stdout, err := call(c, "exec_sync", func() (stdout []byte, err error) {
		stdout, stderr, err = c.runtime.ExecSync(ctx, containerID, cmd, timeout)
		return stdout, err
	})
	var exit utilexec.CodeExitError
	switch {
	case err == nil:
		return stdout, stderr, nil
	case errors.As(err, &exit):
		return stdout, stderr, &ExitError{ContainerID: containerID, Cmd: cmd, Code: int32(exit.Code), Stderr: stderr}
	case errors.Is(err, remote.ErrCommandTimedOut):
		err = fmt.Errorf("%w: %w", err, status.Error(codes.DeadlineExceeded, "the exec call's deadline passed"))
	}
	return nil, nil, fmt.Errorf("exec %q in container %s: %w", strings.Join(cmd, " "), containerID, err)
}

// Exec asks the runtime for an exec streaming URL.
func (c *Client) Exec(ctx context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	resp, err := call(c, "exec", func() (*runtimeapi.ExecResponse, error) { return c.runtime.Exec(ctx, req) })
	if err != nil {
		return nil, fmt.Errorf("preparing exec in container %s: %w", req.GetContainerId(), err)
	}
	return resp, nil
}

// Attach asks the runtime for an attach streaming URL.
func (c *Client) Attach(ctx context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	resp, err := call(c, "attach", func() (*runtimeapi.AttachResponse, error) { return c.runtime.Attach(ctx, req) })
	if err != nil {
		return nil, fmt.Errorf("preparing attach to container %s: %w", req.GetContainerId(), err)
	}
	return resp, nil
}

// ReopenContainerLog asks the runtime to reopen a container's log file.
func (c *Client) ReopenContainerLog(ctx context.Context, containerID string) error {
	if err := call0(c, "reopen_container_log", func() error { return c.runtime.ReopenContainerLog(ctx, containerID) }); err != nil {
		return fmt.Errorf("reopening log of container %s: %w", containerID, err)
	}
	return nil
}

// CheckpointContainer checkpoints a container. As upstream, the call's
// deadline is options.Timeout (seconds) when that exceeds the request
// timeout, else the request timeout.
func (c *Client) CheckpointContainer(ctx context.Context, options *runtimeapi.CheckpointContainerRequest) error {
	if err := call0(c, "checkpoint_container", func() error { return c.runtime.CheckpointContainer(ctx, options) }); err != nil {
		return fmt.Errorf("checkpointing container %s: %w", options.GetContainerId(), err)
	}
	return nil
}

// GetContainerEvents streams container events into containerEventsCh until ctx
// is done or the stream fails. connectionEstablishedCallback, if set, is called
// once the stream is open. It has no timeout: the stream is long-lived.
// cri-client sends each event without watching ctx, so the caller must keep
// reading containerEventsCh until this returns (pleg's Evented does).
func (c *Client) GetContainerEvents(ctx context.Context, containerEventsCh chan *runtimeapi.ContainerEventResponse, connectionEstablishedCallback func(runtimeapi.RuntimeService_GetContainerEventsClient)) error {
	opened := false // set by the callback, which runs on this goroutine
	err := c.runtime.GetContainerEvents(ctx, containerEventsCh, func(s runtimeapi.RuntimeService_GetContainerEventsClient) {
		opened = true
		c.metrics.observe("get_container_events", 0, nil)
		if connectionEstablishedCallback != nil {
			connectionEstablishedCallback(s)
		}
	})
	switch {
	case !opened:
		c.metrics.observe("get_container_events", 0, err)
		return fmt.Errorf("opening container event stream: %w", err)
	case errors.Is(err, io.EOF):
		return fmt.Errorf("container event stream closed by the runtime: %w", err)
	}
	return fmt.Errorf("receiving container events: %w", err)
}

// ContainerStats returns a container's stats.
func (c *Client) ContainerStats(ctx context.Context, containerID string) (*runtimeapi.ContainerStats, error) {
	st, err := call(c, "container_stats", func() (*runtimeapi.ContainerStats, error) { return c.runtime.ContainerStats(ctx, containerID) })
	if err != nil {
		return nil, fmt.Errorf("getting stats of container %s: %w", containerID, err)
	}
	return st, nil
}

// ListContainerStats returns stats of containers matching filter.
func (c *Client) ListContainerStats(ctx context.Context, filter *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error) {
	st, err := call(c, "list_container_stats", func() ([]*runtimeapi.ContainerStats, error) { return c.runtime.ListContainerStats(ctx, filter) })
	if err != nil {
		return nil, fmt.Errorf("listing container stats: %w", err)
	}
	return st, nil
}

// PodSandboxStats returns a sandbox's stats.
func (c *Client) PodSandboxStats(ctx context.Context, podSandboxID string) (*runtimeapi.PodSandboxStats, error) {
	st, err := call(c, "podsandbox_stats", func() (*runtimeapi.PodSandboxStats, error) { return c.runtime.PodSandboxStats(ctx, podSandboxID) })
	if err != nil {
		return nil, fmt.Errorf("getting stats of pod sandbox %s: %w", podSandboxID, err)
	}
	return st, nil
}

// ListPodSandboxStats returns stats of sandboxes matching filter.
func (c *Client) ListPodSandboxStats(ctx context.Context, filter *runtimeapi.PodSandboxStatsFilter) ([]*runtimeapi.PodSandboxStats, error) {
	st, err := call(c, "list_podsandbox_stats", func() ([]*runtimeapi.PodSandboxStats, error) { return c.runtime.ListPodSandboxStats(ctx, filter) })
	if err != nil {
		return nil, fmt.Errorf("listing pod sandbox stats: %w", err)
	}
	return st, nil
}

// ListMetricDescriptors returns the descriptors of ListPodSandboxMetrics' metrics.
func (c *Client) ListMetricDescriptors(ctx context.Context) ([]*runtimeapi.MetricDescriptor, error) {
	d, err := call(c, "list_metric_descriptors", func() ([]*runtimeapi.MetricDescriptor, error) { return c.runtime.ListMetricDescriptors(ctx) })
	if err != nil {
		return nil, fmt.Errorf("listing metric descriptors: %w", err)
	}
	return d, nil
}

// ListPodSandboxMetrics returns metrics of all running pods.
func (c *Client) ListPodSandboxMetrics(ctx context.Context) ([]*runtimeapi.PodSandboxMetrics, error) {
	m, err := call(c, "list_podsandbox_metrics", func() ([]*runtimeapi.PodSandboxMetrics, error) { return c.runtime.ListPodSandboxMetrics(ctx) })
	if err != nil {
		return nil, fmt.Errorf("listing pod sandbox metrics: %w", err)
	}
	return m, nil
}

// UpdateRuntimeConfig pushes runtime configuration (the pod CIDR) to the runtime.
func (c *Client) UpdateRuntimeConfig(ctx context.Context, runtimeConfig *runtimeapi.RuntimeConfig) error {
	if err := call0(c, "update_runtime_config", func() error { return c.runtime.UpdateRuntimeConfig(ctx, runtimeConfig) }); err != nil {
		return fmt.Errorf("updating runtime config: %w", err)
	}
	return nil
}

// Status returns the runtime's conditions (RuntimeReady, NetworkReady).
func (c *Client) Status(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error) {
	resp, err := call(c, "status", func() (*runtimeapi.StatusResponse, error) { return c.runtime.Status(ctx, verbose) })
	if err != nil {
		return nil, fmt.Errorf("getting runtime status: %w", err)
	}
	return resp, nil
}

// RuntimeConfig returns the runtime's configuration (e.g. its cgroup driver).
func (c *Client) RuntimeConfig(ctx context.Context) (*runtimeapi.RuntimeConfigResponse, error) {
	resp, err := call(c, "runtime_config", func() (*runtimeapi.RuntimeConfigResponse, error) { return c.runtime.RuntimeConfig(ctx) })
	if err != nil {
		return nil, fmt.Errorf("getting runtime config: %w", err)
	}
	return resp, nil
}

// ListImages lists images matching filter (nil = all).
func (c *Client) ListImages(ctx context.Context, filter *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	imgs, err := call(c, "list_images", func() ([]*runtimeapi.Image, error) { return c.image.ListImages(ctx, filter) })
	if err != nil {
		return nil, fmt.Errorf("listing images: %w", err)
	}
	return imgs, nil
}

// ImageStatus returns the image's status; resp.Image is nil when it is absent.
// An image without ID or size is an error (it would break image GC).
func (c *Client) ImageStatus(ctx context.Context, image *runtimeapi.ImageSpec, verbose bool) (*runtimeapi.ImageStatusResponse, error) {
	resp, err := call(c, "image_status", func() (*runtimeapi.ImageStatusResponse, error) { return c.image.ImageStatus(ctx, image, verbose) })
	if err != nil {
		return nil, fmt.Errorf("getting status of image %s: %w", image.GetImage(), err)
	}
	return resp, nil
}

// PullImage pulls an image. It has no timeout: pulls of big images take as long
// as they take, and the caller cancels ctx to give up.
func (c *Client) PullImage(ctx context.Context, image *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, podSandboxConfig *runtimeapi.PodSandboxConfig) (string, error) {
	ref, err := call(c, "pull_image", func() (string, error) { return c.image.PullImage(ctx, image, auth, podSandboxConfig) })
	if err != nil {
		return "", fmt.Errorf("pulling image %s: %w", image.GetImage(), err)
	}
	return ref, nil
}

// RemoveImage removes an image (and every tag sharing its ID).
func (c *Client) RemoveImage(ctx context.Context, image *runtimeapi.ImageSpec) error {
	if err := call0(c, "remove_image", func() error { return c.image.RemoveImage(ctx, image) }); err != nil {
		return fmt.Errorf("removing image %s: %w", image.GetImage(), err)
	}
	return nil
}

// ImageFsInfo returns usage of the image and container filesystems.
func (c *Client) ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	resp, err := call(c, "image_fs_info", func() (*runtimeapi.ImageFsInfoResponse, error) { return c.image.ImageFsInfo(ctx) })
	if err != nil {
		return nil, fmt.Errorf("getting image filesystem info: %w", err)
	}
	return resp, nil
}

// Close closes the gRPC connections.
func (c *Client) Close(ctx context.Context) error {
	var errs []error
	if c.runtime != nil {
		errs = append(errs, c.runtime.Close(ctx))
	}
	if c.image != nil {
		errs = append(errs, c.image.Close(ctx))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("closing CRI connections: %w", err)
	}
	return nil
}
