// Command csidriver is a test fixture, not part of the product: a small CSI driver,
// csi.nodelet.test, backed by directories, for the e2e tests of CSI volumes (issue 18). One
// process serves the Identity, Controller and Node services on --endpoint, so the external
// provisioner and attacher and the node agent all talk to it, and registers itself with the node
// agent through a registration socket in <--kubelet-root>/plugins_registry, as
// node-driver-registrar would for a real driver.
//
// A volume is a directory <--data-dir>/volumes/<id>; NodeStageVolume bind-mounts it at the
// staging path and NodePublishVolume bind-mounts the staging path at the target. State
// (volumes, capacities, attachments) is kept in <--data-dir>/state.json. Every CSI call is
// appended as one JSON line to --calls-file, so tests can count stage and publish calls.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// DriverName is the CSI driver's name (GetPluginInfo, the CSIDriver object, the
// registration socket).
const DriverName = "csi.nodelet.test"

func main() {
	klog.InitFlags(nil)
	var cfg config
	flag.StringVar(&cfg.endpoint, "endpoint", "", "unix socket path to serve CSI on")
	flag.StringVar(&cfg.nodeID, "node-id", "", "NodeGetInfo's node_id")
	flag.StringVar(&cfg.dataDir, "data-dir", "", "where volumes (directories) and state.json live")
	flag.StringVar(&cfg.kubeletRoot, "kubelet-root", "", "the node agent's root dir: the registration socket goes to <root>/plugins_registry ('' = do not register)")
	flag.StringVar(&cfg.callsFile, "calls-file", "", "append one JSON line per CSI call here ('' = none)")
	flag.Int64Var(&cfg.maxVolumesPerNode, "max-volumes-per-node", 0, "NodeGetInfo's max_volumes_per_node (0 = no limit)")
	flag.Parse()
	if err := run(cfg); err != nil {
		klog.ErrorS(err, "csidriver failed")
		klog.Flush()
		os.Exit(1)
	}
}

type config struct {
	endpoint, nodeID, dataDir, kubeletRoot, callsFile string
	maxVolumesPerNode                                 int64
}

func run(cfg config) error {
	if cfg.endpoint == "" || cfg.nodeID == "" || cfg.dataDir == "" {
		return errors.New("--endpoint, --node-id and --data-dir are required")
	}
	d, err := newDriver(cfg)
	if err != nil {
		return err
	}
	defer d.close()

	csiSrv := grpc.NewServer(grpc.UnaryInterceptor(d.logCall))
	csi.RegisterIdentityServer(csiSrv, d)
	csi.RegisterControllerServer(csiSrv, d)
	csi.RegisterNodeServer(csiSrv, d)
	csiLis, err := listenUnix(cfg.endpoint)
	if err != nil {
		return err
	}
	servers := []*grpc.Server{csiSrv}
	listeners := []net.Listener{csiLis}
	var regSock string
	if cfg.kubeletRoot != "" {
		regSrv := grpc.NewServer()
		registerapi.RegisterRegistrationServer(regSrv, &registration{endpoint: cfg.endpoint})
		regSock = filepath.Join(cfg.kubeletRoot, "plugins_registry", DriverName+"-reg.sock")
		regLis, err := listenUnix(regSock)
		if err != nil {
			return err
		}
		servers, listeners = append(servers, regSrv), append(listeners, regLis)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var wg sync.WaitGroup
	errs := make(chan error, len(servers))
	for i := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := servers[i].Serve(listeners[i]); err != nil {
				errs <- fmt.Errorf("serving %s: %w", listeners[i].Addr(), err)
			}
		}()
	}
	klog.InfoS("csidriver serving", "driver", DriverName, "endpoint", cfg.endpoint, "registration", regSock, "nodeID", cfg.nodeID)
	var err1 error
	select {
	case <-ctx.Done():
	case err1 = <-errs:
	}
	// The registration socket goes first: the node agent deregisters the driver when it is gone.
	for i := len(servers) - 1; i >= 0; i-- {
		servers[i].GracefulStop()
	}
	wg.Wait()
	for _, p := range []string{regSock, cfg.endpoint} {
		if p != "" {
			_ = os.Remove(p)
		}
	}
	return err1
}

// listenUnix listens on a unix socket at path, replacing a stale socket file.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("creating the directory of socket %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("removing stale socket %s: %w", path, err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	return l, nil
}

// registration answers the node agent's plugin watcher (pluginregistration v1).
type registration struct {
	registerapi.UnimplementedRegistrationServer
	endpoint string
}

func (r *registration) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	klog.InfoS("registration: GetInfo")
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              DriverName,
		Endpoint:          r.endpoint,
		SupportedVersions: []string{"1.0.0"},
	}, nil
}

func (r *registration) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	klog.InfoS("registration: status", "registered", s.PluginRegistered, "error", s.Error)
	return &registerapi.RegistrationStatusResponse{}, nil
}
