// Package fakecri is test support: an in-memory CRI runtime served over gRPC for
// tests that want cri.Client and the wire format. It imports testing, so only
// tests may import it (cmd/nodelet checks the binary does not link it).
package fakecri

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Runtime is an in-memory CRI v1 runtime and image service served over gRPC
// on a unix socket, for tests that want the real client and wire format. It
// keeps a containerd-like state machine and is safe for concurrent use.
//
// Deliberate choices (stricter than or equal to containerd, never looser):
//   - CreateContainer needs a READY sandbox and a present image, and refuses a
//     duplicate (sandbox, name, attempt); RunPodSandbox refuses a duplicate
//     (name, namespace, uid, attempt).
//   - RemoveContainer of a RUNNING container and RemovePodSandbox of a READY
//     sandbox fail with FailedPrecondition: stop first.
//   - Remove* of an unknown ID succeeds (CRI says removal is idempotent);
//     status, start, stop, update and exec of an unknown ID fail with NotFound.
//   - StopContainer and StopPodSandbox end running containers with exit code
//     137, reason "Error", immediately (the grace period is not waited for).
//   - PullImage succeeds for any reference; use InjectError to make it fail, or
//     RequireAuth to make a repository private (then only its credential pulls).
//   - ContainerStats reports the memory usage SetMemoryUsage set (Unimplemented
//     before); ListContainerStats reports every container with a memory usage
//     set; ListPodSandboxStats answers Unimplemented (as a runtime without it)
//     until SetSandboxStats(true), then reports every READY sandbox: its
//     running containers' stats, their memory summed and their count as the
//     process count. Other stats, streaming (Exec/Attach/PortForward URLs),
//     checkpoint/restore and the Stream* list RPCs answer Unimplemented.
type Runtime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	runtimeapi.UnimplementedImageServiceServer

	t        testing.TB
	dir      string
	endpoint string
	server   *grpc.Server

	mu         sync.Mutex
	version    *runtimeapi.VersionResponse
	conditions map[string]*runtimeapi.RuntimeCondition
	sandboxes  map[string]*fakeSandbox
	containers map[string]*fakeContainer
	images     map[string]*runtimeapi.Image      // by image ID
	private    map[string]*runtimeapi.AuthConfig // repository → the credential it accepts
	names      map[string]string                 // reserved sandbox/container names → ID
	calls      []string
	// traceparents are the W3C traceparent headers the calls carried, by method.
	traceparents map[string][]string
	injected     map[string][]error
	delays       map[string]time.Duration
	execFn       func(containerID string, cmd []string) (stdout, stderr []byte, exitCode int32)
	// subscribers are the open GetContainerEvents streams, each with the
	// channel that ends it (BreakEventStreams).
	subscribers map[chan *runtimeapi.ContainerEventResponse]chan error
	nextIP      int
	lastTime    int64
	podCIDR     string
	// sandboxStats: ListPodSandboxStats is implemented (SetSandboxStats).
	sandboxStats bool
}

type fakeSandbox struct {
	id        string
	config    *runtimeapi.PodSandboxConfig
	handler   string
	state     runtimeapi.PodSandboxState
	createdAt int64
	ip        string
	nameKey   string
	// netOpen: its network was never torn down (LoseSandbox); containerd
	// refuses to remove such a sandbox until StopPodSandbox.
	netOpen bool
}

type fakeContainer struct {
	id         string
	sandboxID  string
	config     *runtimeapi.ContainerConfig
	imageID    string
	state      runtimeapi.ContainerState
	createdAt  int64
	startedAt  int64
	finishedAt int64
	exitCode   int32
	reason     string
	message    string
	logPath    string
	nameKey    string
	memory     *uint64 // memory usage in bytes (SetMemoryUsage)
}

var (
	_ runtimeapi.RuntimeServiceServer = (*Runtime)(nil)
	_ runtimeapi.ImageServiceServer   = (*Runtime)(nil)
)

// New starts a Runtime on a socket in a fresh temp dir and stops
// it when the test ends.
func New(t testing.TB) *Runtime {
	t.Helper()
	// Not t.TempDir(): long test names overflow the 108-byte sun_path limit.
	dir, err := os.MkdirTemp("", "fakecri")
	if err != nil {
		t.Fatalf("creating fake CRI socket dir: %v", err)
	}
	f := &Runtime{
		t:   t,
		dir: dir,
		version: &runtimeapi.VersionResponse{
			Version: "0.1.0", RuntimeName: "fakeruntime", RuntimeVersion: "1.0.0", RuntimeApiVersion: "v1", // the API it serves: runtimeapi is CRI v1
		},
		conditions: map[string]*runtimeapi.RuntimeCondition{
			runtimeapi.RuntimeReady: {Type: runtimeapi.RuntimeReady, Status: true},
			runtimeapi.NetworkReady: {Type: runtimeapi.NetworkReady, Status: true},
		},
		sandboxes:    map[string]*fakeSandbox{},
		containers:   map[string]*fakeContainer{},
		images:       map[string]*runtimeapi.Image{},
		private:      map[string]*runtimeapi.AuthConfig{},
		names:        map[string]string{},
		traceparents: map[string][]string{},
		injected:     map[string][]error{},
		delays:       map[string]time.Duration{},
		subscribers:  map[chan *runtimeapi.ContainerEventResponse]chan error{},
	}
	sock := filepath.Join(dir, "cri.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		_ = os.RemoveAll(dir)
		t.Fatalf("listening on fake CRI socket %s: %v", sock, err)
	}
	f.endpoint = "unix://" + sock
	f.server = grpc.NewServer(grpc.UnaryInterceptor(f.unaryInterceptor), grpc.StreamInterceptor(f.streamInterceptor))
	runtimeapi.RegisterRuntimeServiceServer(f.server, f)
	runtimeapi.RegisterImageServiceServer(f.server, f)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = f.server.Serve(lis)
	}()
	t.Cleanup(func() {
		f.server.Stop()
		<-served
		_ = os.RemoveAll(dir)
	})
	return f
}

// Endpoint is the unix:// endpoint to give cri.New.
func (f *Runtime) Endpoint() string { return f.endpoint }

// --- test controls ---

// InjectError makes the next call of method (e.g. "ListPodSandbox") fail with
// err. Several injections for one method are used in order.
func (f *Runtime) InjectError(method string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.injected[method] = append(f.injected[method], err)
}

// SetDelay makes every call of method wait d (or until the caller gives up)
// before it is served; d = 0 removes the delay.
func (f *Runtime) SetDelay(method string, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if d <= 0 {
		delete(f.delays, method)
		return
	}
	f.delays[method] = d
}

// Calls returns the names of the methods called so far, in order.
func (f *Runtime) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// TraceParents returns the W3C traceparent headers that the calls of method
// carried, in order (none from a client that propagates no trace context).
func (f *Runtime) TraceParents(method string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.traceparents[method])
}

// EventSubscribers is how many GetContainerEvents streams are open server-side.
func (f *Runtime) EventSubscribers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.subscribers)
}

// BreakEventStreams ends every open GetContainerEvents stream with err, as a
// runtime restart would.
func (f *Runtime) BreakEventStreams(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, end := range f.subscribers {
		select {
		case end <- err:
		default:
		}
	}
}

// ResetCalls forgets the recorded calls.
func (f *Runtime) ResetCalls() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = nil
}

// SetVersion replaces the Version answer (e.g. to play an old runtime).
func (f *Runtime) SetVersion(v *runtimeapi.VersionResponse) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.version = proto.Clone(v).(*runtimeapi.VersionResponse)
}

// SetCondition sets a runtime condition reported by Status (RuntimeReady, NetworkReady, ...).
func (f *Runtime) SetCondition(condType string, ok bool, reason, message string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.conditions[condType] = &runtimeapi.RuntimeCondition{Type: condType, Status: ok, Reason: reason, Message: message}
}

// SetExecSync sets what ExecSync answers for running containers (default: exit 0, no output).
func (f *Runtime) SetExecSync(fn func(containerID string, cmd []string) (stdout, stderr []byte, exitCode int32)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.execFn = fn
}

// AddImage makes ref present in the image store, as if it had been pulled.
func (f *Runtime) AddImage(ref string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.addImageLocked(ref)
}

// SetImageUser makes ref present and sets the user its config names, as a
// runtime reports it in ImageStatus: a numeric uid, or else a user name
// (neither: the image names no user).
func (f *Runtime) SetImageUser(ref string, uid *int64, username string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	img := f.addImageLocked(ref)
	img.Uid, img.Username = nil, username
	if uid != nil {
		img.Uid = &runtimeapi.Int64Value{Value: *uid}
	}
}

// RequireAuth makes repo (an image reference without tag or digest, as pods
// write it) private, like a registry with basic auth: PullImage of it then
// fails without username and password. Images already present stay usable.
func (f *Runtime) RequireAuth(repo, username, password string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.private[repo] = &runtimeapi.AuthConfig{Username: username, Password: password}
}

// ExitContainer makes a running container exit with code and reason ("" means
// "Completed" for 0 and "Error" otherwise), as if its process had ended.
func (f *Runtime) ExitContainer(id string, code int32, reason string) {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.containers[id]
	if !ok {
		f.t.Errorf("Runtime.ExitContainer: no container %s", id)
		return
	}
	if c.state != runtimeapi.ContainerState_CONTAINER_RUNNING {
		f.t.Errorf("Runtime.ExitContainer: container %s is %s, not running", id, c.state)
		return
	}
	f.exitLocked(c, code, reason)
}

// FailStart ends created container id the way containerd ends one whose start
// failed or was cut off before its process ran: exited, never started, with
// code, reason and message (containerd: 128 "StartError" and the error of the
// start; 255 "Unknown" for a start a restarted containerd lost).
func (f *Runtime) FailStart(id string, code int32, reason, message string) {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.containers[id]
	if !ok || c.state != runtimeapi.ContainerState_CONTAINER_CREATED {
		f.t.Errorf("Runtime.FailStart: no created container %s", id)
		return
	}
	f.exitLocked(c, code, reason)
	c.message = message
}

// LoseSandbox leaves ready sandbox id as a RunPodSandbox cut off by a runtime
// crash does: not ready, its network namespace still set up, so that
// RemovePodSandbox is refused until StopPodSandbox tears it down (containerd:
// "sandbox network namespace ... is not fully closed").
func (f *Runtime) LoseSandbox(id string) {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.sandboxes[id]
	if !ok {
		f.t.Errorf("Runtime.LoseSandbox: no sandbox %s", id)
		return
	}
	s.state = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	s.netOpen = true
}

// ContainerConfig returns a copy of the config a container was created with
// (nil if unknown).
func (f *Runtime) ContainerConfig(id string) *runtimeapi.ContainerConfig {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.containers[id]
	if !ok {
		return nil
	}
	return proto.Clone(c.config).(*runtimeapi.ContainerConfig)
}

// SandboxConfig returns a copy of the config a sandbox was run with (nil if unknown).
func (f *Runtime) SandboxConfig(id string) *runtimeapi.PodSandboxConfig {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.sandboxes[id]
	if !ok {
		return nil
	}
	return proto.Clone(s.config).(*runtimeapi.PodSandboxConfig)
}

// SandboxRuntimeHandler returns the runtime handler a sandbox was run with.
func (f *Runtime) SandboxRuntimeHandler(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.sandboxes[id]; ok {
		return s.handler
	}
	return ""
}

// --- interception: call log, delays, injected errors ---

func methodName(fullMethod string) string {
	return fullMethod[strings.LastIndex(fullMethod, "/")+1:]
}

func (f *Runtime) before(ctx context.Context, method string) error {
	f.mu.Lock()
	f.calls = append(f.calls, method)
	md, _ := metadata.FromIncomingContext(ctx)
	f.traceparents[method] = append(f.traceparents[method], md.Get("traceparent")...)
	d := f.delays[method]
	var err error
	if q := f.injected[method]; len(q) > 0 {
		err, f.injected[method] = q[0], q[1:]
	}
	f.mu.Unlock()
	if d > 0 {
		timer := time.NewTimer(d)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
	return err
}

func (f *Runtime) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := f.before(ctx, methodName(info.FullMethod)); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (f *Runtime) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := f.before(ss.Context(), methodName(info.FullMethod)); err != nil {
		return err
	}
	return handler(srv, ss)
}

// --- helpers (call with f.mu held) ---

// nowLocked returns a strictly increasing nanosecond timestamp, so "newest
// first" orderings are deterministic even on coarse clocks.
func (f *Runtime) nowLocked() int64 {
	n := time.Now().UnixNano()
	if n <= f.lastTime {
		n = f.lastTime + 1
	}
	f.lastTime = n
	return n
}

func newID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func normalizeRef(ref string) string {
	if strings.Contains(ref, "@") {
		return ref
	}
	if i, j := strings.LastIndex(ref, ":"), strings.LastIndex(ref, "/"); i <= j {
		return ref + ":latest"
	}
	return ref
}

// repository strips the tag and digest from ref.
func repository(ref string) string {
	ref, _, _ = strings.Cut(ref, "@")
	if i, j := strings.LastIndex(ref, ":"), strings.LastIndex(ref, "/"); i > j {
		return ref[:i]
	}
	return ref
}

func (f *Runtime) addImageLocked(ref string) *runtimeapi.Image {
	if img := f.findImageLocked(ref); img != nil {
		return img
	}
	sum := sha256.Sum256([]byte(normalizeRef(ref)))
	id := "sha256:" + hex.EncodeToString(sum[:])
	img := &runtimeapi.Image{Id: id, Size: 1 << 20}
	if strings.Contains(ref, "@") {
		img.RepoDigests = []string{ref}
	} else {
		img.RepoTags = []string{normalizeRef(ref)}
		img.RepoDigests = []string{strings.SplitN(normalizeRef(ref), ":", 2)[0] + "@" + id}
	}
	f.images[id] = img
	return img
}

func (f *Runtime) findImageLocked(ref string) *runtimeapi.Image {
	if ref == "" {
		return nil
	}
	if img, ok := f.images[ref]; ok {
		return img
	}
	if img, ok := f.images["sha256:"+ref]; ok {
		return img
	}
	n := normalizeRef(ref)
	for _, img := range f.images {
		if slices.Contains(img.RepoTags, n) || slices.Contains(img.RepoDigests, ref) {
			return img
		}
	}
	return nil
}

func (f *Runtime) exitLocked(c *fakeContainer, code int32, reason string) {
	if reason == "" {
		reason = "Completed"
		if code != 0 {
			reason = "Error"
		}
	}
	c.state = runtimeapi.ContainerState_CONTAINER_EXITED
	c.finishedAt = f.nowLocked()
	c.exitCode = code
	c.reason = reason
	f.emitLocked(c.id, c.sandboxID, runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT)
}

func hostNetwork(cfg *runtimeapi.PodSandboxConfig) bool {
	return cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetNetwork() == runtimeapi.NamespaceMode_NODE
}

func (f *Runtime) sandboxStatusLocked(s *fakeSandbox) *runtimeapi.PodSandboxStatus {
	st := &runtimeapi.PodSandboxStatus{
		Id:             s.id,
		Metadata:       proto.Clone(s.config.GetMetadata()).(*runtimeapi.PodSandboxMetadata),
		State:          s.state,
		CreatedAt:      s.createdAt,
		Network:        &runtimeapi.PodSandboxNetworkStatus{},
		Labels:         maps.Clone(s.config.GetLabels()),
		Annotations:    maps.Clone(s.config.GetAnnotations()),
		RuntimeHandler: s.handler,
		Linux: &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{
			Options: proto.Clone(namespaceOptions(s.config)).(*runtimeapi.NamespaceOption),
		}},
	}
	// Like containerd, a stopped sandbox has released its network.
	if s.state == runtimeapi.PodSandboxState_SANDBOX_READY {
		st.Network.Ip = s.ip
	}
	return st
}

func namespaceOptions(cfg *runtimeapi.PodSandboxConfig) *runtimeapi.NamespaceOption {
	if o := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions(); o != nil {
		return o
	}
	return &runtimeapi.NamespaceOption{}
}

func (f *Runtime) containerLocked(c *fakeContainer) *runtimeapi.Container {
	return &runtimeapi.Container{
		Id:           c.id,
		PodSandboxId: c.sandboxID,
		Metadata:     proto.Clone(c.config.GetMetadata()).(*runtimeapi.ContainerMetadata),
		Image:        proto.Clone(c.config.GetImage()).(*runtimeapi.ImageSpec),
		ImageRef:     c.imageID,
		ImageId:      c.imageID,
		State:        c.state,
		CreatedAt:    c.createdAt,
		Labels:       maps.Clone(c.config.GetLabels()),
		Annotations:  maps.Clone(c.config.GetAnnotations()),
	}
}

func (f *Runtime) containerStatusLocked(c *fakeContainer) *runtimeapi.ContainerStatus {
	st := &runtimeapi.ContainerStatus{
		Id:          c.id,
		Metadata:    proto.Clone(c.config.GetMetadata()).(*runtimeapi.ContainerMetadata),
		State:       c.state,
		CreatedAt:   c.createdAt,
		StartedAt:   c.startedAt,
		FinishedAt:  c.finishedAt,
		ExitCode:    c.exitCode,
		Image:       proto.Clone(c.config.GetImage()).(*runtimeapi.ImageSpec),
		ImageRef:    c.imageID,
		ImageId:     c.imageID,
		Reason:      c.reason,
		Message:     c.message,
		Labels:      maps.Clone(c.config.GetLabels()),
		Annotations: maps.Clone(c.config.GetAnnotations()),
		LogPath:     c.logPath,
	}
	for _, m := range c.config.GetMounts() {
		st.Mounts = append(st.Mounts, proto.Clone(m).(*runtimeapi.Mount))
	}
	if r := c.config.GetLinux().GetResources(); r != nil {
		st.Resources = &runtimeapi.ContainerResources{Linux: proto.Clone(r).(*runtimeapi.LinuxContainerResources)}
	}
	return st
}

// emitLocked fans an event out to GetContainerEvents streams; a subscriber
// that does not keep up loses events rather than blocking the runtime.
func (f *Runtime) emitLocked(id, sandboxID string, typ runtimeapi.ContainerEventType) {
	if len(f.subscribers) == 0 {
		return
	}
	ev := &runtimeapi.ContainerEventResponse{ContainerId: id, ContainerEventType: typ, CreatedAt: f.nowLocked()}
	if s, ok := f.sandboxes[sandboxID]; ok {
		ev.PodSandboxStatus = f.sandboxStatusLocked(s)
		for _, c := range f.sortedContainersLocked() {
			if c.sandboxID == sandboxID {
				ev.ContainersStatuses = append(ev.ContainersStatuses, f.containerStatusLocked(c))
			}
		}
	}
	for ch := range f.subscribers {
		select {
		case ch <- ev:
		default:
		}
	}
}

func (f *Runtime) sortedContainersLocked() []*fakeContainer {
	out := slices.Collect(maps.Values(f.containers))
	slices.SortFunc(out, func(a, b *fakeContainer) int { return cmp.Compare(a.createdAt, b.createdAt) })
	return out
}

func labelsMatch(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// --- RuntimeService ---

func (f *Runtime) Version(_ context.Context, _ *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return proto.Clone(f.version).(*runtimeapi.VersionResponse), nil
}

func (f *Runtime) RunPodSandbox(_ context.Context, req *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	cfg := req.GetConfig()
	m := cfg.GetMetadata()
	if m.GetName() == "" || m.GetNamespace() == "" || m.GetUid() == "" {
		return nil, status.Error(codes.InvalidArgument, "sandbox config must have metadata name, namespace and uid")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	key := fmt.Sprintf("sandbox/%s_%s_%s_%d", m.GetName(), m.GetNamespace(), m.GetUid(), m.GetAttempt())
	if id, ok := f.names[key]; ok {
		return nil, status.Errorf(codes.AlreadyExists, "sandbox name %q is reserved for %s", key, id)
	}
	s := &fakeSandbox{
		id:        newID(),
		config:    proto.Clone(cfg).(*runtimeapi.PodSandboxConfig),
		handler:   req.GetRuntimeHandler(),
		state:     runtimeapi.PodSandboxState_SANDBOX_READY,
		createdAt: f.nowLocked(),
		nameKey:   key,
	}
	if !hostNetwork(cfg) {
		s.ip = fmt.Sprintf("10.88.%d.%d", f.nextIP/250, f.nextIP%250+2)
		f.nextIP++
	}
	f.sandboxes[s.id] = s
	f.names[key] = s.id
	f.emitLocked(s.id, s.id, runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT)
	f.emitLocked(s.id, s.id, runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT)
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: s.id}, nil
}

func (f *Runtime) StopPodSandbox(_ context.Context, req *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.sandboxes[req.GetPodSandboxId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "pod sandbox %s not found", req.GetPodSandboxId())
	}
	for _, c := range f.sortedContainersLocked() {
		if c.sandboxID == s.id && c.state == runtimeapi.ContainerState_CONTAINER_RUNNING {
			f.exitLocked(c, 137, "Error")
		}
	}
	s.netOpen = false
	if s.state == runtimeapi.PodSandboxState_SANDBOX_READY {
		s.state = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
		f.emitLocked(s.id, s.id, runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT)
	}
	return &runtimeapi.StopPodSandboxResponse{}, nil
}

func (f *Runtime) RemovePodSandbox(_ context.Context, req *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.sandboxes[req.GetPodSandboxId()]
	if !ok {
		return &runtimeapi.RemovePodSandboxResponse{}, nil
	}
	if s.state == runtimeapi.PodSandboxState_SANDBOX_READY {
		return nil, status.Errorf(codes.FailedPrecondition, "pod sandbox %s is still ready: stop it first", s.id)
	}
	if s.netOpen {
		return nil, status.Errorf(codes.Unknown, "sandbox network namespace of %s is not fully closed", s.id)
	}
	for _, c := range f.sortedContainersLocked() {
		if c.sandboxID == s.id {
			delete(f.containers, c.id)
			delete(f.names, c.nameKey)
			f.emitLocked(c.id, s.id, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT)
		}
	}
	f.emitLocked(s.id, s.id, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT)
	delete(f.sandboxes, s.id)
	delete(f.names, s.nameKey)
	return &runtimeapi.RemovePodSandboxResponse{}, nil
}

func (f *Runtime) PodSandboxStatus(_ context.Context, req *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.sandboxes[req.GetPodSandboxId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "pod sandbox %s not found", req.GetPodSandboxId())
	}
	return &runtimeapi.PodSandboxStatusResponse{Status: f.sandboxStatusLocked(s)}, nil
}

func (f *Runtime) ListPodSandbox(_ context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	flt := req.GetFilter()
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*runtimeapi.PodSandbox, 0, len(f.sandboxes))
	for _, s := range f.sandboxes {
		if flt.GetId() != "" && !strings.HasPrefix(s.id, flt.GetId()) {
			continue
		}
		if flt.GetState() != nil && flt.GetState().GetState() != s.state {
			continue
		}
		if !labelsMatch(s.config.GetLabels(), flt.GetLabelSelector()) {
			continue
		}
		out = append(out, &runtimeapi.PodSandbox{
			Id:             s.id,
			Metadata:       proto.Clone(s.config.GetMetadata()).(*runtimeapi.PodSandboxMetadata),
			State:          s.state,
			CreatedAt:      s.createdAt,
			Labels:         maps.Clone(s.config.GetLabels()),
			Annotations:    maps.Clone(s.config.GetAnnotations()),
			RuntimeHandler: s.handler,
		})
	}
	slices.SortFunc(out, func(a, b *runtimeapi.PodSandbox) int { return cmp.Compare(a.CreatedAt, b.CreatedAt) })
	return &runtimeapi.ListPodSandboxResponse{Items: out}, nil
}

func (f *Runtime) CreateContainer(_ context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	cfg := req.GetConfig()
	if cfg.GetMetadata().GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "container config must have a metadata name")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.sandboxes[req.GetPodSandboxId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "pod sandbox %s not found", req.GetPodSandboxId())
	}
	if s.state != runtimeapi.PodSandboxState_SANDBOX_READY {
		return nil, status.Errorf(codes.FailedPrecondition, "pod sandbox %s is not ready", s.id)
	}
	img := f.findImageLocked(cfg.GetImage().GetImage())
	if img == nil {
		return nil, status.Errorf(codes.NotFound, "image %q not present: pull it first", cfg.GetImage().GetImage())
	}
	key := fmt.Sprintf("container/%s/%s_%d", s.id, cfg.GetMetadata().GetName(), cfg.GetMetadata().GetAttempt())
	if id, ok := f.names[key]; ok {
		return nil, status.Errorf(codes.AlreadyExists, "container name %q is reserved for %s", key, id)
	}
	c := &fakeContainer{
		id:        newID(),
		sandboxID: s.id,
		config:    proto.Clone(cfg).(*runtimeapi.ContainerConfig),
		imageID:   img.Id,
		state:     runtimeapi.ContainerState_CONTAINER_CREATED,
		createdAt: f.nowLocked(),
		nameKey:   key,
	}
	if dir, p := s.config.GetLogDirectory(), cfg.GetLogPath(); dir != "" && p != "" {
		c.logPath = filepath.Join(dir, p)
	}
	f.containers[c.id] = c
	f.names[key] = c.id
	f.emitLocked(c.id, s.id, runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT)
	return &runtimeapi.CreateContainerResponse{ContainerId: c.id}, nil
}

func (f *Runtime) StartContainer(_ context.Context, req *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.containers[req.GetContainerId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "container %s not found", req.GetContainerId())
	}
	if c.state != runtimeapi.ContainerState_CONTAINER_CREATED {
		return nil, status.Errorf(codes.FailedPrecondition, "container %s is %s, not created", c.id, c.state)
	}
	if s := f.sandboxes[c.sandboxID]; s == nil || s.state != runtimeapi.PodSandboxState_SANDBOX_READY {
		return nil, status.Errorf(codes.FailedPrecondition, "pod sandbox %s of container %s is not ready", c.sandboxID, c.id)
	}
	c.state = runtimeapi.ContainerState_CONTAINER_RUNNING
	c.startedAt = f.nowLocked()
	f.emitLocked(c.id, c.sandboxID, runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT)
	return &runtimeapi.StartContainerResponse{}, nil
}

func (f *Runtime) StopContainer(_ context.Context, req *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.containers[req.GetContainerId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "container %s not found", req.GetContainerId())
	}
	// Like containerd, stopping a created or exited container is a no-op.
	if c.state == runtimeapi.ContainerState_CONTAINER_RUNNING {
		f.exitLocked(c, 137, "Error")
	}
	return &runtimeapi.StopContainerResponse{}, nil
}

func (f *Runtime) RemoveContainer(_ context.Context, req *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.containers[req.GetContainerId()]
	if !ok {
		return &runtimeapi.RemoveContainerResponse{}, nil
	}
	if c.state == runtimeapi.ContainerState_CONTAINER_RUNNING {
		return nil, status.Errorf(codes.FailedPrecondition, "container %s is running: stop it first", c.id)
	}
	f.emitLocked(c.id, c.sandboxID, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT)
	delete(f.containers, c.id)
	delete(f.names, c.nameKey)
	return &runtimeapi.RemoveContainerResponse{}, nil
}

func (f *Runtime) ListContainers(_ context.Context, req *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	flt := req.GetFilter()
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*runtimeapi.Container, 0, len(f.containers))
	for _, c := range f.sortedContainersLocked() {
		if flt.GetId() != "" && !strings.HasPrefix(c.id, flt.GetId()) {
			continue
		}
		if flt.GetPodSandboxId() != "" && !strings.HasPrefix(c.sandboxID, flt.GetPodSandboxId()) {
			continue
		}
		if flt.GetState() != nil && flt.GetState().GetState() != c.state {
			continue
		}
		if !labelsMatch(c.config.GetLabels(), flt.GetLabelSelector()) {
			continue
		}
		out = append(out, f.containerLocked(c))
	}
	return &runtimeapi.ListContainersResponse{Containers: out}, nil
}

func (f *Runtime) ContainerStatus(_ context.Context, req *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.containers[req.GetContainerId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "container %s not found", req.GetContainerId())
	}
	return &runtimeapi.ContainerStatusResponse{Status: f.containerStatusLocked(c)}, nil
}

// SetMemoryUsage makes ContainerStats report the container using bytes of memory.
func (f *Runtime) SetMemoryUsage(id string, bytes uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.containers[id]; ok {
		c.memory = &bytes
	}
}

func (f *Runtime) ContainerStats(_ context.Context, req *runtimeapi.ContainerStatsRequest) (*runtimeapi.ContainerStatsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.containers[req.GetContainerId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "container %s not found", req.GetContainerId())
	}
	if c.memory == nil {
		return nil, status.Error(codes.Unimplemented, "method ContainerStats not implemented")
	}
	return &runtimeapi.ContainerStatsResponse{Stats: f.containerStatsLocked(c)}, nil
}

func (f *Runtime) containerStatsLocked(c *fakeContainer) *runtimeapi.ContainerStats {
	return &runtimeapi.ContainerStats{
		Attributes: &runtimeapi.ContainerAttributes{Id: c.id, Metadata: proto.Clone(c.config.GetMetadata()).(*runtimeapi.ContainerMetadata)},
		Memory: &runtimeapi.MemoryUsage{Timestamp: f.nowLocked(),
			UsageBytes: &runtimeapi.UInt64Value{Value: *c.memory}, WorkingSetBytes: &runtimeapi.UInt64Value{Value: *c.memory}},
	}
}

func (f *Runtime) ListContainerStats(_ context.Context, _ *runtimeapi.ListContainerStatsRequest) (*runtimeapi.ListContainerStatsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*runtimeapi.ContainerStats
	for _, c := range f.sortedContainersLocked() {
		if c.memory != nil {
			out = append(out, f.containerStatsLocked(c))
		}
	}
	return &runtimeapi.ListContainerStatsResponse{Stats: out}, nil
}

// SetSandboxStats makes ListPodSandboxStats implemented (on) or Unimplemented.
func (f *Runtime) SetSandboxStats(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sandboxStats = on
}

func (f *Runtime) ListPodSandboxStats(_ context.Context, _ *runtimeapi.ListPodSandboxStatsRequest) (*runtimeapi.ListPodSandboxStatsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.sandboxStats {
		return nil, status.Error(codes.Unimplemented, "method ListPodSandboxStats not implemented")
	}
	bySandbox := map[string]*runtimeapi.PodSandboxStats{}
	var out []*runtimeapi.PodSandboxStats
	for _, s := range f.sandboxes {
		if s.state != runtimeapi.PodSandboxState_SANDBOX_READY {
			continue
		}
		ps := &runtimeapi.PodSandboxStats{
			Attributes: &runtimeapi.PodSandboxAttributes{Id: s.id, Metadata: proto.Clone(s.config.GetMetadata()).(*runtimeapi.PodSandboxMetadata),
				Labels: maps.Clone(s.config.GetLabels())},
			Linux: &runtimeapi.LinuxPodSandboxStats{
				Memory:  &runtimeapi.MemoryUsage{Timestamp: f.nowLocked(), WorkingSetBytes: &runtimeapi.UInt64Value{}, UsageBytes: &runtimeapi.UInt64Value{}},
				Process: &runtimeapi.ProcessUsage{Timestamp: f.nowLocked(), ProcessCount: &runtimeapi.UInt64Value{}},
			},
		}
		bySandbox[s.id] = ps
		out = append(out, ps)
	}
	slices.SortFunc(out, func(a, b *runtimeapi.PodSandboxStats) int {
		return cmp.Compare(a.GetAttributes().GetId(), b.GetAttributes().GetId())
	})
	for _, c := range f.sortedContainersLocked() {
		ps := bySandbox[c.sandboxID]
		if ps == nil || c.state != runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		ps.Linux.Process.ProcessCount.Value++
		if c.memory != nil {
			ps.Linux.Containers = append(ps.Linux.Containers, f.containerStatsLocked(c))
			ps.Linux.Memory.WorkingSetBytes.Value += *c.memory
			ps.Linux.Memory.UsageBytes.Value += *c.memory
		}
	}
	return &runtimeapi.ListPodSandboxStatsResponse{Stats: out}, nil
}

func (f *Runtime) UpdateContainerResources(_ context.Context, req *runtimeapi.UpdateContainerResourcesRequest) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.containers[req.GetContainerId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "container %s not found", req.GetContainerId())
	}
	if c.state == runtimeapi.ContainerState_CONTAINER_EXITED {
		return nil, status.Errorf(codes.FailedPrecondition, "container %s has exited", c.id)
	}
	if req.GetLinux() != nil {
		if c.config.Linux == nil {
			c.config.Linux = &runtimeapi.LinuxContainerConfig{}
		}
		c.config.Linux.Resources = proto.Clone(req.GetLinux()).(*runtimeapi.LinuxContainerResources)
	}
	return &runtimeapi.UpdateContainerResourcesResponse{}, nil
}

func (f *Runtime) ReopenContainerLog(_ context.Context, req *runtimeapi.ReopenContainerLogRequest) (*runtimeapi.ReopenContainerLogResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.containers[req.GetContainerId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "container %s not found", req.GetContainerId())
	}
	if c.state != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return nil, status.Errorf(codes.FailedPrecondition, "container %s is not running", c.id)
	}
	// As containerd: the log is opened again by name, a new file if it was renamed.
	if c.logPath != "" {
		lf, err := os.OpenFile(c.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "reopening the log of container %s: %v", c.id, err)
		}
		_ = lf.Close()
	}
	return &runtimeapi.ReopenContainerLogResponse{}, nil
}

func (f *Runtime) ExecSync(_ context.Context, req *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	f.mu.Lock()
	c, ok := f.containers[req.GetContainerId()]
	fn := f.execFn
	running := ok && c.state == runtimeapi.ContainerState_CONTAINER_RUNNING
	f.mu.Unlock()
	if !ok {
		return nil, status.Errorf(codes.NotFound, "container %s not found", req.GetContainerId())
	}
	if !running {
		return nil, status.Errorf(codes.FailedPrecondition, "container %s is not running", req.GetContainerId())
	}
	if fn == nil {
		return &runtimeapi.ExecSyncResponse{}, nil
	}
	// As containerd: a command still running at the request's timeout is stopped and the
	// call answers DeadlineExceeded (the fake waits for fn, standing in for the kill).
	type result struct {
		stdout, stderr []byte
		code           int32
	}
	done := make(chan result, 1)
	go func() {
		stdout, stderr, code := fn(req.GetContainerId(), req.GetCmd())
		done <- result{stdout, stderr, code}
	}()
	var expired <-chan time.Time
	if s := req.GetTimeout(); s > 0 {
		timer := time.NewTimer(time.Duration(s) * time.Second)
		defer timer.Stop()
		expired = timer.C
	}
	select {
	case r := <-done:
		return &runtimeapi.ExecSyncResponse{Stdout: r.stdout, Stderr: r.stderr, ExitCode: r.code}, nil
	case <-expired:
		<-done
		return nil, status.Errorf(codes.DeadlineExceeded, "failed to exec in container: timeout %ds exceeded: %v", req.GetTimeout(), context.DeadlineExceeded)
	}
}

func (f *Runtime) UpdateRuntimeConfig(_ context.Context, req *runtimeapi.UpdateRuntimeConfigRequest) (*runtimeapi.UpdateRuntimeConfigResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.podCIDR = req.GetRuntimeConfig().GetNetworkConfig().GetPodCidr()
	return &runtimeapi.UpdateRuntimeConfigResponse{}, nil
}

// PodCIDR is the pod CIDR the last UpdateRuntimeConfig set ("" before any).
func (f *Runtime) PodCIDR() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.podCIDR
}

func (f *Runtime) Status(_ context.Context, _ *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := &runtimeapi.RuntimeStatus{}
	for _, k := range slices.Sorted(maps.Keys(f.conditions)) {
		st.Conditions = append(st.Conditions, proto.Clone(f.conditions[k]).(*runtimeapi.RuntimeCondition))
	}
	return &runtimeapi.StatusResponse{Status: st}, nil
}

func (f *Runtime) RuntimeConfig(_ context.Context, _ *runtimeapi.RuntimeConfigRequest) (*runtimeapi.RuntimeConfigResponse, error) {
	return &runtimeapi.RuntimeConfigResponse{Linux: &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS}}, nil
}

func (f *Runtime) GetContainerEvents(_ *runtimeapi.GetEventsRequest, stream grpc.ServerStreamingServer[runtimeapi.ContainerEventResponse]) error {
	ch := make(chan *runtimeapi.ContainerEventResponse, 1000)
	end := make(chan error, 1)
	f.mu.Lock()
	f.subscribers[ch] = end
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.subscribers, ch)
		f.mu.Unlock()
	}()
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case err := <-end:
			return err
		case ev := <-ch:
			if err := stream.Send(ev); err != nil {
				return err
			}
		}
	}
}

// --- ImageService ---

func (f *Runtime) ListImages(_ context.Context, req *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var want *runtimeapi.Image
	if ref := req.GetFilter().GetImage().GetImage(); ref != "" {
		if want = f.findImageLocked(ref); want == nil {
			return &runtimeapi.ListImagesResponse{}, nil
		}
	}
	var out []*runtimeapi.Image
	for _, id := range slices.Sorted(maps.Keys(f.images)) {
		if want == nil || want.Id == id {
			out = append(out, proto.Clone(f.images[id]).(*runtimeapi.Image))
		}
	}
	return &runtimeapi.ListImagesResponse{Images: out}, nil
}

func (f *Runtime) ImageStatus(_ context.Context, req *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	img := f.findImageLocked(req.GetImage().GetImage())
	if img == nil {
		return &runtimeapi.ImageStatusResponse{}, nil
	}
	return &runtimeapi.ImageStatusResponse{Image: proto.Clone(img).(*runtimeapi.Image)}, nil
}

func (f *Runtime) PullImage(_ context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	ref := req.GetImage().GetImage()
	if ref == "" {
		return nil, status.Error(codes.InvalidArgument, "image reference is empty")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if want, ok := f.private[repository(ref)]; ok {
		if got := req.GetAuth(); got.GetUsername() != want.Username || got.GetPassword() != want.Password {
			// containerd's wording when the registry answers 401.
			return nil, status.Errorf(codes.Unknown, "failed to pull and unpack image %q: failed to resolve reference %q: "+
				"pull access denied, repository does not exist or may require authorization: authorization failed", ref, ref)
		}
	}
	return &runtimeapi.PullImageResponse{ImageRef: f.addImageLocked(ref).Id}, nil
}

func (f *Runtime) RemoveImage(_ context.Context, req *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	// Like containerd, removing by one tag drops every tag of the image.
	if img := f.findImageLocked(req.GetImage().GetImage()); img != nil {
		delete(f.images, img.Id)
	}
	return &runtimeapi.RemoveImageResponse{}, nil
}

func (f *Runtime) ImageFsInfo(_ context.Context, _ *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var used uint64
	for _, img := range f.images {
		used += img.Size
	}
	now := f.nowLocked()
	return &runtimeapi.ImageFsInfoResponse{
		ImageFilesystems: []*runtimeapi.FilesystemUsage{{
			Timestamp:  now,
			FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: filepath.Join(f.dir, "images")},
			UsedBytes:  &runtimeapi.UInt64Value{Value: used},
			InodesUsed: &runtimeapi.UInt64Value{Value: uint64(len(f.images))},
		}},
		ContainerFilesystems: []*runtimeapi.FilesystemUsage{{
			Timestamp:  now,
			FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: filepath.Join(f.dir, "containers")},
			UsedBytes:  &runtimeapi.UInt64Value{Value: 0},
			InodesUsed: &runtimeapi.UInt64Value{Value: 0},
		}},
	}, nil
}
