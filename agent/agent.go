package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/trace"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/cgroups"
	"github.com/nodelet/nodelet/config"
	"github.com/nodelet/nodelet/cri"
	"github.com/nodelet/nodelet/hostsetup"
	"github.com/nodelet/nodelet/internal/periodic"
	nodeletversion "github.com/nodelet/nodelet/internal/version"
	"github.com/nodelet/nodelet/pleg"
	"github.com/nodelet/nodelet/syncloop"
)

// userAgent names nodelet and its version on every API request.
func userAgent() string { return "nodelet/" + nodeletversion.Get().GitVersion }

// maxWaitForContainerRuntime is how long start-up waits for the CRI socket.
const maxWaitForContainerRuntime = 30 * time.Second

// checkpointRetryPeriod is how often a pod resource checkpoint whose write
// failed is written again.
const checkpointRetryPeriod = 10 * time.Second

// errStoppedEarly is build's answer when ctx ended before nodelet could be built
// (during the TLS bootstrap): not a failure.
var errStoppedEarly = errors.New("stopped before nodelet was built")

// Run runs nodelet until ctx is done: build makes every part, fully wired, and run
// runs them (see agent.run for the stop order). The caller has applied opts' logging
// configuration (config.ApplyLogging).
func Run(ctx context.Context, opts *config.Options) error {
	logConfigWarnings(opts)
	a, err := build(ctx, opts, hostPaths{procSys: hostsetup.ProcSysDir})
	if errors.Is(err, errStoppedEarly) {
		return nil
	}
	if err != nil {
		return err
	}
	a.run(ctx)
	return nil
}

// logConfigWarnings logs what the configuration files and feature gates
// carry that upstream tolerates with a warning.
func logConfigWarnings(opts *config.Options) {
	for _, w := range opts.DecodeWarnings {
		klog.InfoS("Using lenient decoding as strict decoding failed", "path", w.File, "field", w.Field, "err", w.Detail)
	}
	if gates, err := config.FeatureGates(opts.Config); err == nil {
		for _, w := range gates.Warnings {
			klog.InfoS(w)
		}
	}
}

// notifySystemd tells systemd nodelet has started as soon as its own start-up is done
// (configuration, runtime, servers), pings its watchdog while healthy, and says STOPPING when
// ctx ends, which is the first thing a stop does. READY does not wait for the pod sources to
// sync: on a control-plane node the API server is a static pod nodelet itself runs, and
// kubeadm's `systemctl restart kubelet` blocks until READY, so waiting for the API would hold
// the restart until systemd's start timeout kills nodelet.
func notifySystemd(ctx context.Context, loop *syncloop.Loop, p healthChecker) {
	logger := klog.FromContext(ctx)
	sent, err := daemon.SdNotify(false, daemon.SdNotifyReady)
	logger.Info("nodelet started", "notifiedSystemd", sent)
	if err != nil {
		logger.Error(err, "Telling systemd nodelet is ready")
	}
	logged := make(chan struct{})
	go func() {
		defer close(logged)
		select {
		case <-loop.Synced():
			logger.Info("nodelet is ready: pod sources synced")
		case <-ctx.Done():
		}
	}()
	watchdog(ctx, clock.RealClock{}, p, loop)
	<-ctx.Done()
	<-logged
	logger.Info("Stopping nodelet; running pods are left running")
	_, _ = daemon.SdNotify(false, daemon.SdNotifyStopping)
}

// eventsInUse says whether the evented PLEG follows the runtime's events now;
// nil without the EventedPLEG gate.
func eventsInUse(e *pleg.Evented) func() bool {
	if e == nil {
		return nil
	}
	return e.InUse
}

func podsDir(root string) string { return root + "/pods" }

// connectRuntime connects to the runtime; a nil tp leaves the CRI calls untraced.
func connectRuntime(ctx context.Context, endpoint, imageEndpoint string, timeout time.Duration, reg prometheus.Registerer, tp trace.TracerProvider) (*cri.Client, error) {
	opts := []cri.Option{cri.WithMetrics(reg)}
	if tp != nil {
		opts = append(opts, cri.WithTracerProvider(tp))
	}
	deadline := time.Now().Add(maxWaitForContainerRuntime)
	for {
		c, err := cri.New(ctx, endpoint, imageEndpoint, timeout, opts...)
		if err == nil {
			return c, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("connecting to the container runtime (containerRuntimeEndpoint %q): %w", endpoint, err)
		}
		klog.FromContext(ctx).Info("Waiting for the container runtime", "endpoint", endpoint, "err", err)
		select {
		case <-time.After(2 * time.Second):
		case <-ctx.Done():
		}
	}
}

// newClients returns the main API client and an unthrottled heartbeat client whose
// timeout keeps a hung connection from delaying node status and lease renewals.
func newClients(kubeconfig string, api config.APIClientSettings) (kubernetes.Interface, kubernetes.Interface, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, nil, fmt.Errorf("loading kubeconfig %s: %w", kubeconfig, err)
	}
	return newClientsForConfig(rc, api)
}

// newClientsForConfig is newClients for a loaded (possibly rotating) configuration.
func newClientsForConfig(rc *rest.Config, api config.APIClientSettings) (kubernetes.Interface, kubernetes.Interface, error) {
	rc.UserAgent = userAgent()
	rc.QPS = api.QPS
	rc.Burst = api.Burst
	if api.ContentType != "" {
		rc.ContentType = api.ContentType
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("creating the API client: %w", err)
	}
	hb := *rc
	hb.QPS = -1
	if api.HeartbeatTimeout > 0 {
		hb.Timeout = api.HeartbeatTimeout
	}
	heartbeat, err := kubernetes.NewForConfig(&hb)
	if err != nil {
		return nil, nil, fmt.Errorf("creating the heartbeat API client: %w", err)
	}
	return client, heartbeat, nil
}

// eventCorrelatorCacheSize bounds each of the event correlator's caches (aggregation,
// spam filter, repeat counts). client-go's default, 4096 keys each, held about 4 KiB per
// churned pod until full: a node that ran a thousand short pods kept ~4 MiB of heap (and
// ~15 MiB of RSS) for events of pods long gone. A node has at most a few hundred pods
// with a handful of event keys each, so 1024 keeps every live pod's repeats counted.
const eventCorrelatorCacheSize = 1024

// newRecorder records events to the API server, or only logs them in standalone mode.
func newRecorder(client kubernetes.Interface, nodeName string) (record.EventRecorder, func()) {
	b := record.NewBroadcaster(record.WithCorrelatorOptions(record.CorrelatorOptions{LRUCacheSize: eventCorrelatorCacheSize}))
	b.StartStructuredLogging(3)
	if client != nil {
		b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	}
	return b.NewRecorder(scheme.Scheme, v1.EventSource{Component: "kubelet", Host: nodeName}), b.Shutdown
}

func hostIPs(n *v1.Node, configured []net.IP) []string {
	var out []string
	if n != nil {
		for _, a := range n.Status.Addresses {
			if a.Type == v1.NodeInternalIP {
				out = append(out, a.Address)
			}
		}
	}
	if len(out) == 0 {
		for _, ip := range configured {
			out = append(out, ip.String())
		}
	}
	return out
}

// newMetricsRegistry is the registry /metrics serves, with the node gauges. Like
// the kubelet's (component-base's legacy registry) it has the process collector
// (process_resident_memory_bytes, process_open_fds, ...) and the Go collector with
// all runtime/metrics series (go_goroutines, go_memstats_*, go_sched_*, ...), which
// is how operators and the fault suite see a leak.
func newMetricsRegistry(nodeName string, mode cgroups.Mode) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsAll)),
	)
	registerNodeGauges(reg, nodeName, mode)
	registerBuildInfo(reg)
	return reg
}

// registerBuildInfo exports upstream's kubernetes_build_info (component-base's
// metrics/prometheus/version registers it in the legacy registry, which
// nodelet does not serve) with nodelet's version record.
func registerBuildInfo(reg prometheus.Registerer) {
	info := nodeletversion.Get()
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kubernetes_build_info",
		Help: "A metric with a constant '1' value labeled by major, minor, git version, git commit, git tree state, build date, Go version, and compiler from which Kubernetes was built, and platform on which it is running."},
		[]string{"major", "minor", "git_version", "git_commit", "git_tree_state", "build_date", "go_version", "compiler", "platform"})
	g.WithLabelValues(info.Major, info.Minor, info.GitVersion, info.GitCommit, info.GitTreeState, info.BuildDate, info.GoVersion, info.Compiler, info.Platform).Set(1)
	reg.MustRegister(g)
}

// registerNodeGauges exports upstream's constant node facts: kubelet_node_name{node}
// and kubelet_cgroup_version (2 on a unified host, 1 on v1 and hybrid).
func registerNodeGauges(reg prometheus.Registerer, nodeName string, mode cgroups.Mode) {
	name := prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: "kubelet", Name: "node_name",
		Help: "The node's name. The count is always 1."}, []string{"node"})
	name.WithLabelValues(nodeName).Set(1)
	version := prometheus.NewGauge(prometheus.GaugeOpts{Subsystem: "kubelet", Name: "cgroup_version",
		Help: "cgroup version on the hosts."})
	version.Set(1)
	if mode.Unified() {
		version.Set(2)
	}
	reg.MustRegister(name, version)
}

// watchdog pings systemd on clk while the loop and PLEG are healthy, so a
// wedged nodelet is restarted when WatchdogSec is set.
func watchdog(ctx context.Context, clk clock.WithTicker, p healthChecker, loop *syncloop.Loop) {
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil || interval == 0 {
		return
	}
	periodic.Every(ctx, clk, interval/2, func(context.Context) {
		if p.Healthy() == nil && loop.Healthy() == nil {
			_, _ = daemon.SdNotify(false, daemon.SdNotifyWatchdog)
		}
	})
}
