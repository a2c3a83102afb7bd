package config

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/apimachinery/pkg/util/validation/field"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"
	tracingapi "k8s.io/component-base/tracing/api/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/cpuset"

	"github.com/nodelet/nodelet/eviction"
	"github.com/nodelet/nodelet/pullrecords"
	"github.com/nodelet/nodelet/resourcemanager/cpumanager"
	"github.com/nodelet/nodelet/resourcemanager/topologymanager"
)

// FieldError is one validation failure, naming the configuration field by
// its JSON path.
type FieldError struct {
	Field  string
	Detail string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Detail }

// validator collects every failure so the operator sees them all at once.
type validator struct{ errs []error }

func (v *validator) add(fieldPath, format string, args ...any) {
	v.errs = append(v.errs, &FieldError{Field: fieldPath, Detail: fmt.Sprintf(format, args...)})
}

// Validate checks kc the way the upstream kubelet does before it starts.
// It returns every failure joined (errors.Join) as *FieldError values.
func Validate(kc *kubeletconfigv1beta1.KubeletConfiguration) error {
	if kc == nil {
		return errors.New("kubelet configuration is nil")
	}
	v := &validator{}
	v.basics(kc)
	v.ports(kc)
	v.imageGC(kc)
	v.nodeStatus(kc)
	v.resources(kc)
	v.eviction(kc)
	v.shutdown(kc)
	v.enforceNodeAllocatable(kc)
	v.taints(kc.RegisterWithTaints)
	v.enums(kc)
	v.tls(kc)
	gates, err := FeatureGates(kc)
	if err != nil {
		v.errs = append(v.errs, err)
	}
	// Which topology manager options may be set depends on the gates.
	if _, err := topologymanager.ParseOptions(kc.TopologyManagerPolicyOptions, TopologyGates(gates)); err != nil {
		v.add("topologyManagerPolicyOptions", "%v", err)
	}
	for _, e := range logsapi.Validate(&kc.Logging, gates.logging(), field.NewPath("logging")) {
		v.add(e.Field, "%s", e.ErrorBody())
	}
	// Upstream's checks: a sampling rate within [0, 1000000] and an endpoint
	// that gRPC can dial. The feature gate argument is unused by the library.
	for _, e := range tracingapi.ValidateTracingConfiguration(kc.Tracing, nil, field.NewPath("tracing")) {
		v.add(e.Field, "%s", e.ErrorBody())
	}
	// Fields whose feature nodelet does not build, set to something else
	// than their default: refused by name rather than silently ignored.
	v.errs = append(v.errs, refuseUnbuilt(kc)...)
	return errors.Join(v.errs...)
}

func (v *validator) basics(kc *kubeletconfigv1beta1.KubeletConfiguration) {
	if kc.SyncFrequency.Duration <= 0 {
		v.add("syncFrequency", "must be greater than zero (got %s)", kc.SyncFrequency.Duration)
	}
	if kc.FileCheckFrequency.Duration < 0 {
		v.add("fileCheckFrequency", "must not be negative (got %s)", kc.FileCheckFrequency.Duration)
	}
	if kc.HTTPCheckFrequency.Duration < 0 {
		v.add("httpCheckFrequency", "must not be negative (got %s)", kc.HTTPCheckFrequency.Duration)
	}
	if kc.RunOnce {
		v.add("runOnce", "is not supported")
	}
	if kc.ContainerRuntimeEndpoint == "" {
		v.add("containerRuntimeEndpoint", "is required")
	}
	if kc.RuntimeRequestTimeout.Duration <= 0 {
		v.add("runtimeRequestTimeout", "must be greater than zero (got %s)", kc.RuntimeRequestTimeout.Duration)
	}
	if p := kc.PodLogsDir; p != "" {
		switch {
		case !filepath.IsAbs(p):
			v.add("podLogsDir", "must be an absolute path (got %q)", p)
		case filepath.Clean(p) == "/":
			v.add("podLogsDir", "must not be the root directory")
		case filepath.Clean(p) != strings.TrimSuffix(p, "/"):
			// One trailing slash is tolerated: the API documents "/var/log/pods/".
			v.add("podLogsDir", "must be a normalized path (got %q, want %q)", p, filepath.Clean(p))
		}
	}
	if kc.OOMScoreAdj != nil && (*kc.OOMScoreAdj < -1000 || *kc.OOMScoreAdj > 1000) {
		v.add("oomScoreAdj", "must be between -1000 and 1000 (got %d)", *kc.OOMScoreAdj)
	}
	if kc.MaxPods <= 0 {
		v.add("maxPods", "must be greater than zero (got %d)", kc.MaxPods)
	}
	if kc.PodsPerCore < 0 {
		v.add("podsPerCore", "must not be negative (got %d)", kc.PodsPerCore)
	}
	if kc.PodPidsLimit != nil && *kc.PodPidsLimit < -1 {
		v.add("podPidsLimit", "must be -1 (unlimited) or greater (got %d)", *kc.PodPidsLimit)
	}
	if kc.MaxOpenFiles < 0 {
		v.add("maxOpenFiles", "must not be negative (got %d)", kc.MaxOpenFiles)
	}
	nonNegative32 := func(name string, p *int32) {
		if p != nil && *p < 0 {
			v.add(name, "must not be negative (got %d)", *p)
		}
	}
	nonNegative32("registryPullQPS", kc.RegistryPullQPS)
	nonNegative32("registryBurst", &kc.RegistryBurst)
	nonNegative32("eventRecordQPS", kc.EventRecordQPS)
	nonNegative32("eventBurst", &kc.EventBurst)
	nonNegative32("kubeAPIQPS", kc.KubeAPIQPS)
	nonNegative32("kubeAPIBurst", &kc.KubeAPIBurst)
	nonNegative32("evictionMaxPodGracePeriod", &kc.EvictionMaxPodGracePeriod)
	for name, p := range map[string]*int32{"iptablesMasqueradeBit": kc.IPTablesMasqueradeBit, "iptablesDropBit": kc.IPTablesDropBit} {
		if p != nil && (*p < 0 || *p > 31) {
			v.add(name, "must be between 0 and 31 (got %d)", *p)
		}
	}
	if kc.CPUCFSQuotaPeriod != nil {
		if d := kc.CPUCFSQuotaPeriod.Duration; d < time.Millisecond || d > time.Second {
			v.add("cpuCFSQuotaPeriod", "must be between 1ms and 1s, inclusive (got %s)", d)
		}
	}
	if kc.MemoryThrottlingFactor != nil && (*kc.MemoryThrottlingFactor <= 0 || *kc.MemoryThrottlingFactor > 1) {
		v.add("memoryThrottlingFactor", "must be greater than 0 and at most 1.0 (got %v)", *kc.MemoryThrottlingFactor)
	}
	if kc.ContainerLogMaxFiles != nil && *kc.ContainerLogMaxFiles < 2 {
		v.add("containerLogMaxFiles", "must be greater than 1 (got %d)", *kc.ContainerLogMaxFiles)
	}
	if kc.ContainerLogMaxSize != "" {
		if q, err := resource.ParseQuantity(kc.ContainerLogMaxSize); err != nil {
			v.add("containerLogMaxSize", "must be a quantity such as 10Mi: %v", err)
		} else if _, ok := q.AsInt64(); !ok {
			// Negative is valid: upstream's container log manager then rotates nothing.
			v.add("containerLogMaxSize", "must be a whole number of bytes (got %s)", kc.ContainerLogMaxSize)
		}
	}
	if kc.ContainerLogMaxWorkers != nil && *kc.ContainerLogMaxWorkers < 1 {
		v.add("containerLogMaxWorkers", "must be greater than zero (got %d)", *kc.ContainerLogMaxWorkers)
	}
	if kc.ContainerLogMonitorInterval != nil && kc.ContainerLogMonitorInterval.Duration < 3*time.Second {
		v.add("containerLogMonitorInterval", "must be at least 3s (got %s)", kc.ContainerLogMonitorInterval.Duration)
	}
	if kc.SystemCgroups != "" && kc.CgroupRoot == "" {
		v.add("systemCgroups", "requires cgroupRoot to be set")
	}
	if kc.ReservedSystemCPUs != "" {
		if _, err := cpuset.Parse(kc.ReservedSystemCPUs); err != nil {
			v.add("reservedSystemCPUs", "is not a valid cpu list: %v", err)
		}
		if kc.SystemReservedCgroup != "" || kc.KubeReservedCgroup != "" {
			v.add("reservedSystemCPUs", "cannot be combined with systemReservedCgroup or kubeReservedCgroup")
		}
	}
	for i, ip := range kc.ClusterDNS {
		if net.ParseIP(ip) == nil {
			v.add(fmt.Sprintf("clusterDNS[%d]", i), "%q is not a valid IP address", ip)
		}
	}
	if kc.Address != "" && net.ParseIP(kc.Address) == nil {
		v.add("address", "%q is not a valid IP address", kc.Address)
	}
	if kc.HealthzBindAddress != "" && net.ParseIP(kc.HealthzBindAddress) == nil {
		v.add("healthzBindAddress", "%q is not a valid IP address", kc.HealthzBindAddress)
	}
	if kc.MaxParallelImagePulls != nil {
		switch n := *kc.MaxParallelImagePulls; {
		case n < 1:
			v.add("maxParallelImagePulls", "must be greater than zero (got %d)", n)
		case n > 1 && kc.SerializeImagePulls != nil && *kc.SerializeImagePulls:
			v.add("maxParallelImagePulls", "must be 1 or unset when serializeImagePulls is true (got %d)", n)
		}
	}
	if p := kc.CrashLoopBackOff.MaxContainerRestartPeriod; p != nil && (p.Duration < time.Second || p.Duration > maxContainerBackOff) {
		v.add("crashLoopBackOff.maxContainerRestartPeriod", "must be between 1s and 300s (got %s)", p.Duration)
	}
	if u := kc.UserNamespaces; u != nil && u.IDsPerPod != nil {
		if n := *u.IDsPerPod; n <= 0 || n%65536 != 0 || n >= 1<<32 {
			v.add("userNamespaces.idsPerPod", "must be a positive multiple of 65536 below 2^32 (got %d)", n)
		}
	}
}

func (v *validator) ports(kc *kubeletconfigv1beta1.KubeletConfiguration) {
	if kc.Port < 1 || kc.Port > 65535 {
		v.add("port", "must be between 1 and 65535 (got %d)", kc.Port)
	}
	if kc.ReadOnlyPort != 0 && (kc.ReadOnlyPort < 1 || kc.ReadOnlyPort > 65535) {
		v.add("readOnlyPort", "must be 0 (disabled) or between 1 and 65535 (got %d)", kc.ReadOnlyPort)
	}
	if kc.HealthzPort != nil && *kc.HealthzPort != 0 && (*kc.HealthzPort < 1 || *kc.HealthzPort > 65535) {
		v.add("healthzPort", "must be 0 (disabled) or between 1 and 65535 (got %d)", *kc.HealthzPort)
	}
}

func (v *validator) imageGC(kc *kubeletconfigv1beta1.KubeletConfiguration) {
	high, low := kc.ImageGCHighThresholdPercent, kc.ImageGCLowThresholdPercent
	if high != nil && (*high < 0 || *high > 100) {
		v.add("imageGCHighThresholdPercent", "must be between 0 and 100 (got %d)", *high)
	}
	if low != nil && (*low < 0 || *low > 100) {
		v.add("imageGCLowThresholdPercent", "must be between 0 and 100 (got %d)", *low)
	}
	if high != nil && low != nil && *low >= *high {
		v.add("imageGCLowThresholdPercent", "must be less than imageGCHighThresholdPercent (%d)", *high)
	}
	if kc.ImageMinimumGCAge.Duration < 0 {
		v.add("imageMinimumGCAge", "must not be negative (got %s)", kc.ImageMinimumGCAge.Duration)
	}
	switch maxAge := kc.ImageMaximumGCAge.Duration; {
	case maxAge < 0:
		v.add("imageMaximumGCAge", "must not be negative (got %s)", maxAge)
	case maxAge > 0 && maxAge <= kc.ImageMinimumGCAge.Duration:
		v.add("imageMaximumGCAge", "must be greater than imageMinimumGCAge (%s) when set (got %s)", kc.ImageMinimumGCAge.Duration, maxAge)
	}
}

func (v *validator) nodeStatus(kc *kubeletconfigv1beta1.KubeletConfiguration) {
	if kc.NodeStatusUpdateFrequency.Duration <= 0 {
		v.add("nodeStatusUpdateFrequency", "must be greater than zero (got %s)", kc.NodeStatusUpdateFrequency.Duration)
	}
	if kc.NodeStatusReportFrequency.Duration <= 0 {
		v.add("nodeStatusReportFrequency", "must be greater than zero (got %s)", kc.NodeStatusReportFrequency.Duration)
	}
	if kc.NodeLeaseDurationSeconds <= 0 {
		v.add("nodeLeaseDurationSeconds", "must be greater than zero (got %d)", kc.NodeLeaseDurationSeconds)
	}
	if kc.NodeStatusMaxImages != nil && *kc.NodeStatusMaxImages < -1 {
		v.add("nodeStatusMaxImages", "must be -1 (no limit) or greater (got %d)", *kc.NodeStatusMaxImages)
	}
}

func (v *validator) resources(kc *kubeletconfigv1beta1.KubeletConfiguration) {
	for name, m := range map[string]map[string]string{"systemReserved": kc.SystemReserved, "kubeReserved": kc.KubeReserved} {
		for _, k := range slices.Sorted(mapKeys(m)) {
			q, err := resource.ParseQuantity(m[k])
			if err != nil {
				v.add(name+"["+k+"]", "%q is not a valid quantity: %v", m[k], err)
				continue
			}
			if q.Sign() < 0 {
				v.add(name+"["+k+"]", "must not be negative (got %s)", m[k])
			}
		}
	}
}

func (v *validator) eviction(kc *kubeletconfigv1beta1.KubeletConfiguration) {
	for _, sig := range slices.Sorted(mapKeys(kc.EvictionHard)) {
		if _, _, err := eviction.ParseThreshold(sig, kc.EvictionHard[sig]); err != nil {
			v.add("evictionHard["+sig+"]", "%v", err)
		}
	}
	for _, sig := range slices.Sorted(mapKeys(kc.EvictionSoft)) {
		p := "evictionSoft[" + sig + "]"
		if _, _, err := eviction.ParseThreshold(sig, kc.EvictionSoft[sig]); err != nil {
			v.add(p, "%v", err)
			continue
		}
		if _, ok := kc.EvictionSoftGracePeriod[sig]; !ok {
			v.add(p, "soft eviction threshold needs a grace period in evictionSoftGracePeriod[%s]", sig)
		}
	}
	for _, sig := range slices.Sorted(mapKeys(kc.EvictionSoftGracePeriod)) {
		if _, err := eviction.ParseGracePeriod(sig, kc.EvictionSoftGracePeriod[sig]); err != nil {
			v.add("evictionSoftGracePeriod["+sig+"]", "%v", err)
		}
	}
	for _, sig := range slices.Sorted(mapKeys(kc.EvictionMinimumReclaim)) {
		if _, err := eviction.ParseMinimumReclaim(sig, kc.EvictionMinimumReclaim[sig]); err != nil {
			v.add("evictionMinimumReclaim["+sig+"]", "%v", err)
		}
	}
	if kc.EvictionPressureTransitionPeriod.Duration < 0 {
		v.add("evictionPressureTransitionPeriod", "must not be negative (got %s)", kc.EvictionPressureTransitionPeriod.Duration)
	}
}

func (v *validator) shutdown(kc *kubeletconfigv1beta1.KubeletConfiguration) {
	total, critical := kc.ShutdownGracePeriod.Duration, kc.ShutdownGracePeriodCriticalPods.Duration
	oneOf := func(name string, d time.Duration) {
		switch {
		case d < 0:
			v.add(name, "must not be negative (got %s)", d)
		case d > 0 && d < time.Second:
			v.add(name, "must be zero or at least 1s (got %s)", d)
		}
	}
	oneOf("shutdownGracePeriod", total)
	oneOf("shutdownGracePeriodCriticalPods", critical)
	if critical > total {
		v.add("shutdownGracePeriodCriticalPods", "must be <= shutdownGracePeriod (%s), got %s", total, critical)
	}
	if len(kc.ShutdownGracePeriodByPodPriority) > 0 && (total != 0 || critical != 0) {
		v.add("shutdownGracePeriodByPodPriority", "cannot be combined with shutdownGracePeriod or shutdownGracePeriodCriticalPods")
	}
	for i, p := range kc.ShutdownGracePeriodByPodPriority {
		if p.ShutdownGracePeriodSeconds < 0 {
			v.add(fmt.Sprintf("shutdownGracePeriodByPodPriority[%d].shutdownGracePeriodSeconds", i), "must not be negative (got %d)", p.ShutdownGracePeriodSeconds)
		}
	}
}

func (v *validator) enforceNodeAllocatable(kc *kubeletconfigv1beta1.KubeletConfiguration) {
	keys := kc.EnforceNodeAllocatable
	seen := map[string]bool{}
	for i, k := range keys {
		p := fmt.Sprintf("enforceNodeAllocatable[%d]", i)
		if seen[k] {
			v.add(p, "duplicate value %q", k)
		}
		seen[k] = true
		switch k {
		case "pods":
		case "system-reserved", "system-reserved-compressible":
			if kc.SystemReservedCgroup == "" {
				v.add(p, "%q requires systemReservedCgroup to be set", k)
			}
		case "kube-reserved", "kube-reserved-compressible":
			if kc.KubeReservedCgroup == "" {
				v.add(p, "%q requires kubeReservedCgroup to be set", k)
			}
		case "none":
			if len(keys) > 1 {
				v.add(p, "\"none\" cannot be combined with other values")
			}
		default:
			v.add(p, "unsupported value %q (valid: pods, system-reserved, system-reserved-compressible, kube-reserved, kube-reserved-compressible, none)", k)
		}
	}
	if seen["system-reserved"] && seen["system-reserved-compressible"] {
		v.add("enforceNodeAllocatable", "system-reserved and system-reserved-compressible cannot be combined")
	}
	if seen["kube-reserved"] && seen["kube-reserved-compressible"] {
		v.add("enforceNodeAllocatable", "kube-reserved and kube-reserved-compressible cannot be combined")
	}
	enforced := len(keys) > 0 && !(len(keys) == 1 && keys[0] == "none")
	if enforced && kc.CgroupsPerQOS != nil && !*kc.CgroupsPerQOS {
		v.add("enforceNodeAllocatable", "is only supported when cgroupsPerQOS is true")
	}
}

func (v *validator) taints(taints []v1.Taint) {
	for i, t := range taints {
		p := fmt.Sprintf("registerWithTaints[%d]", i)
		for _, msg := range content.IsLabelKey(t.Key) {
			v.add(p+".key", "%q: %s", t.Key, msg)
		}
		if t.Value != "" {
			for _, msg := range content.IsLabelValue(t.Value) {
				v.add(p+".value", "%q: %s", t.Value, msg)
			}
		}
		switch t.Effect {
		case v1.TaintEffectNoSchedule, v1.TaintEffectPreferNoSchedule, v1.TaintEffectNoExecute:
		default:
			v.add(p+".effect", "unsupported value %q (valid: NoSchedule, PreferNoSchedule, NoExecute)", t.Effect)
		}
		if t.TimeAdded != nil {
			v.add(p+".timeAdded", "must not be set")
		}
	}
}

func (v *validator) enums(kc *kubeletconfigv1beta1.KubeletConfiguration) {
	oneOf := func(name, val string, allowEmpty bool, valid ...string) {
		if val == "" && allowEmpty || slices.Contains(valid, val) {
			return
		}
		v.add(name, "unsupported value %q (valid: %s)", val, strings.Join(valid, ", "))
	}
	oneOf("cgroupDriver", kc.CgroupDriver, false, "cgroupfs", "systemd")
	oneOf("cpuManagerPolicy", kc.CPUManagerPolicy, true, cpumanager.PolicyNone, cpumanager.PolicyStatic)
	if _, err := cpumanager.ParseOptions(orNone(kc.CPUManagerPolicy), kc.CPUManagerPolicyOptions); err != nil {
		v.add("cpuManagerPolicyOptions", "%v", err)
	}
	if kc.CPUManagerReconcilePeriod.Duration < 0 {
		v.add("cpuManagerReconcilePeriod", "must not be negative (got %s)", kc.CPUManagerReconcilePeriod.Duration)
	}
	oneOf("hairpinMode", kc.HairpinMode, true, kubeletconfigv1beta1.PromiscuousBridge, kubeletconfigv1beta1.HairpinVeth, kubeletconfigv1beta1.HairpinNone)
	oneOf("memorySwap.swapBehavior", kc.MemorySwap.SwapBehavior, true, "NoSwap", "LimitedSwap")
	oneOf("topologyManagerPolicy", kc.TopologyManagerPolicy, true,
		topologymanager.PolicyNone, topologymanager.PolicyBestEffort, topologymanager.PolicyRestricted, topologymanager.PolicySingleNUMANode)
	oneOf("topologyManagerScope", kc.TopologyManagerScope, true, topologymanager.ScopeContainer, topologymanager.ScopePod)
	oneOf("memoryManagerPolicy", kc.MemoryManagerPolicy, true, kubeletconfigv1beta1.NoneMemoryManagerPolicy, kubeletconfigv1beta1.StaticMemoryManagerPolicy)
	oneOf("authorization.mode", string(kc.Authorization.Mode), true, string(kubeletconfigv1beta1.KubeletAuthorizationModeAlwaysAllow), string(kubeletconfigv1beta1.KubeletAuthorizationModeWebhook))
	oneOf("configMapAndSecretChangeDetectionStrategy", string(kc.ConfigMapAndSecretChangeDetectionStrategy), true,
		string(kubeletconfigv1beta1.GetChangeDetectionStrategy), string(kubeletconfigv1beta1.TTLCacheChangeDetectionStrategy), string(kubeletconfigv1beta1.WatchChangeDetectionStrategy))
	oneOf("memoryReservationPolicy", string(kc.MemoryReservationPolicy), true,
		string(kubeletconfigv1beta1.NoneMemoryReservationPolicy), string(kubeletconfigv1beta1.TieredReservationMemoryReservationPolicy))
	oneOf("imagePullCredentialsVerificationPolicy", string(kc.ImagePullCredentialsVerificationPolicy), true,
		string(kubeletconfigv1beta1.NeverVerify), string(kubeletconfigv1beta1.NeverVerifyPreloadedImages),
		string(kubeletconfigv1beta1.NeverVerifyAllowlistedImages), string(kubeletconfigv1beta1.AlwaysVerify))
	if len(kc.PreloadedImagesVerificationAllowlist) > 0 && kc.ImagePullCredentialsVerificationPolicy != kubeletconfigv1beta1.NeverVerifyAllowlistedImages {
		v.add("preloadedImagesVerificationAllowlist", "can only be set when imagePullCredentialsVerificationPolicy is %q", kubeletconfigv1beta1.NeverVerifyAllowlistedImages)
	}
	bad := pullrecords.ValidateAllowlist(kc.PreloadedImagesVerificationAllowlist)
	for i := range kc.PreloadedImagesVerificationAllowlist {
		if err := bad[i]; err != nil {
			v.add(fmt.Sprintf("preloadedImagesVerificationAllowlist[%d]", i), "%v", err)
		}
	}
	if kc.Authentication.Webhook.Enabled != nil && *kc.Authentication.Webhook.Enabled && kc.Authentication.Webhook.CacheTTL.Duration < 0 {
		v.add("authentication.webhook.cacheTTL", "must not be negative (got %s)", kc.Authentication.Webhook.CacheTTL.Duration)
	}
}

// orNone is the CPU manager policy with unset meaning none, as defaulting does.
func orNone(policy string) string {
	if policy == "" {
		return cpumanager.PolicyNone
	}
	return policy
}

func (v *validator) tls(kc *kubeletconfigv1beta1.KubeletConfiguration) {
	if _, err := cliflag.TLSCipherSuites(kc.TLSCipherSuites); err != nil {
		v.add("tlsCipherSuites", "%v", err)
	}
	if kc.TLSMinVersion != "" {
		if _, err := cliflag.TLSVersion(kc.TLSMinVersion); err != nil {
			v.add("tlsMinVersion", "%v", err)
		}
	}
	if (kc.TLSCertFile == "") != (kc.TLSPrivateKeyFile == "") {
		v.add("tlsCertFile", "tlsCertFile and tlsPrivateKeyFile must be set together")
	}
}
