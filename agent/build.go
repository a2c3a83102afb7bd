package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"time"

	"go.opentelemetry.io/otel/trace"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"

	"github.com/prometheus/client_golang/prometheus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/allocation"
	"github.com/nodelet/nodelet/certificate"
	"github.com/nodelet/nodelet/cgroups"
	"github.com/nodelet/nodelet/config"
	"github.com/nodelet/nodelet/cri"
	"github.com/nodelet/nodelet/csi"
	"github.com/nodelet/nodelet/eviction"
	"github.com/nodelet/nodelet/hostsetup"
	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/internal/resourcemetrics"
	nodeletversion "github.com/nodelet/nodelet/internal/version"
	"github.com/nodelet/nodelet/logrotate"
	"github.com/nodelet/nodelet/node"
	"github.com/nodelet/nodelet/pleg"
	"github.com/nodelet/nodelet/pluginmanager"
	"github.com/nodelet/nodelet/podconfig"
	"github.com/nodelet/nodelet/podobjects"
	"github.com/nodelet/nodelet/podresources"
	"github.com/nodelet/nodelet/podruntime"
	"github.com/nodelet/nodelet/procfs"
	"github.com/nodelet/nodelet/pullrecords"
	"github.com/nodelet/nodelet/resourcemanager/cpumanager"
	"github.com/nodelet/nodelet/resourcemanager/devicemanager"
	"github.com/nodelet/nodelet/resourcemanager/dra"
	"github.com/nodelet/nodelet/resourcemanager/memorymanager"
	"github.com/nodelet/nodelet/resourcemanager/topologymanager"
	"github.com/nodelet/nodelet/server"
	"github.com/nodelet/nodelet/stats"
	"github.com/nodelet/nodelet/statussync"
	"github.com/nodelet/nodelet/syncloop"
	"github.com/nodelet/nodelet/userns"
	"github.com/nodelet/nodelet/volumes"
)

// hostPaths are the host files build writes outside the root dir; tests point them at
// temp dirs so that building an agent never changes the test machine's kernel.
type hostPaths struct {
	procSys string // /proc/sys: the kernel tunables of protectKernelDefaults
}

// builder holds what every phase of build reads: the options, the configuration
// resolved once, and the parts two phases share before either is built.
type builder struct {
	a    *agent
	opts *config.Options
	kc   *kubeletconfigv1beta1.KubeletConfiguration
	set  config.Settings
	clk  clock.RealClock

	// Built before the parts that read them and the managers that feed them (see build).
	pressure     *pressureState
	shuttingDown *shutdownState
	queries      *loopQueries
}

// build makes every part of nodelet from opts, each one complete when it is handed
// to another: nothing is filled in later. The parts' goroutines start in run, except
// those a library starts on construction and the part's closer stops (the logind
// inhibitor's signal watcher, the event broadcaster, gRPC's). The kubelet API ports
// are opened here, so a port in use fails the start. On an error the closers so far
// run.
//
// It goes in phases, each returning what the next ones take: the host, the
// connections (runtime, API server), the node's state (PLEG, runtime health, node
// controller), the resource managers, the pods' inputs (objects, volumes, plugins,
// sources, status, probes), the pod pipeline (runtime manager, sync loop), the
// observers (GC, stats, eviction), the servers, and the run stages.
//
// Where two parts need each other, one of them gets something built before both:
//   - node controller and sync loop ↔ eviction manager: the eviction manager's
//     conditions reach node status and admission through a pressureState, built first
//     and fed by the manager's WithConditionsChanged; the manager is built last.
//   - node controller and sync loop ↔ graceful shutdown manager: whether a shutdown is
//     under way reaches readiness and admission through a shutdownState, built first
//     and fed by the manager's Run; the manager is built after the loop.
//   - sync loop → status manager → sync loop (CanDeletePod) and sync loop → runtime
//     manager → QoS cgroups → sync loop (ActivePods): the status manager and the QoS
//     cgroups ask the loop over the channels of a loopQueries, built first and
//     answered from the loop in the run phase.
//   - prober → status manager (pod statuses) is no cycle any more: the status manager
//     is built before the prober (it needed the loop before).
func build(ctx context.Context, opts *config.Options, paths hostPaths) (_ *agent, err error) {
	b := &builder{a: &agent{}, opts: opts, kc: opts.Config, set: config.Resolve(opts.Config),
		pressure: &pressureState{}, shuttingDown: &shutdownState{}, queries: newLoopQueries()}
	defer func() {
		if err != nil {
			b.a.close(ctx)
		}
	}()
	h, err := b.host(ctx, paths)
	if err != nil {
		return nil, err
	}
	c, err := b.connect(ctx, h)
	if err != nil {
		return nil, err
	}
	n, err := b.nodeState(ctx, h, c)
	if err != nil {
		return nil, err
	}
	r, err := b.resourceManagers(ctx, h, c, n)
	if err != nil {
		return nil, err
	}
	in, err := b.podInputs(ctx, h, c, n)
	if err != nil {
		return nil, err
	}
	p, err := b.podPipeline(ctx, c, n, r, in)
	if err != nil {
		return nil, err
	}
	o, err := b.observers(ctx, h, c, n, r, in, p)
	if err != nil {
		return nil, err
	}
	s, err := b.servers(ctx, h, c, n, in, p, o)
	if err != nil {
		return nil, err
	}
	b.a.synced = p.loop.Synced()
	b.a.stages = b.stages(ctx, h, c, n, r, in, p, o, s)
	return b.a, nil
}

// hostFacts are the node's names and what the host checks found.
type hostFacts struct {
	nodeName, hostname string
	cgroupMode         cgroups.Mode
	showHiddenMetrics  bool
}

// host names the node, checks the configuration and the host, and sets up
// nodelet's process and directories (package hostsetup).
func (b *builder) host(ctx context.Context, paths hostPaths) (hostFacts, error) {
	opts, kc, logger := b.opts, b.kc, klog.FromContext(ctx)
	var h hostFacts
	var err error
	if h.nodeName, err = config.NodeName(opts.HostnameOverride); err != nil {
		return h, err
	}
	if h.hostname, err = os.Hostname(); err != nil {
		return h, fmt.Errorf("reading the host name: %w", err)
	}
	if opts.HostnameOverride != "" {
		h.hostname = h.nodeName
	}
	logger.Info("Starting nodelet", "version", nodeletversion.Get().GitVersion, "node", h.nodeName, "rootDir", opts.RootDir, "config", opts.ConfigFile)
	for _, w := range config.ServingWarnings(opts) {
		logger.Error(nil, w.Message, "setting", w.Setting, "value", w.Value, "address", w.Address, "fix", w.Fix)
	}

	// The kubelet loads its API credential before it looks at the runtime: a
	// missing bootstrap kubeconfig stops it at once, naming the file, rather
	// than after the wait for the runtime.
	if opts.Kubeconfig != "" {
		if err := certificate.CheckBootstrapKubeconfig(opts.Kubeconfig, opts.BootstrapKubeconfig, time.Now()); err != nil {
			return h, err
		}
	}
	if h.showHiddenMetrics, err = showHiddenMetrics(kc.ShowHiddenMetricsForVersion); err != nil {
		return h, err
	}
	if h.cgroupMode, err = hostsetup.Prepare(ctx, b.set.Host, hostsetup.Paths{ProcSys: paths.procSys, Cgroupfs: cgroupfsRoot}); err != nil {
		return h, err
	}
	for _, dir := range []string{opts.RootDir, podsDir(opts.RootDir), kc.PodLogsDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return h, fmt.Errorf("creating directory %s: %w", dir, err)
		}
	}
	return h, nil
}

// connections are the metrics registry, the tracer and the clients of the
// container runtime and of the API server (nil in standalone mode).
type connections struct {
	reg        *prometheus.Registry
	tracer     trace.TracerProvider // nil: untraced
	rt         *cri.Client
	ver        *runtimeapi.VersionResponse
	client     kubernetes.Interface
	heartbeat  kubernetes.Interface
	authClient kubernetes.Interface
	credential *certificate.Client
	recorder   record.EventRecorder
}

// connect reaches the container runtime and, with a kubeconfig, the API server
// (after the TLS bootstrap, if needed).
func (b *builder) connect(ctx context.Context, h hostFacts) (connections, error) {
	a, opts, kc, logger := b.a, b.opts, b.kc, klog.FromContext(ctx)
	c := connections{reg: newMetricsRegistry(h.nodeName, h.cgroupMode)}
	a.metrics = c.reg
	tracer, err := newTracerProvider(ctx, kc.Tracing, h.hostname)
	if err != nil {
		return c, err
	}
	if tracer != nil {
		c.tracer = tracer
		// Added before the runtime client: it closes after it, with the
		// spans of the last CRI calls.
		a.addCloser("tracer provider", func() error { return shutdownTracer(tracer) })
		logger.Info("Tracing pod syncs, CRI calls, API requests and kubelet API requests", "endpoint", b.set.Tracing.Endpoint, "samplingRatePerMillion", b.set.Tracing.SamplingRatePerMillion)
	}
	if c.rt, err = connectRuntime(ctx, kc.ContainerRuntimeEndpoint, kc.ImageServiceEndpoint, kc.RuntimeRequestTimeout.Duration, c.reg, c.tracer); err != nil {
		return c, err
	}
	rt := c.rt
	a.addCloser("container runtime client", func() error { return rt.Close(context.Background()) })
	if c.ver, err = rt.Version(ctx, "v1"); err != nil {
		return c, fmt.Errorf("reading the container runtime version: %w", err)
	}
	logger.Info("Connected to the container runtime", "runtime", c.ver.RuntimeName, "runtimeVersion", c.ver.RuntimeVersion, "criVersion", c.ver.RuntimeApiVersion)

	// API clients: none in standalone mode.
	var eventClient kubernetes.Interface
	if opts.Kubeconfig != "" {
		// TLS bootstrap (if needed) happens here; rotation runs in the run phase.
		credential, err := newClientCredential(ctx, opts, h.nodeName, c.reg)
		if err != nil {
			if ctx.Err() != nil {
				logger.Info("Stopped before a client certificate was issued; the bootstrap key is kept for the next start")
				return c, errStoppedEarly
			}
			return c, fmt.Errorf("setting up the API client credential: %w", err)
		}
		c.credential = credential
		a.addCloser("API client connections", func() error { credential.CloseAllConns(); return nil })
		if c.client, c.heartbeat, err = newClientsForConfig(apiConfig(credential, tracer), b.set.APIClient); err != nil {
			return c, err
		}
		if c.authClient, err = newAuthClient(apiConfig(credential, tracer)); err != nil {
			return c, err
		}
		if eventClient, err = newEventClient(apiConfig(credential, tracer), b.set.APIClient); err != nil {
			return c, err
		}
	} else {
		logger.Info("No kubeconfig given: running in standalone mode (static pods only)", "staticPodPath", kc.StaticPodPath)
	}

	recorder, stopEvents := newRecorder(eventClient, h.nodeName)
	c.recorder = recorder
	a.addCloser("event broadcaster", func() error { stopEvents(); return nil })
	return c, nil
}

// nodeParts are what watches the runtime and the node: the pod cache and PLEG,
// the runtime's health, the device manager (the node advertises its devices),
// the node controller and the serving certificate.
type nodeParts struct {
	cache       *pleg.Cache
	gates       config.Gates
	gpleg       *pleg.Generic
	epleg       *pleg.Evented // nil without EventedPLEG
	health      *runtimeHealth
	appArmor    bool
	csiInUse    *volumes.CSIInUse
	topologyCfg topologymanager.Config
	devices     *devicemanager.Manager
	ctl         *node.Controller
	facts       func() podruntime.NodeFacts
	serving     *certificate.Serving
}

// nodeState builds the PLEG, runtime health and the node controller.
func (b *builder) nodeState(ctx context.Context, h hostFacts, c connections) (nodeParts, error) {
	opts, kc, clk, logger := b.opts, b.kc, b.clk, klog.FromContext(ctx)
	n := nodeParts{cache: pleg.NewCache(clk)}
	var err error
	if n.gates, err = config.FeatureGates(kc); err != nil {
		return n, fmt.Errorf("reading the feature gates: %w", err)
	}
	// With EventedPLEG the relist is the safety net at upstream's longer period;
	// the evented PLEG shortens it again while the event stream is down.
	relistPeriod, relistThreshold := pleg.DefaultRelistPeriod, pleg.DefaultRelistThreshold
	if n.gates.Enabled("EventedPLEG") {
		relistPeriod, relistThreshold = pleg.EventedRelistPeriod, pleg.EventedRelistThreshold
	}
	n.gpleg = pleg.NewGeneric(c.rt, n.cache, relistPeriod, relistThreshold, clk, pleg.WithMetrics(c.reg))
	if n.gates.Enabled("EventedPLEG") {
		n.epleg = pleg.NewEvented(n.gpleg, c.rt, clk, pleg.WithEventedMetrics(c.reg))
	}
	n.health = newRuntimeHealth(c.rt, clk)

	external, err := externalCloudProvider(opts.CloudProvider)
	if err != nil {
		return n, err
	}
	// podCIDR reaches the runtime from the config now, then from the Node's spec.
	cidrs := &podCIDR{rt: c.rt}
	if _, err := cidrs.update(ctx, kc.PodCIDR); err != nil {
		logger.Error(err, "Pod CIDR update failed")
	}
	// Checked once, as upstream: enabling AppArmor needs a reboot anyway.
	n.appArmor = procfs.AppArmorEnabled("/sys")
	// The attachable CSI volumes the volume manager uses, for
	// node.status.volumesInUse (the attach/detach controller detaches none
	// listed there); made first, as the volume manager needs the node
	// controller.
	n.csiInUse = volumes.NewCSIInUse(opts.RootDir)
	// The topology manager's policy and the machine's NUMA nodes, which the
	// device manager's hints range over.
	if n.topologyCfg, err = topologyConfig(kc, n.gates, "/"); err != nil {
		return n, err
	}
	// Device plugins are always on, as upstream; the checkpoint is read now so
	// pods running since before a restart keep their devices.
	if n.devices, err = devicemanager.New(filepath.Join(opts.RootDir, devicemanager.DirName), clk, n.topologyCfg.NUMA.Nodes); err != nil {
		return n, fmt.Errorf("setting up the device plugin manager: %w", err)
	}
	n.ctl, err = node.New(c.client, c.heartbeat, node.Config{
		NodeName: h.nodeName,
		Hostname: h.hostname,
		NodeIPs:  opts.NodeIPs,
		Labels:   opts.NodeLabels,
		Settings: b.set.Node,
		RootDir:  opts.RootDir,
		Version:  nodeletversion.Get().GitVersion,

		ExternalCloudProvider: external,
		AppArmorEnabled:       n.appArmor,
	}, c.rt, nodeReadiness(n.health, plegChecks(n.gpleg, n.epleg), b.shuttingDown.notReady), clk, node.WithEventRecorder(c.recorder), node.WithImageLister(c.rt), node.WithRuntimeStatus(c.rt), node.WithPressure(b.pressure.pressure),
		node.WithPodCIDRUpdater(cidrs.update), node.WithVolumesInUse(n.csiInUse.List), node.WithDevices(n.devices), heartbeatReset(c.credential))
	if err != nil {
		return n, fmt.Errorf("setting up the node controller: %w", err)
	}
	nodeCtl, health, devices := n.ctl, n.health, n.devices
	// A runtime going down or coming back is in the node's status at once.
	health.onChange = nodeCtl.TriggerStatusUpdate
	n.facts = func() podruntime.NodeFacts {
		f := podruntime.NodeFacts{Name: h.nodeName, Allocatable: nodeCtl.Allocatable(), NetworkError: health.networkError()}
		// Admission judges device resources by what is healthy now (not the
		// last status sent), and never below what pods already hold.
		for name, q := range devices.AdmissionAllocatable() {
			f.Allocatable[name] = q
		}
		if mem, ok := nodeCtl.Capacity()[v1.ResourceMemory]; ok {
			f.MemoryCapacity = mem.Value()
		}
		f.HostIPs = hostIPs(nodeCtl.Node(), opts.NodeIPs)
		return f
	}

	// serving.GetCertificate is the certificate source for the kubelet API's
	// HTTPS server (tls.Config.GetCertificate).
	if n.serving, err = newServingCertificate(ctx, opts, h.nodeName, h.hostname, c.client, nodeCtl.Node, c.reg); err != nil {
		return n, fmt.Errorf("setting up the serving certificate: %w", err)
	}
	return n, nil
}

// resourceParts are the pod cgroups, the resource allocation checkpoints and
// the CPU, memory and topology managers.
type resourceParts struct {
	cg            *podCgroupSetup
	placement     *hostsetup.CgroupPlacement // nil: neither kubeletCgroups nor systemCgroups
	qos           *qosCgroups                // nil without cgroupsPerQOS
	podCgroups    podruntime.PodCgroups
	cgroupCleaner syncloop.PodCgroups
	podResize     podruntime.PodCgroupResizer
	allocated     *allocation.State
	actuated      *allocation.State
	allocations   *allocation.Manager
	cpus          *cpumanager.Manager
	memory        *memorymanager.Manager
	topology      *topologymanager.Manager
}

// resourceManagers builds the cgroup hierarchy and the managers that decide a
// pod's CPUs, memory and devices at admission.
func (b *builder) resourceManagers(ctx context.Context, h hostFacts, c connections, n nodeParts) (resourceParts, error) {
	a, opts, kc, clk := b.a, b.opts, b.kc, b.clk
	var r resourceParts
	var err error
	if r.cg, err = setUpCgroups(ctx, kc, b.set.Cgroups, h.cgroupMode, c.rt, n.ctl.Capacity(), int64(n.ctl.MachineInfo().SwapCapacity), dialSystemd); err != nil {
		return r, err
	}
	if cg := r.cg; cg.systemd != nil {
		a.addCloser("systemd D-Bus connection", func() error { cg.Close(); return nil })
	}
	if r.placement, err = hostsetup.NewCgroupPlacement(kc.KubeletCgroups, kc.SystemCgroups, kc.CgroupRoot, h.cgroupMode, cgroupfsRoot, "/proc", os.Getpid(), clk); err != nil {
		return r, err
	}
	if r.cg.mgr != nil {
		r.qos = &qosCgroups{mgr: r.cg.mgr, activePods: b.queries.activePods}
		r.podCgroups, r.cgroupCleaner, r.podResize = r.qos, r.cg.mgr, r.cg.mgr
	}
	// In-place resize: what each pod was allocated at admission or resize, and
	// what the runtime was told, checkpointed as upstream's (allocated_pods_state,
	// actuated_pods_state). A corrupt checkpoint is set aside and the pods are
	// admitted again at their specs; one that cannot be read at all stops the start.
	if r.allocated, err = allocation.OpenState(ctx, opts.RootDir, allocation.AllocatedStateFile, clk); err != nil {
		return r, fmt.Errorf("setting up pod resource allocations: %w", err)
	}
	if r.actuated, err = allocation.OpenState(ctx, opts.RootDir, allocation.ActuatedStateFile, clk); err != nil {
		return r, fmt.Errorf("setting up pod resource allocations: %w", err)
	}
	r.allocations = allocation.NewManager(r.allocated, r.cg.resources, allocation.StaticManagers{
		CPU:    kc.CPUManagerPolicy == cpumanager.PolicyStatic,
		Memory: kc.MemoryManagerPolicy == memorymanager.PolicyStatic,
	}, c.recorder, clk)

	// Exclusive CPUs (cpuManagerPolicy static) are decided at admission and
	// given at container creation; a checkpoint of another policy stops the start.
	// The topology, CPU and memory managers' kubelet_* families, registered
	// whatever the policies, as upstream.
	resourceMetrics, err := resourcemetrics.New(c.reg)
	if err != nil {
		return r, err
	}
	topologyCfg := n.topologyCfg
	topologyCfg.Metrics = resourceMetrics
	if r.cpus, err = newCPUManager(kc, opts.RootDir, c.rt, b.queries.activePods, clk, resourceMetrics); err != nil {
		return r, err
	}
	// NUMA memory (memoryManagerPolicy Static) is decided at admission and
	// given at container creation as cpuset.mems; reservedMemory must add up to
	// the node allocatable reservation.
	if r.memory, err = memorymanager.NewFromConfig(kc, n.ctl.Reservation(), opts.RootDir, "/", clk, resourceMetrics); err != nil {
		return r, fmt.Errorf("setting up the memory manager (memoryManagerPolicy %q): %w", kc.MemoryManagerPolicy, err)
	}
	// The topology manager admits each container's CPUs, memory and devices
	// along one NUMA affinity (topologyManagerPolicy); under none it only
	// allocates.
	if r.topology, err = topologymanager.New(topologyCfg, r.cpus, r.memory, n.devices); err != nil {
		return r, fmt.Errorf("setting up the topology manager: %w", err)
	}
	return r, nil
}

// inputs are what the pod pipeline reads pods and their dependencies from:
// the pod sources, the configMaps and secrets, volumes and their plugins,
// image pull records and credentials, user namespaces, RuntimeClasses, and
// the status manager and prober that report on them.
type inputs struct {
	objects       *podobjects.Manager
	vols          *volumes.Manager
	draMgr        *dra.Manager
	csiDrivers    *csi.Registry
	plugins       *pluginmanager.Watcher
	envSrc        *envSources
	pullRecords   *pullrecords.Manager
	credProviders podruntime.CredentialProviders
	usernsMgr     *userns.Manager
	classes       *runtimeClasses // nil in standalone mode
	pods          *podconfig.Config
	statusMgr     *statussync.Manager
	probes        *probeWiring
}

// podInputs builds what a pod's sync reads.
func (b *builder) podInputs(ctx context.Context, h hostFacts, c connections, n nodeParts) (inputs, error) {
	a, opts, kc, clk, logger := b.a, b.opts, b.kc, b.clk, klog.FromContext(ctx)
	client, nodeCtl := c.client, n.ctl
	var in inputs
	var err error
	// The configMaps and secrets pods reference, read per
	// configMapAndSecretChangeDetectionStrategy by volumes, env and pull secrets.
	if in.objects, err = podobjects.New(kc.ConfigMapAndSecretChangeDetectionStrategy, client, clk,
		podobjects.WithTTL(func() (time.Duration, bool) { return nodeObjectTTL(nodeCtl.Node()) })); err != nil {
		return in, fmt.Errorf("setting up the configMap and secret source: %w", err)
	}
	var kubeGetter volumes.KubeGetter
	volOpts := []volumes.Option{volumes.WithNodeAllocatable(nodeCtl.Allocatable)}
	if client != nil {
		kubeGetter = volumes.KubeGetterWithObjects(in.objects, client)
		// Claims and their volumes are read with a Get on each pod sync, as
		// upstream's volume manager does; a local volume's node affinity is
		// matched against the registered Node's labels.
		volOpts = append(volOpts, volumes.WithClaims(volumes.ClaimGetterFromClientset(client), func() map[string]string {
			if n := nodeCtl.Node(); n != nil {
				return n.Labels
			}
			return nil
		}))
	}
	// Node plugins register through <root>/plugins_registry, each type with
	// its handler. CSI node plugins: with an API server, each is published in the Node and its CSINode, and its volumes
	// are staged and published for pods (attached by the attach/detach
	// controller, never by nodelet).
	// DRA drivers register in the same directory (type DRAPlugin); their
	// claims are prepared before a pod's sandbox and unprepared once its
	// containers stopped, and their CDI devices reach the containers.
	draPlugins := dra.NewPlugins()
	a.addCloser("DRA driver connections", func() error { draPlugins.Close(); return nil })
	if in.draMgr, err = dra.New(opts.RootDir, client, draPlugins); err != nil {
		return in, fmt.Errorf("setting up dynamic resource allocation: %w", err)
	}
	if in.csiDrivers, err = csi.New(ctx, csi.WithKubeClient(client, h.nodeName)); err != nil {
		return in, fmt.Errorf("setting up the CSI plugin registry: %w", err)
	}
	if in.plugins, err = pluginmanager.New(pluginmanager.RegistryDir(opts.RootDir),
		pluginmanager.WithHandler(csi.PluginType, in.csiDrivers), pluginmanager.WithHandler(dra.PluginType, draPlugins)); err != nil {
		return in, fmt.Errorf("setting up the plugin registration watcher: %w", err)
	}
	volOpts = append(volOpts, volumes.WithCSIInUse(n.csiInUse))
	if client != nil {
		volOpts = append(volOpts, volumes.WithCSI(in.csiDrivers, volumes.CSIObjectsFromClientset(client), h.nodeName))
		// A resized CSI claim is grown on the node (NodeExpandVolume) and its
		// status finished, as upstream's kubelet does.
		volOpts = append(volOpts, volumes.WithClaimExpansion(volumes.ClaimStatusWriterFromClientset(client), c.recorder))
	}
	in.vols = volumes.NewManager(opts.RootDir, kubeGetter, clk, volOpts...)
	in.envSrc = newEnvSources(client, in.objects)

	pullPolicy, err := pullrecords.NewPolicy(kc.ImagePullCredentialsVerificationPolicy, kc.PreloadedImagesVerificationAllowlist)
	if err != nil {
		return in, fmt.Errorf("setting up image pull credential verification: %w", err)
	}
	if in.pullRecords, err = pullrecords.Open(ctx, opts.RootDir, pullPolicy, c.rt, clk); err != nil {
		return in, fmt.Errorf("setting up image pull credential verification: %w", err)
	}
	if in.credProviders, err = credentialProviders(opts, c.reg); err != nil {
		return in, err
	}

	// User namespaces: each hostUsers: false pod gets idsPerPod host IDs from
	// the kubelet user's subordinate IDs; a mapping that cannot serve maxPods
	// pods, or a pod's mapping file that cannot be read back, stops the start
	// as upstream's.
	if in.usernsMgr, err = newUserNamespaces(ctx, b.set.UserNamespaceIDsPerPod, kc.MaxPods, opts.RootDir, n.health.runtimeHandlers); err != nil {
		return in, err
	}
	if client != nil {
		in.classes = newRuntimeClasses(client)
	}

	var sources []string
	if kc.StaticPodPath != "" {
		sources = append(sources, podutil.SourceFile)
	}
	if kc.StaticPodURL != "" {
		sources = append(sources, podutil.SourceHTTP)
	}
	if client != nil {
		sources = append(sources, podutil.SourceAPI)
	}
	// The static sources adopt the static pods the kubelet left running, from
	// what the runtime runs when they first read their manifests.
	rt := c.rt
	in.pods = podconfig.New(h.nodeName, clk, podconfig.WithSources(sources...),
		podconfig.WithRuntimeLister(func(ctx context.Context) (podconfig.RuntimePods, error) {
			return podconfig.ListRuntimePods(ctx, rt.ListPodSandbox, rt.ListContainers)
		}))
	if len(sources) == 0 {
		logger.Info("None of staticPodPath, staticPodURL and a kubeconfig is set: nodelet has no pods to run")
	}

	in.statusMgr = statussync.NewManager(client, in.pods, clk,
		statussync.WithDeleteWhenReclaimed(b.queries.canDeletePod),
		statussync.WithMetrics(c.reg))
	in.probes = newProbes(rt, in.statusMgr, c.recorder, clk)
	return in, nil
}

// pipeline is the pod runtime manager, the sync loop that drives it and the
// graceful node shutdown manager that stops its pods.
type pipeline struct {
	runtimeMgr *podruntime.Manager
	loop       *syncloop.Loop
	graceful   *gracefulShutdown // nil when graceful node shutdown is off
}

// podPipeline builds the runtime manager and the sync loop.
func (b *builder) podPipeline(ctx context.Context, c connections, n nodeParts, r resourceParts, in inputs) (pipeline, error) {
	a, opts, kc, clk, logger := b.a, b.opts, b.kc, b.clk, klog.FromContext(ctx)
	var p pipeline
	imageVolumes := podruntime.ImageVolumeSupport(c.ver.RuntimeName, c.ver.RuntimeVersion)
	if imageVolumes != nil {
		logger.Info("Pods' image volumes will fail on this runtime", "reason", imageVolumes)
	}
	var runtimeClassLookup podruntime.RuntimeClasses
	if in.classes != nil {
		runtimeClassLookup = in.classes
	}
	run := b.set.Runtime
	p.runtimeMgr = podruntime.New(podruntime.Config{
		RootDir:               opts.RootDir,
		PodLogsDir:            kc.PodLogsDir,
		ClusterDNS:            kc.ClusterDNS,
		ClusterDomain:         kc.ClusterDomain,
		ResolvConf:            run.ResolvConf,
		MaxParallelImagePulls: run.MaxParallelImagePulls,
		// 10 per CPU: on the 2-core rig, 20 sandboxes at a time started a burst of
		// 110 pods 10 % sooner than all at once, and each pod in a seventh of the time.
		MaxRuntimeStarts:    10 * goruntime.NumCPU(),
		RegistryPullQPS:     run.RegistryPullQPS,
		RegistryBurst:       run.RegistryBurst,
		CrashLoopBackOffMax: run.CrashLoopBackOffMax,
		Resources:           r.cg.resources,
		SeccompDefault:      run.SeccompDefault,
		ImageVolumeSupport:  imageVolumes,
	}, podruntime.Deps{
		Runtime: c.rt, Images: c.rt, Volumes: in.vols, Env: in.envSrc, Node: n.facts, Recorder: c.recorder, Clock: clk,
		RuntimeClasses:      runtimeClassLookup,
		CgroupParent:        r.cg.cgroupParent,
		PodCgroups:          r.podCgroups,
		Hooks:               in.probes.hooks,
		Probes:              in.probes.mgr,
		PullRecords:         in.pullRecords,
		CredentialProviders: in.credProviders,
		UserNamespaces:      in.usernsMgr,
		Actuated:            r.actuated,
		PodResize:           r.podResize,
		CPUs:                r.cpus,
		Memory:              r.memory,
		Devices:             containerDevices{n.devices, in.draMgr},
		DynamicResources:    in.draMgr,
	})

	sysctls, err := sysctlAllowlist(kc, n.ctl.MachineInfo().KernelVersion)
	if err != nil {
		return p, err
	}
	p.loop = syncloop.New(syncloop.Config{
		SyncFrequency: kc.SyncFrequency.Duration,
		RootDir:       opts.RootDir,
		PodLogsDir:    kc.PodLogsDir,
		RuntimeName:   c.ver.RuntimeName,
	}, syncloop.Deps{
		Runtime: p.runtimeMgr, Cache: n.cache, PLEG: n.gpleg, Status: in.statusMgr, Volumes: in.vols,
		Sources: in.pods, Node: n.facts, NodeObject: n.ctl.AdmissionNode, Recorder: c.recorder, Clock: clk, Registerer: c.reg,
		PodCgroups: r.cgroupCleaner,
		Probes:     in.probes.mgr,
		// Upstream's order: the eviction manager's handler first, node shutdown's last.
		Admitters:        []func(*v1.Pod) *syncloop.Rejection{b.pressure.admit},
		AdmittersAfter:   []func(*v1.Pod) *syncloop.Rejection{b.shuttingDown.admit},
		Sysctls:          sysctls,
		Objects:          in.objects,
		AppArmorEnabled:  n.appArmor,
		Allocations:      r.allocations,
		Actuated:         r.actuated,
		EventsInUse:      eventsInUse(n.epleg),
		Resources:        resourceAllocator{topology: r.topology, memory: r.memory, devices: n.devices},
		TracerProvider:   c.tracer,
		DynamicResources: in.draMgr,
	})

	if p.graceful, err = setUpShutdown(ctx, kc, opts.RootDir, p.loop, clk, c.reg); err != nil {
		return p, err
	}
	if p.graceful != nil {
		a.addCloser("logind D-Bus connection", p.graceful.inh.Close)
	}
	return p, nil
}

// observed are what watches the node's pods and disks and acts on them:
// garbage collection, log rotation, the stats caches and eviction.
type observed struct {
	gcs         *garbageCollectors
	logRotation *logrotate.Manager // nil: rotation off
	volStats    *stats.VolumeStatsCache
	statsCache  *stats.Cache
	evictions   *eviction.Manager // nil: nothing to enforce
}

// observers builds GC, log rotation, the stats caches and the eviction manager.
func (b *builder) observers(ctx context.Context, h hostFacts, c connections, n nodeParts, r resourceParts, in inputs, p pipeline) (observed, error) {
	opts, kc, clk, logger := b.opts, b.kc, b.clk, klog.FromContext(ctx)
	var o observed
	var err error
	sandboxImage := opts.PodInfraContainerImage
	if sandboxImage == "" {
		sandboxImage = runtimeSandboxImage(ctx, c.rt)
	}
	if o.gcs, err = newGarbageCollectors(kc, b.set.ImageGC, containerGCPolicy(opts), opts.RootDir, sandboxImage, h.nodeName, c.rt, p.loop, c.recorder, clk, c.reg); err != nil {
		return o, err
	}

	if o.logRotation, err = newLogRotation(kc, b.set.LogRotation, c.rt, clk); err != nil {
		return o, fmt.Errorf("setting up container log rotation: %w", err)
	}
	if o.logRotation == nil {
		logger.Info("Container log rotation is off: containerLogMaxSize is negative", "containerLogMaxSize", kc.ContainerLogMaxSize)
	}

	selfCgroup, _ := os.ReadFile("/proc/self/cgroup")
	sysContainers := summarySystemContainers(kc.KubeletCgroups, opts.RuntimeCgroups, kc.SystemCgroups, string(selfCgroup), h.cgroupMode)
	// Pod volume usage, measured every volumeStatsAggPeriod (0: never) for the
	// Summary, eviction and the kubelet_volume_stats_* metrics.
	o.volStats = stats.NewVolumeStatsCache(stats.VolumeStatsConfig{
		Period: kc.VolumeStatsAggPeriod.Duration, RootDir: opts.RootDir, Pods: p.loop.ActivePods,
		Volumes: in.vols, CSI: in.csiDrivers, Clock: clk,
	})
	c.reg.MustRegister(o.volStats)
	// The Summary, measured every housekeeping period in the background:
	// /stats/summary, /metrics/resource and eviction read the last one.
	o.statsCache = stats.NewCache(newStatsProvider(kc, h.nodeName, opts.RootDir, sandboxImage, r.cg, sysContainers, c.rt, p.loop.ActivePods, o.volStats, clk),
		opts.HousekeepingInterval, clk)
	nodeCtl := n.ctl
	if o.evictions, err = newEvictionManager(kc, b.set.LocalStorageCapacityIsolation, h.nodeName, o.statsCache, nodeCtl, p.loop, o.gcs, c.recorder, clk, c.reg, func(cond []v1.NodeConditionType) {
		b.pressure.set(cond)
		nodeCtl.TriggerStatusUpdate()
	}); err != nil {
		return o, fmt.Errorf("setting up the eviction manager: %w", err)
	}
	return o, nil
}

// serving are the healthz server and the kubelet API's ports.
type serving struct {
	healthz  *healthzServer    // nil: healthzPort 0
	apiPorts *server.Listeners // nil: neither port served
}

// servers builds the healthz server and opens the kubelet API's ports.
func (b *builder) servers(ctx context.Context, h hostFacts, c connections, n nodeParts, in inputs, p pipeline, o observed) (serving, error) {
	kc := b.kc
	var s serving
	s.healthz = newHealthzServer(kc, n.gpleg, p.loop, n.health)
	if s.healthz != nil {
		s.healthz.details = p.graceful.healthDetails
	}

	// The kubelet API (port 10250, readOnlyPort): a port in use fails the start, as upstream.
	var err error
	if s.apiPorts, err = newAPIServer(ctx, kc, b.set.Server, apiServerDeps{
		nodeName: h.nodeName, authClient: c.authClient, runtime: c.rt, getCertificate: n.serving.GetCertificate,
		pods: p.loop.Pods, podStatus: in.statusMgr.GetPodStatus, pleg: n.gpleg, loop: p.loop,
		metrics: c.reg, probeMetrics: in.probes.registry, summary: o.statsCache, cadvisor: o.statsCache, clock: b.clk,
		machine:           cadvisorMachine(n.ctl.MachineInfo()),
		showHiddenMetrics: h.showHiddenMetrics,
		tracer:            c.tracer,
	}); err != nil {
		return s, fmt.Errorf("setting up the kubelet API server: %w", err)
	}
	if s.apiPorts != nil {
		b.a.addCloser("kubelet API ports", s.apiPorts.Close)
	}
	return s, nil
}

// stages are the run phase's components, in stop order (see agent.run).
func (b *builder) stages(ctx context.Context, h hostFacts, c connections, n nodeParts, r resourceParts, in inputs, p pipeline, o observed, s serving) []stage {
	opts, kc, clk, logger := b.opts, b.kc, b.clk, klog.FromContext(ctx)
	client, nodeCtl, loop, pods := c.client, n.ctl, p.loop, in.pods
	var intake, workers, rest []component
	add := func(to *[]component, name string, run func(context.Context)) {
		*to = append(*to, component{name: name, run: run})
	}
	if s.apiPorts != nil {
		add(&intake, "kubelet API server", s.apiPorts.Serve)
	}
	if s.healthz != nil {
		add(&intake, "healthz server", s.healthz.serve)
	}
	if kc.StaticPodPath != "" {
		add(&intake, "static pod files", func(ctx context.Context) { pods.RunFileSource(ctx, kc.StaticPodPath, kc.FileCheckFrequency.Duration) })
	}
	if kc.StaticPodURL != "" {
		header := podconfig.HTTPHeader(kc.StaticPodURLHeader)
		add(&intake, "static pod URL", func(ctx context.Context) {
			pods.RunHTTPSource(ctx, kc.StaticPodURL, header, kc.HTTPCheckFrequency.Duration)
		})
	}
	if client != nil {
		add(&intake, "API pod source", func(ctx context.Context) { pods.RunAPISource(ctx, client) })
		add(&intake, "mirror pods", func(ctx context.Context) {
			pods.RunMirrorReconciler(ctx, client, func() types.UID {
				if n := nodeCtl.Node(); n != nil {
					return n.UID
				}
				return ""
			}, 5*time.Second)
		})
	}
	add(&intake, "systemd notifier", func(ctx context.Context) { notifySystemd(ctx, loop, n.gpleg) })
	if evictions := o.evictions; evictions != nil {
		add(&intake, "eviction manager", func(ctx context.Context) {
			runAfterSynced(ctx, loop.Synced(), clk.After(evictionStartWait), evictions.Run)
		})
	}
	if graceful := p.graceful; graceful != nil {
		add(&intake, "graceful node shutdown", func(ctx context.Context) {
			graceful.mgr.Run(ctx, graceful.inh, func(on bool) {
				b.shuttingDown.set(on)
				logger.Info("Node shutdown state changed", "shuttingDown", on)
				recordShutdown(c.recorder, h.nodeName, on)
				nodeCtl.TriggerStatusUpdate()
			})
		})
	}

	add(&workers, "sync loop", loop.Run)
	add(&workers, "probe workers", in.probes.mgr.Run)
	if qos := r.qos; qos != nil {
		add(&workers, "QoS cgroups", func(ctx context.Context) { qos.run(ctx, clk) })
	}
	add(&workers, "CPU manager", func(ctx context.Context) { runCPUManager(ctx, r.cpus, loop.Synced(), clk) })
	// A checkpoint write that failed (a full root dir) is retried until it lands.
	add(&workers, "allocated resources checkpoint", func(ctx context.Context) {
		r.allocated.RunFlusher(ctx, clk, checkpointRetryPeriod)
	})
	add(&workers, "actuated resources checkpoint", func(ctx context.Context) {
		r.actuated.RunFlusher(ctx, clk, checkpointRetryPeriod)
	})

	if credential := c.credential; credential != nil {
		add(&rest, "client certificate", func(ctx context.Context) { credential.Run(ctx, c.recorder) })
	}
	add(&rest, "serving certificate", func(ctx context.Context) { n.serving.Run(ctx, c.recorder) })
	add(&rest, "PLEG", n.gpleg.Start)
	if n.epleg != nil {
		add(&rest, "evented PLEG", n.epleg.Start)
	}
	add(&rest, "runtime health", n.health.run)
	// Stopped with the rest: the loop's workers it serves have stopped by then.
	add(&rest, "device plugin manager", func(ctx context.Context) {
		if err := n.devices.Run(ctx); err != nil {
			logger.Error(err, "Device plugin manager stopped")
		}
	})
	// Exclusive CPUs from the CPU manager, devices (with their NUMA nodes)
	// from the device manager.
	podResources := podresources.NewServer(loop, n.devices, podResourcesCPUs{r.cpus}, podResourcesMemory{r.memory})
	add(&rest, "pod resources API", func(ctx context.Context) {
		if err := podresources.Serve(ctx, filepath.Join(opts.RootDir, podresources.DirName), podResources); err != nil {
			logger.Error(err, "Pod resources API stopped")
		}
	})
	if r.placement != nil {
		add(&rest, "kubeletCgroups and systemCgroups", r.placement.Run)
	}
	if ipt := hostsetup.NewIPTablesUtil(ctx, b.set.Host.MakeIPTablesUtilChains, clk); ipt != nil {
		add(&rest, "iptables util chains", ipt.Run)
	}
	// Run registers the Node first (unless registerNode is false), then reports status and renews the Lease.
	add(&rest, "node controller", nodeCtl.Run)
	add(&rest, "container GC", func(ctx context.Context) { o.gcs.containers.Run(ctx, containerGCPeriod) })
	add(&rest, "image GC", func(ctx context.Context) { o.gcs.images.Run(ctx, imageGCPeriod) })
	if o.logRotation != nil {
		add(&rest, "container log rotation", o.logRotation.Run)
	}
	add(&rest, "services informer", in.envSrc.Run)
	if in.classes != nil {
		add(&rest, "RuntimeClass informer", in.classes.Run)
	}
	add(&rest, "user namespace cleanup", func(ctx context.Context) { in.usernsMgr.Run(ctx, clk, usernsCleanupPeriod) })
	add(&rest, "configMap and secret watches", in.objects.Run)
	// In the last stage: the sync loop's volume teardowns need the plugins.
	add(&rest, "plugin registration watcher", func(ctx context.Context) {
		if err := in.plugins.Run(ctx); err != nil {
			klog.FromContext(ctx).Error(err, "Plugin registration watcher stopped")
		}
		in.csiDrivers.Close()
	})
	add(&rest, "sync loop queries", func(ctx context.Context) { b.queries.serve(ctx, loop) })
	add(&rest, "volume stats", o.volStats.Run)
	add(&rest, "stats cache", o.statsCache.Run)

	return []stage{
		{name: "intake", components: intake},
		{name: "sync loop and workers", components: workers},
		{name: "status manager", components: []component{{name: "status manager", run: in.statusMgr.Run}}},
		{name: "the rest", components: rest},
	}
}
