package config

import (
	"time"

	v1 "k8s.io/api/core/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

// Settings is the configuration resolved into the plain values the parts take:
// every optional field (a pointer, or a zero that means "the default") is
// decided here, from the defaults of SetDefaults, so no part applies a default
// of its own. The cpumanager does the same for its part (cpumanager.NewFromConfig).
type Settings struct {
	Host        HostSettings
	APIClient   APIClientSettings
	Node        NodeSettings
	Runtime     RuntimeSettings
	Cgroups     CgroupSettings
	ImageGC     ImageGCSettings
	LogRotation LogRotationSettings
	Server      ServerSettings
	Tracing     TracingSettings
	// LocalStorageCapacityIsolation is localStorageCapacityIsolation.
	LocalStorageCapacityIsolation bool
	// UserNamespaceIDsPerPod is userNamespaces.idsPerPod.
	UserNamespaceIDsPerPod int64
}

// HostSettings are what the start-up checks of the host and its process settings take.
type HostSettings struct {
	FailSwapOn             bool
	FailCgroupV1           bool
	ProtectKernelDefaults  bool
	OOMScoreAdj            int32
	MaxOpenFiles           int64
	MakeIPTablesUtilChains bool
}

// APIClientSettings are the API clients' limits: the main client's, the
// heartbeat client's timeout and the event client's.
type APIClientSettings struct {
	QPS         float32
	Burst       int
	ContentType string
	// HeartbeatTimeout bounds a node status or Lease request: the shorter of
	// nodeStatusUpdateFrequency and nodeLeaseDurationSeconds.
	HeartbeatTimeout time.Duration
	// EventQPS 0 means no limit, as documented for eventRecordQPS.
	EventQPS   float32
	EventBurst int
}

// NodeSettings are what the node controller takes: registration, status
// reporting, the Lease, and the capacity and reservation inputs.
type NodeSettings struct {
	RegisterNode       bool
	RegisterWithTaints []v1.Taint
	ProviderID         string
	Port               int32
	// MaxImages is nodeStatusMaxImages: -1 reports every image, 0 none.
	MaxImages       int32
	UpdateFrequency time.Duration
	ReportFrequency time.Duration
	LeaseDuration   time.Duration
	MaxPods         int32
	PodsPerCore     int32
	KubeReserved    map[string]string
	SystemReserved  map[string]string
	// ReservedSystemCPUs replaces systemReserved's cpu with the size of the set.
	ReservedSystemCPUs string
	EvictionHard       map[string]string
}

// RuntimeSettings are the pod runtime manager's values from the configuration.
type RuntimeSettings struct {
	ResolvConf     string
	SeccompDefault bool
	// MaxParallelImagePulls is how many pulls may run at once: one while
	// serializeImagePulls is on, else maxParallelImagePulls (unset:
	// effectively unbounded, as upstream).
	MaxParallelImagePulls int
	RegistryPullQPS       float64
	RegistryBurst         int
	// CrashLoopBackOffMax is crashLoopBackOff.maxContainerRestartPeriod; 0 is
	// upstream's ceiling.
	CrashLoopBackOffMax time.Duration
}

// CgroupSettings are the pod cgroup hierarchy's values.
type CgroupSettings struct {
	Driver            string
	CgroupsPerQOS     bool
	CPUCFSQuota       bool
	CPUCFSQuotaPeriod time.Duration
	PodPidsLimit      int64
	// singleProcessOOMKill is the field as set; nil is decided by the host's
	// cgroup version (SingleProcessOOMKill).
	singleProcessOOMKill *bool
}

// SingleProcessOOMKill is singleProcessOOMKill; unset, it is on for cgroup v1
// and off for v2 (where the whole container is killed), as upstream.
func (c CgroupSettings) SingleProcessOOMKill(cgroupV2 bool) bool {
	return ptr.Deref(c.singleProcessOOMKill, !cgroupV2)
}

// ImageGCSettings are image garbage collection's disk thresholds.
type ImageGCSettings struct {
	HighThresholdPercent int
	LowThresholdPercent  int
}

// LogRotationSettings are the container log manager's values.
type LogRotationSettings struct {
	MaxFiles        int
	Workers         int
	MonitorInterval time.Duration
}

// ServerSettings are the kubelet API's switches.
type ServerSettings struct {
	Enable                  bool
	EnableDebuggingHandlers bool
	EnableProfilingHandler  bool
	EnableDebugFlagsHandler bool
	EnableSystemLogHandler  bool
	EnableSystemLogQuery    bool
	AnonymousAuth           bool
	WebhookAuth             bool
}

// TracingSettings are the tracing values nodelet reports.
type TracingSettings struct {
	Endpoint               string
	SamplingRatePerMillion int32
}

// defaultTracingEndpoint is the OTLP gRPC collector component-base sends to
// when tracing.endpoint is unset.
const defaultTracingEndpoint = "localhost:4317"

// Resolve decides every value of Settings from kc. kc is not changed; a field
// it leaves unset takes the default SetDefaults gives it, so a configuration
// built in code resolves as a loaded one does.
func Resolve(kc *kubeletconfigv1beta1.KubeletConfiguration) Settings {
	c := kc.DeepCopy()
	SetDefaults(c)

	heartbeat := c.NodeStatusUpdateFrequency.Duration
	if lease := time.Duration(c.NodeLeaseDurationSeconds) * time.Second; lease > 0 && lease < heartbeat {
		heartbeat = lease
	}
	pulls := 1
	if !*c.SerializeImagePulls {
		pulls = 64
		if n := ptr.Deref(c.MaxParallelImagePulls, 0); n >= 1 {
			pulls = int(n)
		}
	}
	var crashMax time.Duration
	if p := c.CrashLoopBackOff.MaxContainerRestartPeriod; p != nil {
		crashMax = p.Duration
	}
	var tracing TracingSettings
	if c.Tracing != nil {
		tracing = TracingSettings{
			Endpoint:               ptr.Deref(c.Tracing.Endpoint, defaultTracingEndpoint),
			SamplingRatePerMillion: ptr.Deref(c.Tracing.SamplingRatePerMillion, 0),
		}
	}
	return Settings{
		Host: HostSettings{
			FailSwapOn:             *c.FailSwapOn,
			FailCgroupV1:           *c.FailCgroupV1,
			ProtectKernelDefaults:  c.ProtectKernelDefaults,
			OOMScoreAdj:            *c.OOMScoreAdj,
			MaxOpenFiles:           c.MaxOpenFiles,
			MakeIPTablesUtilChains: *c.MakeIPTablesUtilChains,
		},
		APIClient: APIClientSettings{
			QPS:              float32(*c.KubeAPIQPS),
			Burst:            int(c.KubeAPIBurst),
			ContentType:      c.ContentType,
			HeartbeatTimeout: heartbeat,
			EventQPS:         float32(*c.EventRecordQPS),
			EventBurst:       int(c.EventBurst),
		},
		Node: NodeSettings{
			RegisterNode:       *c.RegisterNode,
			RegisterWithTaints: c.RegisterWithTaints,
			ProviderID:         c.ProviderID,
			Port:               c.Port,
			MaxImages:          *c.NodeStatusMaxImages,
			UpdateFrequency:    c.NodeStatusUpdateFrequency.Duration,
			ReportFrequency:    c.NodeStatusReportFrequency.Duration,
			LeaseDuration:      time.Duration(c.NodeLeaseDurationSeconds) * time.Second,
			MaxPods:            c.MaxPods,
			PodsPerCore:        c.PodsPerCore,
			KubeReserved:       c.KubeReserved,
			SystemReserved:     c.SystemReserved,
			ReservedSystemCPUs: c.ReservedSystemCPUs,
			EvictionHard:       c.EvictionHard,
		},
		Runtime: RuntimeSettings{
			ResolvConf:            *c.ResolverConfig,
			SeccompDefault:        *c.SeccompDefault,
			MaxParallelImagePulls: pulls,
			RegistryPullQPS:       float64(*c.RegistryPullQPS),
			RegistryBurst:         int(c.RegistryBurst),
			CrashLoopBackOffMax:   crashMax,
		},
		Cgroups: CgroupSettings{
			Driver:               c.CgroupDriver,
			CgroupsPerQOS:        *c.CgroupsPerQOS,
			CPUCFSQuota:          *c.CPUCFSQuota,
			CPUCFSQuotaPeriod:    c.CPUCFSQuotaPeriod.Duration,
			PodPidsLimit:         *c.PodPidsLimit,
			singleProcessOOMKill: c.SingleProcessOOMKill,
		},
		ImageGC: ImageGCSettings{
			HighThresholdPercent: int(*c.ImageGCHighThresholdPercent),
			LowThresholdPercent:  int(*c.ImageGCLowThresholdPercent),
		},
		LogRotation: LogRotationSettings{
			MaxFiles:        int(*c.ContainerLogMaxFiles),
			Workers:         int(*c.ContainerLogMaxWorkers),
			MonitorInterval: c.ContainerLogMonitorInterval.Duration,
		},
		Server: ServerSettings{
			Enable:                  *c.EnableServer,
			EnableDebuggingHandlers: *c.EnableDebuggingHandlers,
			EnableProfilingHandler:  *c.EnableProfilingHandler,
			EnableDebugFlagsHandler: *c.EnableDebugFlagsHandler,
			EnableSystemLogHandler:  *c.EnableSystemLogHandler,
			EnableSystemLogQuery:    *c.EnableSystemLogQuery,
			AnonymousAuth:           *c.Authentication.Anonymous.Enabled,
			WebhookAuth:             *c.Authentication.Webhook.Enabled,
		},
		Tracing:                       tracing,
		LocalStorageCapacityIsolation: *c.LocalStorageCapacityIsolation,
		UserNamespaceIDsPerPod:        *c.UserNamespaces.IDsPerPod,
	}
}
