package dra

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/nodelet/nodelet/pluginmanager"
)

// PluginType is the plugin registration type of DRA drivers.
const PluginType = "DRAPlugin"

// callTimeout bounds each NodePrepareResources and NodeUnprepareResources
// call, upstream's defaultClientCallTimeout.
const callTimeout = 45 * time.Second

// servicesSupported are the gRPC services of the DRA kubelet plugin API
// nodelet speaks (upstream also speaks v1beta1.DRAPlugin).
var servicesSupported = []string{drapb.DRAPluginService}

// Plugins are the registered DRA drivers; it is the plugin watcher's
// (pluginmanager) handler of the DRAPlugin type.
type Plugins struct {
	mu sync.Mutex
	// byDriver holds each driver's registered endpoints, the latest last:
	// as upstream, the latest registration serves and an older one takes
	// over when it goes.
	byDriver map[string][]*plugin
}

var _ pluginmanager.Handler = (*Plugins)(nil)

type plugin struct {
	driver   string
	endpoint string
	conn     *grpc.ClientConn
	client   drapb.DRAPluginClient
}

// NewPlugins returns an empty set of drivers.
func NewPlugins() *Plugins {
	return &Plugins{byDriver: map[string][]*plugin{}}
}

// validateServices is upstream's check of a driver's supported versions:
// one of them must be a service nodelet speaks.
func validateServices(services []string) error {
	if len(services) == 0 {
		return errors.New("empty list of supported gRPC services (aka supported versions)")
	}
	for _, s := range services {
		if slices.Contains(servicesSupported, s) {
			return nil
		}
	}
	return fmt.Errorf("none of services supported by the plugin (%q) are supported by the kubelet (%q)", services, servicesSupported)
}

// validatePlugin decides whether a DRA driver's registration is accepted.
func validatePlugin(name, endpoint string, services []string) error {
	if name == "" {
		return errors.New("DRA driver name is empty")
	}
	if err := validateServices(services); err != nil {
		return fmt.Errorf("invalid supported gRPC versions of DRA driver plugin %s at endpoint %s: %w", name, endpoint, err)
	}
	if p := strings.TrimPrefix(endpoint, "unix://"); !filepath.IsAbs(p) {
		return fmt.Errorf("endpoint %q of DRA driver plugin %s is not the absolute path of a unix socket", endpoint, name)
	}
	return nil
}

// ValidatePlugin is the plugin watcher handler's check.
func (p *Plugins) ValidatePlugin(_ context.Context, reg pluginmanager.Plugin) error {
	return validatePlugin(reg.Name, reg.Endpoint, reg.Versions)
}

// RegisterPlugin connects to a driver's endpoint (lazily: the first call
// dials).
func (p *Plugins) RegisterPlugin(ctx context.Context, reg pluginmanager.Plugin) error {
	name, endpoint := reg.Name, reg.Endpoint
	if err := validatePlugin(name, endpoint, reg.Versions); err != nil {
		return err
	}
	conn, err := grpc.NewClient("unix://"+strings.TrimPrefix(endpoint, "unix://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("create gRPC connection to DRA driver %s plugin at endpoint %s: %w", name, endpoint, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, old := range p.byDriver[name] {
		if old.endpoint == endpoint {
			conn.Close()
			return fmt.Errorf("endpoint %s already registered for DRA driver plugin %s", endpoint, name)
		}
	}
	p.byDriver[name] = append(p.byDriver[name], &plugin{driver: name, endpoint: endpoint, conn: conn, client: drapb.NewDRAPluginClient(conn)})
	klog.FromContext(ctx).Info("Registered DRA plugin", "driverName", name, "endpoint", endpoint, "numPlugins", len(p.byDriver[name]))
	return nil
}

// DeRegisterPlugin forgets a driver's endpoint. The driver's
// ResourceSlices stay (upstream deletes them after 30 s without the
// driver; nodelet leaves that to the driver and the control plane).
func (p *Plugins) DeRegisterPlugin(ctx context.Context, reg pluginmanager.Plugin) {
	name, endpoint := reg.Name, reg.Endpoint
	p.mu.Lock()
	defer p.mu.Unlock()
	ps := p.byDriver[name]
	for i, pl := range ps {
		if pl.endpoint == endpoint {
			pl.conn.Close()
			ps = slices.Delete(ps, i, i+1)
			break
		}
	}
	if len(ps) == 0 {
		delete(p.byDriver, name)
	} else {
		p.byDriver[name] = ps
	}
	klog.FromContext(ctx).Info("Deregistered DRA plugin", "driverName", name, "endpoint", endpoint, "numPlugins", len(ps))
}

// Close closes every driver's connection.
func (p *Plugins) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for n, ps := range p.byDriver {
		for _, pl := range ps {
			pl.conn.Close()
		}
		delete(p.byDriver, n)
	}
}

// client is the DRA service of the latest registration of driver, in
// upstream's wording when there is none.
func (p *Plugins) client(driver string) (drapb.DRAPluginClient, error) {
	if driver == "" {
		return nil, errors.New("DRA driver name is empty")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	ps := p.byDriver[driver]
	if len(ps) == 0 {
		return nil, fmt.Errorf("DRA driver %s is not registered", driver)
	}
	return ps[len(ps)-1].client, nil
}

// Drivers lists the registered drivers' names.
func (p *Plugins) Drivers() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for n := range p.byDriver {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
