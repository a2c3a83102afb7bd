package syncloop

import (
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestAdmit(t *testing.T) {
	allow, err := NewSysctlAllowlist(append(SafeSysctls("6.18.44"), "kernel.msgmax", "fs.mqueue.*"))
	if err != nil {
		t.Fatal(err)
	}
	node := AdmitNode{
		Allocatable: v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("1Gi"), v1.ResourcePods: resource.MustParse("2")},
		Labels:      map[string]string{v1.LabelOSStable: "linux", "disk": "ssd"},
		OS:          "linux",
		Sysctls:     allow,
	}
	type mod func(*v1.Pod)
	newPod := func(mods ...mod) *v1.Pod {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "u"},
			Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "img"}}}}
		for _, m := range mods {
			m(p)
		}
		return p
	}
	sysctls := func(names ...string) mod {
		return func(p *v1.Pod) {
			p.Spec.SecurityContext = &v1.PodSecurityContext{}
			for _, n := range names {
				p.Spec.SecurityContext.Sysctls = append(p.Spec.SecurityContext.Sysctls, v1.Sysctl{Name: n, Value: "1"})
			}
		}
	}
	hostNet := func(p *v1.Pod) { p.Spec.HostNetwork = true }
	hostIPC := func(p *v1.Pod) { p.Spec.HostIPC = true }
	osField := func(os v1.OSName) mod { return func(p *v1.Pod) { p.Spec.OS = &v1.PodOS{Name: os} } }
	osLabel := func(os string) mod { return func(p *v1.Pod) { p.Labels = map[string]string{v1.LabelOSStable: os} } }
	selector := func(k, v string) mod { return func(p *v1.Pod) { p.Spec.NodeSelector = map[string]string{k: v} } }
	cpu := func(q string) mod {
		return func(p *v1.Pod) {
			p.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse(q)}
		}
	}
	one := []*v1.Pod{newPod(cpu("1500m"))}
	sgPolicy := func(pol v1.SupplementalGroupsPolicy) mod {
		return func(p *v1.Pod) { p.Spec.SecurityContext = &v1.PodSecurityContext{SupplementalGroupsPolicy: &pol} }
	}
	withSGP := func(supported *bool) *AdmitNode {
		n := node
		if supported != nil {
			n.Features = &v1.NodeFeatures{SupplementalGroupsPolicy: supported}
		}
		return &n
	}
	pending := func(p *v1.Pod) { p.Status.Phase = v1.PodPending }
	appArmor := func(typ v1.AppArmorProfileType) mod {
		return func(p *v1.Pod) {
			p.Spec.Containers[0].SecurityContext = &v1.SecurityContext{AppArmorProfile: &v1.AppArmorProfile{Type: typ}}
		}
	}
	annotation := func(v string) mod {
		return func(p *v1.Pod) {
			p.Annotations = map[string]string{v1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "c": v}
		}
	}
	appArmorHost := func() *AdmitNode { n := node; n.AppArmorEnabled = true; return &n }
	noAppArmor := "Cannot enforce AppArmor: AppArmor is not enabled on the host"
	sgpMsg := "SupplementalGroupsPolicy=Strict is not supported in this node"

	tests := []struct {
		name     string
		pod      *v1.Pod
		admitted []*v1.Pod
		node     *AdmitNode // nil: node
		reason   string     // "": admitted
		message  string
	}{
		{name: "a plain pod", pod: newPod()},
		{name: "safe sysctls", pod: newPod(sysctls("kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_rmem"))},
		{name: "a safe sysctl in slash form", pod: newPod(sysctls("net/ipv4/ip_local_port_range"))},
		{name: "an unsafe sysctl not in allowedUnsafeSysctls", pod: newPod(sysctls("kernel.shm_rmid_forced", "kernel.msgmnb")),
			reason: "SysctlForbidden", message: `forbidden sysctl: "kernel.msgmnb" not allowlisted`},
		{name: "an unsafe sysctl in allowedUnsafeSysctls", pod: newPod(sysctls("kernel.msgmax"))},
		{name: "an unsafe sysctl matching an allowedUnsafeSysctls pattern", pod: newPod(sysctls("fs.mqueue.msg_max"))},
		{name: "unsafe sysctls refused when none are allowed", pod: newPod(sysctls("kernel.msgmax")), node: &AdmitNode{OS: "linux"},
			reason: "SysctlForbidden", message: `forbidden sysctl: "kernel.msgmax" not allowlisted`},
		{name: "a net sysctl with hostNetwork", pod: newPod(sysctls("net.ipv4.ip_local_port_range"), hostNet),
			reason: "SysctlForbidden", message: `forbidden sysctl: "net.ipv4.ip_local_port_range" not allowed with host Net enabled`},
		{name: "an IPC sysctl with hostIPC", pod: newPod(sysctls("kernel.shm_rmid_forced"), hostIPC),
			reason: "SysctlForbidden", message: `forbidden sysctl: "kernel.shm_rmid_forced" not allowed with host IPC enabled`},
		{name: "an allowed IPC pattern with hostIPC", pod: newPod(sysctls("fs.mqueue.queues_max"), hostIPC),
			reason: "SysctlForbidden", message: `forbidden sysctl: "fs.mqueue.queues_max" not allowed with host IPC enabled`},
		{name: "an IPC sysctl with hostNetwork only", pod: newPod(sysctls("kernel.shm_rmid_forced"), hostNet)},
		{name: "sysctls come before the OS", pod: newPod(sysctls("kernel.msgmnb"), osField("windows")),
			reason: "SysctlForbidden", message: `forbidden sysctl: "kernel.msgmnb" not allowlisted`},
		{name: "spec.os of the node", pod: newPod(osField("linux"))},
		{name: "spec.os of another OS", pod: newPod(osField("windows")),
			reason: "PodOSNotSupported", message: "Failed to admit pod as the OS field doesn't match node OS"},
		{name: "kubernetes.io/os label of the node", pod: newPod(osLabel("linux"))},
		{name: "kubernetes.io/os label of another OS", pod: newPod(osLabel("windows")),
			reason: "PodOSSelectorNodeLabelDoesNotMatch", message: "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"},
		{name: "the OS label comes before spec.os", pod: newPod(osLabel("windows"), osField("windows")), reason: "PodOSSelectorNodeLabelDoesNotMatch",
			message: "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"},
		{name: "the OS comes before resources", pod: newPod(osField("windows"), cpu("3")), reason: "PodOSNotSupported",
			message: "Failed to admit pod as the OS field doesn't match node OS"},
		// A node selector is the scheduler's predicate: upstream reports NodeAffinity for it, OS or not.
		{name: "a kubernetes.io/os node selector of another OS", pod: newPod(selector(v1.LabelOSStable, "windows")),
			reason: "NodeAffinity", message: "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"},
		{name: "a matching node selector", pod: newPod(selector("disk", "ssd"))},
		{name: "out of cpu", pod: newPod(cpu("1")), admitted: one,
			reason: "OutOfcpu", message: "Node didn't have enough resource: cpu, requested: 1000, used: 1500, capacity: 2000"},
		{name: "out of pods", pod: newPod(), admitted: []*v1.Pod{newPod(), newPod()},
			reason: "OutOfpods", message: "Node didn't have enough resource: pods, requested: 1, used: 2, capacity: 2"},
		{name: "resources come before the node selector", pod: newPod(cpu("3"), selector("disk", "hdd")), reason: "OutOfcpu",
			message: "Node didn't have enough resource: cpu, requested: 3000, used: 0, capacity: 2000"},
		// supplementalGroupsPolicy Strict needs the runtime's support (node status.features).
		{name: "Strict before the node reports features", pod: newPod(sgPolicy(v1.SupplementalGroupsPolicyStrict)),
			reason: "SupplementalGroupsPolicyNotSupported", message: sgpMsg},
		{name: "Strict on a runtime without it", pod: newPod(sgPolicy(v1.SupplementalGroupsPolicyStrict)), node: withSGP(ptr.To(false)),
			reason: "SupplementalGroupsPolicyNotSupported", message: sgpMsg},
		{name: "Strict on a runtime with it", pod: newPod(sgPolicy(v1.SupplementalGroupsPolicyStrict)), node: withSGP(ptr.To(true))},
		{name: "Merge needs no support", pod: newPod(sgPolicy(v1.SupplementalGroupsPolicyMerge)), node: withSGP(ptr.To(false))},
		{name: "the OS comes before supplementalGroupsPolicy", pod: newPod(sgPolicy(v1.SupplementalGroupsPolicyStrict), osField("windows")),
			reason: "PodOSNotSupported", message: "Failed to admit pod as the OS field doesn't match node OS"},
		{name: "supplementalGroupsPolicy comes before resources", pod: newPod(sgPolicy(v1.SupplementalGroupsPolicyStrict), cpu("3")),
			reason: "SupplementalGroupsPolicyNotSupported", message: sgpMsg},
		// AppArmor, on a host without it unless the node says otherwise.
		{name: "an AppArmor profile on a host without AppArmor", pod: newPod(pending, appArmor(v1.AppArmorProfileTypeRuntimeDefault)),
			reason: "AppArmor", message: noAppArmor},
		{name: "an AppArmor annotation on a host without AppArmor", pod: newPod(pending, annotation("localhost/k8s-x")),
			reason: "AppArmor", message: noAppArmor},
		{name: "Unconfined needs no AppArmor", pod: newPod(pending, appArmor(v1.AppArmorProfileTypeUnconfined), annotation("unconfined"))},
		{name: "a running pod is not checked again", pod: newPod(appArmor(v1.AppArmorProfileTypeRuntimeDefault), func(p *v1.Pod) { p.Status.Phase = v1.PodRunning })},
		{name: "an AppArmor profile on a host with AppArmor", pod: newPod(pending, appArmor(v1.AppArmorProfileTypeRuntimeDefault)), node: appArmorHost()},
		{name: "an empty Localhost AppArmor profile", pod: newPod(pending, annotation("localhost/ ")), node: appArmorHost(),
			reason: "AppArmor", message: `Cannot enforce AppArmor: invalid empty AppArmor profile name for container "c"`},
		{name: "resources come before AppArmor", pod: newPod(pending, appArmor(v1.AppArmorProfileTypeRuntimeDefault), cpu("3")),
			reason: "OutOfcpu", message: "Node didn't have enough resource: cpu, requested: 3000, used: 0, capacity: 2000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := node
			if tt.node != nil {
				n = *tt.node
			}
			r := Admit(tt.pod, tt.admitted, n)
			switch {
			case tt.reason == "" && r != nil:
				t.Fatalf("rejected: %+v", *r)
			case tt.reason != "" && r == nil:
				t.Fatalf("admitted, want %s", tt.reason)
			case r != nil && (r.Reason != tt.reason || r.Message != tt.message):
				t.Errorf("rejection = %q %q, want %q %q", r.Reason, r.Message, tt.reason, tt.message)
			}
		})
	}
}

func TestNewSysctlAllowlist(t *testing.T) {
	tests := []struct {
		patterns []string
		err      string // "": none
	}{
		{patterns: []string{"kernel.msgmax", "net.core.*", "fs.mqueue.*", "kernel.sem", "net.ipv4.conf.eno2/100.rp_filter"}},
		{patterns: []string{"vm.swappiness"}, err: `the sysctls "vm.swappiness" are not known to be namespaced`},
		{patterns: []string{"kernel.*"}, err: `the sysctls "kernel." are not known to be namespaced`},
		{patterns: []string{"Net.core.somaxconn"}, err: `sysctl "Net.core.somaxconn" must have at most 253 characters`},
		{patterns: []string{"net.*.x"}, err: `sysctl "net.*.x" must have at most 253 characters`},
	}
	for _, tt := range tests {
		_, err := NewSysctlAllowlist(tt.patterns)
		if (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("NewSysctlAllowlist(%q) = %v, want %q", tt.patterns, err, tt.err)
		}
	}
}

func TestSafeSysctls(t *testing.T) {
	tests := []struct {
		kernel     string
		with, wout []string
	}{
		{kernel: "6.18.44-fc-v1272", with: []string{"net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem", "kernel.shm_rmid_forced", "net.ipv4.tcp_keepalive_probes"}},
		{kernel: "4.4.0", with: []string{"net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_fin_timeout"}, wout: []string{"net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"}},
		{kernel: "", with: []string{"net.ipv4.ping_group_range", "net.ipv4.ip_unprivileged_port_start"},
			wout: []string{"net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_rmem"}},
	}
	for _, tt := range tests {
		got := SafeSysctls(tt.kernel)
		for _, s := range tt.with {
			if !slices.Contains(got, s) {
				t.Errorf("SafeSysctls(%q) lacks %s", tt.kernel, s)
			}
		}
		for _, s := range tt.wout {
			if slices.Contains(got, s) {
				t.Errorf("SafeSysctls(%q) has %s", tt.kernel, s)
			}
		}
	}
}
