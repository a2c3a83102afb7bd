package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	tracingapi "k8s.io/component-base/tracing/api/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

func validConfig() *kubeletconfigv1beta1.KubeletConfiguration {
	kc := &kubeletconfigv1beta1.KubeletConfiguration{}
	SetDefaults(kc)
	return kc
}

func TestValidate(t *testing.T) {
	type kc = kubeletconfigv1beta1.KubeletConfiguration
	tests := []struct {
		name   string
		mutate func(*kc)
		want   string // "" means valid
	}{
		{"defaults", func(*kc) {}, ""},
		{"image gc high above 100", func(c *kc) { c.ImageGCHighThresholdPercent = int32p(101) }, "imageGCHighThresholdPercent: must be between 0 and 100"},
		{"image gc low negative", func(c *kc) { c.ImageGCLowThresholdPercent = int32p(-1) }, "imageGCLowThresholdPercent: must be between 0 and 100"},
		{"image gc low not below high", func(c *kc) { c.ImageGCLowThresholdPercent = int32p(85) }, "imageGCLowThresholdPercent: must be less than imageGCHighThresholdPercent (85)"},
		{"image max age not above min", func(c *kc) { c.ImageMaximumGCAge = dur(time.Minute) }, "imageMaximumGCAge: must be greater than imageMinimumGCAge"},
		{"image max age above min", func(c *kc) { c.ImageMaximumGCAge = dur(time.Hour) }, ""},
		{"tracing defaults", func(c *kc) { c.Tracing = &tracingapi.TracingConfiguration{} }, ""},
		{"tracing rate and endpoint", func(c *kc) {
			c.Tracing = &tracingapi.TracingConfiguration{Endpoint: ptr.To("collector.example:4317"), SamplingRatePerMillion: int32p(1000000)}
		}, ""},
		{"tracing rate above a million", func(c *kc) { c.Tracing = &tracingapi.TracingConfiguration{SamplingRatePerMillion: int32p(1000001)} }, "tracing.samplingRatePerMillion: Invalid value: 1000001"},
		{"tracing negative rate", func(c *kc) { c.Tracing = &tracingapi.TracingConfiguration{SamplingRatePerMillion: int32p(-1)} }, "tracing.samplingRatePerMillion: Invalid value: -1"},
		{"tracing endpoint with an unknown scheme", func(c *kc) { c.Tracing = &tracingapi.TracingConfiguration{Endpoint: ptr.To("http://collector:4317")} }, "tracing.endpoint: Invalid value: \"http://collector:4317\": unsupported scheme: http"},
		{"port zero", func(c *kc) { c.Port = 0 }, "port: must be between 1 and 65535"},
		{"port too large", func(c *kc) { c.Port = 70000 }, "port: must be between 1 and 65535"},
		{"read-only port invalid", func(c *kc) { c.ReadOnlyPort = -1 }, "readOnlyPort:"},
		{"healthz port invalid", func(c *kc) { c.HealthzPort = int32p(65536) }, "healthzPort:"},
		{"healthz port disabled", func(c *kc) { c.HealthzPort = int32p(0) }, ""},
		{"oomScoreAdj too low", func(c *kc) { c.OOMScoreAdj = int32p(-1001) }, "oomScoreAdj: must be between -1000 and 1000"},
		{"oomScoreAdj too high", func(c *kc) { c.OOMScoreAdj = int32p(1001) }, "oomScoreAdj:"},
		{"maxPods zero", func(c *kc) { c.MaxPods = 0 }, "maxPods: must be greater than zero"},
		{"lease duration zero", func(c *kc) { c.NodeLeaseDurationSeconds = 0 }, "nodeLeaseDurationSeconds: must be greater than zero"},
		{"node status update zero", func(c *kc) { c.NodeStatusUpdateFrequency = dur(0) }, "nodeStatusUpdateFrequency: must be greater than zero"},
		{"sync frequency zero", func(c *kc) { c.SyncFrequency = dur(0) }, "syncFrequency: must be greater than zero"},
		{"runtime timeout zero", func(c *kc) { c.RuntimeRequestTimeout = dur(0) }, "runtimeRequestTimeout:"},
		{"no runtime endpoint", func(c *kc) { c.ContainerRuntimeEndpoint = "" }, "containerRuntimeEndpoint: is required"},
		{"negative qps", func(c *kc) { c.KubeAPIQPS = int32p(-1) }, "kubeAPIQPS: must not be negative"},
		{"iptables bit out of range", func(c *kc) { c.IPTablesDropBit = int32p(32) }, "iptablesDropBit: must be between 0 and 31"},
		{"eviction percent above 100", func(c *kc) { c.EvictionHard = map[string]string{"nodefs.available": "101%"} }, "evictionHard[nodefs.available]: percentage"},
		{"eviction negative percent", func(c *kc) { c.EvictionHard = map[string]string{"nodefs.available": "-1%"} }, "evictionHard[nodefs.available]:"},
		{"eviction bad quantity", func(c *kc) { c.EvictionHard = map[string]string{"memory.available": "lots"} }, "evictionHard[memory.available]:"},
		{"eviction negative quantity", func(c *kc) { c.EvictionHard = map[string]string{"memory.available": "-1Gi"} }, "evictionHard[memory.available]: threshold \"-1Gi\" must be above zero"},
		{"eviction zero quantity (upstream: must be positive)", func(c *kc) { c.EvictionHard = map[string]string{"memory.available": "0"} }, "must be above zero"},
		{"eviction flag form in the file", func(c *kc) { c.EvictionHard = map[string]string{"memory.available": "<100Mi"} }, "evictionHard[memory.available]: invalid quantity"},
		{"eviction value with spaces", func(c *kc) { c.EvictionHard = map[string]string{"memory.available": " 100Mi"} }, "evictionHard[memory.available]: invalid quantity"},
		{"eviction soft grace of an unknown signal", func(c *kc) { c.EvictionSoftGracePeriod = map[string]string{"x": "1m"} }, "evictionSoftGracePeriod[x]: unknown eviction signal"},
		{"eviction minimum reclaim 0%", func(c *kc) { c.EvictionMinimumReclaim = map[string]string{"memory.available": "0%"} }, "evictionMinimumReclaim[memory.available]: percentage"},
		{"eviction unknown signal", func(c *kc) { c.EvictionHard = map[string]string{"gpu.available": "1"} }, `evictionHard[gpu.available]: unknown eviction signal`},
		{"eviction 0% disables", func(c *kc) { c.EvictionHard = map[string]string{"memory.available": "0%"} }, ""},
		{"soft without grace period", func(c *kc) { c.EvictionSoft = map[string]string{"memory.available": "1Gi"} }, "evictionSoft[memory.available]: soft eviction threshold needs a grace period"},
		{"soft with grace period", func(c *kc) {
			c.EvictionSoft = map[string]string{"memory.available": "1Gi"}
			c.EvictionSoftGracePeriod = map[string]string{"memory.available": "1m30s"}
		}, ""},
		{"bad grace period", func(c *kc) {
			c.EvictionSoft = map[string]string{"memory.available": "1Gi"}
			c.EvictionSoftGracePeriod = map[string]string{"memory.available": "later"}
		}, "evictionSoftGracePeriod[memory.available]:"},
		{"minimum reclaim unknown signal", func(c *kc) { c.EvictionMinimumReclaim = map[string]string{"x": "1Gi"} }, "evictionMinimumReclaim[x]: unknown eviction signal"},
		{"critical above total", func(c *kc) {
			c.ShutdownGracePeriod = dur(10 * time.Second)
			c.ShutdownGracePeriodCriticalPods = dur(20 * time.Second)
		}, "shutdownGracePeriodCriticalPods: must be <= shutdownGracePeriod"},
		{"shutdown below 1s", func(c *kc) { c.ShutdownGracePeriod = dur(500 * time.Millisecond) }, "shutdownGracePeriod: must be zero or at least 1s"},
		{"shutdown valid", func(c *kc) {
			c.ShutdownGracePeriod = dur(30 * time.Second)
			c.ShutdownGracePeriodCriticalPods = dur(10 * time.Second)
		}, ""},
		{"by-priority combined with two-value style", func(c *kc) {
			c.ShutdownGracePeriod = dur(30 * time.Second)
			c.ShutdownGracePeriodByPodPriority = []kubeletconfigv1beta1.ShutdownGracePeriodByPodPriority{{Priority: 1, ShutdownGracePeriodSeconds: 10}}
		}, "shutdownGracePeriodByPodPriority: cannot be combined"},
		{"by-priority alone", func(c *kc) {
			c.ShutdownGracePeriodByPodPriority = []kubeletconfigv1beta1.ShutdownGracePeriodByPodPriority{{Priority: 1, ShutdownGracePeriodSeconds: 10}}
		}, ""},
		{"swap behavior unknown", func(c *kc) { c.MemorySwap.SwapBehavior = "UnlimitedSwap" }, "memorySwap.swapBehavior: unsupported value \"UnlimitedSwap\""},
		{"swap limited", func(c *kc) { c.MemorySwap.SwapBehavior = "LimitedSwap" }, ""},
		{"cgroup driver", func(c *kc) { c.CgroupDriver = "cgroupv2" }, "cgroupDriver: unsupported value"},
		{"cgroup driver systemd", func(c *kc) { c.CgroupDriver = "systemd" }, ""},
		{"parallel pulls zero", func(c *kc) { c.MaxParallelImagePulls = int32p(0) }, "maxParallelImagePulls: must be greater than zero"},
		{"parallel pulls with serialized pulls", func(c *kc) { c.MaxParallelImagePulls = int32p(3) }, "maxParallelImagePulls: must be 1 or unset when serializeImagePulls is true"},
		{"parallel pulls without serialized pulls", func(c *kc) {
			c.MaxParallelImagePulls = int32p(3)
			c.SerializeImagePulls = boolp(false)
		}, ""},
		{"crash loop max too small", func(c *kc) {
			c.CrashLoopBackOff.MaxContainerRestartPeriod = &metav1.Duration{Duration: 500 * time.Millisecond}
		}, "crashLoopBackOff.maxContainerRestartPeriod: must be between 1s and 300s"},
		{"crash loop max too large", func(c *kc) {
			c.CrashLoopBackOff.MaxContainerRestartPeriod = &metav1.Duration{Duration: 301 * time.Second}
		}, "crashLoopBackOff.maxContainerRestartPeriod:"},
		{"crash loop max valid", func(c *kc) { c.CrashLoopBackOff.MaxContainerRestartPeriod = &metav1.Duration{Duration: time.Minute} }, ""},
		{"enforce unknown key", func(c *kc) { c.EnforceNodeAllocatable = []string{"pods", "everything"} }, "enforceNodeAllocatable[1]: unsupported value \"everything\""},
		{"enforce none combined", func(c *kc) { c.EnforceNodeAllocatable = []string{"none", "pods"} }, "enforceNodeAllocatable[0]: \"none\" cannot be combined"},
		{"enforce system-reserved without cgroup", func(c *kc) { c.EnforceNodeAllocatable = []string{"system-reserved"} }, "requires systemReservedCgroup"},
		{"enforce kube-reserved with cgroup", func(c *kc) {
			c.EnforceNodeAllocatable = []string{"pods", "kube-reserved"}
			c.KubeReservedCgroup = "/kube.slice"
		}, ""},
		{"enforce duplicate", func(c *kc) { c.EnforceNodeAllocatable = []string{"pods", "pods"} }, "enforceNodeAllocatable[1]: duplicate value"},
		{"enforce without cgroupsPerQOS", func(c *kc) { c.CgroupsPerQOS = boolp(false) }, "enforceNodeAllocatable: is only supported when cgroupsPerQOS is true"},
		{"taint bad effect", func(c *kc) { c.RegisterWithTaints = []v1.Taint{{Key: "a", Effect: "Maybe"}} }, "registerWithTaints[0].effect: unsupported value"},
		{"taint bad key", func(c *kc) { c.RegisterWithTaints = []v1.Taint{{Key: "a b", Effect: v1.TaintEffectNoSchedule}} }, "registerWithTaints[0].key:"},
		{"taint with timeAdded", func(c *kc) {
			now := metav1.Now()
			c.RegisterWithTaints = []v1.Taint{{Key: "a", Effect: v1.TaintEffectNoSchedule, TimeAdded: &now}}
		}, "registerWithTaints[0].timeAdded: must not be set"},
		{"hairpin mode", func(c *kc) { c.HairpinMode = "sideways" }, "hairpinMode: unsupported value"},
		{"topology policy", func(c *kc) { c.TopologyManagerPolicy = "best" }, "topologyManagerPolicy: unsupported value"},
		{"topology scope", func(c *kc) { c.TopologyManagerScope = "node" }, "topologyManagerScope: unsupported value"},
		{"topology policy and scope built", func(c *kc) {
			c.TopologyManagerPolicy, c.TopologyManagerScope = "single-numa-node", "pod"
			c.TopologyManagerPolicyOptions = map[string]string{"prefer-closest-numa-nodes": "true", "max-allowable-numa-nodes": "16"}
		}, ""},
		{"topology option unknown", func(c *kc) { c.TopologyManagerPolicyOptions = map[string]string{"align-by-socket": "true"} },
			`topologyManagerPolicyOptions: unknown Topology Manager Policy option: "align-by-socket"`},
		{"topology option too few nodes", func(c *kc) { c.TopologyManagerPolicyOptions = map[string]string{"max-allowable-numa-nodes": "2"} },
			`topologyManagerPolicyOptions: the minimum value of "max-allowable-numa-nodes" should not be less than 8`},
		{"topology option bad bool", func(c *kc) { c.TopologyManagerPolicyOptions = map[string]string{"prefer-closest-numa-nodes": "often"} },
			`topologyManagerPolicyOptions: bad value for option "prefer-closest-numa-nodes"`},
		{"authorization mode", func(c *kc) { c.Authorization.Mode = "RBAC" }, "authorization.mode: unsupported value"},
		{"image pull policy", func(c *kc) { c.ImagePullCredentialsVerificationPolicy = "Sometimes" }, "imagePullCredentialsVerificationPolicy: unsupported value"},
		{"allowlist needs policy", func(c *kc) { c.PreloadedImagesVerificationAllowlist = []string{"registry.local/*"} }, "preloadedImagesVerificationAllowlist:"},
		{"allowlist with policy", func(c *kc) {
			c.ImagePullCredentialsVerificationPolicy = kubeletconfigv1beta1.NeverVerifyAllowlistedImages
			c.PreloadedImagesVerificationAllowlist = []string{"registry.local/*", "registry.local/team/app", "alpine"}
		}, ""},
		{"allowlist entry with a tag", func(c *kc) {
			c.ImagePullCredentialsVerificationPolicy = kubeletconfigv1beta1.NeverVerifyAllowlistedImages
			c.PreloadedImagesVerificationAllowlist = []string{"registry.local/*", "registry.local/app:1.0"}
		}, "preloadedImagesVerificationAllowlist[1]: not an image name without tag or digest"},
		{"allowlist partial wildcard", func(c *kc) {
			c.ImagePullCredentialsVerificationPolicy = kubeletconfigv1beta1.NeverVerifyAllowlistedImages
			c.PreloadedImagesVerificationAllowlist = []string{"registry.local/te*"}
		}, "preloadedImagesVerificationAllowlist[0]: only a trailing whole path segment wildcard"},
		{"allowlist bare wildcard", func(c *kc) {
			c.ImagePullCredentialsVerificationPolicy = kubeletconfigv1beta1.NeverVerifyAllowlistedImages
			c.PreloadedImagesVerificationAllowlist = []string{"/*"}
		}, "preloadedImagesVerificationAllowlist[0]: at least a registry host is required"},
		{"cluster dns not an ip", func(c *kc) { c.ClusterDNS = []string{"10.0.0.10", "dns"} }, "clusterDNS[1]:"},
		{"address not an ip", func(c *kc) { c.Address = "localhost" }, "address:"},
		{"pod logs dir relative", func(c *kc) { c.PodLogsDir = "logs" }, "podLogsDir: must be an absolute path"},
		{"pod logs dir not normalized", func(c *kc) { c.PodLogsDir = "/var/log/../pods" }, "podLogsDir: must be a normalized path"},
		{"pod logs dir trailing slash", func(c *kc) { c.PodLogsDir = "/var/log/pods/" }, ""},
		{"cfs quota period", func(c *kc) { c.CPUCFSQuotaPeriod = &metav1.Duration{Duration: 2 * time.Second} }, "cpuCFSQuotaPeriod: must be between 1ms and 1s"},
		{"memory throttling factor", func(c *kc) { f := 1.5; c.MemoryThrottlingFactor = &f }, "memoryThrottlingFactor:"},
		{"container log max files", func(c *kc) { c.ContainerLogMaxFiles = int32p(1) }, "containerLogMaxFiles: must be greater than 1"},
		{"container log max size", func(c *kc) { c.ContainerLogMaxSize = "big" }, "containerLogMaxSize:"},
		{"container log max size fractional bytes", func(c *kc) { c.ContainerLogMaxSize = "1500m" }, "containerLogMaxSize: must be a whole number of bytes"},
		{"container log max size negative turns rotation off", func(c *kc) { c.ContainerLogMaxSize = "-1" }, ""},
		{"container log monitor interval", func(c *kc) { c.ContainerLogMonitorInterval = &metav1.Duration{Duration: time.Second} }, "containerLogMonitorInterval: must be at least 3s"},
		{"reserved cpus", func(c *kc) { c.ReservedSystemCPUs = "0-x" }, "reservedSystemCPUs: is not a valid cpu list"},
		{"cpu manager policy", func(c *kc) { c.CPUManagerPolicy = "bogus" }, `cpuManagerPolicy: unsupported value "bogus"`},
		{"cpu manager static", func(c *kc) { c.CPUManagerPolicy = "static"; c.ReservedSystemCPUs = "0" }, ""},
		{"cpu manager option unknown", func(c *kc) {
			c.CPUManagerPolicy = "static"
			c.CPUManagerPolicyOptions = map[string]string{"align-by-socket": "true"}
		}, `cpuManagerPolicyOptions: unsupported cpu manager policy option "align-by-socket"`},
		{"cpu manager options need static", func(c *kc) { c.CPUManagerPolicyOptions = map[string]string{"full-pcpus-only": "true"} }, "cpuManagerPolicyOptions: cpu manager policy options are only supported with"},
		{"cpu manager reconcile period", func(c *kc) { c.CPUManagerReconcilePeriod = metav1.Duration{Duration: -time.Second} }, "cpuManagerReconcilePeriod: must not be negative"},
		{"system reserved quantity", func(c *kc) { c.SystemReserved = map[string]string{"memory": "much"} }, "systemReserved[memory]:"},
		{"system cgroups need cgroup root", func(c *kc) { c.SystemCgroups = "/system" }, "systemCgroups: requires cgroupRoot"},
		{"runOnce", func(c *kc) { c.RunOnce = true }, "runOnce: is not supported"},
		{"tls version", func(c *kc) { c.TLSMinVersion = "VersionTLS99" }, "tlsMinVersion:"},
		{"tls ciphers", func(c *kc) { c.TLSCipherSuites = []string{"TLS_NOPE"} }, "tlsCipherSuites:"},
		{"tls half configured", func(c *kc) { c.TLSCertFile = "/tls.crt" }, "tlsCertFile: tlsCertFile and tlsPrivateKeyFile must be set together"},
		{"user namespaces", func(c *kc) { n := int64(1000); c.UserNamespaces.IDsPerPod = &n }, "userNamespaces.idsPerPod:"},
		{"logging", func(c *kc) { c.Logging.Format = "xml" }, "logging.format:"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			tc.mutate(c)
			err := Validate(c)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want error containing %q", err, tc.want)
			}
		})
	}
}

func TestValidateCollectsAllErrors(t *testing.T) {
	c := validConfig()
	c.MaxPods = -1
	c.Port = 0
	c.HairpinMode = "x"
	err := Validate(c)
	if err == nil {
		t.Fatal("want errors")
	}
	var fe *FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("error %T is not a *FieldError chain", err)
	}
	got := map[string]bool{}
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		if errors.As(e, &fe) {
			got[fe.Field] = true
		}
	}
	for _, f := range []string{"maxPods", "port", "hairpinMode"} {
		if !got[f] {
			t.Errorf("no error for %s in %v", f, err)
		}
	}
	if Validate(nil) == nil {
		t.Error("Validate(nil) must fail")
	}
}
