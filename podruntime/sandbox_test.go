package podruntime

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/cri"
)

func TestDNSConfig(t *testing.T) {
	dir := t.TempDir()
	resolv := filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(resolv, []byte("nameserver 192.0.2.53\nsearch corp.example\noptions edns0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		clusterDNS []string
		pod        func(*v1.Pod)
		want       *runtimeapi.DNSConfig
	}{
		{
			name: "ClusterFirst", clusterDNS: []string{"10.96.0.10"},
			want: &runtimeapi.DNSConfig{Servers: []string{"10.96.0.10"}, Searches: []string{"ns1.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example"}, Options: []string{"ndots:5"}},
		},
		{
			name: "ClusterFirst on the host network uses the host's resolver", clusterDNS: []string{"10.96.0.10"},
			pod:  func(p *v1.Pod) { p.Spec.HostNetwork = true },
			want: &runtimeapi.DNSConfig{Servers: []string{"192.0.2.53"}, Searches: []string{"corp.example"}, Options: []string{"edns0"}},
		},
		{
			name: "ClusterFirstWithHostNet keeps cluster DNS", clusterDNS: []string{"10.96.0.10"},
			pod:  func(p *v1.Pod) { p.Spec.HostNetwork = true; p.Spec.DNSPolicy = v1.DNSClusterFirstWithHostNet },
			want: &runtimeapi.DNSConfig{Servers: []string{"10.96.0.10"}, Searches: []string{"ns1.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example"}, Options: []string{"ndots:5"}},
		},
		{
			name: "no clusterDNS falls back to Default",
			want: &runtimeapi.DNSConfig{Servers: []string{"192.0.2.53"}, Searches: []string{"corp.example"}, Options: []string{"edns0"}},
		},
		{
			name: "None with dnsConfig, options override by name", clusterDNS: []string{"10.96.0.10"},
			pod: func(p *v1.Pod) {
				p.Spec.DNSPolicy = v1.DNSNone
				p.Spec.DNSConfig = &v1.PodDNSConfig{Nameservers: []string{"1.1.1.1"}, Searches: []string{"a.example"}, Options: []v1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("2")}, {Name: "ndots", Value: ptr.To("3")}}}
			},
			want: &runtimeapi.DNSConfig{Servers: []string{"1.1.1.1"}, Searches: []string{"a.example"}, Options: []string{"ndots:3"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &Manager{cfg: Config{ClusterDNS: tt.clusterDNS, ClusterDomain: "cluster.local", ResolvConf: resolv}}
			pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns1"}}
			if tt.pod != nil {
				tt.pod(pod)
			}
			got, err := m.dnsConfig(pod)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Servers, tt.want.Servers) || !reflect.DeepEqual(got.Searches, tt.want.Searches) || !reflect.DeepEqual(got.Options, tt.want.Options) {
				t.Fatalf("dnsConfig = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestSandboxConfig(t *testing.T) {
	m := &Manager{cfg: Config{PodLogsDir: "/var/log/pods"}}
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "prod", UID: "u1", Labels: map[string]string{"app": "web"}},
		Spec: v1.PodSpec{
			DNSPolicy:  v1.DNSDefault,
			Containers: []v1.Container{{Name: "c", Ports: []v1.ContainerPort{{ContainerPort: 80, HostPort: 8080}, {ContainerPort: 9090}}}},
		},
	}
	cfg, err := m.SandboxConfig(pod, 2)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Hostname != "web" || cfg.LogDirectory != "/var/log/pods/prod_web_u1" || cfg.Metadata.Attempt != 2 {
		t.Errorf("hostname/logdir/attempt = %q %q %d", cfg.Hostname, cfg.LogDirectory, cfg.Metadata.Attempt)
	}
	if cfg.Labels[cri.LabelPodUID] != "u1" || cfg.Labels["app"] != "web" {
		t.Errorf("labels = %v", cfg.Labels)
	}
	if len(cfg.PortMappings) != 1 || cfg.PortMappings[0].HostPort != 8080 {
		t.Errorf("port mappings = %v, want only the hostPort one", cfg.PortMappings)
	}
	ns := cfg.Linux.SecurityContext.NamespaceOptions
	if ns.Network != runtimeapi.NamespaceMode_POD || ns.Pid != runtimeapi.NamespaceMode_CONTAINER || ns.Ipc != runtimeapi.NamespaceMode_POD {
		t.Errorf("namespaces = %+v", ns)
	}

	pod.Spec.HostNetwork = true
	pod.Spec.ShareProcessNamespace = ptr.To(true)
	cfg, err = m.SandboxConfig(pod, 0)
	if err != nil {
		t.Fatal(err)
	}
	// A host-network sandbox must not set a hostname: the runtime refuses it.
	if cfg.Hostname != "" {
		t.Errorf("host-network sandbox hostname = %q, want empty", cfg.Hostname)
	}
	ns = cfg.Linux.SecurityContext.NamespaceOptions
	if ns.Network != runtimeapi.NamespaceMode_NODE || ns.Pid != runtimeapi.NamespaceMode_POD {
		t.Errorf("namespaces = %+v, want host network and a shared pod PID namespace", ns)
	}
}

// hostnameOverride (beta, on by default) wins over hostname and subdomain and
// leaves the pod without a domain: no FQDN line in its managed /etc/hosts.
func TestPodHostnameAndHostsFile(t *testing.T) {
	long := strings.Repeat("a", 70)
	tests := []struct {
		name       string
		spec       v1.PodSpec
		podName    string
		want       string
		wantInHost string
		notInHosts string
	}{
		{name: "pod name", podName: "web", want: "web", wantInHost: "10.0.0.5\tweb\n"},
		{name: "hostname and subdomain", podName: "web", spec: v1.PodSpec{Hostname: "h", Subdomain: "sub"}, want: "h",
			wantInHost: "10.0.0.5\th.sub.ns.svc.cluster.local\th\n"},
		{name: "long pod name cut to 63", podName: long, want: strings.Repeat("a", 63)},
		{name: "override wins over hostname and subdomain", podName: "web", spec: v1.PodSpec{Hostname: "h", Subdomain: "sub", HostnameOverride: ptr.To("custom.host")},
			want: "custom.host", wantInHost: "10.0.0.5\tcustom.host\n", notInHosts: "svc.cluster.local"},
		{name: "empty override is none", podName: "web", spec: v1.PodSpec{HostnameOverride: ptr.To("")}, want: "web"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: tt.podName, Namespace: "ns", UID: "u1"}, Spec: tt.spec}
			got, err := podHostname(pod)
			if err != nil || got != tt.want {
				t.Fatalf("podHostname = %q, %v; want %q", got, err, tt.want)
			}
			m := &Manager{cfg: Config{RootDir: t.TempDir(), ClusterDomain: "cluster.local"}}
			if err := m.writeHostsFile(pod, []string{"10.0.0.5"}); err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(m.hostsFilePath(pod.UID))
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantInHost != "" && !strings.Contains(string(data), tt.wantInHost) {
				t.Errorf("hosts file lacks %q:\n%s", tt.wantInHost, data)
			}
			if tt.notInHosts != "" && strings.Contains(string(data), tt.notInHosts) {
				t.Errorf("hosts file has %q:\n%s", tt.notInHosts, data)
			}
		})
	}
}

// The pod's hosts file is written on every sync: only when it differs (the
// file containers mounted is left alone), and a truncated one (ENOSPC, a
// crash; issue 20 scenario 8) is written whole again.
func TestHostsFileRewrittenOnlyWhenItDiffers(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "u1"}}
	m := &Manager{cfg: Config{RootDir: t.TempDir(), ClusterDomain: "cluster.local"}}
	if err := m.writeHostsFile(pod, []string{"10.0.0.5"}); err != nil {
		t.Fatal(err)
	}
	p := m.hostsFilePath(pod.UID)
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	old := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	if err := m.writeHostsFile(pod, []string{"10.0.0.5"}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(p); err != nil || !fi.ModTime().Equal(old) {
		t.Errorf("an unchanged hosts file was written again: %v, %v", fi.ModTime(), err)
	}
	if err := os.WriteFile(p, want[:len(want)/3], 0o644); err != nil {
		t.Fatal(err)
	}
	truncated, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.writeHostsFile(pod, []string{"10.0.0.5"}); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(p); err != nil || string(got) != string(want) {
		t.Errorf("truncated hosts file after a sync = %q, %v; want it whole again", got, err)
	}
	// Replaced by a rename, not rewritten in place: no reader sees it half written.
	if now, err := os.Stat(p); err != nil || os.SameFile(truncated, now) {
		t.Errorf("the hosts file was rewritten in place (%v)", err)
	}
	entries, err := os.ReadDir(filepath.Dir(p))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "etc-hosts" {
			t.Errorf("left in the pod dir: %s", e.Name())
		}
	}
}
