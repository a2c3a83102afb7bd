package config

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	tracingapi "k8s.io/component-base/tracing/api/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

// TestResolve: every resolved field takes the upstream default when unset and
// the configured value when set, and the fields whose default is another
// field's value follow it.
func TestResolve(t *testing.T) {
	defaults := Settings{
		Host: HostSettings{FailSwapOn: true, FailCgroupV1: true, OOMScoreAdj: -999, MaxOpenFiles: 1000000, MakeIPTablesUtilChains: true},
		APIClient: APIClientSettings{QPS: 50, Burst: 100, ContentType: "application/vnd.kubernetes.protobuf",
			HeartbeatTimeout: 10 * time.Second, EventQPS: 50, EventBurst: 100},
		Node: NodeSettings{RegisterNode: true, Port: 10250, MaxImages: 50, UpdateFrequency: 10 * time.Second,
			ReportFrequency: 5 * time.Minute, LeaseDuration: 40 * time.Second, MaxPods: 110, EvictionHard: DefaultEvictionHard()},
		Runtime:     RuntimeSettings{ResolvConf: "/etc/resolv.conf", MaxParallelImagePulls: 1, RegistryPullQPS: 5, RegistryBurst: 10},
		Cgroups:     CgroupSettings{Driver: "cgroupfs", CgroupsPerQOS: true, CPUCFSQuota: true, CPUCFSQuotaPeriod: 100 * time.Millisecond, PodPidsLimit: -1},
		ImageGC:     ImageGCSettings{HighThresholdPercent: 85, LowThresholdPercent: 80},
		LogRotation: LogRotationSettings{MaxFiles: 5, Workers: 1, MonitorInterval: 10 * time.Second},
		Server: ServerSettings{Enable: true, EnableDebuggingHandlers: true, EnableProfilingHandler: true,
			EnableDebugFlagsHandler: true, EnableSystemLogHandler: true, WebhookAuth: true},
		LocalStorageCapacityIsolation: true,
		UserNamespaceIDsPerPod:        65536,
	}
	taints := []v1.Taint{{Key: "k", Effect: v1.TaintEffectNoSchedule}}
	explicit := &kubeletconfigv1beta1.KubeletConfiguration{
		FailSwapOn: ptr.To(false), FailCgroupV1: ptr.To(false), ProtectKernelDefaults: true, OOMScoreAdj: ptr.To[int32](-5),
		MaxOpenFiles: 4096, MakeIPTablesUtilChains: ptr.To(false),
		KubeAPIQPS: ptr.To[int32](7), KubeAPIBurst: 9, ContentType: "application/json",
		NodeStatusUpdateFrequency: metav1.Duration{Duration: time.Minute}, NodeStatusReportFrequency: metav1.Duration{Duration: 2 * time.Minute},
		NodeLeaseDurationSeconds: 30, EventRecordQPS: ptr.To[int32](0), EventBurst: 3,
		RegisterNode: ptr.To(false), RegisterWithTaints: taints, ProviderID: "p://1", Port: 11250, NodeStatusMaxImages: ptr.To[int32](-1),
		MaxPods: 20, PodsPerCore: 4, KubeReserved: map[string]string{"cpu": "1"}, SystemReserved: map[string]string{"memory": "1Gi"},
		ReservedSystemCPUs: "0", EvictionHard: map[string]string{"memory.available": "1Gi"},
		ResolverConfig: ptr.To(""), SeccompDefault: ptr.To(true), SerializeImagePulls: ptr.To(false), MaxParallelImagePulls: ptr.To[int32](3),
		RegistryPullQPS: ptr.To[int32](0), RegistryBurst: 2,
		CrashLoopBackOff: kubeletconfigv1beta1.CrashLoopBackOffConfig{MaxContainerRestartPeriod: &metav1.Duration{Duration: 30 * time.Second}},
		CgroupDriver:     "systemd", CgroupsPerQOS: ptr.To(false), CPUCFSQuota: ptr.To(false), CPUCFSQuotaPeriod: &metav1.Duration{Duration: 50 * time.Millisecond},
		PodPidsLimit: ptr.To[int64](100), SingleProcessOOMKill: ptr.To(true),
		ImageGCHighThresholdPercent: ptr.To[int32](90), ImageGCLowThresholdPercent: ptr.To[int32](70),
		ContainerLogMaxFiles: ptr.To[int32](3), ContainerLogMaxWorkers: ptr.To[int32](2), ContainerLogMonitorInterval: &metav1.Duration{Duration: time.Second},
		EnableServer: ptr.To(false), EnableDebuggingHandlers: ptr.To(false), EnableProfilingHandler: ptr.To(false),
		EnableDebugFlagsHandler: ptr.To(false), EnableSystemLogHandler: ptr.To(false), EnableSystemLogQuery: ptr.To(true),
		Tracing:                       &tracingapi.TracingConfiguration{Endpoint: ptr.To("collector:4317"), SamplingRatePerMillion: ptr.To[int32](100)},
		LocalStorageCapacityIsolation: ptr.To(false),
		UserNamespaces:                &kubeletconfigv1beta1.UserNamespaces{IDsPerPod: ptr.To[int64](131072)},
	}
	explicit.Authentication.Anonymous.Enabled = ptr.To(true)
	explicit.Authentication.Webhook.Enabled = ptr.To(false)
	explicitWant := Settings{
		Host: HostSettings{ProtectKernelDefaults: true, OOMScoreAdj: -5, MaxOpenFiles: 4096},
		APIClient: APIClientSettings{QPS: 7, Burst: 9, ContentType: "application/json",
			HeartbeatTimeout: 30 * time.Second, EventQPS: 0, EventBurst: 3},
		Node: NodeSettings{RegisterWithTaints: taints, ProviderID: "p://1", Port: 11250, MaxImages: -1, UpdateFrequency: time.Minute,
			ReportFrequency: 2 * time.Minute, LeaseDuration: 30 * time.Second, MaxPods: 20, PodsPerCore: 4,
			KubeReserved: map[string]string{"cpu": "1"}, SystemReserved: map[string]string{"memory": "1Gi"},
			ReservedSystemCPUs: "0", EvictionHard: map[string]string{"memory.available": "1Gi"}},
		Runtime:                RuntimeSettings{SeccompDefault: true, MaxParallelImagePulls: 3, RegistryBurst: 2, CrashLoopBackOffMax: 30 * time.Second},
		Cgroups:                CgroupSettings{Driver: "systemd", CPUCFSQuotaPeriod: 50 * time.Millisecond, PodPidsLimit: 100, singleProcessOOMKill: ptr.To(true)},
		ImageGC:                ImageGCSettings{HighThresholdPercent: 90, LowThresholdPercent: 70},
		LogRotation:            LogRotationSettings{MaxFiles: 3, Workers: 2, MonitorInterval: time.Second},
		Server:                 ServerSettings{EnableSystemLogQuery: true, AnonymousAuth: true},
		Tracing:                TracingSettings{Endpoint: "collector:4317", SamplingRatePerMillion: 100},
		UserNamespaceIDsPerPod: 131072,
	}

	for _, tc := range []struct {
		name string
		kc   *kubeletconfigv1beta1.KubeletConfiguration
		want func() Settings
	}{
		{name: "defaults", kc: &kubeletconfigv1beta1.KubeletConfiguration{}, want: func() Settings { return defaults }},
		{name: "explicit values", kc: explicit, want: func() Settings { return explicitWant }},
		{name: "an update frequency alone is also the report frequency", kc: &kubeletconfigv1beta1.KubeletConfiguration{
			NodeStatusUpdateFrequency: metav1.Duration{Duration: 20 * time.Second}}, want: func() Settings {
			s := defaults
			s.Node.UpdateFrequency, s.Node.ReportFrequency, s.APIClient.HeartbeatTimeout = 20*time.Second, 20*time.Second, 20*time.Second
			return s
		}},
		{name: "parallel pulls asked for turn serialized pulls off", kc: &kubeletconfigv1beta1.KubeletConfiguration{
			MaxParallelImagePulls: ptr.To[int32](4)}, want: func() Settings {
			s := defaults
			s.Runtime.MaxParallelImagePulls = 4
			return s
		}},
		{name: "parallel pulls without a bound", kc: &kubeletconfigv1beta1.KubeletConfiguration{
			SerializeImagePulls: ptr.To(false)}, want: func() Settings {
			s := defaults
			s.Runtime.MaxParallelImagePulls = 64
			return s
		}},
		{name: "tracing on with its defaults", kc: &kubeletconfigv1beta1.KubeletConfiguration{
			Tracing: &tracingapi.TracingConfiguration{}}, want: func() Settings {
			s := defaults
			s.Tracing.Endpoint = "localhost:4317"
			return s
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.kc.DeepCopy()
			got := Resolve(tc.kc)
			if diff := cmp.Diff(tc.want(), got, cmp.AllowUnexported(CgroupSettings{})); diff != "" {
				t.Errorf("Resolve (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, tc.kc); diff != "" {
				t.Errorf("Resolve changed its argument (-before +after):\n%s", diff)
			}
		})
	}
}

// singleProcessOOMKill: unset follows the host's cgroup version, set wins.
func TestSingleProcessOOMKill(t *testing.T) {
	for _, tc := range []struct {
		set      *bool
		cgroupV2 bool
		want     bool
	}{
		{nil, false, true},
		{nil, true, false},
		{ptr.To(true), true, true},
		{ptr.To(false), false, false},
	} {
		s := Resolve(&kubeletconfigv1beta1.KubeletConfiguration{SingleProcessOOMKill: tc.set}).Cgroups
		if got := s.SingleProcessOOMKill(tc.cgroupV2); got != tc.want {
			t.Errorf("SingleProcessOOMKill(set %v, v2 %v) = %v, want %v", tc.set, tc.cgroupV2, got, tc.want)
		}
	}
}
