package pluginmanager

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/nodelet/nodelet/internal/testsupport/eventually"
	"github.com/nodelet/nodelet/internal/testsupport/leakcheck"
)

// listenUnix makes a unix socket at path, creating its directory.
func listenUnix(t *testing.T, path string) *net.UnixListener {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	return l.(*net.UnixListener)
}

// fakePlugin serves the registration API on a socket in the directory.
type fakePlugin struct {
	registerapi.UnimplementedRegistrationServer
	info     *registerapi.PluginInfo
	statuses chan *registerapi.RegistrationStatus
	srv      *grpc.Server
	done     chan struct{}
}

func (p *fakePlugin) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return p.info, nil
}

func (p *fakePlugin) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	p.statuses <- s
	return &registerapi.RegistrationStatusResponse{}, nil
}

func startPlugin(t *testing.T, dir, pluginType, name string) *fakePlugin {
	t.Helper()
	p := &fakePlugin{
		info:     &registerapi.PluginInfo{Type: pluginType, Name: name, Endpoint: "/plugins/" + name + ".sock", SupportedVersions: []string{"v1"}},
		statuses: make(chan *registerapi.RegistrationStatus, 10),
		srv:      grpc.NewServer(),
		done:     make(chan struct{}),
	}
	registerapi.RegisterRegistrationServer(p.srv, p)
	l := listenUnix(t, filepath.Join(dir, name+"-reg.sock"))
	go func() {
		defer close(p.done)
		_ = p.srv.Serve(l)
	}()
	t.Cleanup(p.stop)
	return p
}

// stop ends the server; closing the listener removes its socket.
func (p *fakePlugin) stop() {
	p.srv.Stop()
	<-p.done
}

func (p *fakePlugin) status(t *testing.T) *registerapi.RegistrationStatus {
	t.Helper()
	select {
	case s := <-p.statuses:
		return s
	case <-time.After(eventually.Timeout):
		t.Fatal("no registration status sent")
		return nil
	}
}

// recordingHandler records its calls; validation fails with refuse,
// register with registerErrs in turn, then succeeds.
type recordingHandler struct {
	refuse       error
	mu           sync.Mutex
	calls        []string
	registerErrs []error
}

func (h *recordingHandler) record(c string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, c)
}

func (h *recordingHandler) get() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.calls)
}

func (h *recordingHandler) ValidatePlugin(_ context.Context, p Plugin) error {
	h.record(fmt.Sprintf("validate %s %s %v %s", p.Name, p.Endpoint, p.Versions, filepath.Base(p.Socket)))
	return h.refuse
}

func (h *recordingHandler) RegisterPlugin(_ context.Context, p Plugin) error {
	h.record("register " + p.Name)
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.registerErrs) == 0 {
		return nil
	}
	err := h.registerErrs[0]
	h.registerErrs = h.registerErrs[1:]
	return err
}

func (h *recordingHandler) DeRegisterPlugin(_ context.Context, p Plugin) {
	h.record(fmt.Sprintf("deregister %s %s", p.Name, filepath.Base(p.Socket)))
}

// startWatcher runs a watcher until the test ends and checks it joined its
// goroutines.
func startWatcher(t *testing.T, opts ...Option) string {
	t.Helper()
	root, err := os.MkdirTemp("", "pm") // short: sun_path is 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	dir := RegistryDir(root)
	w, err := New(dir, append(opts, WithPollInterval(10*time.Millisecond))...)
	if err != nil {
		t.Fatal(err)
	}
	leaks := leakcheck.Check(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		leaks()
	})
	eventually.True(t, "registration directory created", func() bool {
		fi, err := os.Stat(dir)
		return err == nil && fi.IsDir()
	})
	return dir
}

func TestRegistryDir(t *testing.T) {
	if got := RegistryDir("/var/lib/kubelet"); got != "/var/lib/kubelet/plugins_registry" {
		t.Errorf("RegistryDir = %s", got)
	}
}

func TestWatcherHandsEachTypeToItsHandler(t *testing.T) {
	a, b := &recordingHandler{}, &recordingHandler{}
	dir := startWatcher(t, WithHandler("APlugin", a), WithHandler("BPlugin", b))
	pa := startPlugin(t, dir, "APlugin", "a")
	if s := pa.status(t); !s.PluginRegistered || s.Error != "" {
		t.Fatalf("status = %+v, want registered", s)
	}
	pb := startPlugin(t, dir, "BPlugin", "b")
	if s := pb.status(t); !s.PluginRegistered {
		t.Fatalf("status = %+v, want registered", s)
	}
	if got, want := a.get(), []string{"validate a /plugins/a.sock [v1] a-reg.sock", "register a"}; !slices.Equal(got, want) {
		t.Errorf("A handler calls = %q, want %q", got, want)
	}
	pb.stop()
	eventually.True(t, "b deregistered through its handler", func() bool {
		return slices.Equal(b.get(), []string{"validate b /plugins/b.sock [v1] b-reg.sock", "register b", "deregister b b-reg.sock"})
	})
	if got := a.get(); len(got) != 2 {
		t.Errorf("A handler called for B's socket: %q", got)
	}

	pc := startPlugin(t, dir, "DevicePlugin", "c")
	want := "RegisterPlugin error -- no handler registered for plugin type: DevicePlugin at socket " + filepath.Join(dir, "c-reg.sock") +
		" (DevicePlugin plugins are not supported by nodelet, only APlugin, BPlugin)"
	if s := pc.status(t); s.PluginRegistered || s.Error != want {
		t.Fatalf("status = %+v, want refused with %q", s, want)
	}
}

func TestWatcherRetriesFailedRegistrationUnlessPermanent(t *testing.T) {
	t.Run("retried", func(t *testing.T) {
		h := &recordingHandler{registerErrs: []error{errors.New("not ready")}}
		dir := startWatcher(t, WithHandler("APlugin", h))
		p := startPlugin(t, dir, "APlugin", "a")
		if s := p.status(t); s.PluginRegistered || s.Error != "RegisterPlugin error -- plugin registration failed with err: not ready" {
			t.Fatalf("first status = %+v, want the failure", s)
		}
		if s := p.status(t); !s.PluginRegistered {
			t.Fatalf("status after the retry = %+v, want registered", s)
		}
	})
	t.Run("permanent", func(t *testing.T) {
		h := &recordingHandler{registerErrs: []error{Permanent(errors.New("replaced"))}}
		dir := startWatcher(t, WithHandler("APlugin", h))
		p := startPlugin(t, dir, "APlugin", "a")
		if s := p.status(t); s.PluginRegistered || !strings.HasSuffix(s.Error, "failed with err: replaced") {
			t.Fatalf("status = %+v, want the failure", s)
		}
		time.Sleep(1500 * time.Millisecond) // past the first retry delay (500 ms)
		if got := h.get(); len(got) != 2 {
			t.Errorf("handler calls = %q, want one validation and one registration", got)
		}
	})
}

// A plugin its handler refuses is told why, and never registered nor
// deregistered.
func TestWatcherRefusesWhatItsHandlerRefuses(t *testing.T) {
	h := &recordingHandler{refuse: errors.New("no v1")}
	dir := startWatcher(t, WithHandler("APlugin", h))
	p := startPlugin(t, dir, "APlugin", "a")
	if s := p.status(t); s.PluginRegistered || s.Error != "RegisterPlugin error -- plugin validation failed with err: no v1" {
		t.Fatalf("status = %+v, want refused with the handler's error", s)
	}
	p.stop()
	time.Sleep(50 * time.Millisecond) // five scans: a refused plugin is never deregistered
	if got := h.get(); len(got) != 1 {
		t.Fatalf("handler calls = %q, want the validation only", got)
	}
}

func TestNewRefusesASecondHandlerOfAType(t *testing.T) {
	if _, err := New(t.TempDir(), WithHandler("APlugin", &recordingHandler{}), WithHandler("APlugin", &recordingHandler{})); err == nil {
		t.Error("a second handler of APlugin was accepted")
	}
}
