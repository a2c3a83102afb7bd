package config

import (
	"errors"
	"fmt"
	"slices"

	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodelet/nodelet/resourcemanager/topologymanager"
)

// GateStage is a feature gate's maturity, as upstream prints it.
type GateStage string

const (
	stageAlpha      GateStage = "ALPHA"
	stageBeta       GateStage = "BETA"
	stageGA         GateStage = ""
	stageDeprecated GateStage = "DEPRECATED"
)

// GateSpec is one upstream v1.37 feature gate: its default, stage and
// whether it is locked to its default (a GA or removed feature).
type GateSpec struct {
	Name    string
	Default bool
	Stage   GateStage
	Locked  bool
	// Kubelet: the upstream kubelet reads the gate. The others (API
	// server, controller, scheduler gates) are accepted and have no effect
	// on a node, as upstream.
	Kubelet bool
}

// gateSupport is what nodelet does about a gate the upstream kubelet reads.
type gateSupport int

const (
	// gateBuilt: nodelet has the feature, always on; turning it off is refused.
	gateBuilt gateSupport = iota + 1
	// gateLacking: nodelet does not build the feature; turning it on is
	// refused, turning it off is what nodelet does anyway.
	gateLacking
	// gateHonoured: the gate's value changes what nodelet does.
	gateHonoured
)

type nodeletGate struct {
	support gateSupport
	note    string // what the feature is, for the refusal
}

// nodeletGates is nodelet's decision for every gate the upstream kubelet
// reads (a gate the kubelet does not read - an API server, controller or
// scheduler gate - is accepted and has no effect on a node, as upstream).
func nodeletGates() map[string]nodeletGate {
	built := func(note string) nodeletGate { return nodeletGate{support: gateBuilt, note: note} }
	lacking := func(note string) nodeletGate { return nodeletGate{support: gateLacking, note: note} }
	honoured := nodeletGate{support: gateHonoured}
	return map[string]nodeletGate{
		// Read through k8s.io/component-base/logs when the logging
		// configuration is applied.
		string(logsapi.ContextualLogging):   honoured,
		string(logsapi.LoggingAlphaOptions): honoured,
		string(logsapi.LoggingBetaOptions):  honoured,
		// Read by the agent: the PLEG follows the runtime's container events.
		"EventedPLEG": honoured,
		// Which topology manager policy option levels may be set
		// (TopologyGates; TopologyManagerPolicyOptions is locked on).
		"TopologyManagerPolicyAlphaOptions": honoured,
		"TopologyManagerPolicyBetaOptions":  honoured,

		"DynamicResourceAllocation":              built("dynamic resource allocation"),
		"ContainerRestartRules":                  built("container-level restartPolicy and restartPolicyRules"),
		"EnvFiles":                               built("environment variables from files (fileKeyRef)"),
		"ExtendWebSocketsToKubelet":              built("WebSocket clients of exec, attach and portForward"),
		"GracefulNodeShutdown":                   built("graceful node shutdown"),
		"GracefulNodeShutdownBasedOnPodPriority": built("graceful node shutdown by pod priority"),
		"KubeletCrashLoopBackOffMax":             built("crashLoopBackOff.maxContainerRestartPeriod"),
		"KubeletEnsureSecretPulledImages":        built("image pull credential verification"),
		"KubeletPodResourcesListUseActivePods":   built("the pod resources API's List of active pods only"),
		"PodLevelResources":                      built("pod-level resources"),
		"ReloadKubeletServerCertificateFile":     built("reloading tlsCertFile and tlsPrivateKeyFile when they change"),
		"RotateKubeletServerCertificate":         built("serving certificate rotation (serverTLSBootstrap)"),

		"ComponentFlagz":                                   lacking("the /flagz endpoint"),
		"ComponentStatusz":                                 lacking("the /statusz endpoint"),
		"CPUManagerPolicyAlphaOptions":                     lacking("alpha CPU manager policy options: nodelet builds full-pcpus-only, distribute-cpus-across-numa and strict-cpu-reservation only"),
		"CPUManagerPolicyBetaOptions":                      lacking("beta CPU manager policy options beyond distribute-cpus-across-numa, which nodelet keeps on whatever this gate says"),
		"DRAWorkloadResourceClaims":                        lacking("PodGroup ResourceClaims in dynamic resource allocation"),
		"PodLevelResourcesFixKubeletQOSClass":              lacking("the corrected QoS class of pods with pod-level resources"),
		"QOSReserved":                                      lacking("qosReserved"),
		"ResourceHealthStatusMessage":                      lacking("device resource health messages"),
		"WindowsCPUAndMemoryAffinity":                      lacking("CPU and memory affinity on Windows"),
		"AllowDNSOnlyNodeCSR":                              lacking("the deprecated DNS-only serving certificate request"),
		"AtomicWriteVolumeUserFields":                      lacking("atomic writes of volume user fields"),
		"ChangeContainerStatusOnKubeletRestart":            lacking("the deprecated container status change on restart"),
		"ClusterTrustBundleProjection":                     lacking("clusterTrustBundle projected volumes"),
		"ContainerCheckpoint":                              lacking("container checkpoints (/checkpoint)"),
		"ContainerStopSignals":                             lacking("container stop signals"),
		"CRIListStreaming":                                 lacking("streaming CRI list calls"),
		"CSIVolumeHealth":                                  lacking("CSI volume health"),
		"DefaultPodSysctls":                                lacking("default pod sysctls"),
		"DRANodeAllocatableResources":                      lacking("node allocatable resources from DRA devices"),
		"DRAOptionalNodeOperations":                        lacking("the alpha optional DRA node operations"),
		"EmptyDirVolumeMode":                               lacking("emptyDir volume modes"),
		"GRPCContainerProbeTLS":                            lacking("TLS for gRPC probes"),
		"H2CContainerProbe":                                lacking("h2c probes"),
		"HugepageAwareEviction":                            lacking("hugepage-aware eviction"),
		"ImageVolumeWithDigest":                            lacking("image volume digests"),
		"InPlacePodLevelResourcesVerticalScaling":          lacking("in-place resize of pod-level resources"),
		"InPlacePodVerticalScalingExclusiveCPUs":           lacking("in-place resize of containers with exclusive CPUs"),
		"InPlacePodVerticalScalingExclusiveMemory":         lacking("in-place resize of containers with NUMA memory from the memory manager"),
		"InPlacePodVerticalScalingMemoryBackedVolumes":     lacking("in-place resize of memory-backed volumes"),
		"InPlacePodVerticalScalingSchedulerPreemption":     lacking("in-place resize preemption"),
		"KubeletAllocatedPodsEndpoint":                     lacking("the allocated pods endpoint"),
		"KubeletInUserNamespace":                           lacking("running in a user namespace"),
		"KubeletRegistrationGetOnExistsOnly":               lacking("the deprecated registration GET"),
		"KubeletSeparateDiskGC":                            lacking("separate image and container filesystems"),
		"KubeletServiceAccountTokenForCredentialProviders": lacking("service account tokens for credential provider plugins (tokenAttributes)"),
		"LocalStorageCapacityIsolationFSQuotaMonitoring":   lacking("filesystem quota monitoring"),
		"MemoryQoS":                                        lacking("memory QoS (memory.high)"),
		"PodAndContainerStatsFromCRI":                      lacking("pod and container stats from the CRI"),
		"PodCertificateRequest":                            lacking("podCertificate projected volumes"),
		"PodLevelResourceManagers":                         lacking("pod-level resource managers (the CPU and memory managers leave pods with pod-level resources alone)"),
		"PodLogsQuerySplitStreams":                         lacking("split log streams in the logs query"),
		"PodsAPI":                                          lacking("the kubelet pods API"),
		"ReduceDefaultCrashLoopBackOffDecay":               lacking("the reduced crash-loop back-off decay"),
		"ReloadKubeletClientCAFile":                        lacking("reloading the client CA file"),
		"ResourceHealthStatus":                             lacking("device resource health status"),
		"RestartAllContainersOnContainerExits":             lacking("the RestartAllContainers restart rule action"),
		"SELinuxMount":                                     lacking("SELinux mount labelling"),
		"TaintTolerationComparisonOperators":               lacking("taint toleration comparison operators"),
		"WindowsGracefulNodeShutdown":                      lacking("graceful shutdown on Windows"),
	}
}

// Gates is the effective feature gate set of a configuration.
type Gates struct {
	enabled map[string]bool
	// Warnings are what upstream logs when a gate is set: deprecated and GA
	// gates will be removed.
	Warnings []string
}

// Enabled reports whether the gate is on (its default when not set; false
// for a name that is not a gate).
func (g Gates) Enabled(name string) bool { return g.enabled[name] }

// TopologyGates are the gates that make topology manager option levels
// available (TopologyManagerPolicyOptions, ...BetaOptions, ...AlphaOptions).
func TopologyGates(g Gates) topologymanager.Gates {
	return topologymanager.Gates{
		PolicyOptions: g.Enabled("TopologyManagerPolicyOptions"),
		BetaOptions:   g.Enabled("TopologyManagerPolicyBetaOptions"),
		AlphaOptions:  g.Enabled("TopologyManagerPolicyAlphaOptions"),
	}
}

// FeatureGates checks kc.FeatureGates (the file's gates merged with
// --feature-gates) against the v1.37 gates and what nodelet builds, and
// returns the effective set. Each refusal is a *FieldError naming
// featureGates[Name].
func FeatureGates(kc *kubeletconfigv1beta1.KubeletConfiguration) (Gates, error) {
	specs := map[string]GateSpec{}
	for _, s := range upstreamGateSpecs() {
		specs[s.Name] = s
	}
	g := Gates{enabled: map[string]bool{}}
	for name, s := range specs {
		g.enabled[name] = s.Default
	}
	nodelet := nodeletGates()
	var errs []error
	refuse := func(name, format string, args ...any) {
		errs = append(errs, &FieldError{Field: "featureGates[" + name + "]", Detail: fmt.Sprintf(format, args...)})
	}
	for _, name := range slices.Sorted(mapKeys(kc.FeatureGates)) {
		v := kc.FeatureGates[name]
		if name == "AllAlpha" || name == "AllBeta" {
			// The library's switches turn every alpha (beta) gate on, among
			// them features nodelet lacks; off is the default.
			if v {
				refuse(name, "nodelet does not support turning every %s feature on: enable the features nodelet builds by name", map[string]string{"AllAlpha": "alpha", "AllBeta": "beta"}[name])
			}
			continue
		}
		s, ok := specs[name]
		if !ok {
			refuse(name, "unrecognized feature gate: %s", name)
			continue
		}
		if s.Locked && v != s.Default {
			refuse(name, "cannot set feature gate %s to %v, feature is locked to %v", name, v, s.Default)
			continue
		}
		switch n, ok := nodelet[name]; {
		case !ok && s.Kubelet && v != s.Default:
			// A gate the kubelet reads that nodelet has not decided on:
			// only its default is known to match what nodelet does.
			refuse(name, "nodelet does not support setting %s away from its default (%v)", name, s.Default)
			continue
		case ok && n.support == gateLacking && v && !s.Default:
			refuse(name, "nodelet does not build %s (%s), so it cannot be enabled", name, n.note)
			continue
		case ok && n.support == gateBuilt && !v:
			refuse(name, "nodelet always has %s (%s) and cannot turn it off", name, n.note)
			continue
		}
		switch {
		case s.Stage == stageDeprecated:
			g.Warnings = append(g.Warnings, fmt.Sprintf("Setting deprecated feature gate %s=%t. It will be removed in a future release.", name, v))
		case s.Stage == stageGA && !s.Locked:
			g.Warnings = append(g.Warnings, fmt.Sprintf("Setting GA feature gate %s=%t. It will be removed in a future release.", name, v))
		}
		g.enabled[name] = v
	}
	return g, errors.Join(errs...)
}

// logging returns the gates that k8s.io/component-base/logs reads, as the
// library's FeatureGate.
func (g Gates) logging() featuregate.FeatureGate {
	fg := featuregate.NewFeatureGate()
	if err := logsapi.AddFeatureGates(fg); err != nil {
		// The library's own gates on an empty gate set: cannot collide.
		panic(fmt.Sprintf("registering the logging feature gates: %v", err))
	}
	set := map[string]bool{}
	known := fg.GetAll()
	for _, name := range []featuregate.Feature{logsapi.ContextualLogging, logsapi.LoggingAlphaOptions, logsapi.LoggingBetaOptions} {
		// Only values off their default: SetFromMap logs every call.
		if v, ok := g.enabled[string(name)]; ok && v != known[name].Default {
			set[string(name)] = v
		}
	}
	if len(set) == 0 {
		return fg
	}
	if err := fg.SetFromMap(set); err != nil {
		panic(fmt.Sprintf("setting the logging feature gates: %v", err))
	}
	return fg
}
