// Package agent assembles nodelet's parts from its options and runs them until
// the context ends. Stopping nodelet never stops pods: the next start adopts them.
package agent

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/certificate"
	"github.com/nodelet/nodelet/cgroups"
	"github.com/nodelet/nodelet/config"
	"github.com/nodelet/nodelet/cri"
	"github.com/nodelet/nodelet/node"
	"github.com/nodelet/nodelet/pleg"
	"github.com/nodelet/nodelet/podconfig"
	"github.com/nodelet/nodelet/podruntime"
	"github.com/nodelet/nodelet/pullrecords"
	"github.com/nodelet/nodelet/status"
	"github.com/nodelet/nodelet/syncloop"
	"github.com/nodelet/nodelet/volumes"
)

// Version is the version nodelet reports (nodeInfo.kubeletVersion). It tracks
// the Kubernetes minor whose behaviour nodelet implements.
const Version = "v1.37.2-nodelet"

// maxWaitForContainerRuntime is how long start-up waits for the CRI socket.
const maxWaitForContainerRuntime = 30 * time.Second

// Run runs nodelet until ctx is done.
func Run(ctx context.Context, opts *config.Options) error {
	kc := opts.Config
	clk := clock.RealClock{}
	logger := klog.FromContext(ctx)

	nodeName, err := config.NodeName(opts.HostnameOverride)
	if err != nil {
		return err
	}
	hostname, err := os.Hostname()
	if err != nil {
		return fmt.Errorf("reading the host name: %w", err)
	}
	if opts.HostnameOverride != "" {
		hostname = nodeName
	}
	logger.Info("Starting nodelet", "version", Version, "node", nodeName, "rootDir", opts.RootDir, "config", opts.ConfigFile)
	for _, w := range config.ServingWarnings(opts) {
		logger.Error(nil, w.Message, "setting", w.Setting, "value", w.Value, "address", w.Address, "fix", w.Fix)
	}

	swaps, _ := os.ReadFile("/proc/swaps") // missing means no swap
	if err := cgroups.CheckSwap(string(swaps), ptr.Deref(kc.FailSwapOn, true)); err != nil {
		return fmt.Errorf("%w (set failSwapOn: false in the config file to allow it)", err)
	}
	cgroupMode, err := cgroups.DetectMode(cgroupfsRoot)
	if err != nil {
		return fmt.Errorf("detecting the cgroup version under %s: %w", cgroupfsRoot, err)
	}
	if err := checkCgroupVersion(cgroupMode, ptr.Deref(kc.FailCgroupV1, false)); err != nil {
		return err
	}
	applyOOMScoreAdj(ctx, kc.OOMScoreAdj)
	for _, dir := range []string{opts.RootDir, podsDir(opts.RootDir), kc.PodLogsDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return fmt.Errorf("creating directory %s: %w", dir, err)
		}
	}

	reg := prometheus.NewRegistry()
	registerNodeGauges(reg, nodeName, cgroupMode)
	rt, err := connectRuntime(ctx, kc.ContainerRuntimeEndpoint, kc.ImageServiceEndpoint, kc.RuntimeRequestTimeout.Duration, reg)
	if err != nil {
		return err
	}
	defer rt.Close(context.Background())
	ver, err := rt.Version(ctx, "v1")
	if err != nil {
		return fmt.Errorf("reading the container runtime version: %w", err)
	}
	logger.Info("Connected to the container runtime", "runtime", ver.RuntimeName, "runtimeVersion", ver.RuntimeVersion, "criVersion", ver.RuntimeApiVersion)

	// API clients: none in standalone mode.
	var client, heartbeat, authClient kubernetes.Interface
	var credential *certificate.Client
	if opts.Kubeconfig != "" {
		// TLS bootstrap (if needed) happens here; rotation starts below.
		credential, err = newClientCredential(ctx, opts, nodeName, reg)
		if err != nil {
			if ctx.Err() != nil {
				logger.Info("Stopped before a client certificate was issued; the bootstrap key is kept for the next start")
				return nil
			}
			return fmt.Errorf("setting up the API client credential: %w", err)
		}
		client, heartbeat, err = newClientsForConfig(credential.RESTConfig(), kc)
		if err != nil {
			return err
		}
		if authClient, err = newAuthClient(credential.RESTConfig()); err != nil {
			return err
		}
	} else {
		logger.Info("No kubeconfig given: running in standalone mode (static pods only)", "staticPodPath", kc.StaticPodPath)
	}

	recorder, stopEvents := newRecorder(client, nodeName)
	defer stopEvents()

	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	goRun := func(f func()) {
		wg.Add(1)
		go func() { defer wg.Done(); f() }()
	}

	evictGate := &evictionGate{}   // its manager is set once the loop and GC exist
	var graceful *gracefulShutdown // set once the loop exists; nil means the feature is off
	cache := pleg.NewCache(clk)
	gpleg := pleg.NewGeneric(rt, cache, time.Second, 3*time.Minute, clk, pleg.WithMetrics(reg))
	health := newRuntimeHealth(rt, clk)

	nodeCtl, err := node.New(client, heartbeat, node.Config{
		NodeName: nodeName,
		Hostname: hostname,
		NodeIPs:  opts.NodeIPs,
		Labels:   opts.NodeLabels,
		Kubelet:  kc,
		RootDir:  opts.RootDir,
		Version:  Version,
	}, rt, func() []string {
		var reasons []string
		if err := health.err(); err != nil {
			reasons = append(reasons, err.Error())
		}
		if err := gpleg.Healthy(); err != nil {
			reasons = append(reasons, "PLEG is not healthy: "+err.Error())
		}
		return append(reasons, graceful.notReady()...)
	}, clk, node.WithEventRecorder(recorder), node.WithImageLister(rt), node.WithRuntimeStatus(rt), node.WithPressure(evictGate.pressure),
		heartbeatReset(credential))
	if err != nil {
		return fmt.Errorf("setting up the node controller: %w", err)
	}
	nodeFacts := func() podruntime.NodeFacts {
		f := podruntime.NodeFacts{Name: nodeName, Allocatable: nodeCtl.Allocatable()}
		if mem, ok := nodeCtl.Capacity()[v1.ResourceMemory]; ok {
			f.MemoryCapacity = mem.Value()
		}
		f.HostIPs = hostIPs(nodeCtl.Node(), opts.NodeIPs)
		return f
	}
	nodeLabels := func() map[string]string {
		if n := nodeCtl.Node(); n != nil {
			return n.Labels
		}
		return opts.NodeLabels
	}

	if credential != nil {
		goRun(func() { credential.Run(ctx, recorder) })
	}
	// serving.GetCertificate is the certificate source for the kubelet API's
	// HTTPS server (tls.Config.GetCertificate).
	serving, err := newServingCertificate(ctx, opts, nodeName, hostname, client, nodeCtl.Node, reg)
	if err != nil {
		return fmt.Errorf("setting up the serving certificate: %w", err)
	}
	goRun(func() { serving.Run(ctx, recorder) })

	cg, err := setUpCgroups(ctx, kc, cgroupMode, rt, nodeCtl.Capacity(), int64(nodeCtl.MachineInfo().SwapCapacity), dialSystemd)
	if err != nil {
		return err
	}
	defer cg.Close()
	var podCgroups podruntime.PodCgroups
	var cgroupCleaner syncloop.PodCgroups
	var qos *qosCgroups
	var loop *syncloop.Loop
	if cg.mgr != nil {
		qos = &qosCgroups{mgr: cg.mgr, activePods: func() []*v1.Pod { return loop.ActivePods() }}
		podCgroups, cgroupCleaner = qos, cg.mgr
	}

	var kubeGetter volumes.KubeGetter
	if client != nil {
		kubeGetter = volumes.KubeGetterFromClientset(client)
	}
	vols := volumes.NewManager(opts.RootDir, kubeGetter, clk, volumes.WithNodeAllocatable(nodeCtl.Allocatable))
	envSrc := newEnvSources(client)
	goRun(func() { envSrc.Run(ctx) })

	maxPulls := 1
	if kc.SerializeImagePulls != nil && !*kc.SerializeImagePulls {
		maxPulls = 0 // unbounded unless maxParallelImagePulls says otherwise
		if kc.MaxParallelImagePulls != nil {
			maxPulls = int(*kc.MaxParallelImagePulls)
		}
		if maxPulls < 1 {
			maxPulls = 64
		}
	}
	var crashMax time.Duration
	if kc.CrashLoopBackOff.MaxContainerRestartPeriod != nil {
		crashMax = kc.CrashLoopBackOff.MaxContainerRestartPeriod.Duration
	}
	pullPolicy, err := pullrecords.NewPolicy(kc.ImagePullCredentialsVerificationPolicy, kc.PreloadedImagesVerificationAllowlist)
	if err != nil {
		return fmt.Errorf("setting up image pull credential verification: %w", err)
	}
	pullRecords, err := pullrecords.Open(ctx, opts.RootDir, pullPolicy, rt, clk)
	if err != nil {
		return fmt.Errorf("setting up image pull credential verification: %w", err)
	}
	probes := newProbes(rt, recorder, clk)
	runtimeMgr := podruntime.New(podruntime.Config{
		RootDir:               opts.RootDir,
		PodLogsDir:            kc.PodLogsDir,
		ClusterDNS:            kc.ClusterDNS,
		ClusterDomain:         kc.ClusterDomain,
		ResolvConf:            ptr.Deref(kc.ResolverConfig, ""),
		MaxParallelImagePulls: maxPulls,
		CrashLoopBackOffMax:   crashMax,
		Resources:             cg.resources,
		CgroupParentFunc:      cg.cgroupParent,
		PodCgroups:            podCgroups,
		Hooks:                 probes.hooks,
		Probes:                probes.mgr,
		PullRecords:           pullRecords,
	}, rt, rt, vols, envSrc, nodeFacts, recorder, clk)

	var sources []string
	if kc.StaticPodPath != "" {
		sources = append(sources, podconfig.SourceFile)
	}
	if client != nil {
		sources = append(sources, podconfig.SourceAPI)
	}
	pods := podconfig.New(nodeName, clk, podconfig.WithSources(sources...))
	if kc.StaticPodPath != "" {
		goRun(func() { pods.RunFileSource(ctx, kc.StaticPodPath, kc.FileCheckFrequency.Duration) })
	}
	if client != nil {
		goRun(func() { pods.RunAPISource(ctx, client) })
		goRun(func() {
			pods.RunMirrorReconciler(ctx, client, func() types.UID {
				if n := nodeCtl.Node(); n != nil {
					return n.UID
				}
				return ""
			}, 5*time.Second)
		})
	}
	if kc.StaticPodPath == "" && client == nil {
		logger.Info("Neither staticPodPath nor a kubeconfig is set: nodelet has no pods to run")
	}

	statusMgr := status.NewManager(client, pods, clk,
		status.WithDeleteWhenReclaimed(func(p *v1.Pod) bool { return loop != nil && loop.CanDeletePod(p) }),
		status.WithMetrics(reg))
	probes.status.set(statusMgr)
	loop = syncloop.New(syncloop.Config{
		SyncFrequency: kc.SyncFrequency.Duration,
		RootDir:       opts.RootDir,
		PodLogsDir:    kc.PodLogsDir,
		RuntimeName:   ver.RuntimeName,
	}, syncloop.Deps{
		Runtime: runtimeMgr, Cache: cache, PLEG: gpleg, Status: statusMgr, Volumes: vols,
		Sources: pods, Node: nodeFacts, NodeLabels: nodeLabels, Recorder: recorder, Clock: clk, Registerer: reg,
		PodCgroups: cgroupCleaner,
		Probes:     probes.mgr,
		Admitters:  []func(*v1.Pod) *syncloop.Rejection{func(p *v1.Pod) *syncloop.Rejection { return graceful.admit(p) }, evictGate.admit},
	})
	if qos != nil {
		goRun(func() { qos.run(ctx, clk) })
	}
	graceful, err = setUpShutdown(ctx, kc, opts.RootDir, loop, clk, reg)
	if err != nil {
		return err
	}
	if graceful != nil {
		defer graceful.inh.Close()
		goRun(func() {
			graceful.mgr.Run(ctx, graceful.inh, func(shuttingDown bool) {
				logger.Info("Node shutdown state changed", "shuttingDown", shuttingDown)
				if shuttingDown {
					recorder.Eventf(&v1.ObjectReference{Kind: "Node", Name: nodeName, UID: types.UID(nodeName)}, v1.EventTypeNormal, "NodeShutdown", "Shutdown manager detected shutdown event")
				}
				nodeCtl.TriggerStatusUpdate()
			})
		})
	}

	sandboxImage := opts.PodInfraContainerImage
	if sandboxImage == "" {
		sandboxImage = runtimeSandboxImage(ctx, rt)
	}
	gcs, err := newGarbageCollectors(kc, opts.RootDir, sandboxImage, nodeName, rt, loop, recorder, clk, reg)
	if err != nil {
		return err
	}
	gcs.run(ctx, goRun)

	statsProvider := newStatsProvider(kc, nodeName, opts.RootDir, cg, rt, loop.ActivePods, clk)
	if evictGate.mgr, err = newEvictionManager(kc, nodeName, statsProvider, nodeCtl, loop, gcs, recorder, clk, reg); err != nil {
		return fmt.Errorf("setting up the eviction manager: %w", err)
	}
	if evictGate.mgr != nil {
		goRun(func() { evictGate.mgr.Run(ctx) })
	}

	goRun(func() { health.run(ctx) })
	goRun(func() { gpleg.Start(ctx) })
	goRun(func() { statusMgr.Run(ctx) })
	// Run registers the Node first (unless registerNode is false), then reports status and renews the Lease.
	goRun(func() { nodeCtl.Run(ctx) })
	goRun(func() { loop.Run(ctx) })

	healthz := newHealthzServer(kc, gpleg, loop, health)
	if healthz != nil {
		healthz.details = graceful.healthDetails
		goRun(func() { healthz.serve(ctx) })
	}

	// The kubelet API (port 10250, readOnlyPort): a port in use fails the start, as upstream.
	apiPorts, err := newAPIServer(ctx, kc, apiServerDeps{
		nodeName: nodeName, authClient: authClient, runtime: rt, getCertificate: serving.GetCertificate,
		pods: loop.Pods, podStatus: statusMgr.GetPodStatus, pleg: gpleg, loop: loop,
		metrics: reg, probeMetrics: probes.registry, summary: statsProvider, clock: clk,
	})
	if err != nil {
		return fmt.Errorf("setting up the kubelet API server: %w", err)
	}
	if apiPorts != nil {
		goRun(func() { apiPorts.Serve(ctx) })
	}

	select {
	case <-loop.Synced():
		sent, err := daemon.SdNotify(false, daemon.SdNotifyReady)
		logger.Info("nodelet is ready: pod sources synced", "notifiedSystemd", sent)
		if err != nil {
			logger.Error(err, "Telling systemd nodelet is ready")
		}
		goRun(func() { watchdog(ctx, gpleg, loop) })
	case <-ctx.Done():
	}
	<-ctx.Done()
	logger.Info("Stopping nodelet; running pods are left running")
	_, _ = daemon.SdNotify(false, daemon.SdNotifyStopping)
	return nil
}

func podsDir(root string) string { return root + "/pods" }

func connectRuntime(ctx context.Context, endpoint, imageEndpoint string, timeout time.Duration, reg prometheus.Registerer) (*cri.Client, error) {
	deadline := time.Now().Add(maxWaitForContainerRuntime)
	for {
		c, err := cri.New(ctx, endpoint, imageEndpoint, timeout, cri.WithMetrics(reg))
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
func newClients(kubeconfig string, kc *kubeletconfigv1beta1.KubeletConfiguration) (kubernetes.Interface, kubernetes.Interface, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, nil, fmt.Errorf("loading kubeconfig %s: %w", kubeconfig, err)
	}
	return newClientsForConfig(rc, kc)
}

// newClientsForConfig is newClients for a loaded (possibly rotating) configuration.
func newClientsForConfig(rc *rest.Config, kc *kubeletconfigv1beta1.KubeletConfiguration) (kubernetes.Interface, kubernetes.Interface, error) {
	rc.UserAgent = "nodelet/" + Version
	if kc.KubeAPIQPS == nil {
		rc.QPS = 50
	} else {
		rc.QPS = float32(*kc.KubeAPIQPS)
	}
	rc.Burst = int(kc.KubeAPIBurst)
	if rc.Burst == 0 {
		rc.Burst = 100
	}
	if kc.ContentType != "" {
		rc.ContentType = kc.ContentType
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("creating the API client: %w", err)
	}
	hb := *rc
	hb.QPS = -1
	timeout := kc.NodeStatusUpdateFrequency.Duration
	if lease := time.Duration(kc.NodeLeaseDurationSeconds) * time.Second; lease > 0 && lease < timeout {
		timeout = lease
	}
	if timeout > 0 {
		hb.Timeout = timeout
	}
	heartbeat, err := kubernetes.NewForConfig(&hb)
	if err != nil {
		return nil, nil, fmt.Errorf("creating the heartbeat API client: %w", err)
	}
	return client, heartbeat, nil
}

// newRecorder records events to the API server, or only logs them in standalone mode.
func newRecorder(client kubernetes.Interface, nodeName string) (record.EventRecorder, func()) {
	b := record.NewBroadcaster()
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

// checkCgroupVersion refuses cgroup v1 hosts when failCgroupV1 is set, as upstream.
// A hybrid host (v1 controllers plus an empty unified mount) counts as v1.
func checkCgroupVersion(mode cgroups.Mode, failCgroupV1 bool) error {
	if mode.Unified() || !failCgroupV1 {
		return nil
	}
	return fmt.Errorf("nodelet is configured to not run on a host using cgroup v1 (failCgroupV1: true), and this host's cgroups are %s; cgroup v1 support is in maintenance mode upstream: move the host to cgroup v2, or set failCgroupV1: false in the config file", mode)
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

// applyOOMScoreAdj protects nodelet from the OOM killer. Some hosts refuse
// negative values (no CAP_SYS_RESOURCE); that is a warning, not a failure.
func applyOOMScoreAdj(ctx context.Context, adj *int32) {
	v := int32(-999)
	if adj != nil {
		v = *adj
	}
	if err := os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(int(v))), 0o644); err != nil {
		klog.FromContext(ctx).Info("Warning: could not set nodelet's oom_score_adj; continuing", "oomScoreAdj", v, "err", err)
	}
}

// watchdog pings systemd while the loop and PLEG are healthy, so a wedged
// nodelet is restarted when WatchdogSec is set.
func watchdog(ctx context.Context, p interface{ Healthy() error }, loop *syncloop.Loop) {
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil || interval == 0 {
		return
	}
	t := time.NewTicker(interval / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if p.Healthy() == nil && loop.Healthy() == nil {
				_, _ = daemon.SdNotify(false, daemon.SdNotifyWatchdog)
			}
		}
	}
}
