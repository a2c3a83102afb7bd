package config

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// FieldStatus says what nodelet does with one KubeletConfiguration field.
type FieldStatus string

const (
	// FieldWired: the field takes effect; Test names the test that proves it.
	FieldWired FieldStatus = "wired"
	// FieldRefused: the feature is not built. Load refuses the configuration,
	// naming the field and Reason, when the field holds anything but its
	// default (or the zero value, which v1beta1 defaulting treats as unset).
	FieldRefused FieldStatus = "refused-when-set"
	// FieldNoEffectUpstream: upstream documents the field as deprecated with
	// no effect; nodelet accepts it and ignores it the same way.
	FieldNoEffectUpstream FieldStatus = "no-effect-upstream"
)

// FieldRule is the decision for one field, by JSON path ("userNamespaces.idsPerPod").
type FieldRule struct {
	Path   string
	Status FieldStatus
	// Test is "pkg.TestName" (pkg is the directory below the repository root)
	// for a wired field.
	Test string
	// Reason says why a refused field cannot take effect, or why a field has
	// no effect upstream.
	Reason string
	// Accepts, for a refused field, lists values besides the default and the
	// zero value that nodelet honours (JSON, e.g. "false" for a handler that
	// nodelet never serves).
	Accepts []string
}

// FieldRules returns the decision for every field of the upstream
// KubeletConfiguration. TestFieldRulesCoverKubeletConfiguration fails when a
// new field appears (a new k8s.io/kubelet version) until it is decided here.
func FieldRules() []FieldRule {
	w := func(path, test string) FieldRule { return FieldRule{Path: path, Status: FieldWired, Test: test} }
	r := func(path, reason string, accepts ...string) FieldRule {
		return FieldRule{Path: path, Status: FieldRefused, Reason: reason, Accepts: accepts}
	}
	inert := func(path, reason string) FieldRule {
		return FieldRule{Path: path, Status: FieldNoEffectUpstream, Reason: reason}
	}
	const deprecated = "deprecated upstream: no longer has any effect"
	return []FieldRule{
		w("enableServer", "agent.TestEnableServerFalseServesNothing"),
		w("staticPodPath", "podconfig.TestFileSourceDirectory"),
		w("podLogsDir", "podruntime.TestSandboxConfig"),
		w("syncFrequency", "syncloop.TestPeriodicResyncRefreshesVolumes"),
		w("fileCheckFrequency", "podconfig.TestRunFileSourcePolls"),
		w("httpCheckFrequency", "podconfig.TestHTTPSource"),
		w("staticPodURL", "podconfig.TestHTTPSource"),
		w("staticPodURLHeader", "podconfig.TestHTTPSource"),
		w("address", "server.TestListenServesTLSAndClosesOnCancel"),
		w("port", "server.TestListenServesTLSAndClosesOnCancel"),
		w("readOnlyPort", "server.TestReadOnlyHandlerHasNoDebugging"),
		w("tlsCertFile", "certificate.TestServingOperatorFilesNeverRewritten"),
		w("tlsPrivateKeyFile", "certificate.TestServingOperatorFilesNeverRewritten"),
		w("tlsCipherSuites", "server.TestCipherSuitesAndTLSVersion"),
		w("tlsCurvePreferences", "server.TestTLSCurvePreferences"),
		w("tlsMinVersion", "server.TestCipherSuitesAndTLSVersion"),
		w("rotateCertificates", "certificate.TestNewClientDecision"),
		w("serverTLSBootstrap", "certificate.TestServingBootstrap"),
		w("authentication", "server.TestAuthFilter"),
		w("authorization", "server.TestWebhookAuthorizerCachesByOutcome"),
		w("registryPullQPS", "podruntime.TestRegistryPullQPS"),
		w("registryBurst", "podruntime.TestRegistryPullQPS"),
		w("imagePullCredentialsVerificationPolicy", "podruntime.TestVerificationPolicies"),
		w("preloadedImagesVerificationAllowlist", "pullrecords.TestDecide"),
		w("eventRecordQPS", "agent.TestEventRecordQPS"),
		w("eventBurst", "agent.TestEventRecordQPS"),
		w("enableDebuggingHandlers", "server.TestReadOnlyHandlerHasNoDebugging"),
		w("enableContentionProfiling", "agent.TestDebugHandlersFollowConfig"),
		w("healthzPort", "agent.TestHealthzServerFromKubeletConfig"),
		w("healthzBindAddress", "agent.TestHealthzServerFromKubeletConfig"),
		w("oomScoreAdj", "cgroups.TestOOMScoreAdj"),
		w("clusterDomain", "podruntime.TestDNSConfig"),
		w("clusterDNS", "podruntime.TestDNSConfig"),
		inert("streamingConnectionIdleTimeout", deprecated),
		w("nodeStatusUpdateFrequency", "node.TestStatusUpdates"),
		w("nodeStatusReportFrequency", "node.TestStatusUpdates"),
		w("nodeLeaseDurationSeconds", "node.TestLease"),
		w("imageMinimumGCAge", "gc.TestSelectImagesToFree"),
		w("imageMaximumGCAge", "gc.TestImageManagerMaxAgeSurvivesRestart"),
		w("imageGCHighThresholdPercent", "gc.TestBytesToFree"),
		w("imageGCLowThresholdPercent", "gc.TestBytesToFree"),
		w("volumeStatsAggPeriod", "stats.TestVolumeStatsCacheRunsEveryPeriod"),
		w("kubeletCgroups", "hostsetup.TestKubeletAndSystemCgroups"),
		w("systemCgroups", "hostsetup.TestKubeletAndSystemCgroups"),
		w("cgroupRoot", "agent.TestCheckCgroupRoot"),
		w("cgroupsPerQOS", "cgroups.TestEnsureQOSCgroups"),
		w("cgroupDriver", "agent.TestRuntimeCgroupDriver"),
		w("cpuManagerPolicy", "resourcemanager/cpumanager.TestNewFromConfig"),
		w("singleProcessOOMKill", "cgroups.TestContainerSwapBehaviorSingleProcessOOMKill"),
		w("cpuManagerPolicyOptions", "resourcemanager/cpumanager.TestNewFromConfig"),
		w("cpuManagerReconcilePeriod", "resourcemanager/cpumanager.TestNewFromConfig"),
		w("memoryManagerPolicy", "resourcemanager/memorymanager.TestNewFromConfig"),
		w("topologyManagerPolicy", "agent.TestTopologyManagerFromConfig"),
		w("topologyManagerScope", "agent.TestTopologyManagerFromConfig"),
		w("topologyManagerPolicyOptions", "agent.TestTopologyManagerFromConfig"),
		r("qosReserved", "nodelet does not reserve memory for QoS classes (the alpha QOSReserved feature is not built)"),
		w("runtimeRequestTimeout", "cri.TestTimeouts"),
		// The v1.37 kubelet validates it and binds --hairpin-mode, but nothing
		// reads it since the in-tree network plugins went: hairpin traffic is
		// the CNI plugin's (e.g. the bridge plugin's hairpinMode).
		inert("hairpinMode", "validated upstream but read by nothing since the in-tree network plugins were removed; hairpin traffic is configured by the CNI plugin"),
		w("maxPods", "node.TestCapacityAndAllocatable"),
		w("podCIDR", "agent.TestPodCIDRToRuntime"),
		w("podPidsLimit", "cgroups.TestEnsurePodCgroup"),
		w("resolvConf", "podruntime.TestDNSConfig"),
		r("runOnce", "nodelet has no run-once mode"),
		w("cpuCFSQuota", "cgroups.TestContainerResourcesCPUAndMemory"),
		w("cpuCFSQuotaPeriod", "cgroups.TestSystemdUpdateQOSAndPeriod"),
		w("nodeStatusMaxImages", "node.TestNodeImages"),
		w("maxOpenFiles", "hostsetup.TestMaxOpenFiles"),
		w("contentType", "agent.TestAPIClientFromKubeletConfig"),
		w("kubeAPIQPS", "agent.TestAPIClientFromKubeletConfig"),
		w("kubeAPIBurst", "agent.TestAPIClientFromKubeletConfig"),
		w("serializeImagePulls", "config.TestImagePullSlots"),
		w("maxParallelImagePulls", "config.TestImagePullSlots"),
		w("evictionHard", "agent.TestDefaultedThresholdsParse"),
		w("evictionSoft", "agent.TestDefaultedThresholdsParse"),
		w("evictionSoftGracePeriod", "agent.TestDefaultedThresholdsParse"),
		w("evictionPressureTransitionPeriod", "eviction.TestManagerMemoryEvictionAndConditions"),
		w("evictionMaxPodGracePeriod", "eviction.TestManagerSoftGraceAndStatsError"),
		w("evictionMinimumReclaim", "agent.TestDefaultedThresholdsParse"),
		w("mergeDefaultEvictionSettings", "config.TestDefaults"),
		w("podsPerCore", "node.TestCapacityAndAllocatable"),
		r("enableControllerAttachDetach", "nodelet does not attach or detach volumes itself: it always leaves that to the attach/detach controller (volumes.kubernetes.io/controller-managed-attach-detach=true)"),
		w("protectKernelDefaults", "hostsetup.TestProtectKernelDefaults"),
		w("makeIPTablesUtilChains", "hostsetup.TestIPTablesUtilChains"),
		inert("iptablesMasqueradeBit", deprecated),
		inert("iptablesDropBit", deprecated),
		w("featureGates", "config.TestFeatureGates"),
		w("failSwapOn", "cgroups.TestCheckSwap"),
		w("memorySwap", "cgroups.TestContainerResourcesSwap"),
		w("containerLogMaxSize", "agent.TestLogRotationConfig"),
		w("containerLogMaxFiles", "logrotate.TestManagerRotatesKeepsMaxFiles"),
		w("containerLogMaxWorkers", "logrotate.TestRotateAllWorkersInParallel"),
		w("containerLogMonitorInterval", "logrotate.TestRunEveryInterval"),
		w("configMapAndSecretChangeDetectionStrategy", "podobjects.TestWatchStrategy"),
		w("systemReserved", "node.TestCapacityAndAllocatable"),
		w("kubeReserved", "node.TestCapacityAndAllocatable"),
		w("reservedSystemCPUs", "node.TestCapacityAndAllocatable"),
		w("showHiddenMetricsForVersion", "agent.TestShowHiddenMetricsForVersion"),
		w("systemReservedCgroup", "cgroups.TestEnforceReservedCgroup"),
		w("kubeReservedCgroup", "cgroups.TestEnforceReservedCgroup"),
		w("enforceNodeAllocatable", "cgroups.TestEnforceReservedCgroup"),
		w("allowedUnsafeSysctls", "agent.TestSysctlAllowlistFromConfig"),
		r("defaultPodSysctls", "nodelet does not add default sysctls to pods"),
		r("volumePluginDir", "nodelet has no FlexVolume support, so there is no plugin directory to read"),
		w("providerID", "node.TestRegisterCreatesNode"),
		r("kernelMemcgNotification", "nodelet's eviction manager polls memory usage; it does not use kernel memcg threshold notifications"),
		w("logging", "config.TestApplyLogging"),
		w("enableSystemLogHandler", "agent.TestDebugHandlersFollowConfig"),
		w("enableSystemLogQuery", "agent.TestDebugHandlersFollowConfig"),
		w("shutdownGracePeriod", "nodeshutdown.TestGroups"),
		w("shutdownGracePeriodCriticalPods", "nodeshutdown.TestGroups"),
		w("shutdownGracePeriodByPodPriority", "nodeshutdown.TestGroups"),
		w("crashLoopBackOff", "podruntime.TestCrashLoopBackOffGrows"),
		w("reservedMemory", "resourcemanager/memorymanager.TestNewFromConfig"),
		w("enableProfilingHandler", "agent.TestDebugHandlersFollowConfig"),
		w("enableDebugFlagsHandler", "agent.TestDebugHandlersFollowConfig"),
		w("seccompDefault", "test/e2e.TestSeccompDefaultRuntimeDefault"),
		r("memoryThrottlingFactor", "it is only used by the MemoryQoS feature, which nodelet does not build"),
		r("memoryReservationPolicy", "nodelet does not build memory reservation tiers: only memoryReservationPolicy None is supported"),
		w("registerWithTaints", "node.TestRegisterCreatesNode"),
		w("registerNode", "node.TestRegisterNodeFalse"),
		w("tracing", "agent.TestBuildRunStopTracing"),
		w("localStorageCapacityIsolation", "agent.TestEvictionConfigLocalStorageCapacityIsolation"),
		w("containerRuntimeEndpoint", "agent.TestRunStopsStagesInOrderThenCloses"),
		w("imageServiceEndpoint", "agent.TestRunStopsStagesInOrderThenCloses"),
		w("failCgroupV1", "hostsetup.TestCheckCgroupVersion"),
		w("userNamespaces.idsPerPod", "agent.TestUserNamespacesIDsPerPod"),
	}
}

// refuseUnbuilt returns a *FieldError for every refused field of kc that
// holds a value nodelet cannot honour.
func refuseUnbuilt(kc *kubeletconfigv1beta1.KubeletConfiguration) []error {
	def := &kubeletconfigv1beta1.KubeletConfiguration{}
	setBaseDefaults(def)
	setDerivedDefaults(def)
	var errs []error
	for _, rule := range FieldRules() {
		if rule.Status != FieldRefused {
			continue
		}
		got, ok := fieldByPath(reflect.ValueOf(kc).Elem(), rule.Path)
		if !ok || isUnset(got) {
			continue
		}
		if want, ok := fieldByPath(reflect.ValueOf(def).Elem(), rule.Path); ok && reflect.DeepEqual(got.Interface(), want.Interface()) {
			continue
		}
		raw, _ := json.Marshal(got.Interface())
		if accepted(raw, rule.Accepts) {
			continue
		}
		errs = append(errs, &FieldError{Field: rule.Path, Detail: fmt.Sprintf("is set to %s, which nodelet does not support: %s", raw, rule.Reason)})
	}
	return errs
}

func accepted(raw []byte, values []string) bool {
	for _, v := range values {
		if string(raw) == v {
			return true
		}
	}
	return false
}

// isUnset reports whether v is the zero value (an empty map or list too),
// which v1beta1 defaulting treats as "not set".
func isUnset(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Map, reflect.Slice:
		return v.Len() == 0
	case reflect.Pointer:
		return v.IsNil()
	}
	return v.IsZero()
}

// fieldByPath walks a dot-separated JSON path from a struct value through
// struct fields (and non-nil pointers to structs).
func fieldByPath(v reflect.Value, path string) (reflect.Value, bool) {
	for _, name := range strings.Split(path, ".") {
		for v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return reflect.Value{}, false
			}
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			return reflect.Value{}, false
		}
		idx, ok := jsonFieldIndex(v.Type())[name]
		if !ok {
			return reflect.Value{}, false
		}
		f, err := v.FieldByIndexErr(idx) // a nil inlined pointer has no fields
		if err != nil {
			return reflect.Value{}, false
		}
		v = f
	}
	return v, true
}

// jsonFieldIndex maps the JSON names of t's exported fields (inlined structs,
// or pointers to them, flattened) to their field indexes.
func jsonFieldIndex(t reflect.Type) map[string][]int {
	out := map[string][]int{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" && opts == "" {
			continue
		}
		if name == "" && (f.Anonymous || strings.Contains(","+opts+",", ",inline,")) {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, sub := range jsonFieldIndex(ft) {
					out[k] = append([]int{i}, sub...)
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = []int{i}
	}
	return out
}
