package config

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/api/validate/content"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"
	// The kubelet registers the json log format, and with it the
	// --log-json-* flags.
	_ "k8s.io/component-base/logs/json/register"
	"k8s.io/klog/v2"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// Options is everything nodelet takes from its command line and config files.
type Options struct {
	// Config is merged, defaulted and validated. It is nil when ShowVersion
	// is set: --version short-circuits loading, as upstream.
	Config *kubeletconfigv1beta1.KubeletConfiguration

	ConfigFile, ConfigDir                             string
	Kubeconfig, BootstrapKubeconfig, CertDir, RootDir string
	HostnameOverride                                  string
	// NodeIPs is --node-ip: at most one address per IP family.
	NodeIPs []net.IP
	// NodeLabels is --node-labels, keys and values validated.
	NodeLabels map[string]string
	// PodInfraContainerImage is the deprecated upstream flag; nodelet uses
	// it to pin the sandbox image.
	PodInfraContainerImage string
	// CloudProvider is --cloud-provider: "" or "external" (upstream removed
	// the in-tree providers, so Load refuses any other value).
	CloudProvider string
	// ImageCredentialProviderConfig and ImageCredentialProviderBinDir are
	// --image-credential-provider-config (a CredentialProviderConfig file or a
	// directory of them) and --image-credential-provider-bin-dir (the plugins'
	// executables); read by the agent at start.
	ImageCredentialProviderConfig, ImageCredentialProviderBinDir string
	// RuntimeCgroups is --runtime-cgroups: the container runtime's cgroup, reported
	// as the summary's "runtime" system container (upstream no longer moves it).
	RuntimeCgroups string
	// HousekeepingInterval is --housekeeping-interval, which upstream takes from
	// cAdvisor (its container housekeeping, default 10s as the kubelet
	// overrides it): how often nodelet measures the stats behind
	// /stats/summary, /metrics/resource and eviction.
	HousekeepingInterval time.Duration
	// ContainerGC is the container GC policy of the deprecated flags; nil
	// means upstream's defaults. Load always sets it.
	ContainerGC *ContainerGCFlags
	// ShowVersion is --version (or --version=raw, then VersionRaw is set too).
	ShowVersion, VersionRaw bool
	// Warnings are upstream's deprecation notices for the flags given
	// ("Flag --X has been deprecated, ..."); Load also logs them.
	Warnings []string
	// DecodeWarnings are the unknown and duplicate fields of --config and the
	// --config-dir drop-ins, which upstream's lenient decoding tolerates and
	// logs; nodelet logs them at start.
	DecodeWarnings []DecodeWarning
}

// ContainerGCFlags is the container GC policy, which upstream still takes
// from deprecated flags: --minimum-container-ttl-duration (default 0),
// --maximum-dead-containers-per-container (1) and --maximum-dead-containers
// (-1: unlimited).
type ContainerGCFlags struct {
	MinimumTTL         time.Duration
	MaxPerPodContainer int32
	MaxContainers      int32
}

// deprecatedConfigFlag is upstream's notice on every flag that sets a
// KubeletConfiguration field.
const deprecatedConfigFlag = "This parameter should be set via the config file specified by the Kubelet's --config flag. See https://kubernetes.io/docs/tasks/administer-cluster/kubelet-config-file/ for more information."

// notDeprecatedConfigFlag reports the flags that set configuration fields
// but carry no deprecation notice upstream.
func notDeprecatedConfigFlag(name string) bool {
	switch name {
	case "v", "vmodule", "log-flush-frequency", "provider-id", "seccomp-default", "fail-cgroupv1":
		return true
	}
	return false
}

// flagValues holds what the command line said that does not go straight
// into Options or the configuration.
type flagValues struct {
	opts    Options
	gc      ContainerGCFlags
	nodeIPs string
	labels  map[string]string
	help    bool
	version versionValue

	// Flags for features nodelet does not build: refused unless default.
	lockFile                  string
	exitOnLockContention      bool
	mounterPath               string
	allocatableIgnoreEviction bool
}

// refusedFlag is an upstream flag whose feature nodelet does not build:
// parsed, and refused at Load with the reason unless given its default.
type refusedFlag struct{ name, reason string }

func refusedFlags() []refusedFlag {
	return []refusedFlag{
		{"lock-file", "the kubelet lock file is not built into nodelet"},
		{"exit-on-lock-contention", "the kubelet lock file is not built into nodelet"},
		{"experimental-mounter-path", "a custom mounter binary is not built into nodelet (upstream deprecated it in favour of CSI)"},
		{"experimental-allocatable-ignore-eviction", "leaving the hard eviction thresholds out of node allocatable is not built into nodelet"},
	}
}

func newFlagSet(f *flagValues, kc *kubeletconfigv1beta1.KubeletConfiguration) *pflag.FlagSet {
	f.opts.CertDir = DefaultCertDir
	f.opts.RootDir = DefaultRootDir
	f.opts.HousekeepingInterval = DefaultHousekeepingInterval
	f.gc = ContainerGCFlags{MaxPerPodContainer: 1, MaxContainers: -1}

	fs := pflag.NewFlagSet("nodelet", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.SortFlags = true

	o := &f.opts
	fs.StringVar(&o.ConfigFile, "config", "", "The file nodelet loads its initial KubeletConfiguration (kubelet.config.k8s.io/v1beta1) from. Command-line flags override configuration from this file.")
	fs.StringVar(&o.ConfigDir, "config-dir", "", "Directory of *.conf KubeletConfiguration drop-ins, applied in lexical order as JSON merge patches over --config. [default='']")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "Path to a kubeconfig file, specifying how to connect to the API server. Providing --kubeconfig enables API server mode, omitting --kubeconfig enables standalone mode.")
	fs.StringVar(&o.BootstrapKubeconfig, "bootstrap-kubeconfig", "", "Path to a kubeconfig file used to get a client certificate when the file named by --kubeconfig does not exist.")
	fs.StringVar(&o.CertDir, "cert-dir", o.CertDir, "The directory where the TLS certs are located. If --tls-cert-file and --tls-private-key-file are provided, this flag will be ignored.")
	fs.StringVar(&o.RootDir, "root-dir", o.RootDir, "Directory path for managing nodelet files (volume mounts, etc).")
	fs.StringVar(&o.HostnameOverride, "hostname-override", "", "If non-empty, will use this string as identification instead of the actual hostname.")
	fs.StringVar(&f.nodeIPs, "node-ip", "", "IP address (or comma-separated dual-stack IP addresses) of the node.")
	fs.Var(cliflag.NewMapStringString(&f.labels), "node-labels", "Labels to add when registering the node in the cluster. Labels must be key=value pairs separated by ','.")
	fs.StringVar(&o.CloudProvider, "cloud-provider", "", "The provider for cloud services. Set to empty string for running with no cloud provider. Set to 'external' for running with an external cloud provider.")
	fs.StringVar(&o.PodInfraContainerImage, "pod-infra-container-image", "", "Specified image will not be pruned by the image garbage collector.")
	_ = fs.MarkDeprecated("pod-infra-container-image", "will be removed in 1.35. Image garbage collector will get sandbox image information from CRI.")
	fs.StringVar(&o.RuntimeCgroups, "runtime-cgroups", "", "Optional absolute name of the container runtime's cgroup, reported as the \"runtime\" system container in the stats summary.")
	// Upstream re-registers cAdvisor's Go flag housekeeping_interval under
	// this name (cmd/kubelet/app/options/globalflags_linux.go), not deprecated.
	fs.DurationVar(&o.HousekeepingInterval, "housekeeping-interval", o.HousekeepingInterval, "Interval between container housekeepings")
	fs.StringVar(&o.ImageCredentialProviderConfig, "image-credential-provider-config", "", "Path to a credential provider plugin config file or directory.")
	fs.StringVar(&o.ImageCredentialProviderBinDir, "image-credential-provider-bin-dir", "", "The path to the directory where credential provider plugin binaries are located.")
	fs.StringVar(&f.lockFile, "lock-file", "", "<Warning: Alpha feature> The path to file for kubelet to use as a lock file. Not built into nodelet: refused unless empty.")
	fs.BoolVar(&f.exitOnLockContention, "exit-on-lock-contention", false, "Whether kubelet should exit upon lock-file contention. Not built into nodelet: refused unless false.")

	// Deprecated upstream flags that still carry the container GC policy.
	fs.DurationVar(&f.gc.MinimumTTL, "minimum-container-ttl-duration", 0, "Minimum age for a finished container before it is garbage collected.  Examples: '300ms', '10s' or '2h45m'")
	_ = fs.MarkDeprecated("minimum-container-ttl-duration", "Use --eviction-hard or --eviction-soft instead. Will be removed in a future version.")
	fs.Int32Var(&f.gc.MaxPerPodContainer, "maximum-dead-containers-per-container", f.gc.MaxPerPodContainer, "Maximum number of old instances to retain per container.  Each container takes up some disk space.")
	_ = fs.MarkDeprecated("maximum-dead-containers-per-container", "Use --eviction-hard or --eviction-soft instead. Will be removed in a future version.")
	fs.Int32Var(&f.gc.MaxContainers, "maximum-dead-containers", f.gc.MaxContainers, "Maximum number of old instances of containers to retain globally.  Each container takes up some disk space. To disable, set to a negative number.")
	_ = fs.MarkDeprecated("maximum-dead-containers", "Use --eviction-hard or --eviction-soft instead. Will be removed in a future version.")
	fs.StringVar(&f.mounterPath, "experimental-mounter-path", "", "[Experimental] Path of mounter binary. Not built into nodelet: refused unless empty.")
	_ = fs.MarkDeprecated("experimental-mounter-path", "will be removed in 1.25 or later. in favor of using CSI.")
	fs.BoolVar(&f.allocatableIgnoreEviction, "experimental-allocatable-ignore-eviction", false, "When set to 'true', Hard Eviction Thresholds will be ignored while calculating Node Allocatable. Not built into nodelet: refused unless false.")
	_ = fs.MarkDeprecated("experimental-allocatable-ignore-eviction", "will be removed in 1.25 or later.")

	fs.BoolVarP(&f.help, "help", "h", false, "help for nodelet")
	fs.VarPF(&f.version, "version", "", "--version, --version=raw prints version information and quits").NoOptDefVal = "true"

	addConfigFlags(fs, kc)
	// Deprecated flags stay in the help, as upstream shows them.
	fs.VisitAll(func(fl *pflag.Flag) {
		if fl.Deprecated != "" {
			fl.Hidden = false
		}
	})
	return fs
}

// addConfigFlags registers the flags that set KubeletConfiguration fields,
// bound to kc. Load parses the command line twice: once over the
// flags-only configuration and, when a file or drop-in directory is used,
// again over the loaded configuration so that flags win (upstream #56171).
func addConfigFlags(mainfs *pflag.FlagSet, kc *kubeletconfigv1beta1.KubeletConfiguration) {
	fs := pflag.NewFlagSet("", pflag.ContinueOnError)
	b := func(p **bool, name, usage string) { ptrFlag(fs, p, name, usage, strconv.ParseBool, "bool") }
	i32 := func(p **int32, name, usage string) { ptrFlag(fs, p, name, usage, parseInt32, "int32") }

	fs.Var(&ipValue{&kc.Address}, "address", "The IP address for the Kubelet to serve on (set to '0.0.0.0' or '::' for listening on all interfaces and IP address families)")
	fs.StringSliceVar(&kc.AllowedUnsafeSysctls, "allowed-unsafe-sysctls", kc.AllowedUnsafeSysctls, "Comma-separated whitelist of unsafe sysctls or unsafe sysctl patterns (ending in *). Use these at your own risk.")
	b(&kc.Authentication.Anonymous.Enabled, "anonymous-auth", "Enables anonymous requests to the Kubelet server.")
	b(&kc.Authentication.Webhook.Enabled, "authentication-token-webhook", "Use the TokenReview API to determine authentication for bearer tokens.")
	fs.DurationVar(&kc.Authentication.Webhook.CacheTTL.Duration, "authentication-token-webhook-cache-ttl", kc.Authentication.Webhook.CacheTTL.Duration, "The duration to cache responses from the webhook token authenticator.")
	fs.StringVar((*string)(&kc.Authorization.Mode), "authorization-mode", string(kc.Authorization.Mode), "Authorization mode for Kubelet server. Valid options are AlwaysAllow or Webhook.")
	fs.DurationVar(&kc.Authorization.Webhook.CacheAuthorizedTTL.Duration, "authorization-webhook-cache-authorized-ttl", kc.Authorization.Webhook.CacheAuthorizedTTL.Duration, "The duration to cache 'authorized' responses from the webhook authorizer.")
	fs.DurationVar(&kc.Authorization.Webhook.CacheUnauthorizedTTL.Duration, "authorization-webhook-cache-unauthorized-ttl", kc.Authorization.Webhook.CacheUnauthorizedTTL.Duration, "The duration to cache 'unauthorized' responses from the webhook authorizer.")
	fs.StringVar(&kc.CgroupDriver, "cgroup-driver", kc.CgroupDriver, "Driver that the kubelet uses to manipulate cgroups on the host.  Possible values: 'cgroupfs', 'systemd'")
	fs.StringVar(&kc.CgroupRoot, "cgroup-root", kc.CgroupRoot, "Optional root cgroup to use for pods.")
	b(&kc.CgroupsPerQOS, "cgroups-per-qos", "Enable creation of QoS cgroup hierarchy, if true top level QoS and pod cgroups are created.")
	fs.StringVar(&kc.Authentication.X509.ClientCAFile, "client-ca-file", kc.Authentication.X509.ClientCAFile, "If set, any request presenting a client certificate signed by one of the authorities in the client-ca-file is authenticated with an identity corresponding to the CommonName of the client certificate.")
	fs.StringSliceVar(&kc.ClusterDNS, "cluster-dns", kc.ClusterDNS, "Comma-separated list of DNS server IP address. Used for containers' DNS server in case of Pods with \"dnsPolicy=ClusterFirst\".")
	fs.StringVar(&kc.ClusterDomain, "cluster-domain", kc.ClusterDomain, "Domain for this cluster. If set, kubelet will configure all containers to search this domain in addition to the host's search domains")
	i32(&kc.ContainerLogMaxFiles, "container-log-max-files", "Set the maximum number of container log files that can be present for a container. The number must be >= 2.")
	fs.StringVar(&kc.ContainerLogMaxSize, "container-log-max-size", kc.ContainerLogMaxSize, "Set the maximum size (e.g. 10Mi) of container log file before it is rotated.")
	fs.StringVar(&kc.ContainerRuntimeEndpoint, "container-runtime-endpoint", kc.ContainerRuntimeEndpoint, "The endpoint of container runtime service.")
	fs.BoolVar(&kc.EnableContentionProfiling, "contention-profiling", kc.EnableContentionProfiling, "Enable block profiling, if profiling is enabled")
	b(&kc.CPUCFSQuota, "cpu-cfs-quota", "Enable CPU CFS quota enforcement for containers that specify CPU limits")
	ptrFlag(fs, &kc.CPUCFSQuotaPeriod, "cpu-cfs-quota-period", "Sets CPU CFS quota period value, cpu.cfs_period_us, defaults to Linux Kernel default", parseMetaDuration, "duration")
	fs.StringVar(&kc.CPUManagerPolicy, "cpu-manager-policy", kc.CPUManagerPolicy, "CPU Manager policy to use. Possible values: 'none', 'static'.")
	fs.Var(cliflag.NewMapStringStringNoSplit(&kc.CPUManagerPolicyOptions), "cpu-manager-policy-options", "A set of key=value CPU Manager policy options to use, to fine tune their behaviour.")
	fs.DurationVar(&kc.CPUManagerReconcilePeriod.Duration, "cpu-manager-reconcile-period", kc.CPUManagerReconcilePeriod.Duration, "<Warning: Alpha feature> CPU Manager reconciliation period.")
	b(&kc.EnableControllerAttachDetach, "enable-controller-attach-detach", "Enables the Attach/Detach controller to manage attachment/detachment of volumes scheduled to this node.")
	b(&kc.EnableDebuggingHandlers, "enable-debugging-handlers", "Enables server endpoints for log collection and local running of containers and commands")
	b(&kc.EnableServer, "enable-server", "Enable the Kubelet's server")
	fs.StringSliceVar(&kc.EnforceNodeAllocatable, "enforce-node-allocatable", kc.EnforceNodeAllocatable, "A comma separated list of levels of node allocatable enforcement to be enforced by kubelet.")
	fs.Int32Var(&kc.EventBurst, "event-burst", kc.EventBurst, "Maximum size of a bursty event records, temporarily allows event records to burst to this number, while still not exceeding event-qps.")
	i32(&kc.EventRecordQPS, "event-qps", "QPS to limit event creations. The number must be >= 0.")
	fs.Var(cliflag.NewLangleSeparatedMapStringString(&kc.EvictionHard), "eviction-hard", "A set of eviction thresholds (e.g. memory.available<1Gi) that if met would trigger a pod eviction.")
	fs.Int32Var(&kc.EvictionMaxPodGracePeriod, "eviction-max-pod-grace-period", kc.EvictionMaxPodGracePeriod, "Maximum allowed grace period (in seconds) to use when terminating pods in response to a soft eviction threshold being met.")
	fs.Var(cliflag.NewMapStringString(&kc.EvictionMinimumReclaim), "eviction-minimum-reclaim", "A set of minimum reclaims (e.g. imagefs.available=2Gi).")
	fs.DurationVar(&kc.EvictionPressureTransitionPeriod.Duration, "eviction-pressure-transition-period", kc.EvictionPressureTransitionPeriod.Duration, "Duration for which the kubelet has to wait before transitioning out of an eviction pressure condition.")
	fs.Var(cliflag.NewLangleSeparatedMapStringString(&kc.EvictionSoft), "eviction-soft", "A set of eviction thresholds (e.g. memory.available<1.5Gi) that if met over a corresponding grace period would trigger a pod eviction.")
	fs.Var(cliflag.NewMapStringString(&kc.EvictionSoftGracePeriod), "eviction-soft-grace-period", "A set of eviction grace periods (e.g. memory.available=1m30s).")
	b(&kc.FailCgroupV1, "fail-cgroupv1", "Prevent the kubelet from starting on the host using cgroup v1.")
	b(&kc.FailSwapOn, "fail-swap-on", "Makes the Kubelet fail to start if swap is enabled on the node.")
	fs.Var(cliflag.NewMapStringBool(&kc.FeatureGates), "feature-gates", "A set of key=value pairs that describe feature gates for alpha/experimental features.")
	fs.DurationVar(&kc.FileCheckFrequency.Duration, "file-check-frequency", kc.FileCheckFrequency.Duration, "Duration between checking config files for new data")
	fs.StringVar(&kc.HairpinMode, "hairpin-mode", kc.HairpinMode, "How should the kubelet setup hairpin NAT.")
	fs.Var(&ipValue{&kc.HealthzBindAddress}, "healthz-bind-address", "The IP address for the healthz server to serve on (set to '0.0.0.0' or '::' for listening on all interfaces and IP address families)")
	i32(&kc.HealthzPort, "healthz-port", "The port of the localhost healthz endpoint (set to 0 to disable)")
	fs.DurationVar(&kc.HTTPCheckFrequency.Duration, "http-check-frequency", kc.HTTPCheckFrequency.Duration, "Duration between checking http for new data")
	i32(&kc.ImageGCHighThresholdPercent, "image-gc-high-threshold", "The percent of disk usage after which image garbage collection is always run.")
	i32(&kc.ImageGCLowThresholdPercent, "image-gc-low-threshold", "The percent of disk usage before which image garbage collection is never run.")
	fs.StringVar(&kc.ImageServiceEndpoint, "image-service-endpoint", kc.ImageServiceEndpoint, "The endpoint of container image service. If not specified, it will be the same with --container-runtime-endpoint by default.")
	fs.BoolVar(&kc.KernelMemcgNotification, "kernel-memcg-notification", kc.KernelMemcgNotification, "If enabled, the kubelet will integrate with the kernel memcg notification to determine if memory eviction thresholds are crossed rather than polling.")
	fs.Int32Var(&kc.KubeAPIBurst, "kube-api-burst", kc.KubeAPIBurst, "Burst to use while talking with kubernetes apiserver.")
	fs.StringVar(&kc.ContentType, "kube-api-content-type", kc.ContentType, "Content type of requests sent to apiserver.")
	i32(&kc.KubeAPIQPS, "kube-api-qps", "QPS to use while talking with kubernetes apiserver.")
	fs.Var(cliflag.NewMapStringString(&kc.KubeReserved), "kube-reserved", "A set of ResourceName=ResourceQuantity (e.g. cpu=200m,memory=500Mi,ephemeral-storage=1Gi,pid=1000) pairs that describe resources reserved for kubernetes system components.")
	fs.StringVar(&kc.KubeReservedCgroup, "kube-reserved-cgroup", kc.KubeReservedCgroup, "Absolute name of the top level cgroup that is used to manage kubernetes components for which compute resources were reserved via '--kube-reserved' flag.")
	fs.StringVar(&kc.KubeletCgroups, "kubelet-cgroups", kc.KubeletCgroups, "Optional absolute name of cgroups to create and run the Kubelet in.")
	b(&kc.LocalStorageCapacityIsolation, "local-storage-capacity-isolation", "If true, local ephemeral storage isolation is enabled.")
	b(&kc.MakeIPTablesUtilChains, "make-iptables-util-chains", "If true, kubelet will ensure iptables utility rules are present on host.")
	fs.StringVar(&kc.StaticPodURL, "manifest-url", kc.StaticPodURL, "URL for accessing additional Pod specifications to run")
	fs.Var(cliflag.NewColonSeparatedMultimapStringString(&kc.StaticPodURLHeader), "manifest-url-header", "Comma-separated list of HTTP headers to use when accessing the url provided to --manifest-url. This flag can be repeatedly invoked.")
	fs.Int64Var(&kc.MaxOpenFiles, "max-open-files", kc.MaxOpenFiles, "Number of files that can be opened by Kubelet process.")
	fs.Int32Var(&kc.MaxPods, "max-pods", kc.MaxPods, "Number of Pods that can run on this Kubelet.")
	fs.StringVar(&kc.MemoryManagerPolicy, "memory-manager-policy", kc.MemoryManagerPolicy, "Memory Manager policy to use. Possible values: 'None', 'Static'.")
	fs.DurationVar(&kc.ImageMinimumGCAge.Duration, "minimum-image-ttl-duration", kc.ImageMinimumGCAge.Duration, "Minimum age for an unused image before it is garbage collected.")
	i32(&kc.NodeStatusMaxImages, "node-status-max-images", "The maximum number of images to report in Node.Status.Images. If -1 is specified, no cap will be applied.")
	fs.DurationVar(&kc.NodeStatusUpdateFrequency.Duration, "node-status-update-frequency", kc.NodeStatusUpdateFrequency.Duration, "Specifies how often kubelet posts node status to master.")
	i32(&kc.OOMScoreAdj, "oom-score-adj", "The oom-score-adj value for kubelet process. Values must be within the range [-1000, 1000]")
	fs.StringVar(&kc.PodCIDR, "pod-cidr", kc.PodCIDR, "The CIDR to use for pod IP addresses, only used in standalone mode.")
	fs.StringVar(&kc.StaticPodPath, "pod-manifest-path", kc.StaticPodPath, "Path to the directory containing static pod files to run, or the path to a single static pod file. Files starting with dots will be ignored.")
	ptrFlag(fs, &kc.PodPidsLimit, "pod-max-pids", "Set the maximum number of processes per pod.  If -1, the kubelet defaults to the node allocatable pid capacity.", parseInt64, "int")
	fs.Int32Var(&kc.PodsPerCore, "pods-per-core", kc.PodsPerCore, "Number of Pods per core that can run on this Kubelet. A value of 0 disables this limit.")
	fs.Int32Var(&kc.Port, "port", kc.Port, "The port for the Kubelet to serve on.")
	fs.BoolVar(&kc.ProtectKernelDefaults, "protect-kernel-defaults", kc.ProtectKernelDefaults, "Default kubelet behaviour for kernel tuning. If set, kubelet errors if any of kernel tunables is different than kubelet defaults.")
	fs.StringVar(&kc.ProviderID, "provider-id", kc.ProviderID, "Unique identifier for identifying the node in a machine database, i.e cloudprovider")
	fs.Var(cliflag.NewMapStringString(&kc.QOSReserved), "qos-reserved", "<Warning: Alpha feature> A set of ResourceName=Percentage (e.g. memory=50%) pairs that describe how pod resource requests are reserved at the QoS level.")
	fs.Int32Var(&kc.ReadOnlyPort, "read-only-port", kc.ReadOnlyPort, "The read-only port for the Kubelet to serve on with no authentication/authorization (set to 0 to disable)")
	b(&kc.RegisterNode, "register-node", "Register the node with the apiserver.")
	fs.Var(&taintsValue{taints: &kc.RegisterWithTaints}, "register-with-taints", "Register the node with the given list of taints (comma separated \"<key>=<value>:<effect>\"). No-op if register-node is false.")
	fs.Int32Var(&kc.RegistryBurst, "registry-burst", kc.RegistryBurst, "Maximum size of a bursty pulls, temporarily allows pulls to burst to this number, while still not exceeding registry-qps.")
	i32(&kc.RegistryPullQPS, "registry-qps", "If > 0, limit registry pull QPS to this value.  If 0, unlimited.")
	fs.StringVar(&kc.ReservedSystemCPUs, "reserved-cpus", kc.ReservedSystemCPUs, "A comma-separated list of CPUs or CPU ranges that are reserved for system and kubernetes usage.")
	fs.Var(&reservedMemoryValue{value: &kc.ReservedMemory}, "reserved-memory", "A comma separated list of memory reservations for NUMA nodes. (e.g. --reserved-memory 0:memory=1Gi,hugepages-1M=2Gi --reserved-memory 1:memory=2Gi).")
	ptrFlag(fs, &kc.ResolverConfig, "resolv-conf", "Resolver configuration file used as the basis for the container DNS resolution configuration.", func(s string) (string, error) { return s, nil }, "string")
	fs.BoolVar(&kc.RotateCertificates, "rotate-certificates", kc.RotateCertificates, "Auto rotate the kubelet client certificates by requesting new certificates from the kube-apiserver when the certificate expiration approaches.")
	fs.BoolVar(&kc.ServerTLSBootstrap, "rotate-server-certificates", kc.ServerTLSBootstrap, "Auto-request and rotate the kubelet serving certificates by requesting new certificates from the kube-apiserver when the certificate expiration approaches.")
	fs.BoolVar(&kc.RunOnce, "runonce", kc.RunOnce, "If true, exit after spawning pods from static pod files or remote urls. Exclusive with --enable-server")
	fs.DurationVar(&kc.RuntimeRequestTimeout.Duration, "runtime-request-timeout", kc.RuntimeRequestTimeout.Duration, "Timeout of all runtime requests except long running request - pull, logs, exec and attach.")
	b(&kc.SeccompDefault, "seccomp-default", "Enable the use of `RuntimeDefault` as the default seccomp profile for all workloads.")
	b(&kc.SerializeImagePulls, "serialize-image-pulls", "Pull images one at a time.")
	fs.DurationVar(&kc.StreamingConnectionIdleTimeout.Duration, "streaming-connection-idle-timeout", kc.StreamingConnectionIdleTimeout.Duration, "Maximum time a streaming connection can be idle before the connection is automatically closed. 0 indicates no timeout.")
	fs.DurationVar(&kc.SyncFrequency.Duration, "sync-frequency", kc.SyncFrequency.Duration, "Max period between synchronizing running containers and config")
	fs.StringVar(&kc.SystemCgroups, "system-cgroups", kc.SystemCgroups, "Optional absolute name of cgroups in which to place all non-kernel processes that are not already inside a cgroup under '/'.")
	fs.Var(cliflag.NewMapStringString(&kc.SystemReserved), "system-reserved", "A set of ResourceName=ResourceQuantity (e.g. cpu=200m,memory=500Mi,ephemeral-storage=1Gi,pid=1000) pairs that describe resources reserved for non-kubernetes components.")
	fs.StringVar(&kc.SystemReservedCgroup, "system-reserved-cgroup", kc.SystemReservedCgroup, "Absolute name of the top level cgroup that is used to manage non-kubernetes components for which compute resources were reserved via '--system-reserved' flag.")
	fs.StringVar(&kc.TLSCertFile, "tls-cert-file", kc.TLSCertFile, "File containing x509 Certificate used for serving HTTPS (with intermediate certs, if any, concatenated after server cert).")
	fs.StringSliceVar(&kc.TLSCipherSuites, "tls-cipher-suites", kc.TLSCipherSuites, "Comma-separated list of cipher suites for the server. If omitted, the default Go cipher suites will be used.")
	fs.StringVar(&kc.TLSMinVersion, "tls-min-version", kc.TLSMinVersion, "Minimum TLS version supported. Possible values: VersionTLS10, VersionTLS11, VersionTLS12, VersionTLS13")
	fs.StringVar(&kc.TLSPrivateKeyFile, "tls-private-key-file", kc.TLSPrivateKeyFile, "File containing x509 private key matching --tls-cert-file.")
	fs.StringVar(&kc.TopologyManagerPolicy, "topology-manager-policy", kc.TopologyManagerPolicy, "Topology Manager policy to use. Possible values: 'none', 'best-effort', 'restricted', 'single-numa-node'.")
	fs.Var(cliflag.NewMapStringStringNoSplit(&kc.TopologyManagerPolicyOptions), "topology-manager-policy-options", "A set of key=value Topology Manager policy options to use, to fine tune their behaviour.")
	fs.StringVar(&kc.TopologyManagerScope, "topology-manager-scope", kc.TopologyManagerScope, "Scope to which topology hints applied. Possible values: 'container', 'pod'.")
	fs.StringVar(&kc.VolumePluginDir, "volume-plugin-dir", kc.VolumePluginDir, "The full path of the directory in which to search for additional third party volume plugins")
	fs.DurationVar(&kc.VolumeStatsAggPeriod.Duration, "volume-stats-agg-period", kc.VolumeStatsAggPeriod.Duration, "Specifies interval for kubelet to calculate and cache the volume disk usage for all pods and volumes.")
	// -v, --vmodule, --logging-format, --log-flush-frequency and the
	// --log-text-*/--log-json-* options, exactly as component-base
	// registers them for the kubelet.
	logsapi.AddFlags(&kc.Logging, fs)

	fs.VisitAll(func(fl *pflag.Flag) {
		if !notDeprecatedConfigFlag(fl.Name) {
			fl.Deprecated = deprecatedConfigFlag
		}
	})
	mainfs.AddFlagSet(fs)
}

// Usage returns the help text of nodelet's flags.
func Usage() string {
	kc := flagsOnlyConfig()
	fs := newFlagSet(&flagValues{}, kc)
	return "nodelet is a Kubernetes node agent that runs with the kubelet's flags, configuration files and kubeconfig.\n\n" +
		"Usage:\n  nodelet [flags]\n\nFlags:\n" + fs.FlagUsages()
}

// flagsOnlyConfig is the configuration the command line starts from: the
// upstream defaults with the insecure legacy ones of flags-only mode.
func flagsOnlyConfig() *kubeletconfigv1beta1.KubeletConfiguration {
	kc := &kubeletconfigv1beta1.KubeletConfiguration{}
	setBaseDefaults(kc)
	setLegacyDefaults(kc)
	return kc
}

// Load parses args (the command line without the program name), loads
// --config, merges --config-dir, lets explicitly given flags win, applies
// the defaults and validates the result. --help yields an error wrapping
// pflag.ErrHelp; print Usage() for it.
func Load(args []string) (*Options, error) {
	f := &flagValues{}
	kc := flagsOnlyConfig()
	fs := newFlagSet(f, kc)
	var warnings strings.Builder
	fs.SetOutput(&warnings)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil, err
		}
		return nil, fmt.Errorf("parsing command line: %w", err)
	}
	if f.help {
		return nil, pflag.ErrHelp
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("parsing command line: unexpected arguments %q", fs.Args())
	}
	opts := f.opts
	opts.Warnings = deprecationWarnings(warnings.String())
	for _, w := range opts.Warnings {
		klog.Warning(w)
	}
	if f.version.set {
		if f.version.override != "" {
			return nil, fmt.Errorf("--version=%s: overriding the reported version is not built into nodelet; use --version or --version=raw", f.version.override)
		}
		opts.ShowVersion, opts.VersionRaw = true, f.version.raw
		return &opts, nil
	}
	refusals := refuseUnbuiltFlags(fs, opts.CloudProvider)

	if opts.ConfigFile != "" {
		var err error
		if kc, opts.DecodeWarnings, err = loadConfigFile(opts.ConfigFile); err != nil {
			return nil, err
		}
	}
	if opts.ConfigDir != "" {
		var err error
		var warnings []DecodeWarning
		if kc, warnings, err = mergeConfigDir(kc, opts.ConfigDir); err != nil {
			return nil, err
		}
		opts.DecodeWarnings = append(opts.DecodeWarnings, warnings...)
	}
	if opts.ConfigFile != "" || opts.ConfigDir != "" {
		// Flags win over the file and the drop-ins (upstream #56171).
		if err := applyFlagPrecedence(kc, args); err != nil {
			return nil, fmt.Errorf("parsing command line: %w", err)
		}
	}
	setDerivedDefaults(kc)

	var errs []error
	errs = append(errs, refusals...)
	if err := Validate(kc); err != nil {
		errs = append(errs, err)
	}
	ips, err := parseNodeIPs(f.nodeIPs)
	if err != nil {
		errs = append(errs, fmt.Errorf("--node-ip: %w", err))
	}
	if err := validateNodeLabels(f.labels); err != nil {
		errs = append(errs, fmt.Errorf("--node-labels: %w", err))
	}
	// A zero period would measure in a busy loop (a ticker refuses it).
	if opts.HousekeepingInterval <= 0 {
		errs = append(errs, fmt.Errorf("--housekeeping-interval=%s: must be greater than zero", opts.HousekeepingInterval))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("invalid configuration: %w", errors.Join(errs...))
	}
	opts.Config = kc
	opts.NodeIPs = ips
	opts.NodeLabels = f.labels
	opts.ContainerGC = &f.gc
	return &opts, nil
}

// applyFlagPrecedence parses the command line again over the loaded
// configuration, as upstream's kubeletConfigFlagPrecedence does: only the
// flags given change a field. Feature gates from the file that the flags
// do not name are kept.
func applyFlagPrecedence(kc *kubeletconfigv1beta1.KubeletConfiguration, args []string) error {
	fileGates := kc.FeatureGates
	fs := newFlagSet(&flagValues{}, kc) // its deprecation notices were shown by the first parse
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.Changed("feature-gates") {
		for k, v := range fileGates {
			if _, ok := kc.FeatureGates[k]; !ok {
				kc.FeatureGates[k] = v
			}
		}
	}
	return nil
}

// refuseUnbuiltFlags names each given flag whose feature nodelet does not
// build, unless it was given its default (empty or false) value.
func refuseUnbuiltFlags(fs *pflag.FlagSet, cloudProvider string) []error {
	var errs []error
	for _, r := range refusedFlags() {
		fl := fs.Lookup(r.name)
		if fs.Changed(r.name) && fl.Value.String() != fl.DefValue {
			errs = append(errs, fmt.Errorf("--%s=%s: %s", r.name, fl.Value.String(), r.reason))
		}
	}
	if cloudProvider != "" && cloudProvider != CloudProviderExternal {
		errs = append(errs, fmt.Errorf("--cloud-provider=%s: built-in cloud providers were removed upstream; set --cloud-provider=external and run the provider's cloud controller manager", cloudProvider))
	}
	return errs
}

// CloudProviderExternal is the only non-empty --cloud-provider value.
const CloudProviderExternal = "external"

// deprecationWarnings picks pflag's "Flag --X has been deprecated, ..."
// lines out of what the parse wrote.
func deprecationWarnings(out string) []string {
	var ws []string
	for line := range strings.Lines(out) {
		if line = strings.TrimSpace(line); strings.HasPrefix(line, "Flag --") {
			ws = append(ws, line)
		}
	}
	return ws
}

// ptrFlag registers a flag for an optional (pointer) field. The field is
// only allocated when the flag is given, so an unset field keeps its
// default from the file or the defaulting that follows.
func ptrFlag[T any](fs *pflag.FlagSet, p **T, name, usage string, parse func(string) (T, error), typ string) {
	fl := fs.VarPF(&ptrValue[T]{p: p, parse: parse, typ: typ}, name, "", usage)
	if typ == "bool" {
		fl.NoOptDefVal = "true"
	}
}

type ptrValue[T any] struct {
	p     **T
	parse func(string) (T, error)
	typ   string
}

func (v *ptrValue[T]) Set(s string) error {
	x, err := v.parse(s)
	if err != nil {
		return err
	}
	*v.p = &x
	return nil
}

func (v *ptrValue[T]) String() string {
	if v.p == nil || *v.p == nil {
		return ""
	}
	if d, ok := any(**v.p).(metav1.Duration); ok {
		return d.Duration.String()
	}
	return fmt.Sprint(**v.p)
}

func (v *ptrValue[T]) Type() string { return v.typ }

func parseInt32(s string) (int32, error) {
	n, err := strconv.ParseInt(s, 0, 32)
	return int32(n), err
}

func parseInt64(s string) (int64, error) { return strconv.ParseInt(s, 0, 64) }

func parseMetaDuration(s string) (metav1.Duration, error) {
	d, err := time.ParseDuration(s)
	return metav1.Duration{Duration: d}, err
}

// ipValue is an IP-address flag (--address, --healthz-bind-address).
type ipValue struct{ p *string }

func (v *ipValue) Set(s string) error {
	if net.ParseIP(s) == nil {
		return fmt.Errorf("%q is not a valid IP address", s)
	}
	*v.p = s
	return nil
}

func (v *ipValue) String() string { return *v.p }
func (v *ipValue) Type() string   { return "string" }

// versionValue is --version: true/false, raw, or vX.Y.Z (upstream sets the
// reported version with it, which nodelet refuses).
type versionValue struct {
	set, raw bool
	override string
}

func (v *versionValue) Set(s string) error {
	*v = versionValue{}
	switch s {
	case "raw":
		v.set, v.raw = true, true
		return nil
	case "true", "false", "1", "0", "t", "f", "TRUE", "FALSE", "True", "False":
		v.set, _ = strconv.ParseBool(s)
		return nil
	}
	if !strings.HasPrefix(s, "v") {
		return fmt.Errorf("invalid value %q: want true, false, raw or vX.Y.Z", s)
	}
	v.set, v.override = true, s
	return nil
}

func (v *versionValue) String() string {
	switch {
	case v.raw:
		return "raw"
	case v.override != "":
		return v.override
	}
	return strconv.FormatBool(v.set)
}

func (v *versionValue) Type() string     { return "version" }
func (v *versionValue) IsBoolFlag() bool { return true }

// reservedMemoryValue is --reserved-memory: "<numaNode>:<resource>=<quantity>[,...]",
// repeatable, one NUMA node per occurrence (or several separated by ';').
type reservedMemoryValue struct {
	value *[]kubeletconfigv1beta1.MemoryReservation
	set   bool
}

func (v *reservedMemoryValue) Set(s string) error {
	if !v.set {
		// The first occurrence replaces what the file said.
		*v.value = nil
		v.set = true
	}
	for _, node := range strings.Split(s, ";") {
		node = strings.TrimSpace(node)
		if node == "" {
			continue
		}
		id, limits, ok := strings.Cut(node, ":")
		if !ok {
			return fmt.Errorf("invalid reserved memory %q: want <numaNodeID>:<resource>=<quantity>[,<resource>=<quantity>...]", node)
		}
		numa, err := strconv.ParseInt(strings.TrimSpace(id), 10, 32)
		if err != nil {
			return fmt.Errorf("invalid NUMA node ID %q in reserved memory %q: %w", id, node, err)
		}
		r := kubeletconfigv1beta1.MemoryReservation{NumaNode: int32(numa), Limits: v1.ResourceList{}}
		for _, kv := range strings.Split(limits, ",") {
			name, qty, ok := strings.Cut(strings.TrimSpace(kv), "=")
			if !ok || name == "" {
				return fmt.Errorf("invalid reserved memory %q: want <resource>=<quantity>, got %q", node, kv)
			}
			q, err := resource.ParseQuantity(strings.TrimSpace(qty))
			if err != nil {
				return fmt.Errorf("invalid quantity %q for %s in reserved memory %q: %w", qty, name, node, err)
			}
			if _, dup := r.Limits[v1.ResourceName(name)]; dup {
				return fmt.Errorf("reserved memory %q names %s twice", node, name)
			}
			r.Limits[v1.ResourceName(name)] = q
		}
		*v.value = append(*v.value, r)
	}
	return nil
}

func (v *reservedMemoryValue) String() string {
	if v.value == nil {
		return ""
	}
	var parts []string
	for _, r := range *v.value {
		var lim []string
		for _, k := range slices.Sorted(maps.Keys(r.Limits)) {
			q := r.Limits[k]
			lim = append(lim, string(k)+"="+q.String())
		}
		parts = append(parts, fmt.Sprintf("%d:%s", r.NumaNode, strings.Join(lim, ",")))
	}
	return strings.Join(parts, ";")
}

func (v *reservedMemoryValue) Type() string { return "reserved-memory" }

// parseNodeIPs parses --node-ip: one address, or two of different families
// (dual stack). An unspecified address (0.0.0.0 / ::) only picks a family.
func parseNodeIPs(s string) ([]net.IP, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var ips []net.IP
	for _, part := range strings.Split(s, ",") {
		ip := net.ParseIP(strings.TrimSpace(part))
		if ip == nil {
			return nil, fmt.Errorf("%q is not a valid IP address", strings.TrimSpace(part))
		}
		ips = append(ips, ip)
	}
	switch {
	case len(ips) > 2:
		return nil, fmt.Errorf("at most two addresses (one per family) may be given, got %d", len(ips))
	case len(ips) == 2:
		if (ips[0].To4() == nil) == (ips[1].To4() == nil) {
			return nil, fmt.Errorf("dual-stack addresses must be of different IP families: %s", s)
		}
		if ips[0].IsUnspecified() || ips[1].IsUnspecified() {
			return nil, fmt.Errorf("an unspecified address cannot be part of a dual-stack pair: %s", s)
		}
	}
	return ips, nil
}

// validateNodeLabels checks label syntax and, like the upstream kubelet,
// refuses labels in the kubernetes.io / k8s.io namespaces that a kubelet
// may not set on itself.
func validateNodeLabels(labels map[string]string) error {
	var errs []error
	var restricted []string
	for _, k := range slices.Sorted(mapKeys(labels)) {
		for _, msg := range content.IsLabelKey(k) {
			errs = append(errs, fmt.Errorf("invalid label key %q: %s", k, msg))
		}
		for _, msg := range content.IsLabelValue(labels[k]) {
			errs = append(errs, fmt.Errorf("invalid label value %q for key %q: %s", labels[k], k, msg))
		}
		if !isAllowedKubeletLabel(k) {
			restricted = append(restricted, k)
		}
	}
	if len(restricted) > 0 {
		errs = append(errs, fmt.Errorf("unknown 'kubernetes.io' or 'k8s.io' labels %v: labels in these namespaces must begin with kubelet.kubernetes.io/ or node.kubernetes.io/, or be one of the well-known node labels", restricted))
	}
	return errors.Join(errs...)
}

func isAllowedKubeletLabel(key string) bool {
	prefix, _, ok := strings.Cut(key, "/")
	if !ok {
		return true
	}
	if prefix != "kubernetes.io" && prefix != "k8s.io" && !strings.HasSuffix(prefix, ".kubernetes.io") && !strings.HasSuffix(prefix, ".k8s.io") {
		return true
	}
	wellKnown := []string{
		"kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch",
		"beta.kubernetes.io/os", "beta.kubernetes.io/arch", "beta.kubernetes.io/instance-type",
		"node.kubernetes.io/instance-type",
		"failure-domain.beta.kubernetes.io/region", "failure-domain.beta.kubernetes.io/zone",
		"topology.kubernetes.io/region", "topology.kubernetes.io/zone",
	}
	if slices.Contains(wellKnown, key) {
		return true
	}
	for _, ns := range []string{"kubelet.kubernetes.io", "node.kubernetes.io"} {
		if prefix == ns || strings.HasSuffix(prefix, "."+ns) {
			return true
		}
	}
	return false
}

// taintsValue parses --register-with-taints: key=value:Effect or
// key:Effect, comma separated.
type taintsValue struct {
	taints *[]v1.Taint
	set    bool
}

func (t *taintsValue) String() string {
	if t.taints == nil {
		return ""
	}
	parts := make([]string, 0, len(*t.taints))
	for _, tt := range *t.taints {
		parts = append(parts, tt.ToString())
	}
	return strings.Join(parts, ",")
}

func (t *taintsValue) Set(s string) error {
	var out []v1.Taint
	for _, spec := range strings.Split(s, ",") {
		spec = strings.TrimSpace(spec)
		if spec == "" {
			continue
		}
		kv, effect, ok := strings.Cut(spec, ":")
		if !ok || effect == "" {
			return fmt.Errorf("invalid taint %q: want key=value:Effect or key:Effect", spec)
		}
		key, value, _ := strings.Cut(kv, "=")
		taint := v1.Taint{Key: key, Value: value, Effect: v1.TaintEffect(effect)}
		switch taint.Effect {
		case v1.TaintEffectNoSchedule, v1.TaintEffectPreferNoSchedule, v1.TaintEffectNoExecute:
		default:
			return fmt.Errorf("invalid taint %q: effect must be NoSchedule, PreferNoSchedule or NoExecute", spec)
		}
		if msgs := content.IsLabelKey(key); len(msgs) > 0 {
			return fmt.Errorf("invalid taint key %q: %s", key, strings.Join(msgs, "; "))
		}
		if value != "" {
			if msgs := content.IsLabelValue(value); len(msgs) > 0 {
				return fmt.Errorf("invalid taint value %q: %s", value, strings.Join(msgs, "; "))
			}
		}
		out = append(out, taint)
	}
	// Repeating the flag accumulates, as upstream's string-slice flags do.
	if t.set {
		*t.taints = append(*t.taints, out...)
	} else {
		*t.taints = out
		t.set = true
	}
	return nil
}

func (t *taintsValue) Type() string { return "[]v1.Taint" }

// NodeName returns the node's name: hostnameOverride if non-empty, else the
// machine's hostname, trimmed and lower-cased, and valid as an RFC 1123
// subdomain (the API server's rule for Node names).
func NodeName(hostnameOverride string) (string, error) {
	return nodeName(hostnameOverride, os.Hostname)
}

func nodeName(override string, hostname func() (string, error)) (string, error) {
	name := override
	source := "--hostname-override"
	if name == "" {
		h, err := hostname()
		if err != nil {
			return "", fmt.Errorf("getting the hostname for the node name: %w", err)
		}
		name, source = h, "hostname"
	}
	name = strings.ToLower(strings.TrimSpace(name))
	if name == "" {
		return "", fmt.Errorf("node name from %s is empty", source)
	}
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return "", fmt.Errorf("node name %q from %s is not a valid RFC 1123 subdomain: %s", name, source, strings.Join(msgs, "; "))
	}
	return name, nil
}
