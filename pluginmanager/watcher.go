// Package pluginmanager watches the kubelet's plugins_registry directory,
// upstream's pluginmanager: node plugins (node-driver-registrar for CSI, DRA
// drivers) put a registration socket there, the watcher asks each what it is
// (GetInfo), hands it to the Handler of its type, tells it the outcome
// (NotifyRegistrationStatus) and hands it back for deregistration once its
// socket or registration server goes away. The handlers (csi.Registry,
// dra.Plugins) are equals: the watcher knows none of their types.
//
// The directory is scanned every second; the pure plan turns a scan into
// actions. A handler's validation refusal waits for the socket to change; a
// failed registration is retried with back-off unless the error is Permanent;
// a type without a handler is refused by name. A removed or re-created socket,
// or a dead registration server, deregisters through the handler.
package pluginmanager

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/periodic"
)

// Timeouts of the calls a registration makes, as upstream.
const (
	getInfoTimeout = 10 * time.Second // upstream: 10 s to connect, then GetInfo
	notifyTimeout  = 5 * time.Second
)

// DefaultPollInterval is how often the registry directory is scanned.
// Polling, not inotify: a scan of a directory of a few sockets each second
// costs nothing, needs no watch descriptors per subdirectory, and cannot
// miss a socket re-created between two events (the inode tells); upstream's
// reconciler acts once a second too.
const DefaultPollInterval = time.Second

// RegistryDir is where node plugins put their registration sockets.
func RegistryDir(rootDir string) string { return filepath.Join(rootDir, "plugins_registry") }

// Plugin is what a plugin said of itself in GetInfo, and the registration
// socket it said it on.
type Plugin struct {
	Name string
	// Endpoint is as the plugin gave it ("" when it gave none).
	Endpoint string
	Versions []string
	// Socket is the path of the registration socket.
	Socket string
}

// Handler registers the plugins of one type, upstream's plugin handler:
// ValidatePlugin decides (a refusal waits for the socket to change),
// RegisterPlugin connects (retried on failure, unless the error is
// Permanent), DeRegisterPlugin is called once the registration socket or
// its server of a registered plugin goes away.
type Handler interface {
	ValidatePlugin(ctx context.Context, p Plugin) error
	RegisterPlugin(ctx context.Context, p Plugin) error
	DeRegisterPlugin(ctx context.Context, p Plugin)
}

// permanentError is a RegisterPlugin failure a retry cannot fix.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent marks a RegisterPlugin error that a retry cannot fix: the
// socket is not registered again until it changes.
func Permanent(err error) error { return permanentError{err} }

// Watcher registers the plugins that put a registration socket in its
// directory, through the Handler of each one's type.
type Watcher struct {
	dir          string
	clock        clock.WithTicker
	pollInterval time.Duration
	handlers     map[string]Handler // by plugin type

	mu      sync.Mutex
	sockets map[string]sockState // by registration socket path
	// regConns are the connections to the registration servers of the
	// registered plugins, kept open to see those servers go away: a
	// restarted plugin closes them even when its new socket cannot be
	// told from the old one by the file alone.
	regConns map[string]*grpc.ClientConn
}

// Option configures a Watcher.
type Option func(*Watcher) error

// WithHandler hands the plugins registering with pluginType (e.g.
// "CSIPlugin", "DRAPlugin") to h; a plugin of a type without a handler is
// refused.
func WithHandler(pluginType string, h Handler) Option {
	return func(w *Watcher) error {
		if _, ok := w.handlers[pluginType]; ok {
			return fmt.Errorf("a second handler for plugin type %s", pluginType)
		}
		w.handlers[pluginType] = h
		return nil
	}
}

// WithClock sets the clock of the scans and retry delays.
func WithClock(c clock.WithTicker) Option {
	return func(w *Watcher) error { w.clock = c; return nil }
}

// WithPollInterval sets how often the directory is scanned.
func WithPollInterval(d time.Duration) Option {
	return func(w *Watcher) error {
		if d <= 0 {
			return fmt.Errorf("poll interval %s is not positive", d)
		}
		w.pollInterval = d
		return nil
	}
}

// New returns the watcher of the plugins registering under dir
// (RegistryDir of the root dir); Run starts it.
func New(dir string, opts ...Option) (*Watcher, error) {
	w := &Watcher{
		dir:          dir,
		clock:        clock.RealClock{},
		pollInterval: DefaultPollInterval,
		handlers:     map[string]Handler{},
		sockets:      map[string]sockState{},
		regConns:     map[string]*grpc.ClientConn{},
	}
	for _, o := range opts {
		if err := o(w); err != nil {
			return nil, fmt.Errorf("configuring the plugin registration watcher: %w", err)
		}
	}
	return w, nil
}

// Run scans the registry directory (created if missing) until ctx ends,
// registering new sockets and deregistering removed ones. It returns once
// every registration it started has ended, with the registration
// connections closed; the handlers keep what they registered (closing it is
// their owner's call, so a CSI driver stays in CSINode for the next run, as
// upstream).
func (w *Watcher) Run(ctx context.Context) error {
	if err := os.MkdirAll(w.dir, 0o750); err != nil {
		return fmt.Errorf("creating the plugin registration directory %s: %w", w.dir, err)
	}
	klog.InfoS("Watching the plugin registration directory", "path", w.dir, "interval", w.pollInterval)
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		w.closeAll()
	}()
	w.scan(ctx, &wg)
	periodic.Every(ctx, w.clock, w.pollInterval, func(ctx context.Context) { w.scan(ctx, &wg) })
	return nil
}

// scan acts on one listing of the directory: deregistrations first (as
// upstream's reconciler), then registrations, each in its own goroutine
// (a CSI driver may take up to two minutes to answer NodeGetInfo).
func (w *Watcher) scan(ctx context.Context, wg *sync.WaitGroup) {
	found, err := findSockets(w.dir)
	if err != nil {
		// Nothing is deregistered on a failed listing: it says nothing of the sockets.
		klog.ErrorS(err, "Failed to list the plugin registration directory", "path", w.dir)
		return
	}
	w.mu.Lock()
	known := maps.Clone(w.sockets)
	for s, conn := range w.regConns {
		if st := conn.GetState(); st != connectivity.Ready {
			klog.InfoS("Registration server of a plugin went away", "socket", s, "type", known[s].pluginType, "name", known[s].plugin.Name, "state", st)
			k := known[s]
			k.gone = true
			known[s] = k
		}
	}
	a := plan(found, known, w.clock.Now())
	w.mu.Unlock()
	for _, s := range a.drop {
		w.dropSocket(ctx, s)
	}
	for _, s := range a.register {
		w.mu.Lock()
		st := w.sockets[s]
		if st.id != found[s] {
			st = sockState{id: found[s]}
		}
		st.busy = true
		w.sockets[s] = st
		w.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.registerSocket(ctx, s)
		}()
	}
}

// findSockets lists the unix sockets under dir (subdirectories included,
// symlinks not followed, names starting with "." skipped as upstream).
func findSockets(dir string) (map[string]fileID, error) {
	found := map[string]fileID{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == dir {
				return err
			}
			klog.ErrorS(err, "Error accessing path in the plugin registration directory", "path", path)
			return nil
		}
		if path == dir {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.Type()&fs.ModeSocket == 0 {
			return nil
		}
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return nil // removed since listed
		}
		found[path] = fileID{dev: uint64(st.Dev), ino: st.Ino, ctimeNs: st.Ctim.Nano()}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("walking %s: %w", dir, err)
	}
	return found, nil
}

// registerSocket runs one registration of a socket and records its outcome.
func (w *Watcher) registerSocket(ctx context.Context, socket string) {
	reg, regConn, permanent, err := w.register(ctx, socket)
	w.mu.Lock()
	defer w.mu.Unlock()
	st := w.sockets[socket]
	st.busy = false
	switch {
	case err == nil:
		st.settled, st.failures = true, 0
		st.pluginType, st.plugin = reg.pluginType, reg.plugin
		w.regConns[socket] = regConn
	case permanent:
		st.settled = true
	default:
		st.failures++
		st.retryAt = w.clock.Now().Add(retryDelay(st.failures))
		klog.ErrorS(err, "Plugin registration failed, will retry", "socket", socket, "retryIn", retryDelay(st.failures))
	}
	w.sockets[socket] = st
}

// registered is what a successful registration of a socket registered.
type registered struct {
	pluginType string
	plugin     Plugin
}

// register asks the plugin at socket what it is and hands it to the
// handler of its type, upstream's order: validate (a refusal waits for the
// socket to change), register (retried on failure unless Permanent), then
// the plugin is told the outcome. On success the connection to the
// registration server is returned open.
func (w *Watcher) register(ctx context.Context, socket string) (_ registered, regConn *grpc.ClientConn, permanent bool, err error) {
	// Never idle: an idle channel drops its connection, which would read as
	// the server going away.
	conn, err := dialUnix(socket, grpc.WithIdleTimeout(0))
	if err != nil {
		return registered{}, nil, false, fmt.Errorf("RegisterPlugin error -- dial failed at socket %s, err: %w", socket, err)
	}
	defer func() {
		if err != nil {
			conn.Close()
		}
	}()
	rc := registerapi.NewRegistrationClient(conn)
	infoCtx, cancel := context.WithTimeout(ctx, getInfoTimeout)
	info, err := rc.GetInfo(infoCtx, &registerapi.InfoRequest{})
	cancel()
	if err != nil {
		return registered{}, nil, false, fmt.Errorf("RegisterPlugin error -- failed to get plugin info using RPC GetInfo at socket %s, err: %w", socket, err)
	}
	p := Plugin{Name: info.GetName(), Endpoint: info.GetEndpoint(), Versions: info.GetSupportedVersions(), Socket: socket}
	h, ok := w.handlers[info.GetType()]
	if !ok {
		err := noHandler(info.GetType(), socket, slices.Sorted(maps.Keys(w.handlers)))
		klog.InfoS("Refused plugin registration", "socket", socket, "type", info.GetType(), "name", p.Name, "err", err)
		w.notify(ctx, rc, socket, false, err.Error())
		return registered{}, nil, true, err
	}
	if err := h.ValidatePlugin(ctx, p); err != nil {
		err = fmt.Errorf("RegisterPlugin error -- plugin validation failed with err: %w", err)
		klog.InfoS("Refused plugin registration", "socket", socket, "type", info.GetType(), "name", p.Name, "err", err)
		w.notify(ctx, rc, socket, false, err.Error())
		return registered{}, nil, true, err
	}
	if err := h.RegisterPlugin(ctx, p); err != nil {
		err = fmt.Errorf("RegisterPlugin error -- plugin registration failed with err: %w", err)
		w.notify(ctx, rc, socket, false, err.Error())
		return registered{}, nil, errors.As(err, new(permanentError)), err
	}
	klog.InfoS("Registered plugin", "type", info.GetType(), "name", p.Name, "endpoint", p.Endpoint, "versions", p.Versions, "socket", socket)
	w.notify(ctx, rc, socket, true, "")
	return registered{pluginType: info.GetType(), plugin: p}, conn, false, nil
}

// notify tells the plugin the outcome of its registration. A plugin that
// cannot be told is only logged: it learns nothing either way.
func (w *Watcher) notify(ctx context.Context, reg registerapi.RegistrationClient, socket string, ok bool, msg string) {
	nctx, cancel := context.WithTimeout(ctx, notifyTimeout)
	defer cancel()
	if _, err := reg.NotifyRegistrationStatus(nctx, &registerapi.RegistrationStatus{PluginRegistered: ok, Error: msg}); err != nil {
		klog.ErrorS(err, "Failed to send the registration status to the plugin", "socket", socket, "registered", ok)
	}
}

// dropSocket forgets a removed or re-created socket and hands the plugin
// it registered (if any) to its handler for deregistration.
func (w *Watcher) dropSocket(ctx context.Context, socket string) {
	w.mu.Lock()
	st := w.sockets[socket]
	delete(w.sockets, socket)
	if c := w.regConns[socket]; c != nil {
		c.Close()
		delete(w.regConns, socket)
	}
	w.mu.Unlock()
	h, ok := w.handlers[st.pluginType]
	if !ok || st.plugin.Name == "" {
		return
	}
	h.DeRegisterPlugin(ctx, st.plugin)
	klog.InfoS("Deregistered plugin", "type", st.pluginType, "name", st.plugin.Name, "endpoint", st.plugin.Endpoint, "socket", socket)
}

// closeAll closes the registration connections when Run ends.
func (w *Watcher) closeAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	clear(w.sockets)
	for s, c := range w.regConns {
		c.Close()
		delete(w.regConns, s)
	}
}

// dialUnix makes a gRPC client of the unix socket at path; it connects on
// the first call.
func dialUnix(path string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	return grpc.NewClient("unix://"+path, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
}
