package framework

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/testsupport/eventually"
	"github.com/nodelet/nodelet/internal/testsupport/fakecri"
)

// The proxy relays unary and streaming calls and their errors unchanged, and
// holds exactly the StartContainer it was asked to: that container stays
// CREATED in the runtime, as if the agent had died between create and start.
func TestCRIProxyRelaysAndHoldsOneStart(t *testing.T) {
	rt := fakecri.New(t)
	rt.AddImage("busybox:1")
	p := StartCRIProxy(t, rt.Endpoint())
	conn, err := grpc.NewClient(p.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := runtimeapi.NewRuntimeServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if v, err := c.Version(ctx, &runtimeapi.VersionRequest{}); err != nil || v.RuntimeName != "fakeruntime" {
		t.Fatalf("Version through the proxy = %v, %v", v, err)
	}
	if _, err := runtimeapi.NewImageServiceClient(conn).ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: "busybox:1"}}); err != nil {
		t.Fatalf("ImageStatus through the proxy: %v", err)
	}
	_, err = c.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: "nope"})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("StartContainer of an unknown container through the proxy = %v, want the runtime's NotFound", err)
	}

	events, err := c.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// The stream reaches the runtime asynchronously through the proxy; an event
	// emitted before it subscribes is lost (CI once waited 30 s for one).
	eventually.True(t, "the runtime's event subscription through the proxy", func() bool { return rt.EventSubscribers() > 0 })
	held := p.HoldStart("ns", "p", "setup")
	sbCfg := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "ns", Uid: "uid-1"},
		Labels:   map[string]string{LabelPodUID: "uid-1"},
	}
	sb, err := c.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sbCfg})
	if err != nil {
		t.Fatal(err)
	}
	create := func(name string) string {
		t.Helper()
		resp, err := c.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, SandboxConfig: sbCfg, Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: name}, Image: &runtimeapi.ImageSpec{Image: "busybox:1"},
			Labels: map[string]string{LabelPodNamespace: "ns", LabelPodName: "p", LabelPodUID: "uid-1", LabelContainerName: name},
		}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.ContainerId
	}
	other, setup := create("other"), create("setup")
	if _, err := c.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: other}); err != nil {
		t.Fatalf("a container the proxy does not hold: %v", err)
	}
	if ev, err := events.Recv(); err != nil || ev.ContainerId == "" {
		t.Fatalf("container event through the proxy = %v, %v", ev, err)
	}

	startCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := c.StartContainer(startCtx, &runtimeapi.StartContainerRequest{ContainerId: setup})
		errc <- err
	}()
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the held StartContainer never arrived")
	}
	stop() // the agent gives up (or dies)
	if err := <-errc; err == nil {
		t.Fatal("a held StartContainer succeeded")
	}
	st, err := c.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: setup})
	if err != nil || st.Status.State != runtimeapi.ContainerState_CONTAINER_CREATED {
		t.Fatalf("held container = %v, %v; want it left CREATED", st, err)
	}
}

// SetDelay holds every call, unary or streaming, for the delay before the runtime
// sees it; concurrent calls wait side by side (a slow runtime, not a queue), and
// SetDelay(0) ends it.
func TestCRIProxyDelaysEveryCall(t *testing.T) {
	rt := fakecri.New(t)
	p := StartCRIProxy(t, rt.Endpoint())
	conn, err := grpc.NewClient(p.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := runtimeapi.NewRuntimeServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The first call also dials; its time is not the proxy's.
	if _, err := c.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		t.Fatal(err)
	}

	const delay = 300 * time.Millisecond
	p.SetDelay(delay)
	start := time.Now()
	if _, err := c.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < delay {
		t.Errorf("a unary call through a proxy delaying %v took %v", delay, d)
	}

	const calls = 5
	start = time.Now()
	errs := make(chan error, calls)
	for range calls {
		go func() {
			_, err := c.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
			errs <- err
		}()
	}
	for range calls {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// Side by side: well under calls × delay even on a loaded machine.
	if d := time.Since(start); d < delay || d >= calls*delay {
		t.Errorf("%d concurrent calls through a proxy delaying %v took %v; want [%v, %v)", calls, delay, d, delay, calls*delay)
	}

	start = time.Now()
	events, err := c.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// The stream opens at the runtime only after the delay.
	eventually.True(t, "the runtime's event subscription through the proxy", func() bool { return rt.EventSubscribers() > 0 })
	if d := time.Since(start); d < delay {
		t.Errorf("a streaming call reached the runtime %v after it was made; want at least %v", d, delay)
	}
	_ = events

	shortCtx, stop := context.WithTimeout(ctx, delay/3)
	_, err = c.Version(shortCtx, &runtimeapi.VersionRequest{})
	stop()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("a call whose deadline ends while the proxy delays it = %v, want DeadlineExceeded", err)
	}

	p.SetDelay(0)
	start = time.Now()
	if _, err := c.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d >= delay {
		t.Errorf("a call after SetDelay(0) took %v", d)
	}
}
