package csi

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"sync"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/nodelet/nodelet/pluginmanager"
)

// PluginType is the plugin registration type of CSI node plugins.
const PluginType = registerapi.CSIPlugin

// nodeGetInfoTimeout bounds a registration's NodeGetInfo, upstream's csiTimeout.
const nodeGetInfoTimeout = 2 * time.Minute

// Registry is the plugin watcher's handler of CSIPlugin: it registers the
// CSI node plugins (node-driver-registrar's protocol), keeps a connection
// to each driver for the volume manager, and publishes the drivers in the
// Node's annotation and labels and the CSINode.
type Registry struct {
	api *apiPublisher // nil standalone: no API objects

	mu      sync.Mutex
	drivers map[string]*driver // by driver name
	// reserved are the drivers ValidatePlugin entered (not ready) for the
	// RegisterPlugin of the same registration socket, by socket path.
	reserved map[string]*driver
}

var _ pluginmanager.Handler = (*Registry)(nil)

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

// New returns the registry of the CSI drivers; hand it to a
// pluginmanager.Watcher as the CSIPlugin handler, and Close it once the
// watcher's Run returned.
func New(ctx context.Context, opts ...Option) (*Registry, error) {
	r := &Registry{
		drivers:  map[string]*driver{},
		reserved: map[string]*driver{},
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

// ValidatePlugin checks the plugin's info and, when it can register,
// enters its driver (not ready yet) so a concurrent registration of the
// same name is judged against it; RegisterPlugin completes it. A driver of
// the same name with a lower version (another socket) is replaced, as
// upstream.
func (r *Registry) ValidatePlugin(_ context.Context, pl pluginmanager.Plugin) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	versions := map[string]*utilversion.Version{}
	for n, d := range r.drivers {
		versions[n] = d.version
	}
	p, err := checkPluginInfo(pl, versions)
	if err != nil {
		return err
	}
	if old, ok := r.drivers[p.name]; ok {
		klog.InfoS("CSI driver registering with a higher version replaces the registered one", "driver", p.name,
			"oldVersion", old.version, "newVersion", p.version, "oldSocket", old.socket, "socket", pl.Socket)
		if old.conn != nil {
			old.conn.Close()
		}
	}
	d := &driver{name: p.name, socket: pl.Socket, endpoint: p.endpoint, version: p.version}
	r.drivers[p.name] = d
	r.reserved[pl.Socket] = d
	klog.InfoS("Registering CSI driver", "driver", p.name, "endpoint", p.endpoint, "versions", pl.Versions, "socket", pl.Socket)
	return nil
}

// RegisterPlugin completes the registration ValidatePlugin started: the
// driver's connection, NodeGetInfo, then the API objects. A failure takes
// the driver out again (retried); a driver replaced by a higher version
// registering meanwhile is refused for good.
func (r *Registry) RegisterPlugin(ctx context.Context, pl pluginmanager.Plugin) error {
	r.mu.Lock()
	d := r.reserved[pl.Socket]
	delete(r.reserved, pl.Socket)
	r.mu.Unlock()
	if d == nil {
		return fmt.Errorf("CSI driver %s at socket %s registered without validation", pl.Name, pl.Socket)
	}
	dconn, ni, err := r.nodeGetInfo(ctx, d)
	if err == nil && r.api != nil {
		if err = r.api.install(ctx, ni); err != nil {
			dconn.Close()
		}
	}
	if err != nil {
		r.release(d)
		if r.api != nil {
			// As upstream: what was published before the failure goes.
			if uerr := r.api.uninstall(ctx, d.name); uerr != nil {
				klog.ErrorS(uerr, "Failed to unpublish CSI driver after its failed registration", "driver", d.name)
			}
		}
		return err
	}

	r.mu.Lock()
	current := r.drivers[d.name] == d
	if current {
		d.info, d.conn, d.ready = ni, dconn, true
	}
	r.mu.Unlock()
	if !current {
		// A higher version of the driver registered from another socket meanwhile.
		dconn.Close()
		return pluginmanager.Permanent(fmt.Errorf("CSI driver %s was replaced by a higher version registering meanwhile", d.name))
	}
	klog.InfoS("Registered CSI driver", "driver", d.name, "endpoint", d.endpoint, "version", d.version, "nodeID", ni.nodeID,
		"maxVolumesPerNode", ni.maxVolumes, "topology", ni.topology, "socket", pl.Socket)
	return nil
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
func (r *Registry) nodeGetInfo(ctx context.Context, d *driver) (*grpc.ClientConn, nodeInfo, error) {
	conn, err := grpc.NewClient("unix://"+endpointPath(d.endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nodeInfo{}, fmt.Errorf("connecting to CSI driver %s at %s: %w", d.name, d.endpoint, err)
	}
	callCtx, cancel := context.WithTimeout(ctx, nodeGetInfoTimeout)
	defer cancel()
	resp, err := csipb.NewNodeClient(conn).NodeGetInfo(callCtx, &csipb.NodeGetInfoRequest{})
	if err != nil {
		conn.Close()
		return nil, nodeInfo{}, fmt.Errorf("calling NodeGetInfo of CSI driver %s: %w", d.name, err)
	}
	ni := nodeInfo{
		driver:     d.name,
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

// DeRegisterPlugin forgets the driver a removed or re-created socket
// registered, unless another socket's driver replaced it, and unpublishes
// it.
func (r *Registry) DeRegisterPlugin(ctx context.Context, pl pluginmanager.Plugin) {
	r.mu.Lock()
	d := r.drivers[pl.Name]
	if d != nil && d.socket == pl.Socket {
		delete(r.drivers, pl.Name)
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
	klog.InfoS("Deregistered CSI driver", "driver", d.name, "endpoint", d.endpoint, "socket", pl.Socket)
	if r.api != nil {
		if err := r.api.uninstall(ctx, d.name); err != nil {
			klog.ErrorS(err, "Failed to unpublish deregistered CSI driver", "driver", d.name)
		}
	}
}

// Close closes the drivers' connections once the watcher stopped. The
// drivers stay in CSINode, as with upstream, for the next run.
func (r *Registry) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for n, d := range r.drivers {
		if d.conn != nil {
			d.conn.Close()
		}
		delete(r.drivers, n)
	}
	clear(r.reserved)
}
