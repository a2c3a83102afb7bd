package config

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
)

const header = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"

func writeFile(t *testing.T, dir, name, data string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustLoad(t *testing.T, args ...string) *Options {
	t.Helper()
	o, err := Load(args)
	if err != nil {
		t.Fatalf("Load(%q): %v", args, err)
	}
	return o
}

func TestLoadConfigFileFormats(t *testing.T) {
	yamlDoc := header + `
staticPodPath: /etc/kubernetes/manifests
syncFrequency: 30s
maxPods: 42
cgroupDriver: systemd
clusterDNS: [10.96.0.10]
evictionHard:
  memory.available: 200Mi
`
	jsonDoc := `{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration",
"staticPodPath":"/etc/kubernetes/manifests","syncFrequency":"30s","maxPods":42,
"cgroupDriver":"systemd","clusterDNS":["10.96.0.10"],"evictionHard":{"memory.available":"200Mi"}}`
	for name, doc := range map[string]string{"config.yaml": yamlDoc, "config.json": jsonDoc} {
		t.Run(name, func(t *testing.T) {
			p := writeFile(t, t.TempDir(), name, doc)
			kc := mustLoad(t, "--config", p).Config
			if kc.StaticPodPath != "/etc/kubernetes/manifests" || kc.SyncFrequency.Duration != 30*time.Second ||
				kc.MaxPods != 42 || kc.CgroupDriver != "systemd" || !reflect.DeepEqual(kc.ClusterDNS, []string{"10.96.0.10"}) {
				t.Errorf("file values not loaded: %+v", kc)
			}
			// A user evictionHard map replaces the defaults entirely.
			if !reflect.DeepEqual(kc.EvictionHard, map[string]string{"memory.available": "200Mi"}) {
				t.Errorf("evictionHard = %v", kc.EvictionHard)
			}
			// Config-file mode defaults.
			if *kc.Authentication.Anonymous.Enabled || !*kc.Authentication.Webhook.Enabled ||
				kc.Authentication.Webhook.CacheTTL.Duration != 2*time.Minute ||
				kc.Authorization.Mode != kubeletconfigv1beta1.KubeletAuthorizationModeWebhook ||
				kc.Authorization.Webhook.CacheAuthorizedTTL.Duration != 5*time.Minute ||
				kc.Authorization.Webhook.CacheUnauthorizedTTL.Duration != 30*time.Second || kc.ReadOnlyPort != 0 {
				t.Errorf("config-file auth defaults wrong: %+v %+v readOnlyPort=%d", kc.Authentication, kc.Authorization, kc.ReadOnlyPort)
			}
			if kc.ContainerRuntimeEndpoint != DefaultContainerRuntimeEndpoint || kc.ImageServiceEndpoint != DefaultContainerRuntimeEndpoint {
				t.Errorf("endpoints = %q, %q", kc.ContainerRuntimeEndpoint, kc.ImageServiceEndpoint)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	kc := &kubeletconfigv1beta1.KubeletConfiguration{}
	SetDefaults(kc)
	checks := []struct {
		name      string
		got, want any
	}{
		{"syncFrequency", kc.SyncFrequency.Duration, time.Minute},
		{"fileCheckFrequency", kc.FileCheckFrequency.Duration, 20 * time.Second},
		{"address", kc.Address, "0.0.0.0"},
		{"port", kc.Port, int32(10250)},
		{"readOnlyPort", kc.ReadOnlyPort, int32(0)},
		{"healthzPort", *kc.HealthzPort, int32(10248)},
		{"healthzBindAddress", kc.HealthzBindAddress, "127.0.0.1"},
		{"registryPullQPS", *kc.RegistryPullQPS, int32(5)},
		{"registryBurst", kc.RegistryBurst, int32(10)},
		{"eventRecordQPS", *kc.EventRecordQPS, int32(50)},
		{"kubeAPIQPS", *kc.KubeAPIQPS, int32(50)},
		{"kubeAPIBurst", kc.KubeAPIBurst, int32(100)},
		{"contentType", kc.ContentType, "application/vnd.kubernetes.protobuf"},
		{"oomScoreAdj", *kc.OOMScoreAdj, int32(-999)},
		{"streamingConnectionIdleTimeout", kc.StreamingConnectionIdleTimeout.Duration, 4 * time.Hour},
		{"nodeStatusUpdateFrequency", kc.NodeStatusUpdateFrequency.Duration, 10 * time.Second},
		{"nodeStatusReportFrequency", kc.NodeStatusReportFrequency.Duration, 5 * time.Minute},
		{"nodeLeaseDurationSeconds", kc.NodeLeaseDurationSeconds, int32(40)},
		{"imageMinimumGCAge", kc.ImageMinimumGCAge.Duration, 2 * time.Minute},
		{"imageMaximumGCAge", kc.ImageMaximumGCAge.Duration, time.Duration(0)},
		{"imageGCHighThresholdPercent", *kc.ImageGCHighThresholdPercent, int32(85)},
		{"imageGCLowThresholdPercent", *kc.ImageGCLowThresholdPercent, int32(80)},
		{"cgroupsPerQOS", *kc.CgroupsPerQOS, true},
		{"cgroupDriver", kc.CgroupDriver, "cgroupfs"},
		{"cpuManagerReconcilePeriod", kc.CPUManagerReconcilePeriod.Duration, 10 * time.Second},
		{"topologyManagerScope", kc.TopologyManagerScope, "container"},
		{"runtimeRequestTimeout", kc.RuntimeRequestTimeout.Duration, 2 * time.Minute},
		{"hairpinMode", kc.HairpinMode, "promiscuous-bridge"},
		{"maxPods", kc.MaxPods, int32(110)},
		{"podPidsLimit", *kc.PodPidsLimit, int64(-1)},
		{"resolvConf", *kc.ResolverConfig, "/etc/resolv.conf"},
		{"cpuCFSQuotaPeriod", kc.CPUCFSQuotaPeriod.Duration, 100 * time.Millisecond},
		{"nodeStatusMaxImages", *kc.NodeStatusMaxImages, int32(50)},
		{"maxOpenFiles", kc.MaxOpenFiles, int64(1000000)},
		{"serializeImagePulls", *kc.SerializeImagePulls, true},
		{"evictionHard", kc.EvictionHard, DefaultEvictionHard()},
		{"evictionPressureTransitionPeriod", kc.EvictionPressureTransitionPeriod.Duration, 5 * time.Minute},
		{"failSwapOn", *kc.FailSwapOn, true},
		{"containerLogMaxSize", kc.ContainerLogMaxSize, "10Mi"},
		{"containerLogMaxFiles", *kc.ContainerLogMaxFiles, int32(5)},
		{"enforceNodeAllocatable", kc.EnforceNodeAllocatable, []string{"pods"}},
		{"registerNode", *kc.RegisterNode, true},
		{"localStorageCapacityIsolation", *kc.LocalStorageCapacityIsolation, true},
		{"podLogsDir", kc.PodLogsDir, "/var/log/pods"},
		{"staticPodPath", kc.StaticPodPath, ""},
		{"containerRuntimeEndpoint", kc.ContainerRuntimeEndpoint, "unix:///run/containerd/containerd.sock"},
		{"imageServiceEndpoint", kc.ImageServiceEndpoint, "unix:///run/containerd/containerd.sock"},
		{"failCgroupV1", *kc.FailCgroupV1, true},
		{"logging.format", kc.Logging.Format, "text"},
		{"enableDebuggingHandlers", *kc.EnableDebuggingHandlers, true},
		{"imagePullCredentialsVerificationPolicy", kc.ImagePullCredentialsVerificationPolicy, kubeletconfigv1beta1.NeverVerifyPreloadedImages},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("default %s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if err := Validate(kc); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}
}

func TestDefaultsDerived(t *testing.T) {
	tests := []struct {
		name  string
		in    kubeletconfigv1beta1.KubeletConfiguration
		check func(*kubeletconfigv1beta1.KubeletConfiguration) string
	}{
		{
			name: "report frequency follows an explicit update frequency",
			in:   kubeletconfigv1beta1.KubeletConfiguration{NodeStatusUpdateFrequency: dur(time.Minute)},
			check: func(kc *kubeletconfigv1beta1.KubeletConfiguration) string {
				if kc.NodeStatusReportFrequency.Duration != time.Minute {
					return "nodeStatusReportFrequency = " + kc.NodeStatusReportFrequency.Duration.String()
				}
				return ""
			},
		},
		{
			name: "parallel pulls turn serialized pulls off",
			in:   kubeletconfigv1beta1.KubeletConfiguration{MaxParallelImagePulls: int32p(3)},
			check: func(kc *kubeletconfigv1beta1.KubeletConfiguration) string {
				if *kc.SerializeImagePulls {
					return "serializeImagePulls defaulted to true"
				}
				return ""
			},
		},
		{
			name: "mergeDefaultEvictionSettings fills missing keys only",
			in: kubeletconfigv1beta1.KubeletConfiguration{
				EvictionHard:                 map[string]string{"memory.available": "1Gi"},
				MergeDefaultEvictionSettings: boolp(true),
			},
			check: func(kc *kubeletconfigv1beta1.KubeletConfiguration) string {
				want := DefaultEvictionHard()
				want["memory.available"] = "1Gi"
				if !reflect.DeepEqual(kc.EvictionHard, want) {
					return "evictionHard = " + strings.Join(sortedPairs(kc.EvictionHard), ",")
				}
				return ""
			},
		},
		{
			name: "explicit zero pointer fields are kept",
			in:   kubeletconfigv1beta1.KubeletConfiguration{HealthzPort: int32p(0), ResolverConfig: strp("")},
			check: func(kc *kubeletconfigv1beta1.KubeletConfiguration) string {
				if *kc.HealthzPort != 0 || *kc.ResolverConfig != "" {
					return "explicit zero overwritten"
				}
				return ""
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kc := tc.in.DeepCopy()
			SetDefaults(kc)
			if msg := tc.check(kc); msg != "" {
				t.Error(msg)
			}
		})
	}
}

func TestLoadFlagsOnlyLegacyDefaults(t *testing.T) {
	kc := mustLoad(t).Config
	if !*kc.Authentication.Anonymous.Enabled || *kc.Authentication.Webhook.Enabled ||
		kc.Authorization.Mode != kubeletconfigv1beta1.KubeletAuthorizationModeAlwaysAllow || kc.ReadOnlyPort != 10255 {
		t.Errorf("flags-only mode must use the legacy defaults, got %+v %+v readOnlyPort=%d", kc.Authentication, kc.Authorization, kc.ReadOnlyPort)
	}
	if kc.SyncFrequency.Duration != time.Minute || kc.MaxPods != 110 {
		t.Errorf("v1beta1 defaults missing in flags-only mode")
	}
}

func TestLoadDecodeErrors(t *testing.T) {
	tests := []struct {
		name, doc string
		want      []string
	}{
		{"bad value beside an unknown field", header + "fooBar: 1\nmaxPods: lots\n", []string{"maxPods: cannot use string value"}},
		{"bad duration", header + "syncFrequency: 10x\n", []string{"syncFrequency:", `duration "10x"`}},
		{"bad nested duration", header + "authorization:\n  webhook:\n    cacheAuthorizedTTL: soon\n", []string{"authorization.webhook.cacheAuthorizedTTL:"}},
		{"bad type", header + "maxPods: lots\n", []string{"maxPods: cannot use string value"}},
		{"bad map value type", header + "evictionHard:\n  memory.available: [1]\n", []string{"evictionHard[memory.available]:"}},
		{"wrong kind", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeProxyConfiguration\n", []string{`kind: "KubeProxyConfiguration" is not supported`}},
		{"missing kind", "apiVersion: kubelet.config.k8s.io/v1beta1\n", []string{"kind: is missing"}},
		{"wrong apiVersion", "apiVersion: kubelet.config.k8s.io/v1\nkind: KubeletConfiguration\n", []string{`apiVersion: "kubelet.config.k8s.io/v1" is not supported`}},
		{"not an object", "- a\n- b\n", []string{"not an object"}},
		{"empty file", "\n", []string{"is empty"}},
		{"invalid yaml", header + "port: [\n", []string{"config.yaml"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, t.TempDir(), "config.yaml", tc.doc)
			_, err := Load([]string{"--config=" + p})
			if err == nil {
				t.Fatal("want error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
	if _, err := Load([]string{"--config=/nonexistent/nodelet.yaml"}); err == nil || !strings.Contains(err.Error(), "/nonexistent/nodelet.yaml") {
		t.Errorf("missing file: got %v", err)
	}
}

func TestLoadImagePullCredentialsVerification(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, dir, "config.yaml", header+"imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\n"+
		"preloadedImagesVerificationAllowlist:\n- registry.local/pause\n- registry.local/system/*\n")
	kc := mustLoad(t, "--config="+p).Config
	if kc.ImagePullCredentialsVerificationPolicy != kubeletconfigv1beta1.NeverVerifyAllowlistedImages ||
		!slices.Equal(kc.PreloadedImagesVerificationAllowlist, []string{"registry.local/pause", "registry.local/system/*"}) {
		t.Errorf("policy %q, allowlist %q", kc.ImagePullCredentialsVerificationPolicy, kc.PreloadedImagesVerificationAllowlist)
	}
	for doc, want := range map[string]string{
		"imagePullCredentialsVerificationPolicy: Sometimes\n": "imagePullCredentialsVerificationPolicy: unsupported value",
		"imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\npreloadedImagesVerificationAllowlist: [\"registry.local/app:1\"]\n": "preloadedImagesVerificationAllowlist[0]:",
	} {
		_, err := Load([]string{"--config=" + writeFile(t, dir, "bad.yaml", header+doc)})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want one naming %q", doc, err, want)
		}
	}
}

func TestLoadRelativePaths(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, dir, "sub/config.yaml", header+`
staticPodPath: manifests
tlsCertFile: pki/tls.crt
tlsPrivateKeyFile: /abs/tls.key
authentication:
  x509:
    clientCAFile: ca.crt
resolvConf: resolv.conf
podLogsDir: logs
`)
	kc := mustLoad(t, "--config", p).Config
	base := filepath.Join(dir, "sub")
	want := map[string]string{
		"staticPodPath":     filepath.Join(base, "manifests"),
		"tlsCertFile":       filepath.Join(base, "pki/tls.crt"),
		"tlsPrivateKeyFile": "/abs/tls.key",
		"clientCAFile":      filepath.Join(base, "ca.crt"),
		"resolvConf":        filepath.Join(base, "resolv.conf"),
		"podLogsDir":        filepath.Join(base, "logs"),
	}
	got := map[string]string{
		"staticPodPath":     kc.StaticPodPath,
		"tlsCertFile":       kc.TLSCertFile,
		"tlsPrivateKeyFile": kc.TLSPrivateKeyFile,
		"clientCAFile":      kc.Authentication.X509.ClientCAFile,
		"resolvConf":        *kc.ResolverConfig,
		"podLogsDir":        kc.PodLogsDir,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("paths = %v, want %v", got, want)
	}
}

// TestLoadConfigDirMerge replays the expectations of the upstream e2e test
// kubelet_config_dir_test.go ("should merge kubelet configs correctly").
func TestLoadConfigDirMerge(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "config.yaml", header+`
port: 10250
cpuCFSQuotaPeriod: 100ms
`)
	dropins := filepath.Join(dir, "kubelet.conf.d")
	writeFile(t, dropins, "10-kubelet.conf", header+`
port: 10255
readOnlyPort: 10257
clusterDNS:
- 192.168.1.10
systemReserved:
  memory: 1Gi
  cpu: 500m
authorization:
  mode: Webhook
  webhook:
    cacheAuthorizedTTL: "5m"
    cacheUnauthorizedTTL: "30s"
staticPodURLHeader:
  kubelet-api-support:
  - "Authorization: 234APSDFA"
  - "X-Custom-Header: 123"
  custom-static-pod:
  - "Authorization: 223EWRWER"
  - "X-Custom-Header: 456"
shutdownGracePeriodByPodPriority:
  - priority: 1
    shutdownGracePeriodSeconds: 60
  - priority: 2
    shutdownGracePeriodSeconds: 45
  - priority: 3
    shutdownGracePeriodSeconds: 30
featureGates:
  ContextualLogging: true
  PodAndContainerStatsFromCRI: true
`)
	writeFile(t, dropins, "20-kubelet.conf", header+`
port: 8080
readOnlyPort: 10255
systemReserved:
  memory: 2Gi
clusterDNS:
- 192.168.1.1
- 192.168.1.5
- 192.168.1.8
authorization:
  webhook:
    cacheAuthorizedTTL: "8m"
staticPodURLHeader:
  kubelet-api-support:
  - "Authorization: 8945AFSG1"
  - "X-Custom-Header: 987"
shutdownGracePeriodByPodPriority:
  - priority: 1
    shutdownGracePeriodSeconds: 60
  - priority: 2
    shutdownGracePeriodSeconds: 45
featureGates:
  PodAndContainerStatsFromCRI: false
  DynamicResourceAllocation: true
cpuManagerReconcilePeriod: 0s
`)
	// Not *.conf: ignored, even though it would not decode.
	writeFile(t, dropins, "30-kubelet.yaml", "port: [oops\n")
	writeFile(t, dropins, "README", "not a config\n")
	// Empty drop-ins are skipped.
	writeFile(t, dropins, "15-empty.conf", "")

	kc := mustLoad(t, "--config", cfg, "--config-dir", dropins).Config
	checks := []struct {
		name      string
		got, want any
	}{
		{"port from the last file", kc.Port, int32(8080)},
		{"readOnlyPort from the last file", kc.ReadOnlyPort, int32(10255)},
		{"systemReserved keys merged", kc.SystemReserved, map[string]string{"memory": "2Gi", "cpu": "500m"}},
		{"clusterDNS replaced", kc.ClusterDNS, []string{"192.168.1.1", "192.168.1.5", "192.168.1.8"}},
		{"authorization.webhook TTLs merged", []time.Duration{kc.Authorization.Webhook.CacheAuthorizedTTL.Duration, kc.Authorization.Webhook.CacheUnauthorizedTTL.Duration}, []time.Duration{8 * time.Minute, 30 * time.Second}},
		{"staticPodURLHeader values replaced per key", kc.StaticPodURLHeader, map[string][]string{
			"kubelet-api-support": {"Authorization: 8945AFSG1", "X-Custom-Header: 987"},
			"custom-static-pod":   {"Authorization: 223EWRWER", "X-Custom-Header: 456"},
		}},
		{"shutdownGracePeriodByPodPriority replaced", kc.ShutdownGracePeriodByPodPriority, []kubeletconfigv1beta1.ShutdownGracePeriodByPodPriority{
			{Priority: 1, ShutdownGracePeriodSeconds: 60}, {Priority: 2, ShutdownGracePeriodSeconds: 45},
		}},
		{"featureGates merged", kc.FeatureGates, map[string]bool{
			"ContextualLogging": true, "PodAndContainerStatsFromCRI": false, "DynamicResourceAllocation": true,
		}},
		{"explicit zero kept", kc.CPUManagerReconcilePeriod.Duration, time.Duration(0)},
		{"true default not clobbered", kc.CPUCFSQuotaPeriod.Duration, 100 * time.Millisecond},
		{"file-mode default kept", kc.Authentication.Webhook.CacheTTL.Duration, 2 * time.Minute},
		{"unmentioned default kept", kc.SyncFrequency.Duration, time.Minute},
		{"evictionHard defaults kept", kc.EvictionHard, DefaultEvictionHard()},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestLoadConfigDirErrors(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"bad value names the drop-in", map[string]string{"10-a.conf": header + "maxPods: lots\n"}, "10-a.conf"},
		{"drop-in needs its kind", map[string]string{"10-a.conf": "port: 1\n"}, "apiVersion: is missing"},
		{"bad duration", map[string]string{"10-a.conf": header + "syncFrequency: 10x\n"}, "syncFrequency:"},
		{"merged result is validated", map[string]string{"10-a.conf": header + "imageGCLowThresholdPercent: 90\n"}, "imageGCLowThresholdPercent: must be less than imageGCHighThresholdPercent (85)"},
		{"subdirectories are walked", map[string]string{"sub/10-a.conf": header + "maxPods: lots\n"}, "sub/10-a.conf"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := writeFile(t, dir, "config.yaml", header)
			for name, data := range tc.files {
				writeFile(t, filepath.Join(dir, "d"), name, data)
			}
			_, err := Load([]string{"--config", cfg, "--config-dir", filepath.Join(dir, "d")})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want error containing %q", err, tc.want)
			}
		})
	}
	if _, err := Load([]string{"--config-dir", "/nonexistent/kubelet.conf.d"}); err == nil {
		t.Error("missing config dir: want error")
	}
}

func TestLoadConfigDirWithoutConfigFile(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "10.conf", header+"maxPods: 12\n")
	kc := mustLoad(t, "--config-dir", dir).Config
	if kc.MaxPods != 12 {
		t.Errorf("maxPods = %d", kc.MaxPods)
	}
	// Without --config the flags-only (legacy) defaults are the base.
	if kc.ReadOnlyPort != 10255 {
		t.Errorf("readOnlyPort = %d, want legacy 10255", kc.ReadOnlyPort)
	}
	// A later drop-in's explicit zeros win over earlier values and defaults.
	writeFile(t, dir, "20.conf", header+"readOnlyPort: 0\nhealthzPort: 0\nresolvConf: \"\"\n")
	kc = mustLoad(t, "--config-dir", dir).Config
	if kc.ReadOnlyPort != 0 || *kc.HealthzPort != 0 || *kc.ResolverConfig != "" || kc.MaxPods != 12 {
		t.Errorf("explicit zeros lost: readOnlyPort=%d healthzPort=%d resolvConf=%q maxPods=%d",
			kc.ReadOnlyPort, *kc.HealthzPort, *kc.ResolverConfig, kc.MaxPods)
	}
}

func TestLoadFlagPrecedence(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "config.yaml", header+`
maxPods: 50
clusterDNS: [10.0.0.1]
clusterDomain: file.local
failSwapOn: true
cgroupDriver: systemd
registerNode: true
nodeStatusUpdateFrequency: 20s
runtimeRequestTimeout: 3m
staticPodPath: /file/manifests
containerRuntimeEndpoint: unix:///file.sock
providerID: file://id
`)
	writeFile(t, filepath.Join(dir, "d"), "10.conf", header+`
maxPods: 60
clusterDNS: [10.0.0.2]
cgroupRoot: /dropin
`)
	o := mustLoad(t,
		"--config", cfg, "--config-dir", filepath.Join(dir, "d"),
		"--max-pods=70", "--cluster-dns=10.0.0.3,10.0.0.4", "--fail-swap-on=false",
		"--register-node=false", "--node-status-update-frequency=7s", "--runtime-request-timeout=90s",
		"--pod-manifest-path=/flag/manifests", "--container-runtime-endpoint=unix:///flag.sock",
		"--cgroup-root=/flag", "--provider-id=flag://id", "--cluster-domain=flag.local",
		"--register-with-taints=a=b:NoSchedule,c:NoExecute",
		"--file-check-frequency=3s", "--sync-frequency=45s",
	)
	kc := o.Config
	checks := []struct {
		name      string
		got, want any
	}{
		{"maxPods", kc.MaxPods, int32(70)},
		{"clusterDNS", kc.ClusterDNS, []string{"10.0.0.3", "10.0.0.4"}},
		{"clusterDomain", kc.ClusterDomain, "flag.local"},
		{"failSwapOn", *kc.FailSwapOn, false},
		{"registerNode", *kc.RegisterNode, false},
		{"nodeStatusUpdateFrequency", kc.NodeStatusUpdateFrequency.Duration, 7 * time.Second},
		{"runtimeRequestTimeout", kc.RuntimeRequestTimeout.Duration, 90 * time.Second},
		{"fileCheckFrequency", kc.FileCheckFrequency.Duration, 3 * time.Second},
		{"syncFrequency", kc.SyncFrequency.Duration, 45 * time.Second},
		{"staticPodPath", kc.StaticPodPath, "/flag/manifests"},
		{"containerRuntimeEndpoint", kc.ContainerRuntimeEndpoint, "unix:///flag.sock"},
		{"imageServiceEndpoint follows the flag", kc.ImageServiceEndpoint, "unix:///flag.sock"},
		{"cgroupRoot", kc.CgroupRoot, "/flag"},
		{"providerID", kc.ProviderID, "flag://id"},
		{"registerWithTaints", kc.RegisterWithTaints, []v1.Taint{{Key: "a", Value: "b", Effect: v1.TaintEffectNoSchedule}, {Key: "c", Effect: v1.TaintEffectNoExecute}}},
		// Flags not given leave the file's values alone.
		{"cgroupDriver from file", kc.CgroupDriver, "systemd"},
		{"nodeStatusReportFrequency from file defaulting", kc.NodeStatusReportFrequency.Duration, 20 * time.Second},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}

	// Without the flags, the drop-in wins over the file.
	kc = mustLoad(t, "--config", cfg, "--config-dir", filepath.Join(dir, "d")).Config
	if kc.MaxPods != 60 || !reflect.DeepEqual(kc.ClusterDNS, []string{"10.0.0.2"}) || kc.CgroupRoot != "/dropin" || !*kc.FailSwapOn {
		t.Errorf("drop-in values lost: maxPods=%d clusterDNS=%v cgroupRoot=%q", kc.MaxPods, kc.ClusterDNS, kc.CgroupRoot)
	}
	if kc.ImageServiceEndpoint != "unix:///file.sock" {
		t.Errorf("imageServiceEndpoint = %q, want the file's runtime endpoint", kc.ImageServiceEndpoint)
	}
}

func TestLoadOptions(t *testing.T) {
	o := mustLoad(t,
		"--kubeconfig=/etc/kubernetes/kubelet.conf", "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
		"--hostname-override=Node-1", "--node-ip=10.0.0.5,fd00::5", "--node-labels=a=b,example.com/x=y",
		"--node-labels", "node.kubernetes.io/role=worker", "--pod-infra-container-image=registry.local/pause:3.10",
	)
	if o.Kubeconfig != "/etc/kubernetes/kubelet.conf" || o.BootstrapKubeconfig != "/etc/kubernetes/bootstrap-kubelet.conf" ||
		o.HostnameOverride != "Node-1" || o.PodInfraContainerImage != "registry.local/pause:3.10" {
		t.Errorf("options = %+v", o)
	}
	if o.CertDir != "/var/lib/kubelet/pki" || o.RootDir != "/var/lib/kubelet" {
		t.Errorf("cert-dir/root-dir defaults = %q %q", o.CertDir, o.RootDir)
	}
	if len(o.NodeIPs) != 2 || !o.NodeIPs[0].Equal(net.ParseIP("10.0.0.5")) || !o.NodeIPs[1].Equal(net.ParseIP("fd00::5")) {
		t.Errorf("node IPs = %v", o.NodeIPs)
	}
	wantLabels := map[string]string{"a": "b", "example.com/x": "y", "node.kubernetes.io/role": "worker"}
	if !reflect.DeepEqual(o.NodeLabels, wantLabels) {
		t.Errorf("labels = %v, want %v", o.NodeLabels, wantLabels)
	}

	o = mustLoad(t, "--cert-dir=/c", "--root-dir=/r", "--version")
	if !o.ShowVersion || o.CertDir != "/c" || o.RootDir != "/r" {
		t.Errorf("--version options = %+v", o)
	}
}

func TestLoadVerbosityFlag(t *testing.T) {
	defer func() { _, _ = Load([]string{"--v=0"}) }() // klog's verbosity is process-wide
	kc := mustLoad(t, "-v=3").Config
	if kc.Logging.Verbosity != 3 {
		t.Errorf("logging.verbosity = %d, want 3", kc.Logging.Verbosity)
	}
	kc = mustLoad(t, "--v", "2").Config
	if kc.Logging.Verbosity != 2 {
		t.Errorf("logging.verbosity = %d, want 2", kc.Logging.Verbosity)
	}
}

func TestLoadCommandLineErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"--no-such-flag"}, "unknown flag: --no-such-flag"},
		{"positional argument", []string{"extra"}, "unexpected arguments"},
		{"bad duration flag", []string{"--runtime-request-timeout=soon"}, "runtime-request-timeout"},
		{"bad node ip", []string{"--node-ip=10.0.0.300"}, `--node-ip: "10.0.0.300" is not a valid IP address`},
		{"same family twice", []string{"--node-ip=10.0.0.1,10.0.0.2"}, "different IP families"},
		{"three node ips", []string{"--node-ip=10.0.0.1,fd00::1,10.0.0.2"}, "at most two"},
		{"bad label key", []string{"--node-labels=foo_/bar=x"}, "invalid label key"},
		{"bad label value", []string{"--node-labels=a=" + strings.Repeat("x", 64)}, "invalid label value"},
		{"restricted label namespace", []string{"--node-labels=kubernetes.io/role=master"}, "unknown 'kubernetes.io' or 'k8s.io' labels"},
		{"label without value", []string{"--node-labels=a"}, "node-labels"},
		{"taint without effect", []string{"--register-with-taints=a=b"}, "invalid taint"},
		{"taint bad effect", []string{"--register-with-taints=a=b:Sometimes"}, "effect must be"},
		{"taint bad key", []string{"--register-with-taints=-a:NoSchedule"}, "invalid taint key"},
		{"invalid flag value reaches validation", []string{"--max-pods=0"}, "maxPods: must be greater than zero"},
		{"invalid cgroup driver flag", []string{"--cgroup-driver=weird"}, "cgroupDriver: unsupported value"},
		{"invalid cluster dns", []string{"--cluster-dns=dns.local"}, "clusterDNS[0]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(tc.args)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Load(%q) = %v, want error containing %q", tc.args, err, tc.want)
			}
		})
	}
	if _, err := Load([]string{"--help"}); !errors.Is(err, pflag.ErrHelp) {
		t.Errorf("--help: got %v, want pflag.ErrHelp", err)
	}
	if u := Usage(); !strings.Contains(u, "--pod-manifest-path") || !strings.Contains(u, "--config-dir") {
		t.Errorf("usage lacks flags:\n%s", u)
	}
}

func TestLoadDeploySamples(t *testing.T) {
	o := mustLoad(t, "--config", "../deploy/config.yaml")
	kc := o.Config
	if kc.StaticPodPath != "/etc/kubernetes/manifests" || kc.CgroupDriver != "systemd" ||
		kc.ContainerRuntimeEndpoint != DefaultContainerRuntimeEndpoint || *kc.FailCgroupV1 {
		t.Errorf("deploy/config.yaml: %+v", kc)
	}
	kc = mustLoad(t, "--config", "../deploy/standalone-config.yaml").Config
	if kc.StaticPodPath != "/etc/nodelet/manifests" || *kc.Authentication.Webhook.Enabled || !*kc.Authentication.Anonymous.Enabled ||
		kc.Authorization.Mode != kubeletconfigv1beta1.KubeletAuthorizationModeAlwaysAllow || *kc.FailSwapOn || kc.CgroupDriver != "cgroupfs" {
		t.Errorf("deploy/standalone-config.yaml: %+v", kc)
	}
}

func TestNodeName(t *testing.T) {
	hostOK := func() (string, error) { return " Worker-7.Example.COM\n", nil }
	hostErr := func() (string, error) { return "", errors.New("uname failed") }
	tests := []struct {
		name     string
		override string
		hostname func() (string, error)
		want     string
		wantErr  string
	}{
		{"hostname lower-cased and trimmed", "", hostOK, "worker-7.example.com", ""},
		{"override wins", "Node-A", hostOK, "node-a", ""},
		{"override trimmed", "  node-b  ", hostOK, "node-b", ""},
		{"underscore rejected", "foo_bar", hostOK, "", "not a valid RFC 1123 subdomain"},
		{"whitespace-only override rejected", "   ", hostOK, "", "empty"},
		{"empty hostname rejected", "", func() (string, error) { return "", nil }, "", "empty"},
		{"hostname error", "", hostErr, "", "uname failed"},
		{"too long", strings.Repeat("a", 254), hostOK, "", "not a valid RFC 1123 subdomain"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := nodeName(tc.override, tc.hostname)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %q, %v; want error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	// The exported function uses the real hostname.
	h, err := os.Hostname()
	if err == nil {
		if got, err := NodeName(""); err == nil && got != strings.ToLower(strings.TrimSpace(h)) {
			t.Errorf("NodeName(\"\") = %q, hostname %q", got, h)
		}
	}
	if got, err := NodeName("UPPER"); err != nil || got != "upper" {
		t.Errorf("NodeName(UPPER) = %q, %v", got, err)
	}
}

func dur(d time.Duration) metav1.Duration { return metav1.Duration{Duration: d} }
func int32p(v int32) *int32               { return &v }
func boolp(v bool) *bool                  { return &v }
func strp(v string) *string               { return &v }

func sortedPairs(m map[string]string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, k+"="+m[k])
	}
	return out
}

// TestLoadDecodeWarnings: upstream decodes v1beta1 leniently, logging what
// strict decoding refused; unknown fields are ignored (also a known field in
// the wrong case) and the last of duplicate fields wins.
func TestLoadDecodeWarnings(t *testing.T) {
	tests := []struct {
		name, doc string
		want      []string // "field: detail" prefixes, in order
		check     func(*kubeletconfigv1beta1.KubeletConfiguration) string
	}{
		{name: "unknown top-level field", doc: header + "fooBar: 1\n", want: []string{"fooBar: unknown field"}},
		{name: "unknown nested field", doc: header + "authentication:\n  webhook:\n    enabld: false\n", want: []string{"authentication.webhook.enabld: unknown field"},
			check: func(kc *kubeletconfigv1beta1.KubeletConfiguration) string {
				if !*kc.Authentication.Webhook.Enabled {
					return "the misspelt field took effect"
				}
				return ""
			}},
		{name: "field names are case-sensitive", doc: header + "SyncFrequency: 5m\n", want: []string{"SyncFrequency: unknown field"},
			check: func(kc *kubeletconfigv1beta1.KubeletConfiguration) string {
				if kc.SyncFrequency.Duration != time.Minute {
					return fmt.Sprintf("syncFrequency = %s, want the default 1m: upstream ignores a field in the wrong case", kc.SyncFrequency.Duration)
				}
				return ""
			}},
		{name: "several unknown fields reported together", doc: header + "a: 1\nb: 2\n", want: []string{"a: unknown field", "b: unknown field"}},
		{name: "unknown field in a list element", doc: header + "registerWithTaints:\n- key: a\n  effect: NoSchedule\n  colour: red\n", want: []string{"registerWithTaints[0].colour: unknown field"}},
		{name: "duplicate field, last wins", doc: header + "maxPods: 10\nmaxPods: 20\n", want: []string{"maxPods: duplicate field"},
			check: func(kc *kubeletconfigv1beta1.KubeletConfiguration) string {
				if kc.MaxPods != 20 {
					return fmt.Sprintf("maxPods = %d, want the last value 20", kc.MaxPods)
				}
				return ""
			}},
		{name: "a clean file has no warnings", doc: header + "maxPods: 10\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, t.TempDir(), "config.yaml", tc.doc)
			o, err := Load([]string{"--config=" + p})
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if len(o.DecodeWarnings) != len(tc.want) {
				t.Fatalf("warnings %v, want %d: %q", o.DecodeWarnings, len(tc.want), tc.want)
			}
			for i, w := range o.DecodeWarnings {
				if w.File != p {
					t.Errorf("warning %d names file %q, want %q", i, w.File, p)
				}
				if got := w.Field + ": " + w.Detail; !strings.HasPrefix(got, tc.want[i]) {
					t.Errorf("warning %d = %q, want prefix %q", i, got, tc.want[i])
				}
			}
			if tc.check != nil {
				if msg := tc.check(o.Config); msg != "" {
					t.Error(msg)
				}
			}
		})
	}
	t.Run("drop-ins", func(t *testing.T) {
		dir := t.TempDir()
		cfg := writeFile(t, dir, "config.yaml", header+"bogusA: 1\n")
		drop := writeFile(t, filepath.Join(dir, "d", "sub"), "10-a.conf", header+"bogusB: 1\nport: 10251\n")
		o, err := Load([]string{"--config", cfg, "--config-dir", filepath.Join(dir, "d")})
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
		want := []DecodeWarning{
			{File: cfg, Field: "bogusA", Detail: "unknown field, ignored"},
			{File: drop, Field: "bogusB", Detail: "unknown field, ignored"},
		}
		if !reflect.DeepEqual(o.DecodeWarnings, want) {
			t.Errorf("warnings %v, want %v", o.DecodeWarnings, want)
		}
		if o.Config.Port != 10251 {
			t.Errorf("the drop-in's known fields must still apply: port = %d", o.Config.Port)
		}
	})
}
