package csi

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/periodic"
)

// Timeouts of the calls a registration makes, as upstream.
const (
	getInfoTimeout     = 10 * time.Second // upstream: 10 s to connect, then GetInfo
	notifyTimeout      = 5 * time.Second
	nodeGetInfoTimeout = 2 * time.Minute // upstream's csiTimeout
)

// DefaultPollInterval is how often the registry directory is scanned.
// Polling, not inotify: a scan of a directory of a few sockets each second
// costs nothing, needs no watch descriptors per subdirectory, and cannot
// miss a socket re-created between two events (the inode tells); upstream's
// reconciler acts once a second too.
const DefaultPollInterval = time.Second

// Registry registers the CSI node plugins that put a registration socket in
// the kubelet's plugins_registry directory (node-driver-registrar's
// protocol), keeps a connection to each driver for the volume manager, and
// publishes the drivers in the Node's annotation and labels and the CSINode.
type Registry struct {
	dir          string
	api          *apiPublisher // nil standalone: no API objects
	clock        clock.WithTicker
	pollInterval time.Duration

	mu      sync.Mutex
	drivers map[string]*driver   // by driver name
	sockets map[string]sockState // by registration socket path
	// regConns are the connections to the registration servers of the
	// registered drivers, kept open to see those servers go away: a
	// restarted plugin closes them even when its new socket cannot be
	// told from the old one by the file alone.
	regConns map[string]*grpc.ClientConn
	// handlers take the plugins of other types (DRAPlugin) registering in
	// the same directory, as upstream's plugin watcher dispatches by type.
	handlers map[string]PluginHandler
}

// PluginHandler registers the plugins of one type other than CSIPlugin,
// upstream's plugin watcher handler: Validate decides, Register connects,
// Deregister is called once the registration socket goes away.
type PluginHandler interface {
	ValidatePlugin(ctx context.Context, name, endpoint string, versions []string) error
	RegisterPlugin(ctx context.Context, name, endpoint string, versions []string) error
	DeRegisterPlugin(ctx context.Context, name, endpoint string)
}

// driver is a registered (or registering: !ready) CSI driver.
type driver struct {
	name     string
	socket   string // registration socket it came from
	endpoint string
	version  *utilversion.Version
	info     nodeInfo
	conn     *grpc.ClientConn
	ready    bool
}

// DriverInfo describes a registered driver to the volume manager.
type DriverInfo struct {
	Name     string
	Endpoint string
	// Version is the highest CSI version both sides support.
	Version string
	// NodeID, MaxVolumesPerNode and Topology are the driver's NodeGetInfo.
	NodeID            string
	MaxVolumesPerNode int64
	Topology          map[string]string
}

// Option configures a Registry.
type Option func(*Registry) error

// WithKubeClient publishes drivers through client on the node named
// nodeName; without it the registry runs standalone (no API objects).
func WithKubeClient(client kubernetes.Interface, nodeName string) Option {
	return func(r *Registry) error {
		if client == nil {
			return nil
		}
		if nodeName == "" {
			return errors.New("a Kubernetes client needs the node name")
		}
		r.api = &apiPublisher{client: client, nodeName: nodeName}
		return nil
	}
}

// WithPluginHandler hands the plugins registering with pluginType (e.g.
// "DRAPlugin") to h instead of refusing them.
func WithPluginHandler(pluginType string, h PluginHandler) Option {
	return func(r *Registry) error {
		if pluginType == registerapi.CSIPlugin {
			return errors.New("CSI plugins are registered by the registry itself")
		}
		r.handlers[pluginType] = h
		return nil
	}
}

// WithClock sets the clock of the scans and retry delays.
func WithClock(c clock.WithTicker) Option {
	return func(r *Registry) error { r.clock = c; return nil }
}

// WithPollInterval sets how often the directory is scanned.
func WithPollInterval(d time.Duration) Option {
	return func(r *Registry) error {
		if d <= 0 {
			return fmt.Errorf("poll interval %s is not positive", d)
		}
		r.pollInterval = d
		return nil
	}
}

// New returns the registry of the plugins registering under
// RegistryDir(rootDir); Run starts it.
func New(ctx context.Context, rootDir string, opts ...Option) (*Registry, error) {
	r := &Registry{
		dir:          RegistryDir(rootDir),
		clock:        clock.RealClock{},
		pollInterval: DefaultPollInterval,
		drivers:      map[string]*driver{},
		sockets:      map[string]sockState{},
		regConns:     map[string]*grpc.ClientConn{},
		handlers:     map[string]PluginHandler{},
	}
	for _, o := range opts {
		if err := o(r); err != nil {
			return nil, fmt.Errorf("configuring the CSI plugin registry: %w", err)
		}
	}
	if r.api == nil {
		klog.FromContext(ctx).Info("No Kubernetes client: CSI drivers register without Node annotation and CSINode (standalone)")
	}
	return r, nil
}

// Run scans the registry directory (created if missing) until ctx ends,
// registering new sockets and deregistering removed ones. It returns once
// every registration it started has ended, with the drivers' connections
// closed. The drivers stay in CSINode, as with upstream, for the next run.
func (r *Registry) Run(ctx context.Context) error {
	if err := os.MkdirAll(r.dir, 0o750); err != nil {
		return fmt.Errorf("creating the plugin registration directory %s: %w", r.dir, err)
	}
	klog.InfoS("Watching the plugin registration directory", "path", r.dir, "interval", r.pollInterval)
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		r.closeAll()
	}()
	r.scan(ctx, &wg)
	periodic.Every(ctx, r.clock, r.pollInterval, func(ctx context.Context) { r.scan(ctx, &wg) })
	return nil
}

// NodeClient is the CSI Node service of a registered driver, over the
// connection the registry keeps.
func (r *Registry) NodeClient(_ context.Context, driverName string) (csipb.NodeClient, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	d, ok := r.drivers[driverName]
	if !ok || !d.ready {
		return nil, fmt.Errorf("driver name %s not found in the list of registered CSI drivers", driverName)
	}
	return csipb.NewNodeClient(d.conn), nil
}

// Registered tells whether driverName is registered.
func (r *Registry) Registered(driverName string) bool {
	_, ok := r.Driver(driverName)
	return ok
}

// Driver describes a registered driver.
func (r *Registry) Driver(driverName string) (DriverInfo, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	d, ok := r.drivers[driverName]
	if !ok || !d.ready {
		return DriverInfo{}, false
	}
	return DriverInfo{
		Name:              d.name,
		Endpoint:          d.endpoint,
		Version:           d.version.String(),
		NodeID:            d.info.nodeID,
		MaxVolumesPerNode: d.info.maxVolumes,
		Topology:          maps.Clone(d.info.topology),
	}, true
}

// Drivers lists the registered drivers' names, sorted.
func (r *Registry) Drivers() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var names []string
	for n, d := range r.drivers {
		if d.ready {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// scan acts on one listing of the directory: deregistrations first (as
// upstream's reconciler), then registrations, each in its own goroutine
// (a driver may take up to two minutes to answer NodeGetInfo).
func (r *Registry) scan(ctx context.Context, wg *sync.WaitGroup) {
	found, err := findSockets(r.dir)
	if err != nil {
		// Nothing is deregistered on a failed listing: it says nothing of the sockets.
		klog.ErrorS(err, "Failed to list the plugin registration directory", "path", r.dir)
		return
	}
	r.mu.Lock()
	known := maps.Clone(r.sockets)
	for s, conn := range r.regConns {
		if st := conn.GetState(); st != connectivity.Ready {
			klog.InfoS("Registration server of a CSI driver went away", "socket", s, "driver", known[s].driver, "state", st)
			k := known[s]
			k.gone = true
			known[s] = k
		}
	}
	a := plan(found, known, r.clock.Now())
	r.mu.Unlock()
	for _, s := range a.drop {
		r.dropSocket(ctx, s)
	}
	for _, s := range a.register {
		r.mu.Lock()
		st := r.sockets[s]
		if st.id != found[s] {
			st = sockState{id: found[s]}
		}
		st.busy = true
		r.sockets[s] = st
		r.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.registerSocket(ctx, s)
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
func (r *Registry) registerSocket(ctx context.Context, socket string) {
	reg, regConn, permanent, err := r.register(ctx, socket)
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.sockets[socket]
	st.busy = false
	switch {
	case err == nil:
		st.settled, st.driver, st.failures = true, reg.name, 0
		st.pluginType, st.endpoint = reg.pluginType, reg.endpoint
		r.regConns[socket] = regConn
	case permanent:
		st.settled = true
	default:
		st.failures++
		st.retryAt = r.clock.Now().Add(retryDelay(st.failures))
		klog.ErrorS(err, "CSI plugin registration failed, will retry", "socket", socket, "retryIn", retryDelay(st.failures))
	}
	r.sockets[socket] = st
}

// register asks the plugin at socket what it is and registers it: its
// driver connection, NodeGetInfo, the API objects, then the plugin is told
// the outcome. permanent failures (wrong type, bad versions) wait for the
// socket to change; the others are retried. On success the connection to
// the registration server is returned open.
func (r *Registry) register(ctx context.Context, socket string) (_ registered, regConn *grpc.ClientConn, permanent bool, err error) {
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
	if h, ok := r.handlers[info.GetType()]; ok {
		permanent, err := r.registerOther(ctx, h, rc, info, socket)
		if err != nil {
			return registered{}, nil, permanent, err
		}
		return registered{name: info.GetName(), pluginType: info.GetType(), endpoint: info.GetEndpoint()}, conn, false, nil
	}
	reg := rc

	p, d, err := r.reserve(info, socket)
	if err != nil {
		klog.InfoS("Refused plugin registration", "socket", socket, "type", info.GetType(), "name", info.GetName(), "err", err)
		r.notify(ctx, reg, socket, false, err.Error())
		return registered{}, nil, true, err
	}
	klog.InfoS("Registering CSI driver", "driver", p.name, "endpoint", p.endpoint, "versions", info.SupportedVersions, "socket", socket)

	dconn, ni, err := r.nodeGetInfo(ctx, p)
	if err == nil && r.api != nil {
		if err = r.api.install(ctx, ni); err != nil {
			dconn.Close()
		}
	}
	if err != nil {
		r.release(d)
		if r.api != nil {
			// As upstream: what was published before the failure goes.
			if uerr := r.api.uninstall(ctx, p.name); uerr != nil {
				klog.ErrorS(uerr, "Failed to unpublish CSI driver after its failed registration", "driver", p.name)
			}
		}
		err = fmt.Errorf("RegisterPlugin error -- plugin registration failed with err: %w", err)
		r.notify(ctx, reg, socket, false, err.Error())
		return registered{}, nil, false, err
	}

	r.mu.Lock()
	current := r.drivers[p.name] == d
	if current {
		d.info, d.conn, d.ready = ni, dconn, true
	}
	r.mu.Unlock()
	if !current {
		// A higher version of the driver registered from another socket meanwhile.
		dconn.Close()
		err := fmt.Errorf("RegisterPlugin error -- plugin registration failed with err: CSI driver %s was replaced by a higher version registering meanwhile", p.name)
		r.notify(ctx, reg, socket, false, err.Error())
		return registered{}, nil, true, err
	}
	klog.InfoS("Registered CSI driver", "driver", p.name, "endpoint", p.endpoint, "version", p.version, "nodeID", ni.nodeID,
		"maxVolumesPerNode", ni.maxVolumes, "topology", ni.topology, "socket", socket)
	r.notify(ctx, reg, socket, true, "")
	return registered{name: p.name, pluginType: registerapi.CSIPlugin, endpoint: p.endpoint}, conn, false, nil
}

// registered is what a successful registration of a socket registered.
type registered struct {
	name, pluginType, endpoint string
}

// registerOther hands a plugin of another type to its handler, upstream's
// order: validate (a refusal waits for the socket to change), register
// (retried on failure), then the plugin is told the outcome.
func (r *Registry) registerOther(ctx context.Context, h PluginHandler, rc registerapi.RegistrationClient, info *registerapi.PluginInfo, socket string) (permanent bool, err error) {
	name, endpoint, versions := info.GetName(), info.GetEndpoint(), info.GetSupportedVersions()
	if err := h.ValidatePlugin(ctx, name, endpoint, versions); err != nil {
		err = fmt.Errorf("RegisterPlugin error -- plugin validation failed with err: %w", err)
		klog.InfoS("Refused plugin registration", "socket", socket, "type", info.GetType(), "name", name, "err", err)
		r.notify(ctx, rc, socket, false, err.Error())
		return true, err
	}
	if err := h.RegisterPlugin(ctx, name, endpoint, versions); err != nil {
		err = fmt.Errorf("RegisterPlugin error -- plugin registration failed with err: %w", err)
		r.notify(ctx, rc, socket, false, err.Error())
		return false, err
	}
	klog.InfoS("Registered plugin", "type", info.GetType(), "name", name, "endpoint", endpoint, "versions", versions, "socket", socket)
	r.notify(ctx, rc, socket, true, "")
	return false, nil
}

// reserve checks the plugin's info and, when it can register, enters its
// driver (not ready yet) so a concurrent registration of the same name is
// judged against it. A driver of the same name with a lower version
// (another socket) is replaced, as upstream.
func (r *Registry) reserve(info *registerapi.PluginInfo, socket string) (checkedPlugin, *driver, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	versions := map[string]*utilversion.Version{}
	for n, d := range r.drivers {
		versions[n] = d.version
	}
	p, err := checkPluginInfo(info, socket, versions)
	if err != nil {
		return p, nil, err
	}
	if old, ok := r.drivers[p.name]; ok {
		klog.InfoS("CSI driver registering with a higher version replaces the registered one", "driver", p.name,
			"oldVersion", old.version, "newVersion", p.version, "oldSocket", old.socket, "socket", socket)
		if old.conn != nil {
			old.conn.Close()
		}
		if st, ok := r.sockets[old.socket]; ok && st.driver == p.name {
			st.driver = ""
			r.sockets[old.socket] = st
		}
	}
	d := &driver{name: p.name, socket: socket, endpoint: p.endpoint, version: p.version}
	r.drivers[p.name] = d
	return p, d, nil
}

// release removes d if it is still the entry of its name.
func (r *Registry) release(d *driver) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.drivers[d.name] == d {
		delete(r.drivers, d.name)
	}
}

// nodeGetInfo connects to the driver's endpoint and asks NodeGetInfo; the
// connection is returned open on success.
func (r *Registry) nodeGetInfo(ctx context.Context, p checkedPlugin) (*grpc.ClientConn, nodeInfo, error) {
	conn, err := dialUnix(endpointPath(p.endpoint))
	if err != nil {
		return nil, nodeInfo{}, fmt.Errorf("connecting to CSI driver %s at %s: %w", p.name, p.endpoint, err)
	}
	callCtx, cancel := context.WithTimeout(ctx, nodeGetInfoTimeout)
	defer cancel()
	resp, err := csipb.NewNodeClient(conn).NodeGetInfo(callCtx, &csipb.NodeGetInfoRequest{})
	if err != nil {
		conn.Close()
		return nil, nodeInfo{}, fmt.Errorf("calling NodeGetInfo of CSI driver %s: %w", p.name, err)
	}
	ni := nodeInfo{
		driver:     p.name,
		nodeID:     resp.GetNodeId(),
		maxVolumes: resp.GetMaxVolumesPerNode(),
		topology:   maps.Clone(resp.GetAccessibleTopology().GetSegments()),
	}
	if ni.nodeID == "" {
		conn.Close()
		return nil, nodeInfo{}, errors.New("error adding CSI driver node info: driverNodeID must not be empty")
	}
	return conn, ni, nil
}

// notify tells the plugin the outcome of its registration. A plugin that
// cannot be told is only logged: it learns nothing either way.
func (r *Registry) notify(ctx context.Context, reg registerapi.RegistrationClient, socket string, ok bool, msg string) {
	nctx, cancel := context.WithTimeout(ctx, notifyTimeout)
	defer cancel()
	if _, err := reg.NotifyRegistrationStatus(nctx, &registerapi.RegistrationStatus{PluginRegistered: ok, Error: msg}); err != nil {
		klog.ErrorS(err, "Failed to send the registration status to the plugin", "socket", socket, "registered", ok)
	}
}

// dropSocket forgets a removed or re-created socket and deregisters the
// driver it registered, unless another socket's driver replaced it.
func (r *Registry) dropSocket(ctx context.Context, socket string) {
	r.mu.Lock()
	st := r.sockets[socket]
	delete(r.sockets, socket)
	if c := r.regConns[socket]; c != nil {
		c.Close()
		delete(r.regConns, socket)
	}
	if h, ok := r.handlers[st.pluginType]; ok && st.driver != "" {
		r.mu.Unlock()
		h.DeRegisterPlugin(ctx, st.driver, st.endpoint)
		klog.InfoS("Deregistered plugin", "type", st.pluginType, "name", st.driver, "endpoint", st.endpoint, "socket", socket)
		return
	}
	d := r.drivers[st.driver]
	if d != nil && d.socket == socket {
		delete(r.drivers, st.driver)
	} else {
		d = nil
	}
	r.mu.Unlock()
	if d == nil {
		return
	}
	if d.conn != nil {
		d.conn.Close()
	}
	klog.InfoS("Deregistered CSI driver", "driver", d.name, "endpoint", d.endpoint, "socket", socket)
	if r.api != nil {
		if err := r.api.uninstall(ctx, d.name); err != nil {
			klog.ErrorS(err, "Failed to unpublish deregistered CSI driver", "driver", d.name)
		}
	}
}

// closeAll closes the drivers' connections when Run ends.
func (r *Registry) closeAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for n, d := range r.drivers {
		if d.conn != nil {
			d.conn.Close()
		}
		delete(r.drivers, n)
	}
	clear(r.sockets)
	for s, c := range r.regConns {
		c.Close()
		delete(r.regConns, s)
	}
}

// dialUnix makes a gRPC client of the unix socket at path; it connects on
// the first call.
func dialUnix(path string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	return grpc.NewClient("unix://"+path, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
}
