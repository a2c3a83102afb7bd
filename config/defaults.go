package config

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logsapi "k8s.io/component-base/logs/api/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

const (
	// DefaultContainerRuntimeEndpoint is the upstream default CRI socket.
	DefaultContainerRuntimeEndpoint = "unix:///run/containerd/containerd.sock"
	// DefaultRootDir and DefaultCertDir are the upstream --root-dir and --cert-dir defaults.
	DefaultRootDir = "/var/lib/kubelet"
	DefaultCertDir = "/var/lib/kubelet/pki"
	// DefaultHousekeepingInterval is the kubelet's --housekeeping-interval
	// default (it overrides cAdvisor's 1s).
	DefaultHousekeepingInterval = 10 * time.Second
	// DefaultPodLogsDir is where container logs are written.
	DefaultPodLogsDir = "/var/log/pods"

	// legacyReadOnlyPort is the read-only port the upstream kubelet opens when
	// it is configured from flags only.
	legacyReadOnlyPort = 10255
	// maxContainerBackOff is the upstream ceiling of CrashLoopBackOff.
	maxContainerBackOff = 300 * time.Second
)

// DefaultEvictionHard returns a fresh copy of the upstream Linux hard
// eviction thresholds.
func DefaultEvictionHard() map[string]string {
	return map[string]string{
		"memory.available":   "100Mi",
		"nodefs.available":   "10%",
		"nodefs.inodesFree":  "5%",
		"imagefs.available":  "15%",
		"imagefs.inodesFree": "5%",
	}
}

// SetDefaults fills every unset field of kc with the upstream v1beta1
// default (the "config file" defaults: webhook authentication and
// authorization, anonymous auth and the read-only port off).
func SetDefaults(kc *kubeletconfigv1beta1.KubeletConfiguration) {
	setBaseDefaults(kc)
	setDerivedDefaults(kc)
}

// setBaseDefaults applies the defaults that upstream applies when a
// configuration file is decoded. Defaults that only depend on other fields
// and that upstream resolves at run time live in setDerivedDefaults, so that a
// later flag (e.g. --container-runtime-endpoint) still drives them.
func setBaseDefaults(kc *kubeletconfigv1beta1.KubeletConfiguration) {
	kc.APIVersion = kubeletconfigv1beta1.SchemeGroupVersion.String()
	kc.Kind = "KubeletConfiguration"

	setBool := func(p **bool, v bool) {
		if *p == nil {
			*p = ptr.To(v)
		}
	}
	setInt32 := func(p **int32, v int32) {
		if *p == nil {
			*p = ptr.To(v)
		}
	}
	setDuration := func(d *metav1.Duration, v time.Duration) {
		if d.Duration == 0 {
			d.Duration = v
		}
	}
	setString := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}

	setBool(&kc.EnableServer, true)
	setDuration(&kc.SyncFrequency, time.Minute)
	setDuration(&kc.FileCheckFrequency, 20*time.Second)
	setDuration(&kc.HTTPCheckFrequency, 20*time.Second)
	setString(&kc.Address, "0.0.0.0")
	if kc.Port == 0 {
		kc.Port = 10250
	}
	setBool(&kc.Authentication.Anonymous.Enabled, false)
	setBool(&kc.Authentication.Webhook.Enabled, true)
	setDuration(&kc.Authentication.Webhook.CacheTTL, 2*time.Minute)
	if kc.Authorization.Mode == "" {
		kc.Authorization.Mode = kubeletconfigv1beta1.KubeletAuthorizationModeWebhook
	}
	setDuration(&kc.Authorization.Webhook.CacheAuthorizedTTL, 5*time.Minute)
	setDuration(&kc.Authorization.Webhook.CacheUnauthorizedTTL, 30*time.Second)
	setInt32(&kc.RegistryPullQPS, 5)
	if kc.RegistryBurst == 0 {
		kc.RegistryBurst = 10
	}
	if kc.ImagePullCredentialsVerificationPolicy == "" {
		kc.ImagePullCredentialsVerificationPolicy = kubeletconfigv1beta1.NeverVerifyPreloadedImages
	}
	setInt32(&kc.EventRecordQPS, 50)
	if kc.EventBurst == 0 {
		kc.EventBurst = 100
	}
	setBool(&kc.EnableDebuggingHandlers, true)
	setInt32(&kc.HealthzPort, 10248)
	setString(&kc.HealthzBindAddress, "127.0.0.1")
	setInt32(&kc.OOMScoreAdj, -999)
	setDuration(&kc.StreamingConnectionIdleTimeout, 4*time.Hour)
	// An explicit update frequency without a report frequency keeps the
	// pre-1.13 behaviour of reporting on every update.
	if kc.NodeStatusReportFrequency.Duration == 0 {
		kc.NodeStatusReportFrequency.Duration = 5 * time.Minute
		if kc.NodeStatusUpdateFrequency.Duration != 0 {
			kc.NodeStatusReportFrequency.Duration = kc.NodeStatusUpdateFrequency.Duration
		}
	}
	setDuration(&kc.NodeStatusUpdateFrequency, 10*time.Second)
	if kc.NodeLeaseDurationSeconds == 0 {
		kc.NodeLeaseDurationSeconds = 40
	}
	setDuration(&kc.ImageMinimumGCAge, 2*time.Minute)
	setInt32(&kc.ImageGCHighThresholdPercent, 85)
	setInt32(&kc.ImageGCLowThresholdPercent, 80)
	setDuration(&kc.VolumeStatsAggPeriod, time.Minute)
	setBool(&kc.CgroupsPerQOS, true)
	setString(&kc.CgroupDriver, "cgroupfs")
	setString(&kc.CPUManagerPolicy, "none")
	setDuration(&kc.CPUManagerReconcilePeriod, 10*time.Second)
	setString(&kc.MemoryManagerPolicy, kubeletconfigv1beta1.NoneMemoryManagerPolicy)
	setString(&kc.TopologyManagerPolicy, kubeletconfigv1beta1.NoneTopologyManagerPolicy)
	setString(&kc.TopologyManagerScope, kubeletconfigv1beta1.ContainerTopologyManagerScope)
	setDuration(&kc.RuntimeRequestTimeout, 2*time.Minute)
	setString(&kc.HairpinMode, kubeletconfigv1beta1.PromiscuousBridge)
	if kc.MaxPods == 0 {
		kc.MaxPods = 110
	}
	if kc.PodPidsLimit == nil {
		kc.PodPidsLimit = ptr.To[int64](-1)
	}
	if kc.ResolverConfig == nil {
		kc.ResolverConfig = ptr.To("/etc/resolv.conf")
	}
	setBool(&kc.CPUCFSQuota, true)
	if kc.CPUCFSQuotaPeriod == nil {
		kc.CPUCFSQuotaPeriod = &metav1.Duration{Duration: 100 * time.Millisecond}
	}
	setInt32(&kc.NodeStatusMaxImages, 50)
	if kc.MaxOpenFiles == 0 {
		kc.MaxOpenFiles = 1000000
	}
	setString(&kc.ContentType, "application/vnd.kubernetes.protobuf")
	setInt32(&kc.KubeAPIQPS, 50)
	if kc.KubeAPIBurst == 0 {
		kc.KubeAPIBurst = 100
	}
	// Serialized pulls are the default unless parallel pulls were asked for,
	// so users need not set both fields.
	if kc.SerializeImagePulls == nil {
		kc.SerializeImagePulls = ptr.To(kc.MaxParallelImagePulls == nil || *kc.MaxParallelImagePulls < 2)
	}
	setBool(&kc.MergeDefaultEvictionSettings, false)
	if kc.EvictionHard == nil {
		kc.EvictionHard = DefaultEvictionHard()
	}
	mergeDefaultEviction(kc)
	setDuration(&kc.EvictionPressureTransitionPeriod, 5*time.Minute)
	setBool(&kc.EnableControllerAttachDetach, true)
	setBool(&kc.MakeIPTablesUtilChains, true)
	setInt32(&kc.IPTablesMasqueradeBit, 14)
	setInt32(&kc.IPTablesDropBit, 15)
	setBool(&kc.FailSwapOn, true)
	setString(&kc.ContainerLogMaxSize, "10Mi")
	setInt32(&kc.ContainerLogMaxFiles, 5)
	setInt32(&kc.ContainerLogMaxWorkers, 1)
	if kc.ContainerLogMonitorInterval == nil {
		kc.ContainerLogMonitorInterval = &metav1.Duration{Duration: 10 * time.Second}
	}
	if kc.ConfigMapAndSecretChangeDetectionStrategy == "" {
		kc.ConfigMapAndSecretChangeDetectionStrategy = kubeletconfigv1beta1.WatchChangeDetectionStrategy
	}
	if kc.EnforceNodeAllocatable == nil {
		kc.EnforceNodeAllocatable = []string{"pods"}
	}
	setString(&kc.VolumePluginDir, "/usr/libexec/kubernetes/kubelet-plugins/volume/exec/")
	logsapi.SetRecommendedLoggingConfiguration(&kc.Logging)
	setBool(&kc.EnableSystemLogHandler, true)
	setBool(&kc.EnableSystemLogQuery, false)
	setBool(&kc.EnableProfilingHandler, true)
	setBool(&kc.EnableDebugFlagsHandler, true)
	setBool(&kc.SeccompDefault, false)
	if kc.MemoryReservationPolicy == "" {
		kc.MemoryReservationPolicy = kubeletconfigv1beta1.NoneMemoryReservationPolicy
	}
	setBool(&kc.RegisterNode, true)
	setBool(&kc.LocalStorageCapacityIsolation, true)
	setString(&kc.ContainerRuntimeEndpoint, DefaultContainerRuntimeEndpoint)
	setString(&kc.PodLogsDir, DefaultPodLogsDir)
	// Since v1.35 the kubelet refuses cgroup v1 hosts unless told otherwise.
	setBool(&kc.FailCgroupV1, true)
	if kc.UserNamespaces == nil {
		kc.UserNamespaces = &kubeletconfigv1beta1.UserNamespaces{}
	}
	if kc.UserNamespaces.IDsPerPod == nil {
		kc.UserNamespaces.IDsPerPod = ptr.To[int64](65536)
	}
}

// setDerivedDefaults fills fields whose default is another field's final
// value. Load runs it after drop-ins and flags are applied.
func setDerivedDefaults(kc *kubeletconfigv1beta1.KubeletConfiguration) {
	if kc.ImageServiceEndpoint == "" {
		kc.ImageServiceEndpoint = kc.ContainerRuntimeEndpoint
	}
	// Flags-only mode leaves evictionHard unset until the drop-ins are
	// merged (see setLegacyDefaults). Upstream then runs with no hard
	// thresholds at all; nodelet keeps the documented defaults instead.
	if kc.EvictionHard == nil {
		kc.EvictionHard = DefaultEvictionHard()
	}
	mergeDefaultEviction(kc)
}

// mergeDefaultEviction adds the default hard thresholds a user map lacks
// when mergeDefaultEvictionSettings asks for it; otherwise a user map
// replaces the defaults entirely.
func mergeDefaultEviction(kc *kubeletconfigv1beta1.KubeletConfiguration) {
	if kc.MergeDefaultEvictionSettings == nil || !*kc.MergeDefaultEvictionSettings {
		return
	}
	if kc.EvictionHard == nil {
		kc.EvictionHard = map[string]string{}
	}
	for k, v := range DefaultEvictionHard() {
		if _, ok := kc.EvictionHard[k]; !ok {
			kc.EvictionHard[k] = v
		}
	}
}

// setLegacyDefaults applies the insecure defaults the upstream kubelet uses
// when it is configured from flags only (no --config file).
func setLegacyDefaults(kc *kubeletconfigv1beta1.KubeletConfiguration) {
	kc.Authentication.Anonymous.Enabled = ptr.To(true)
	kc.Authentication.Webhook.Enabled = ptr.To(false)
	kc.Authorization.Mode = kubeletconfigv1beta1.KubeletAuthorizationModeAlwaysAllow
	kc.ReadOnlyPort = legacyReadOnlyPort
	// Upstream defaults evictionHard only when it loads --config, so in
	// flags-only mode a --config-dir drop-in's evictionHard (k3s writes one)
	// is taken whole instead of merged key by key into the defaults.
	kc.EvictionHard = nil
}
