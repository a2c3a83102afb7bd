package agent

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodelet/nodelet/syncloop"
)

func TestSysctlAllowlistFromConfig(t *testing.T) {
	podWith := func(sysctl string) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: v1.PodSpec{
			SecurityContext: &v1.PodSecurityContext{Sysctls: []v1.Sysctl{{Name: sysctl, Value: "1"}}}}}
	}
	tests := []struct {
		name    string
		allowed []string
		kernel  string
		admit   map[string]bool // sysctl -> admitted
		err     string
	}{
		{name: "safe set only", kernel: "6.1.0-18-amd64",
			admit: map[string]bool{"net.ipv4.tcp_wmem": true, "kernel.shm_rmid_forced": true, "net.core.somaxconn": false, "kernel.msgmax": false}},
		{name: "old kernel", kernel: "4.4.0", admit: map[string]bool{"net.ipv4.tcp_wmem": false, "net.ipv4.ip_local_port_range": true}},
		{name: "allowedUnsafeSysctls with a pattern", allowed: []string{"net.core.*", "kernel.msgmax"}, kernel: "6.1.0",
			admit: map[string]bool{"net.core.somaxconn": true, "kernel.msgmax": true, "kernel.msgmnb": false}},
		{name: "a sysctl not namespaced", allowed: []string{"vm.swappiness"}, err: `reading allowedUnsafeSysctls ["vm.swappiness"]: the sysctls "vm.swappiness" are not known to be namespaced`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := sysctlAllowlist(&kubeletconfigv1beta1.KubeletConfiguration{AllowedUnsafeSysctls: tt.allowed}, tt.kernel)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for s, want := range tt.admit {
				r := syncloop.Admit(podWith(s), nil, syncloop.AdmitNode{OS: "linux", Sysctls: w})
				if got := r == nil; got != want {
					t.Errorf("%s admitted = %v, want %v (%+v)", s, got, want, r)
				}
			}
		})
	}
}
