package cri

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"

	"github.com/nodelet/nodelet/internal/testsupport/eventually"
	"github.com/nodelet/nodelet/internal/testsupport/fakecri"
)

const testImage = "registry.local/busybox:1.36"

func newTestClient(t *testing.T, f *fakecri.Runtime, timeout time.Duration, opts ...Option) *Client {
	t.Helper()
	c, err := New(context.Background(), f.Endpoint(), "", timeout, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func sandboxConfig(name, uid string, hostNet bool) *runtimeapi.PodSandboxConfig {
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "default", Uid: uid},
		LogDirectory: "/var/log/pods/default_" + name + "_" + uid,
		Labels: map[string]string{
			LabelPodName: name, LabelPodNamespace: "default", LabelPodUID: uid,
		},
		Annotations: map[string]string{"a": "b"},
	}
	if hostNet {
		cfg.Linux = &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
		}}
	}
	return cfg
}

func containerConfig(name, uid string) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: testImage},
		LogPath:  name + "/0.log",
		Labels:   map[string]string{LabelPodUID: uid, LabelContainerName: name},
		Annotations: map[string]string{
			AnnotationContainerRestartCount: "0",
		},
	}
}

func TestNewVersionCheck(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(f *fakecri.Runtime) string // returns the endpoint to dial
		wantErr []string                        // substrings; nil = success
	}{
		{
			name:  "v1 runtime",
			setup: func(f *fakecri.Runtime) string { return f.Endpoint() },
		},
		{
			name:  "bare socket path",
			setup: func(f *fakecri.Runtime) string { return strings.TrimPrefix(f.Endpoint(), "unix://") },
		},
		{
			name: "old API version",
			setup: func(f *fakecri.Runtime) string {
				f.SetVersion(&runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "containerd", RuntimeVersion: "1.5.0", RuntimeApiVersion: "v1alpha2"})
				return f.Endpoint()
			},
			wantErr: []string{"does not speak CRI v1", `runtime "containerd" API "v1alpha2"`, "upgrade containerd to >= 1.6", "unix://"},
		},
		{
			name: "incomplete version answer",
			setup: func(f *fakecri.Runtime) string {
				f.SetVersion(&runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "x", RuntimeApiVersion: "v1"})
				return f.Endpoint()
			},
			wantErr: []string{"incomplete CRI version answer", "does not speak CRI v1"},
		},
		{
			name: "v1 service not served",
			setup: func(f *fakecri.Runtime) string {
				f.InjectError("Version", status.Error(codes.Unimplemented, "unknown service runtime.v1.RuntimeService"))
				return f.Endpoint()
			},
			wantErr: []string{"does not speak CRI v1", "upgrade containerd to >= 1.6"},
		},
		{
			name:    "missing socket",
			setup:   func(f *fakecri.Runtime) string { return "unix://" + filepath.Join(t.TempDir(), "nope.sock") },
			wantErr: []string{"is containerd running?", "nope.sock"},
		},
		{
			name: "socket refusing connections",
			setup: func(f *fakecri.Runtime) string {
				p := filepath.Join(t.TempDir(), "dead.sock")
				if err := os.WriteFile(p, nil, 0o600); err != nil {
					t.Fatal(err)
				}
				return "unix://" + p
			},
			wantErr: []string{"is containerd running?", "dead.sock"},
		},
		{
			name:    "tcp endpoint",
			setup:   func(f *fakecri.Runtime) string { return "tcp://127.0.0.1:1234" },
			wantErr: []string{"only unix sockets are supported"},
		},
		{
			name:    "relative path",
			setup:   func(f *fakecri.Runtime) string { return "run/containerd.sock" },
			wantErr: []string{"absolute"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := fakecri.New(t)
			ep := tc.setup(f)
			c, err := New(context.Background(), ep, "", 5*time.Second)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				_ = c.Close(context.Background())
				return
			}
			if err == nil {
				_ = c.Close(context.Background())
				t.Fatal("New succeeded, want error")
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestSeparateImageEndpoint(t *testing.T) {
	rt, img := fakecri.New(t), fakecri.New(t)
	img.AddImage(testImage)
	c, err := New(context.Background(), rt.Endpoint(), img.Endpoint(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(context.Background()) }()
	imgs, err := c.ListImages(context.Background(), nil)
	if err != nil || len(imgs) != 1 {
		t.Fatalf("ListImages on the image endpoint = %v, %v; want the 1 image", imgs, err)
	}
	if calls := rt.Calls(); strings.Contains(strings.Join(calls, ","), "ListImages") {
		t.Errorf("image call went to the runtime endpoint: %v", calls)
	}
	if calls := img.Calls(); len(calls) == 0 || calls[0] != "ImageFsInfo" {
		t.Errorf("image endpoint not validated at construction: %v", calls)
	}

	img.InjectError("ImageFsInfo", status.Error(codes.Unimplemented, "unknown service runtime.v1.ImageService"))
	_, err = New(context.Background(), rt.Endpoint(), img.Endpoint(), time.Minute)
	if err == nil || !strings.Contains(err.Error(), "image service at "+img.Endpoint()+" does not speak CRI v1") {
		t.Errorf("New with a v1alpha2 image service = %v", err)
	}
}

func TestLifecycle(t *testing.T) {
	ctx := context.Background()
	f := fakecri.New(t)
	c := newTestClient(t, f, time.Minute)

	if _, err := c.PullImage(ctx, &runtimeapi.ImageSpec{Image: testImage}, nil, nil); err != nil {
		t.Fatalf("PullImage: %v", err)
	}
	sbCfg := sandboxConfig("web", "uid-1", false)
	sb, err := c.RunPodSandbox(ctx, sbCfg, "runc")
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	if _, err := c.RunPodSandbox(ctx, sbCfg, "runc"); status.Code(err) != codes.AlreadyExists {
		t.Errorf("second RunPodSandbox with the same attempt: %v, want AlreadyExists", err)
	}
	if got := f.SandboxRuntimeHandler(sb); got != "runc" {
		t.Errorf("runtime handler = %q", got)
	}
	sbs, err := c.PodSandboxStatus(ctx, sb, false)
	if err != nil {
		t.Fatalf("PodSandboxStatus: %v", err)
	}
	if st := sbs.GetStatus(); st.State != runtimeapi.PodSandboxState_SANDBOX_READY || st.GetNetwork().GetIp() == "" ||
		st.Labels[LabelPodUID] != "uid-1" || st.Annotations["a"] != "b" || st.CreatedAt == 0 || st.Metadata.GetName() != "web" {
		t.Errorf("sandbox status = %v", st)
	}

	ctrCfg := containerConfig("app", "uid-1")
	id, err := c.CreateContainer(ctx, sb, ctrCfg, sbCfg)
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	if _, err := c.CreateContainer(ctx, sb, ctrCfg, sbCfg); status.Code(err) != codes.AlreadyExists {
		t.Errorf("duplicate CreateContainer: %v, want AlreadyExists", err)
	}
	if got := f.ContainerConfig(id); got.GetLabels()[LabelContainerName] != "app" || got.GetLogPath() != "app/0.log" {
		t.Errorf("stored container config = %v", got)
	}
	if err := c.StartContainer(ctx, id); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	if err := c.StartContainer(ctx, id); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("StartContainer twice: %v, want FailedPrecondition", err)
	}
	cs, err := c.ContainerStatus(ctx, id, false)
	if err != nil {
		t.Fatalf("ContainerStatus: %v", err)
	}
	st := cs.GetStatus()
	if st.State != runtimeapi.ContainerState_CONTAINER_RUNNING || st.StartedAt == 0 || st.FinishedAt != 0 ||
		st.LogPath != filepath.Join(sbCfg.LogDirectory, "app/0.log") || st.ImageRef == "" || st.Annotations[AnnotationContainerRestartCount] != "0" {
		t.Errorf("running container status = %v", st)
	}

	running, err := c.ListContainers(ctx, &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}})
	if err != nil || len(running) != 1 || running[0].Id != id {
		t.Fatalf("ListContainers(running) = %v, %v", running, err)
	}
	bySandbox, err := c.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: "nope"})
	if err != nil || len(bySandbox) != 0 {
		t.Errorf("ListContainers(other sandbox) = %v, %v", bySandbox, err)
	}
	byLabel, err := c.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{LabelPodUID: "uid-1"}})
	if err != nil || len(byLabel) != 1 || byLabel[0].Id != sb {
		t.Errorf("ListPodSandbox(label) = %v, %v", byLabel, err)
	}

	out, _, err := c.ExecSync(ctx, id, []string{"true"}, time.Second)
	if err != nil || len(out) != 0 {
		t.Errorf("ExecSync = %q, %v", out, err)
	}
	f.SetExecSync(func(_ string, cmd []string) ([]byte, []byte, int32) { return []byte("out"), []byte("boom"), 3 })
	out, _, err = c.ExecSync(ctx, id, []string{"false"}, time.Second)
	var exitErr *ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitStatus() != 3 || string(out) != "out" {
		t.Errorf("failing ExecSync = %q, %v; want ExitError code 3", out, err)
	}

	if err := c.UpdateContainerResources(ctx, id, &runtimeapi.ContainerResources{Linux: &runtimeapi.LinuxContainerResources{CpuShares: 512}}); err != nil {
		t.Errorf("UpdateContainerResources: %v", err)
	}
	if got := f.ContainerConfig(id).GetLinux().GetResources().GetCpuShares(); got != 512 {
		t.Errorf("cpu shares after update = %d", got)
	}

	if err := c.RemoveContainer(ctx, id); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("RemoveContainer of a running container: %v, want FailedPrecondition", err)
	}
	if err := c.StopContainer(ctx, id, 5); err != nil {
		t.Fatalf("StopContainer: %v", err)
	}
	cs, _ = c.ContainerStatus(ctx, id, false)
	if st := cs.GetStatus(); st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 137 || st.FinishedAt < st.StartedAt {
		t.Errorf("stopped container status = %v", st)
	}
	if err := c.RemoveContainer(ctx, id); err != nil {
		t.Errorf("RemoveContainer: %v", err)
	}
	if err := c.RemoveContainer(ctx, id); err != nil {
		t.Errorf("RemoveContainer is idempotent, got %v", err)
	}
	if err := c.RemovePodSandbox(ctx, sb); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("RemovePodSandbox of a ready sandbox: %v", err)
	}
	if err := c.StopPodSandbox(ctx, sb); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	sbs, _ = c.PodSandboxStatus(ctx, sb, false)
	if st := sbs.GetStatus(); st.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY || st.GetNetwork().GetIp() != "" {
		t.Errorf("stopped sandbox status = %v", st)
	}
	if err := c.RemovePodSandbox(ctx, sb); err != nil {
		t.Errorf("RemovePodSandbox: %v", err)
	}
	if all, _ := c.ListPodSandbox(ctx, nil); len(all) != 0 {
		t.Errorf("sandboxes left: %v", all)
	}

	if resp, err := c.Status(ctx, false); err != nil || len(resp.GetStatus().GetConditions()) != 2 {
		t.Errorf("Status = %v, %v", resp, err)
	}
	if resp, err := c.RuntimeConfig(ctx); err != nil || resp.GetLinux().GetCgroupDriver() != runtimeapi.CgroupDriver_CGROUPFS {
		t.Errorf("RuntimeConfig = %v, %v", resp, err)
	}
	if v, err := c.Version(ctx, CRIVersion); err != nil || v.RuntimeApiVersion != "v1" {
		t.Errorf("Version = %v, %v", v, err)
	}
}

func TestStopPodSandboxStopsContainersAndHostNetwork(t *testing.T) {
	ctx := context.Background()
	f := fakecri.New(t)
	f.AddImage(testImage)
	c := newTestClient(t, f, time.Minute)
	sbCfg := sandboxConfig("host", "uid-h", true)
	sb, err := c.RunPodSandbox(ctx, sbCfg, "")
	if err != nil {
		t.Fatal(err)
	}
	st, _ := c.PodSandboxStatus(ctx, sb, false)
	if ip := st.GetStatus().GetNetwork().GetIp(); ip != "" {
		t.Errorf("host-network sandbox got IP %q", ip)
	}
	if st.GetStatus().GetLinux().GetNamespaces().GetOptions().GetNetwork() != runtimeapi.NamespaceMode_NODE {
		t.Errorf("namespace options lost: %v", st.GetStatus().GetLinux())
	}
	var ids []string
	for _, n := range []string{"a", "b"} {
		id, err := c.CreateContainer(ctx, sb, containerConfig(n, "uid-h"), sbCfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.StartContainer(ctx, id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := c.StopPodSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		cs, err := c.ContainerStatus(ctx, id, false)
		if err != nil || cs.GetStatus().State != runtimeapi.ContainerState_CONTAINER_EXITED {
			t.Errorf("container %s after StopPodSandbox: %v, %v", id, cs, err)
		}
	}
	if _, err := c.CreateContainer(ctx, sb, containerConfig("late", "uid-h"), sbCfg); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("CreateContainer in a stopped sandbox: %v", err)
	}
	if err := c.RemovePodSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if all, _ := c.ListContainers(ctx, nil); len(all) != 0 {
		t.Errorf("RemovePodSandbox left containers: %v", all)
	}
}

func TestExitContainer(t *testing.T) {
	ctx := context.Background()
	f := fakecri.New(t)
	f.AddImage(testImage)
	c := newTestClient(t, f, time.Minute)
	sbCfg := sandboxConfig("p", "u", false)
	sb, _ := c.RunPodSandbox(ctx, sbCfg, "")
	id, err := c.CreateContainer(ctx, sb, containerConfig("c", "u"), sbCfg)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.StartContainer(ctx, id)
	f.ExitContainer(id, 2, "")
	cs, _ := c.ContainerStatus(ctx, id, false)
	if st := cs.GetStatus(); st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 2 || st.Reason != "Error" || st.FinishedAt == 0 {
		t.Errorf("status after ExitContainer = %v", st)
	}
}

func TestNotFound(t *testing.T) {
	ctx := context.Background()
	f := fakecri.New(t)
	c := newTestClient(t, f, time.Minute)
	const id = "deadbeef"
	tests := []struct {
		name string
		call func() error
		msg  string
	}{
		{"ContainerStatus", func() error { _, err := c.ContainerStatus(ctx, id, false); return err }, "getting status of container deadbeef"},
		{"PodSandboxStatus", func() error { _, err := c.PodSandboxStatus(ctx, id, false); return err }, "getting status of pod sandbox deadbeef"},
		{"StartContainer", func() error { return c.StartContainer(ctx, id) }, "starting container deadbeef"},
		{"StopContainer", func() error { return c.StopContainer(ctx, id, 0) }, "stopping container deadbeef"},
		{"StopPodSandbox", func() error { return c.StopPodSandbox(ctx, id) }, "stopping pod sandbox deadbeef"},
		{"UpdateContainerResources", func() error { return c.UpdateContainerResources(ctx, id, &runtimeapi.ContainerResources{}) }, "updating resources of container deadbeef"},
		{"ExecSync", func() error { _, _, err := c.ExecSync(ctx, id, []string{"ls"}, time.Second); return err }, "in container deadbeef"},
		{"ReopenContainerLog", func() error { return c.ReopenContainerLog(ctx, id) }, "reopening log of container deadbeef"},
		{"CreateContainer", func() error {
			_, err := c.CreateContainer(ctx, id, containerConfig("x", "u"), sandboxConfig("p", "u", false))
			return err
		}, `creating container "x" in pod sandbox deadbeef`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if !IsNotFound(err) {
				t.Fatalf("err = %v, want NotFound", err)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("err %q lacks context %q", err, tc.msg)
			}
			s, ok := status.FromError(err)
			if !ok || s.Code() != codes.NotFound {
				t.Errorf("status.FromError = %v, %v", s, ok)
			}
			if status.Code(errors.Unwrap(err)) != codes.NotFound {
				t.Errorf("unwrapped error lost its code: %v", errors.Unwrap(err))
			}
		})
	}
	// Removal is idempotent per CRI, so unknown IDs are not errors there.
	if err := c.RemoveContainer(ctx, id); err != nil {
		t.Errorf("RemoveContainer(unknown) = %v", err)
	}
	if err := c.RemovePodSandbox(ctx, id); err != nil {
		t.Errorf("RemovePodSandbox(unknown) = %v", err)
	}
	if IsNotFound(nil) || IsNotFound(errors.New("x")) {
		t.Error("IsNotFound true for non-NotFound errors")
	}
}

func TestTimeouts(t *testing.T) {
	ctx := context.Background()
	// Generous margins: the machine is shared and tests run under -race.
	const timeout = 500 * time.Millisecond
	tests := []struct {
		name     string
		method   string
		delay    time.Duration
		call     func(c *Client, sb, ctr string) error
		wantCode codes.Code
	}{
		{"unary call over timeout fails", "ListContainers", 2 * time.Second,
			func(c *Client, _, _ string) error { _, err := c.ListContainers(ctx, nil); return err }, codes.DeadlineExceeded},
		{"status over timeout fails", "ContainerStatus", 2 * time.Second,
			func(c *Client, _, ctr string) error { _, err := c.ContainerStatus(ctx, ctr, false); return err }, codes.DeadlineExceeded},
		{"RunPodSandbox gets twice the timeout", "RunPodSandbox", 700 * time.Millisecond,
			func(c *Client, _, _ string) error {
				_, err := c.RunPodSandbox(ctx, sandboxConfig("other", "u2", false), "")
				return err
			}, codes.OK},
		{"RunPodSandbox beyond twice the timeout fails", "RunPodSandbox", 3 * time.Second,
			func(c *Client, _, _ string) error {
				_, err := c.RunPodSandbox(ctx, sandboxConfig("other", "u2", false), "")
				return err
			}, codes.DeadlineExceeded},
		{"StopContainer gets timeout plus grace", "StopContainer", time.Second,
			func(c *Client, _, ctr string) error { return c.StopContainer(ctx, ctr, 2) }, codes.OK},
		{"StopContainer without grace gets the timeout", "StopContainer", 2 * time.Second,
			func(c *Client, _, ctr string) error { return c.StopContainer(ctx, ctr, 0) }, codes.DeadlineExceeded},
		{"PullImage has no timeout", "PullImage", time.Second,
			func(c *Client, _, _ string) error {
				_, err := c.PullImage(ctx, &runtimeapi.ImageSpec{Image: "x/y:z"}, nil, nil)
				return err
			}, codes.OK},
		{"ExecSync gets its own timeout plus the timeout", "ExecSync", time.Second,
			func(c *Client, _, ctr string) error {
				_, _, err := c.ExecSync(ctx, ctr, []string{"true"}, 3*time.Second)
				return err
			}, codes.OK},
		{"ExecSync without a timeout has no deadline (lifecycle hooks)", "ExecSync", time.Second,
			func(c *Client, _, ctr string) error {
				_, _, err := c.ExecSync(ctx, ctr, []string{"true"}, 0)
				return err
			}, codes.OK},
		{"ExecSync over its own timeout plus the timeout fails", "ExecSync", 2 * time.Second,
			func(c *Client, _, ctr string) error {
				_, _, err := c.ExecSync(ctx, ctr, []string{"true"}, 100*time.Millisecond)
				return err
			}, codes.DeadlineExceeded},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := fakecri.New(t)
			f.AddImage(testImage)
			c := newTestClient(t, f, timeout)
			sb, ctr := runningContainer(t, c)
			f.SetDelay(tc.method, tc.delay)
			start := time.Now()
			err := tc.call(c, sb, ctr)
			if got := status.Code(err); got != tc.wantCode {
				t.Fatalf("code = %v (err %v), want %v", got, err, tc.wantCode)
			}
			if tc.wantCode == codes.DeadlineExceeded && time.Since(start) >= tc.delay {
				t.Errorf("call took %v, the deadline did not cut the %v delay", time.Since(start), tc.delay)
			}
		})
	}
}

// TestExecSyncCallTimeout: an exec with a timeout of its own gets the request
// timeout on top of it as its call deadline, as upstream's client gives it, so the
// runtime has time to stop the command at the exec timeout and answer (containerd
// answers a timed-out exec itself); only a runtime silent beyond both is cut.
func TestExecSyncCallTimeout(t *testing.T) {
	// Generous margins: the machine is shared and tests run under -race.
	const requestTimeout, execTimeout = time.Second, time.Second
	tests := []struct {
		name     string
		delay    time.Duration // when the runtime answers
		wantCode codes.Code
	}{
		// The runtime answers after the exec timeout (stopping the command takes
		// it a moment): the answer arrives.
		{"answer after the exec timeout arrives", 1400 * time.Millisecond, codes.OK},
		// Nothing by exec timeout + request timeout: the call is cut there.
		{"no answer within both is cut", 4 * time.Second, codes.DeadlineExceeded},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := fakecri.New(t)
			f.AddImage(testImage)
			c := newTestClient(t, f, requestTimeout)
			_, ctr := runningContainer(t, c)
			f.SetDelay("ExecSync", tc.delay)
			start := time.Now()
			_, _, err := c.ExecSync(context.Background(), ctr, []string{"true"}, execTimeout)
			took := time.Since(start)
			if got := status.Code(err); got != tc.wantCode {
				t.Fatalf("code = %v after %v (err %v), want %v", got, took, err, tc.wantCode)
			}
			if tc.wantCode == codes.DeadlineExceeded && (took < requestTimeout+execTimeout || took >= tc.delay) {
				t.Errorf("cut after %v, want at the exec timeout plus the request timeout (%v)", took, requestTimeout+execTimeout)
			}
			// The prober and the server look for the code; cri-client's own
			// sentinel stays reachable too.
			if tc.wantCode == codes.DeadlineExceeded && !errors.Is(err, remote.ErrCommandTimedOut) {
				t.Errorf("a cut exec %v does not wrap cri-client's ErrCommandTimedOut", err)
			}
		})
	}
}

// TestCheckpointContainerTimeout: as upstream's client, the call's deadline is
// the checkpoint's own timeout when that is longer than the request timeout,
// and never shorter than the request timeout.
func TestCheckpointContainerTimeout(t *testing.T) {
	// Generous margins: the machine is shared and tests run under -race.
	const requestTimeout = 3 * time.Second
	tests := []struct {
		name     string
		timeout  int64 // the request's, in seconds
		delay    time.Duration
		wantCode codes.Code // the fake answers Unimplemented when it answers at all
	}{
		{"a shorter checkpoint timeout gets the request timeout", 1, 2 * time.Second, codes.Unimplemented},
		{"a longer checkpoint timeout replaces the request timeout", 5, 4 * time.Second, codes.Unimplemented},
		{"beyond both is cut", 0, 7 * time.Second, codes.DeadlineExceeded},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := fakecri.New(t)
			c := newTestClient(t, f, requestTimeout)
			f.SetDelay("CheckpointContainer", tc.delay)
			err := c.CheckpointContainer(context.Background(), &runtimeapi.CheckpointContainerRequest{ContainerId: "c1", Timeout: tc.timeout})
			if got := status.Code(err); got != tc.wantCode {
				t.Fatalf("code = %v (err %v), want %v", got, err, tc.wantCode)
			}
			if !strings.Contains(err.Error(), "checkpointing container c1") {
				t.Errorf("err %q lacks its context", err)
			}
		})
	}
}

// TestPullImageUnknownError: as upstream's client, a pull refused with gRPC
// code Unknown (containerd's "failed to resolve reference ...") comes back as
// its message alone, with the context of what was pulled.
func TestPullImageUnknownError(t *testing.T) {
	f := fakecri.New(t)
	c := newTestClient(t, f, time.Minute)
	f.InjectError("PullImage", status.Error(codes.Unknown, "failed to resolve reference"))
	_, err := c.PullImage(context.Background(), &runtimeapi.ImageSpec{Image: "a/b:c"}, nil, nil)
	if err == nil || err.Error() != "pulling image a/b:c: failed to resolve reference" {
		t.Errorf("PullImage = %v", err)
	}
}

func TestPullImageCancel(t *testing.T) {
	f := fakecri.New(t)
	c := newTestClient(t, f, time.Minute)
	f.SetDelay("PullImage", 10*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err := c.PullImage(ctx, &runtimeapi.ImageSpec{Image: "a/b:c"}, nil, nil)
	if status.Code(err) != codes.Canceled {
		t.Errorf("PullImage after cancel: %v, want Canceled", err)
	}
}

// runningContainer starts a sandbox and a container in it.
func runningContainer(t *testing.T, c *Client) (sandboxID, containerID string) {
	t.Helper()
	ctx := context.Background()
	sbCfg := sandboxConfig("p", "u", false)
	sb, err := c.RunPodSandbox(ctx, sbCfg, "")
	if err != nil {
		t.Fatal(err)
	}
	ctr, err := c.CreateContainer(ctx, sb, containerConfig("c", "u"), sbCfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.StartContainer(ctx, ctr); err != nil {
		t.Fatal(err)
	}
	return sb, ctr
}

// TestExecSyncCancel: an exec without a timeout of its own (a postStart hook)
// ends when its context is cancelled, which is how a pod being deleted stops it.
func TestExecSyncCancel(t *testing.T) {
	f := fakecri.New(t)
	f.AddImage(testImage)
	c := newTestClient(t, f, time.Minute)
	_, ctr := runningContainer(t, c)
	f.SetDelay("ExecSync", 10*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, _, err := c.ExecSync(ctx, ctr, []string{"sleep", "3600"}, 0)
	if status.Code(err) != codes.Canceled {
		t.Errorf("ExecSync after cancel: %v, want Canceled", err)
	}
	if d := time.Since(start); d >= 10*time.Second {
		t.Errorf("ExecSync took %v: the cancellation did not end it", d)
	}
}

func TestImages(t *testing.T) {
	ctx := context.Background()
	f := fakecri.New(t)
	c := newTestClient(t, f, time.Minute)
	f.AddImage("registry.local/a:1")
	f.AddImage("registry.local/b") // gets :latest

	st, err := c.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: "registry.local/b:latest"}, false)
	if err != nil || st.GetImage() == nil || st.GetImage().Size == 0 {
		t.Fatalf("ImageStatus(b:latest) = %v, %v", st, err)
	}
	byID, err := c.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: st.GetImage().Id}, false)
	if err != nil || byID.GetImage().GetId() != st.GetImage().Id {
		t.Errorf("ImageStatus by ID = %v, %v", byID, err)
	}
	missing, err := c.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: "registry.local/none:1"}, false)
	if err != nil || missing.GetImage() != nil {
		t.Errorf("ImageStatus(absent) = %v, %v; want nil image, no error", missing, err)
	}
	ref, err := c.PullImage(ctx, &runtimeapi.ImageSpec{Image: "registry.local/c:2"}, nil, nil)
	if err != nil || !strings.HasPrefix(ref, "sha256:") {
		t.Errorf("PullImage = %q, %v", ref, err)
	}
	imgs, err := c.ListImages(ctx, nil)
	if err != nil || len(imgs) != 3 {
		t.Errorf("ListImages = %v, %v; want 3", imgs, err)
	}
	if err := c.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: "registry.local/a:1"}); err != nil {
		t.Errorf("RemoveImage: %v", err)
	}
	if err := c.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: "registry.local/a:1"}); err != nil {
		t.Errorf("RemoveImage is idempotent, got %v", err)
	}
	if imgs, _ := c.ListImages(ctx, nil); len(imgs) != 2 {
		t.Errorf("after RemoveImage: %d images", len(imgs))
	}
	fs, err := c.ImageFsInfo(ctx)
	if err != nil || fs.GetImageFilesystems()[0].GetUsedBytes().GetValue() != 2<<20 {
		t.Errorf("ImageFsInfo = %v, %v", fs, err)
	}
	// A container on an absent image cannot be created.
	sbCfg := sandboxConfig("p", "u", false)
	sb, _ := c.RunPodSandbox(ctx, sbCfg, "")
	cfg := containerConfig("c", "u")
	cfg.Image.Image = "registry.local/none:1"
	if _, err := c.CreateContainer(ctx, sb, cfg, sbCfg); !IsNotFound(err) {
		t.Errorf("CreateContainer on an absent image: %v", err)
	}
}

func TestInjectErrorAndCalls(t *testing.T) {
	ctx := context.Background()
	f := fakecri.New(t)
	c := newTestClient(t, f, time.Minute)
	f.ResetCalls()
	f.InjectError("ListPodSandbox", status.Error(codes.Internal, "runtime on fire"))
	if _, err := c.ListPodSandbox(ctx, nil); status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "listing pod sandboxes") {
		t.Errorf("first ListPodSandbox = %v, want injected Internal", err)
	}
	if _, err := c.ListPodSandbox(ctx, nil); err != nil {
		t.Errorf("second ListPodSandbox = %v, injection must be one-shot", err)
	}
	_, _ = c.ListContainers(ctx, nil)
	want := []string{"ListPodSandbox", "ListPodSandbox", "ListContainers"}
	if got := f.Calls(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("Calls() = %v, want %v", got, want)
	}
}

func TestMetrics(t *testing.T) {
	ctx := context.Background()
	f := fakecri.New(t)
	reg := prometheus.NewRegistry()
	c := newTestClient(t, f, time.Minute, WithMetrics(reg))
	_, _ = c.ListContainers(ctx, nil)
	_, _ = c.ListContainers(ctx, nil)
	_, _ = c.ContainerStatus(ctx, "missing", false)

	if got := testutil.ToFloat64(c.metrics.total.WithLabelValues("list_containers")); got != 2 {
		t.Errorf("operations_total{list_containers} = %v, want 2", got)
	}
	if got := testutil.ToFloat64(c.metrics.errors.WithLabelValues("container_status")); got != 1 {
		t.Errorf("operations_errors_total{container_status} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(c.metrics.errors.WithLabelValues("list_containers")); got != 0 {
		t.Errorf("operations_errors_total{list_containers} = %v, want 0", got)
	}
	n, err := testutil.GatherAndCount(reg, "kubelet_runtime_operations_duration_seconds")
	if err != nil || n != 2 { // list_containers and container_status series
		t.Errorf("duration series = %d, %v; want 2", n, err)
	}
	// A second client on the same registry must fail loudly, not double count.
	if _, err := New(ctx, f.Endpoint(), "", time.Minute, WithMetrics(reg)); err == nil {
		t.Error("second client with the same registry succeeded")
	}
}

func TestContainerEvents(t *testing.T) {
	f := fakecri.New(t)
	f.AddImage(testImage)
	c := newTestClient(t, f, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := make(chan *runtimeapi.ContainerEventResponse, 100)
	established := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- c.GetContainerEvents(ctx, ch, func(runtimeapi.RuntimeService_GetContainerEventsClient) { close(established) })
	}()
	<-established
	// The stream is open client-side; wait until the server has subscribed.
	eventually.True(t, "the server's event subscription", func() bool { return f.EventSubscribers() > 0 })
	sbCfg := sandboxConfig("p", "u", false)
	sb, _ := c.RunPodSandbox(context.Background(), sbCfg, "")
	id, err := c.CreateContainer(context.Background(), sb, containerConfig("c", "u"), sbCfg)
	if err != nil {
		t.Fatal(err)
	}
	var got []runtimeapi.ContainerEventType
	timeout := time.After(5 * time.Second)
	for len(got) < 3 {
		select {
		case ev := <-ch:
			got = append(got, ev.ContainerEventType)
			if ev.ContainerId == id && ev.GetPodSandboxStatus().GetId() != sb {
				t.Errorf("container event without its sandbox status: %v", ev)
			}
		case <-timeout:
			t.Fatalf("events so far %v", got)
		}
	}
	want := []runtimeapi.ContainerEventType{
		runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT, runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT,
		runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT,
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("events = %v, want %v", got, want)
			break
		}
	}
	cancel()
	if err := <-done; status.Code(err) != codes.Canceled && !errors.Is(err, context.Canceled) {
		t.Errorf("GetContainerEvents after cancel = %v", err)
	}
}

// TestConcurrentUse drives the fake from many goroutines; run with -race.
func TestConcurrentUse(t *testing.T) {
	ctx := context.Background()
	f := fakecri.New(t)
	f.AddImage(testImage)
	c := newTestClient(t, f, time.Minute)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			uid := string(rune('a' + i))
			sbCfg := sandboxConfig("p"+uid, uid, false)
			sb, err := c.RunPodSandbox(ctx, sbCfg, "")
			if err != nil {
				t.Error(err)
				return
			}
			for j := range 5 {
				cfg := containerConfig("c", uid)
				cfg.Metadata.Attempt = uint32(j)
				id, err := c.CreateContainer(ctx, sb, cfg, sbCfg)
				if err != nil {
					t.Error(err)
					return
				}
				_ = c.StartContainer(ctx, id)
				_, _ = c.ListContainers(ctx, nil)
				f.ExitContainer(id, 0, "")
				_ = f.Calls()
				_ = f.ContainerConfig(id)
			}
			_ = c.StopPodSandbox(ctx, sb)
			_ = c.RemovePodSandbox(ctx, sb)
		}()
	}
	wg.Wait()
	if all, _ := c.ListContainers(ctx, nil); len(all) != 0 {
		t.Errorf("%d containers left", len(all))
	}
}
