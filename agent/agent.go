// Package agent assembles nodelet's parts from its options and runs them until
// the context ends. Stopping nodelet never stops pods: the next start adopts them.
package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/trace"
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

	"github.com/nodelet/nodelet/allocation"
	"github.com/nodelet/nodelet/certificate"
	"github.com/nodelet/nodelet/cgroups"
	"github.com/nodelet/nodelet/config"
	"github.com/nodelet/nodelet/cpumanager"
	"github.com/nodelet/nodelet/cri"
	"github.com/nodelet/nodelet/csi"
	"github.com/nodelet/nodelet/devicemanager"
	"github.com/nodelet/nodelet/dra"
	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/internal/resourcemetrics"
	"github.com/nodelet/nodelet/memorymanager"
	"github.com/nodelet/nodelet/node"
	"github.com/nodelet/nodelet/pleg"
	"github.com/nodelet/nodelet/podconfig"
	"github.com/nodelet/nodelet/podobjects"
	"github.com/nodelet/nodelet/podresources"
	"github.com/nodelet/nodelet/podruntime"
	"github.com/nodelet/nodelet/procfs"
	"github.com/nodelet/nodelet/pullrecords"
	"github.com/nodelet/nodelet/stats"
	"github.com/nodelet/nodelet/status"
	"github.com/nodelet/nodelet/syncloop"
	"github.com/nodelet/nodelet/topologymanager"
	"github.com/nodelet/nodelet/volumes"
)

// Version is the version nodelet reports (nodeInfo.kubeletVersion). It tracks
// the Kubernetes minor whose behaviour nodelet implements.
const Version = "v1.37.2-nodelet"

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
	a, err := build(ctx, opts, hostPaths{procSys: procSysDir})
	if errors.Is(err, errStoppedEarly) {
		return nil
	}
	if err != nil {
		return err
	}
	a.run(ctx)
	return nil
}

// imagePullSlots is how many image pulls may run at once: one while
// serializeImagePulls is on, else maxParallelImagePulls (unset: effectively
// unbounded, as upstream).
func imagePullSlots(kc *kubeletconfigv1beta1.KubeletConfiguration) int {
	if kc.SerializeImagePulls == nil || *kc.SerializeImagePulls {
		return 1
	}
	if kc.MaxParallelImagePulls != nil && *kc.MaxParallelImagePulls >= 1 {
		return int(*kc.MaxParallelImagePulls)
	}
	return 64
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

// hostPaths are the host files build writes outside the root dir; tests point them at
// temp dirs so that building an agent never changes the test machine's kernel.
type hostPaths struct {
	procSys string // /proc/sys: the kernel tunables of protectKernelDefaults
}

// build makes every part of nodelet from opts, each one complete when it is handed
// to another: nothing is filled in later. The parts' goroutines start in run, except
// those a library starts on construction and the part's closer stops (the logind
// inhibitor's signal watcher, the event broadcaster, gRPC's). The kubelet API ports
// are opened here, so a port in use fails the start. On an error the closers so far
// run.
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
func build(ctx context.Context, opts *config.Options, host hostPaths) (_ *agent, err error) {
	kc := opts.Config
	clk := clock.RealClock{}
	logger := klog.FromContext(ctx)
	a := &agent{}
	defer func() {
		if err != nil {
			a.close(ctx)
		}
	}()

	nodeName, err := config.NodeName(opts.HostnameOverride)
	if err != nil {
		return nil, err
	}
	hostname, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("reading the host name: %w", err)
	}
	if opts.HostnameOverride != "" {
		hostname = nodeName
	}
	logger.Info("Starting nodelet", "version", Version, "node", nodeName, "rootDir", opts.RootDir, "config", opts.ConfigFile)
	for _, w := range config.ServingWarnings(opts) {
		logger.Error(nil, w.Message, "setting", w.Setting, "value", w.Value, "address", w.Address, "fix", w.Fix)
	}

	showHidden, err := showHiddenMetrics(kc.ShowHiddenMetricsForVersion)
	if err != nil {
		return nil, err
	}

	swaps, _ := os.ReadFile("/proc/swaps") // missing means no swap
	if err := cgroups.CheckSwap(string(swaps), ptr.Deref(kc.FailSwapOn, true)); err != nil {
		return nil, fmt.Errorf("%w (set failSwapOn: false in the config file to allow it)", err)
	}
	cgroupMode, err := cgroups.DetectMode(cgroupfsRoot)
	if err != nil {
		return nil, fmt.Errorf("detecting the cgroup version under %s: %w", cgroupfsRoot, err)
	}
	if err := checkCgroupVersion(cgroupMode, ptr.Deref(kc.FailCgroupV1, false)); err != nil {
		return nil, err
	}
	if err := setUpKernelTunables(ctx, host.procSys, kc.ProtectKernelDefaults); err != nil {
		return nil, err
	}
	applyOOMScoreAdj(ctx, kc.OOMScoreAdj)
	applyMaxOpenFiles(ctx, kc.MaxOpenFiles, processNoFile{})
	for _, dir := range []string{opts.RootDir, podsDir(opts.RootDir), kc.PodLogsDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("creating directory %s: %w", dir, err)
		}
	}

	reg := newMetricsRegistry(nodeName, cgroupMode)
	a.metrics = reg
	tracer, err := newTracerProvider(ctx, kc.Tracing, hostname)
	if err != nil {
		return nil, err
	}
	if tracer != nil {
		// Added before the runtime client: it closes after it, with the
		// spans of the last CRI calls.
		a.addCloser("tracer provider", func() error { return shutdownTracer(tracer) })
		logger.Info("Tracing pod syncs, CRI calls, API requests and kubelet API requests", "endpoint", ptr.Deref(kc.Tracing.Endpoint, "localhost:4317"), "samplingRatePerMillion", ptr.Deref(kc.Tracing.SamplingRatePerMillion, 0))
	}
	rt, err := connectRuntime(ctx, kc.ContainerRuntimeEndpoint, kc.ImageServiceEndpoint, kc.RuntimeRequestTimeout.Duration, reg, tracer)
	if err != nil {
		return nil, err
	}
	a.addCloser("container runtime client", func() error { return rt.Close(context.Background()) })
	ver, err := rt.Version(ctx, "v1")
	if err != nil {
		return nil, fmt.Errorf("reading the container runtime version: %w", err)
	}
	logger.Info("Connected to the container runtime", "runtime", ver.RuntimeName, "runtimeVersion", ver.RuntimeVersion, "criVersion", ver.RuntimeApiVersion)

	// API clients: none in standalone mode.
	var client, heartbeat, authClient, eventClient kubernetes.Interface
	var credential *certificate.Client
	if opts.Kubeconfig != "" {
		// TLS bootstrap (if needed) happens here; rotation runs in the run phase.
		credential, err = newClientCredential(ctx, opts, nodeName, reg)
		if err != nil {
			if ctx.Err() != nil {
				logger.Info("Stopped before a client certificate was issued; the bootstrap key is kept for the next start")
				return nil, errStoppedEarly
			}
			return nil, fmt.Errorf("setting up the API client credential: %w", err)
		}
		a.addCloser("API client connections", func() error { credential.CloseAllConns(); return nil })
		client, heartbeat, err = newClientsForConfig(apiConfig(credential, tracer), kc)
		if err != nil {
			return nil, err
		}
		if authClient, err = newAuthClient(apiConfig(credential, tracer)); err != nil {
			return nil, err
		}
		if eventClient, err = newEventClient(apiConfig(credential, tracer), kc); err != nil {
			return nil, err
		}
	} else {
		logger.Info("No kubeconfig given: running in standalone mode (static pods only)", "staticPodPath", kc.StaticPodPath)
	}

	recorder, stopEvents := newRecorder(eventClient, nodeName)
	a.addCloser("event broadcaster", func() error { stopEvents(); return nil })

	// Built before the parts that read them and the managers that feed them (see above).
	pressure := &pressureState{}
	shuttingDown := &shutdownState{}
	queries := newLoopQueries()

	cache := pleg.NewCache(clk)
	gates, err := config.FeatureGates(kc)
	if err != nil {
		return nil, fmt.Errorf("reading the feature gates: %w", err)
	}
	// With EventedPLEG the relist is the safety net at upstream's longer period;
	// the evented PLEG shortens it again while the event stream is down.
	relistPeriod, relistThreshold := pleg.DefaultRelistPeriod, pleg.DefaultRelistThreshold
	if gates.Enabled("EventedPLEG") {
		relistPeriod, relistThreshold = pleg.EventedRelistPeriod, pleg.EventedRelistThreshold
	}
	gpleg := pleg.NewGeneric(rt, cache, relistPeriod, relistThreshold, clk, pleg.WithMetrics(reg))
	var epleg *pleg.Evented
	if gates.Enabled("EventedPLEG") {
		epleg = pleg.NewEvented(gpleg, rt, clk, pleg.WithEventedMetrics(reg))
	}
	health := newRuntimeHealth(rt, clk)

	external, err := externalCloudProvider(opts.CloudProvider)
	if err != nil {
		return nil, err
	}
	// podCIDR reaches the runtime from the config now, then from the Node's spec.
	cidrs := &podCIDR{rt: rt}
	if _, err := cidrs.update(ctx, kc.PodCIDR); err != nil {
		logger.Error(err, "Pod CIDR update failed")
	}
	// Checked once, as upstream: enabling AppArmor needs a reboot anyway.
	appArmor := procfs.AppArmorEnabled("/sys")
	// The attachable CSI volumes the volume manager uses, for
	// node.status.volumesInUse (the attach/detach controller detaches none
	// listed there); made first, as the volume manager needs the node
	// controller.
	csiInUse := volumes.NewCSIInUse(opts.RootDir)
	// The topology manager's policy and the machine's NUMA nodes, which the
	// device manager's hints range over.
	topologyCfg, err := topologyConfig(kc, gates, "/")
	if err != nil {
		return nil, err
	}
	// Device plugins are always on, as upstream; the checkpoint is read now so
	// pods running since before a restart keep their devices.
	devices, err := devicemanager.New(filepath.Join(opts.RootDir, devicemanager.DirName), clk, topologyCfg.NUMA.Nodes)
	if err != nil {
		return nil, fmt.Errorf("setting up the device plugin manager: %w", err)
	}
	nodeCtl, err := node.New(client, heartbeat, node.Config{
		NodeName: nodeName,
		Hostname: hostname,
		NodeIPs:  opts.NodeIPs,
		Labels:   opts.NodeLabels,
		Kubelet:  kc,
		RootDir:  opts.RootDir,
		Version:  Version,

		ExternalCloudProvider: external,
		AppArmorEnabled:       appArmor,
	}, rt, nodeReadiness(health, plegChecks(gpleg, epleg), shuttingDown.notReady), clk, node.WithEventRecorder(recorder), node.WithImageLister(rt), node.WithRuntimeStatus(rt), node.WithPressure(pressure.pressure),
		node.WithPodCIDRUpdater(cidrs.update), node.WithVolumesInUse(csiInUse.List), node.WithDevices(devices), heartbeatReset(credential))
	if err != nil {
		return nil, fmt.Errorf("setting up the node controller: %w", err)
	}
	// A runtime going down or coming back is in the node's status at once.
	health.onChange = nodeCtl.TriggerStatusUpdate
	nodeFacts := func() podruntime.NodeFacts {
		f := podruntime.NodeFacts{Name: nodeName, Allocatable: nodeCtl.Allocatable(), NetworkError: health.networkError()}
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
	serving, err := newServingCertificate(ctx, opts, nodeName, hostname, client, nodeCtl.Node, reg)
	if err != nil {
		return nil, fmt.Errorf("setting up the serving certificate: %w", err)
	}

	cg, err := setUpCgroups(ctx, kc, cgroupMode, rt, nodeCtl.Capacity(), int64(nodeCtl.MachineInfo().SwapCapacity), dialSystemd)
	if err != nil {
		return nil, err
	}
	if cg.systemd != nil {
		a.addCloser("systemd D-Bus connection", func() error { cg.Close(); return nil })
	}
	placement, err := newCgroupPlacement(kc.KubeletCgroups, kc.SystemCgroups, kc.CgroupRoot, cgroupMode, cgroupfsRoot, "/proc", os.Getpid(), clk)
	if err != nil {
		return nil, err
	}
	var podCgroups podruntime.PodCgroups
	var cgroupCleaner syncloop.PodCgroups
	var podResize podruntime.PodCgroupResizer
	var qos *qosCgroups
	if cg.mgr != nil {
		qos = &qosCgroups{mgr: cg.mgr, activePods: queries.activePods}
		podCgroups, cgroupCleaner, podResize = qos, cg.mgr, cg.mgr
	}
	// In-place resize: what each pod was allocated at admission or resize, and
	// what the runtime was told, checkpointed as upstream's (allocated_pods_state,
	// actuated_pods_state). A corrupt checkpoint is set aside and the pods are
	// admitted again at their specs; one that cannot be read at all stops the start.
	allocated, err := allocation.OpenState(ctx, opts.RootDir, allocation.AllocatedStateFile, clk)
	if err != nil {
		return nil, fmt.Errorf("setting up pod resource allocations: %w", err)
	}
	actuated, err := allocation.OpenState(ctx, opts.RootDir, allocation.ActuatedStateFile, clk)
	if err != nil {
		return nil, fmt.Errorf("setting up pod resource allocations: %w", err)
	}
	allocations := allocation.NewManager(allocated, cg.resources, allocation.StaticManagers{
		CPU:    kc.CPUManagerPolicy == cpumanager.PolicyStatic,
		Memory: kc.MemoryManagerPolicy == memorymanager.PolicyStatic,
	}, recorder, clk)

	// The configMaps and secrets pods reference, read per
	// configMapAndSecretChangeDetectionStrategy by volumes, env and pull secrets.
	objects, err := podobjects.New(kc.ConfigMapAndSecretChangeDetectionStrategy, client, clk,
		podobjects.WithTTL(func() (time.Duration, bool) { return nodeObjectTTL(nodeCtl.Node()) }))
	if err != nil {
		return nil, fmt.Errorf("setting up the configMap and secret source: %w", err)
	}
	var kubeGetter volumes.KubeGetter
	volOpts := []volumes.Option{volumes.WithNodeAllocatable(nodeCtl.Allocatable)}
	if client != nil {
		kubeGetter = volumes.KubeGetterWithObjects(objects, client)
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
	// CSI node plugins register through <root>/plugins_registry; with an API
	// server, each is published in the Node and its CSINode, and its volumes
	// are staged and published for pods (attached by the attach/detach
	// controller, never by nodelet).
	// DRA drivers register in the same directory (type DRAPlugin); their
	// claims are prepared before a pod's sandbox and unprepared once its
	// containers stopped, and their CDI devices reach the containers.
	draPlugins := dra.NewPlugins()
	a.addCloser("DRA driver connections", func() error { draPlugins.Close(); return nil })
	draMgr, err := dra.New(opts.RootDir, client, draPlugins)
	if err != nil {
		return nil, fmt.Errorf("setting up dynamic resource allocation: %w", err)
	}
	csiDrivers, err := csi.New(ctx, opts.RootDir, csi.WithKubeClient(client, nodeName), csi.WithPluginHandler(dra.PluginType, draPlugins))
	if err != nil {
		return nil, fmt.Errorf("setting up the CSI plugin registry: %w", err)
	}
	volOpts = append(volOpts, volumes.WithCSIInUse(csiInUse))
	if client != nil {
		volOpts = append(volOpts, volumes.WithCSI(csiDrivers, volumes.CSIObjectsFromClientset(client), nodeName))
		// A resized CSI claim is grown on the node (NodeExpandVolume) and its
		// status finished, as upstream's kubelet does.
		volOpts = append(volOpts, volumes.WithClaimExpansion(volumes.ClaimStatusWriterFromClientset(client), recorder))
	}
	vols := volumes.NewManager(opts.RootDir, kubeGetter, clk, volOpts...)
	envSrc := newEnvSources(client, objects)

	maxPulls := imagePullSlots(kc)
	var crashMax time.Duration
	if kc.CrashLoopBackOff.MaxContainerRestartPeriod != nil {
		crashMax = kc.CrashLoopBackOff.MaxContainerRestartPeriod.Duration
	}
	pullPolicy, err := pullrecords.NewPolicy(kc.ImagePullCredentialsVerificationPolicy, kc.PreloadedImagesVerificationAllowlist)
	if err != nil {
		return nil, fmt.Errorf("setting up image pull credential verification: %w", err)
	}
	pullRecords, err := pullrecords.Open(ctx, opts.RootDir, pullPolicy, rt, clk)
	if err != nil {
		return nil, fmt.Errorf("setting up image pull credential verification: %w", err)
	}
	credProviders, err := credentialProviders(opts, reg)
	if err != nil {
		return nil, err
	}

	// User namespaces: each hostUsers: false pod gets idsPerPod host IDs from
	// the kubelet user's subordinate IDs; a mapping that cannot serve maxPods
	// pods, or a pod's mapping file that cannot be read back, stops the start
	// as upstream's.
	usernsMgr, err := newUserNamespaces(ctx, kc, opts.RootDir, health.runtimeHandlers)
	if err != nil {
		return nil, err
	}
	var classes *runtimeClasses
	if client != nil {
		classes = newRuntimeClasses(client)
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
	pods := podconfig.New(nodeName, clk, podconfig.WithSources(sources...),
		podconfig.WithRuntimeLister(func(ctx context.Context) (podconfig.RuntimePods, error) {
			return podconfig.ListRuntimePods(ctx, rt.ListPodSandbox, rt.ListContainers)
		}))
	if len(sources) == 0 {
		logger.Info("None of staticPodPath, staticPodURL and a kubeconfig is set: nodelet has no pods to run")
	}

	statusMgr := status.NewManager(client, pods, clk,
		status.WithDeleteWhenReclaimed(queries.canDeletePod),
		status.WithMetrics(reg))
	probes := newProbes(rt, statusMgr, recorder, clk)
	imageVolumes := podruntime.ImageVolumeSupport(ver.RuntimeName, ver.RuntimeVersion)
	if imageVolumes != nil {
		logger.Info("Pods' image volumes will fail on this runtime", "reason", imageVolumes)
	}
	var runtimeClassLookup podruntime.RuntimeClasses
	if classes != nil {
		runtimeClassLookup = classes
	}
	// Exclusive CPUs (cpuManagerPolicy static) are decided at admission and
	// given at container creation; a checkpoint of another policy stops the start.
	// The topology, CPU and memory managers' kubelet_* families, registered
	// whatever the policies, as upstream.
	resourceMetrics, err := resourcemetrics.New(reg)
	if err != nil {
		return nil, err
	}
	topologyCfg.Metrics = resourceMetrics
	cpus, err := newCPUManager(kc, opts.RootDir, rt, queries.activePods, clk, resourceMetrics)
	if err != nil {
		return nil, err
	}
	// NUMA memory (memoryManagerPolicy Static) is decided at admission and
	// given at container creation as cpuset.mems; reservedMemory must add up to
	// the node allocatable reservation.
	memory, err := memorymanager.NewFromConfig(kc, nodeCtl.Reservation(), opts.RootDir, "/", clk, resourceMetrics)
	if err != nil {
		return nil, fmt.Errorf("setting up the memory manager (memoryManagerPolicy %q): %w", kc.MemoryManagerPolicy, err)
	}
	// The topology manager admits each container's CPUs, memory and devices
	// along one NUMA affinity (topologyManagerPolicy); under none it only
	// allocates.
	topology, err := topologymanager.New(topologyCfg, cpus, memory, devices)
	if err != nil {
		return nil, fmt.Errorf("setting up the topology manager: %w", err)
	}
	runtimeMgr := podruntime.New(podruntime.Config{
		RuntimeClasses:        runtimeClassLookup,
		RootDir:               opts.RootDir,
		PodLogsDir:            kc.PodLogsDir,
		ClusterDNS:            kc.ClusterDNS,
		ClusterDomain:         kc.ClusterDomain,
		ResolvConf:            ptr.Deref(kc.ResolverConfig, ""),
		MaxParallelImagePulls: maxPulls,
		// 10 per CPU: on the 2-core rig, 20 sandboxes at a time started a burst of
		// 110 pods 10 % sooner than all at once, and each pod in a seventh of the time.
		MaxRuntimeStarts:    10 * goruntime.NumCPU(),
		RegistryPullQPS:     float64(ptr.Deref(kc.RegistryPullQPS, 5)),
		RegistryBurst:       int(kc.RegistryBurst),
		CrashLoopBackOffMax: crashMax,
		Resources:           cg.resources,
		CgroupParentFunc:    cg.cgroupParent,
		PodCgroups:          podCgroups,
		Hooks:               probes.hooks,
		Probes:              probes.mgr,
		PullRecords:         pullRecords,
		SeccompDefault:      ptr.Deref(kc.SeccompDefault, false),
		ImageVolumeSupport:  imageVolumes,
		CredentialProviders: credProviders,
		UserNamespaces:      usernsMgr,
		Actuated:            actuated,
		PodResize:           podResize,
		CPUs:                cpus,
		Memory:              memory,
		Devices:             containerDevices{devices, draMgr},
		DynamicResources:    draMgr,
	}, rt, rt, vols, envSrc, nodeFacts, recorder, clk)

	sysctls, err := sysctlAllowlist(kc, nodeCtl.MachineInfo().KernelVersion)
	if err != nil {
		return nil, err
	}
	loop := syncloop.New(syncloop.Config{
		SyncFrequency: kc.SyncFrequency.Duration,
		RootDir:       opts.RootDir,
		PodLogsDir:    kc.PodLogsDir,
		RuntimeName:   ver.RuntimeName,
	}, syncloop.Deps{
		Runtime: runtimeMgr, Cache: cache, PLEG: gpleg, Status: statusMgr, Volumes: vols,
		Sources: pods, Node: nodeFacts, NodeObject: nodeCtl.AdmissionNode, Recorder: recorder, Clock: clk, Registerer: reg,
		PodCgroups: cgroupCleaner,
		Probes:     probes.mgr,
		// Upstream's order: the eviction manager's handler first, node shutdown's last.
		Admitters:        []func(*v1.Pod) *syncloop.Rejection{pressure.admit},
		AdmittersAfter:   []func(*v1.Pod) *syncloop.Rejection{shuttingDown.admit},
		Sysctls:          sysctls,
		Objects:          objects,
		AppArmorEnabled:  appArmor,
		Allocations:      allocations,
		Actuated:         actuated,
		EventsInUse:      eventsInUse(epleg),
		Resources:        resourceAllocator{topology: topology, memory: memory, devices: devices},
		TracerProvider:   tracer,
		DynamicResources: draMgr,
	})
	a.synced = loop.Synced()

	graceful, err := setUpShutdown(ctx, kc, opts.RootDir, loop, clk, reg)
	if err != nil {
		return nil, err
	}
	if graceful != nil {
		a.addCloser("logind D-Bus connection", graceful.inh.Close)
	}

	sandboxImage := opts.PodInfraContainerImage
	if sandboxImage == "" {
		sandboxImage = runtimeSandboxImage(ctx, rt)
	}
	gcs, err := newGarbageCollectors(kc, containerGCPolicy(opts), opts.RootDir, sandboxImage, nodeName, rt, loop, recorder, clk, reg)
	if err != nil {
		return nil, err
	}

	logRotation, err := newLogRotation(kc, rt, clk)
	if err != nil {
		return nil, fmt.Errorf("setting up container log rotation: %w", err)
	}
	if logRotation == nil {
		logger.Info("Container log rotation is off: containerLogMaxSize is negative", "containerLogMaxSize", kc.ContainerLogMaxSize)
	}

	selfCgroup, _ := os.ReadFile("/proc/self/cgroup")
	sysContainers := summarySystemContainers(kc.KubeletCgroups, opts.RuntimeCgroups, kc.SystemCgroups, string(selfCgroup), cgroupMode)
	// Pod volume usage, measured every volumeStatsAggPeriod (0: never) for the
	// Summary, eviction and the kubelet_volume_stats_* metrics.
	volStats := stats.NewVolumeStatsCache(stats.VolumeStatsConfig{
		Period: kc.VolumeStatsAggPeriod.Duration, RootDir: opts.RootDir, Pods: loop.ActivePods,
		Volumes: vols, CSI: csiDrivers, Clock: clk,
	})
	reg.MustRegister(volStats)
	// The Summary, measured every housekeeping period in the background:
	// /stats/summary, /metrics/resource and eviction read the last one.
	statsCache := stats.NewCache(newStatsProvider(kc, nodeName, opts.RootDir, sandboxImage, cg, sysContainers, rt, loop.ActivePods, volStats, clk),
		stats.DefaultHousekeepingPeriod, clk)
	evictions, err := newEvictionManager(kc, nodeName, statsCache, nodeCtl, loop, gcs, recorder, clk, reg, func(c []v1.NodeConditionType) {
		pressure.set(c)
		nodeCtl.TriggerStatusUpdate()
	})
	if err != nil {
		return nil, fmt.Errorf("setting up the eviction manager: %w", err)
	}

	healthz := newHealthzServer(kc, gpleg, loop, health)
	if healthz != nil {
		healthz.details = graceful.healthDetails
	}

	// The kubelet API (port 10250, readOnlyPort): a port in use fails the start, as upstream.
	apiPorts, err := newAPIServer(ctx, kc, apiServerDeps{
		nodeName: nodeName, authClient: authClient, runtime: rt, getCertificate: serving.GetCertificate,
		pods: loop.Pods, podStatus: statusMgr.GetPodStatus, pleg: gpleg, loop: loop,
		metrics: reg, probeMetrics: probes.registry, summary: statsCache, cadvisor: statsCache, clock: clk,
		machine:           cadvisorMachine(nodeCtl.MachineInfo()),
		showHiddenMetrics: showHidden,
		tracer:            tracer,
	})
	if err != nil {
		return nil, fmt.Errorf("setting up the kubelet API server: %w", err)
	}
	if apiPorts != nil {
		a.addCloser("kubelet API ports", apiPorts.Close)
	}

	// The run phase, in stop order (see agent.run).
	var intake, workers, rest []component
	add := func(to *[]component, name string, run func(context.Context)) {
		*to = append(*to, component{name: name, run: run})
	}
	if apiPorts != nil {
		add(&intake, "kubelet API server", apiPorts.Serve)
	}
	if healthz != nil {
		add(&intake, "healthz server", healthz.serve)
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
	add(&intake, "systemd notifier", func(ctx context.Context) { notifySystemd(ctx, loop, gpleg) })
	if evictions != nil {
		add(&intake, "eviction manager", func(ctx context.Context) {
			runAfterSynced(ctx, loop.Synced(), clk.After(evictionStartWait), evictions.Run)
		})
	}
	if graceful != nil {
		add(&intake, "graceful node shutdown", func(ctx context.Context) {
			graceful.mgr.Run(ctx, graceful.inh, func(on bool) {
				shuttingDown.set(on)
				logger.Info("Node shutdown state changed", "shuttingDown", on)
				recordShutdown(recorder, nodeName, on)
				nodeCtl.TriggerStatusUpdate()
			})
		})
	}

	add(&workers, "sync loop", loop.Run)
	add(&workers, "probe workers", probes.mgr.Run)
	if qos != nil {
		add(&workers, "QoS cgroups", func(ctx context.Context) { qos.run(ctx, clk) })
	}
	add(&workers, "CPU manager", func(ctx context.Context) { runCPUManager(ctx, cpus, loop.Synced(), clk) })
	// A checkpoint write that failed (a full root dir) is retried until it lands.
	add(&workers, "allocated resources checkpoint", func(ctx context.Context) {
		allocated.RunFlusher(ctx, clk, checkpointRetryPeriod)
	})
	add(&workers, "actuated resources checkpoint", func(ctx context.Context) {
		actuated.RunFlusher(ctx, clk, checkpointRetryPeriod)
	})

	if credential != nil {
		add(&rest, "client certificate", func(ctx context.Context) { credential.Run(ctx, recorder) })
	}
	add(&rest, "serving certificate", func(ctx context.Context) { serving.Run(ctx, recorder) })
	add(&rest, "PLEG", gpleg.Start)
	if epleg != nil {
		add(&rest, "evented PLEG", epleg.Start)
	}
	add(&rest, "runtime health", health.run)
	// Stopped with the rest: the loop's workers it serves have stopped by then.
	add(&rest, "device plugin manager", func(ctx context.Context) {
		if err := devices.Run(ctx); err != nil {
			logger.Error(err, "Device plugin manager stopped")
		}
	})
	// Exclusive CPUs from the CPU manager, devices (with their NUMA nodes)
	// from the device manager.
	podResources := podresources.NewServer(loop, devices, podResourcesCPUs{cpus}, podResourcesMemory{memory})
	add(&rest, "pod resources API", func(ctx context.Context) {
		if err := podresources.Serve(ctx, filepath.Join(opts.RootDir, podresources.DirName), podResources); err != nil {
			logger.Error(err, "Pod resources API stopped")
		}
	})
	if placement != nil {
		add(&rest, "kubeletCgroups and systemCgroups", placement.run)
	}
	if ipt := newIPTablesUtilFromConfig(ctx, kc.MakeIPTablesUtilChains, clk); ipt != nil {
		add(&rest, "iptables util chains", ipt.run)
	}
	// Run registers the Node first (unless registerNode is false), then reports status and renews the Lease.
	add(&rest, "node controller", nodeCtl.Run)
	add(&rest, "container GC", func(ctx context.Context) { gcs.containers.Run(ctx, containerGCPeriod) })
	add(&rest, "image GC", func(ctx context.Context) { gcs.images.Run(ctx, imageGCPeriod) })
	if logRotation != nil {
		add(&rest, "container log rotation", logRotation.Run)
	}
	add(&rest, "services informer", envSrc.Run)
	if classes != nil {
		add(&rest, "RuntimeClass informer", classes.Run)
	}
	add(&rest, "user namespace cleanup", func(ctx context.Context) { usernsMgr.Run(ctx, clk, usernsCleanupPeriod) })
	add(&rest, "configMap and secret watches", objects.Run)
	// In the last stage: the sync loop's volume teardowns need the plugins.
	add(&rest, "CSI plugin registry", func(ctx context.Context) {
		if err := csiDrivers.Run(ctx); err != nil {
			klog.FromContext(ctx).Error(err, "CSI plugin registry stopped")
		}
	})
	add(&rest, "sync loop queries", func(ctx context.Context) { queries.serve(ctx, loop) })
	add(&rest, "volume stats", volStats.Run)
	add(&rest, "stats cache", statsCache.Run)

	a.stages = []stage{
		{name: "intake", components: intake},
		{name: "sync loop and workers", components: workers},
		{name: "status manager", components: []component{{name: "status manager", run: statusMgr.Run}}},
		{name: "the rest", components: rest},
	}
	return a, nil
}

// notifySystemd tells systemd nodelet is ready once the pod sources synced (the
// same condition as always), pings its watchdog while healthy, and says STOPPING
// when ctx ends, which is the first thing a stop does.
func notifySystemd(ctx context.Context, loop *syncloop.Loop, p healthChecker) {
	logger := klog.FromContext(ctx)
	select {
	case <-loop.Synced():
		sent, err := daemon.SdNotify(false, daemon.SdNotifyReady)
		logger.Info("nodelet is ready: pod sources synced", "notifiedSystemd", sent)
		if err != nil {
			logger.Error(err, "Telling systemd nodelet is ready")
		}
		watchdog(ctx, p, loop)
	case <-ctx.Done():
	}
	<-ctx.Done()
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

// checkCgroupVersion refuses cgroup v1 hosts when failCgroupV1 is set, as upstream.
// A hybrid host (v1 controllers plus an empty unified mount) counts as v1.
func checkCgroupVersion(mode cgroups.Mode, failCgroupV1 bool) error {
	if mode.Unified() || !failCgroupV1 {
		return nil
	}
	return fmt.Errorf("nodelet is configured to not run on a host using cgroup v1 (failCgroupV1: true), and this host's cgroups are %s; cgroup v1 support is in maintenance mode upstream: move the host to cgroup v2, or set failCgroupV1: false in the config file", mode)
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
	return reg
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
func watchdog(ctx context.Context, p healthChecker, loop *syncloop.Loop) {
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
