package syncloop

import (
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// checkRejection fails t unless r refuses with reason and message ("": admitted).
func checkRejection(t *testing.T, r *Rejection, reason, message string) {
	t.Helper()
	switch {
	case reason == "" && r != nil:
		t.Fatalf("rejected: %+v", *r)
	case reason != "" && r == nil:
		t.Fatalf("admitted, want %s", reason)
	case r != nil && (r.Reason != reason || r.Message != message):
		t.Errorf("rejection = %q %q, want %q %q", r.Reason, r.Message, reason, message)
	}
}

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
		n.SupplementalGroupsPolicy = ptr.Deref(supported, false)
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
			checkRejection(t, Admit(tt.pod, tt.admitted, n), tt.reason, tt.message)
		})
	}
}

// TestAdmitPredicates covers the scheduler filters admission runs, each alone
// and in upstream's order: resources (NodeResourcesFit), NodeAffinity,
// NodeName, NodePorts, then NoExecute taints (TaintToleration).
func TestAdmitPredicates(t *testing.T) {
	node := AdmitNode{
		Name: "node1",
		Allocatable: v1.ResourceList{
			v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("1Gi"), v1.ResourcePods: resource.MustParse("10"),
			v1.ResourceEphemeralStorage: resource.MustParse("10Gi"), "example.com/dongle": resource.MustParse("2"),
		},
		Labels:                   map[string]string{v1.LabelHostname: "node1", "disk": "ssd", "zone": "a"},
		Taints:                   []v1.Taint{{Key: "dedicated", Value: "db", Effect: v1.TaintEffectNoExecute}, {Key: "soft", Effect: v1.TaintEffectNoSchedule}},
		SupplementalGroupsPolicy: true,
		OS:                       "linux",
	}
	type mod func(*v1.Pod)
	tolerateAll := func(p *v1.Pod) { p.Spec.Tolerations = []v1.Toleration{{Operator: v1.TolerationOpExists}} }
	newPod := func(name string, mods ...mod) *v1.Pod {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
			Spec: v1.PodSpec{NodeName: "node1", Containers: []v1.Container{{Name: "c", Image: "img"}}}}
		tolerateAll(p)
		for _, m := range mods {
			m(p)
		}
		return p
	}
	requests := func(kv ...string) mod {
		return func(p *v1.Pod) {
			p.Spec.Containers[0].Resources.Requests = v1.ResourceList{}
			for i := 0; i < len(kv); i += 2 {
				p.Spec.Containers[0].Resources.Requests[v1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
			}
		}
	}
	limits := func(kv ...string) mod {
		return func(p *v1.Pod) {
			p.Spec.Containers[0].Resources.Limits = v1.ResourceList{}
			for i := 0; i < len(kv); i += 2 {
				p.Spec.Containers[0].Resources.Limits[v1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
			}
		}
	}
	initRequests := func(sidecar bool, kv ...string) mod {
		return func(p *v1.Pod) {
			c := v1.Container{Name: "init", Image: "img", Resources: v1.ResourceRequirements{Requests: v1.ResourceList{}}}
			if sidecar {
				c.RestartPolicy = ptr.To(v1.ContainerRestartPolicyAlways)
			}
			for i := 0; i < len(kv); i += 2 {
				c.Resources.Requests[v1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
			}
			p.Spec.InitContainers = append(p.Spec.InitContainers, c)
		}
	}
	podLevel := func(kv ...string) mod {
		return func(p *v1.Pod) {
			p.Spec.Resources = &v1.ResourceRequirements{Requests: v1.ResourceList{}}
			for i := 0; i < len(kv); i += 2 {
				p.Spec.Resources.Requests[v1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
			}
		}
	}
	overhead := func(k, v string) mod {
		return func(p *v1.Pod) { p.Spec.Overhead = v1.ResourceList{v1.ResourceName(k): resource.MustParse(v)} }
	}
	selector := func(kv ...string) mod {
		return func(p *v1.Pod) {
			p.Spec.NodeSelector = map[string]string{}
			for i := 0; i < len(kv); i += 2 {
				p.Spec.NodeSelector[kv[i]] = kv[i+1]
			}
		}
	}
	affinity := func(terms ...v1.NodeSelectorTerm) mod {
		return func(p *v1.Pod) {
			p.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{NodeSelectorTerms: terms}}}
		}
	}
	labelIn := func(key string, values ...string) v1.NodeSelectorTerm {
		return v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{{Key: key, Operator: v1.NodeSelectorOpIn, Values: values}}}
	}
	nameIn := func(values ...string) v1.NodeSelectorTerm {
		return v1.NodeSelectorTerm{MatchFields: []v1.NodeSelectorRequirement{{Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: values}}}
	}
	nodeName := func(n string) mod { return func(p *v1.Pod) { p.Spec.NodeName = n } }
	port := func(hostIP string, proto v1.Protocol, hostPort int32) mod {
		return func(p *v1.Pod) {
			p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, v1.ContainerPort{ContainerPort: 80, HostIP: hostIP, Protocol: proto, HostPort: hostPort})
		}
	}
	initPort := func(sidecar bool, hostPort int32) mod {
		return func(p *v1.Pod) {
			c := v1.Container{Name: "init", Image: "img", Ports: []v1.ContainerPort{{ContainerPort: 80, HostPort: hostPort}}}
			if sidecar {
				c.RestartPolicy = ptr.To(v1.ContainerRestartPolicyAlways)
			}
			p.Spec.InitContainers = append(p.Spec.InitContainers, c)
		}
	}
	tolerations := func(ts ...v1.Toleration) mod { return func(p *v1.Pod) { p.Spec.Tolerations = ts } }
	static := func(p *v1.Pod) {
		p.Annotations = map[string]string{"kubernetes.io/config.source": "file"}
	}
	strict := func(p *v1.Pod) {
		p.Spec.SecurityContext = &v1.PodSecurityContext{SupplementalGroupsPolicy: ptr.To(v1.SupplementalGroupsPolicyStrict)}
	}
	running := func(name string, mods ...mod) *v1.Pod { return newPod(name, mods...) }

	const (
		affinityMsg = "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"
		portsMsg    = "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"
		taintMsg    = "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate"
	)
	tests := []struct {
		name     string
		pod      *v1.Pod
		admitted []*v1.Pod
		node     func(*AdmitNode)
		reason   string // "": admitted
		message  string
	}{
		// Resources.
		{name: "fits beside others", pod: newPod("p", requests("cpu", "1", "memory", "512Mi")),
			admitted: []*v1.Pod{running("a", requests("cpu", "500m", "memory", "256Mi"))}},
		{name: "out of memory", pod: newPod("p", requests("memory", "800Mi")), admitted: []*v1.Pod{running("a", requests("memory", "256Mi"))},
			reason: "OutOfmemory", message: "Node didn't have enough resource: memory, requested: 838860800, used: 268435456, capacity: 1073741824"},
		{name: "more memory than allocatable", pod: newPod("p", requests("memory", "2Gi")),
			reason: "OutOfmemory", message: "Node didn't have enough resource: memory, requested: 2147483648, used: 0, capacity: 1073741824"},
		{name: "requests default from limits", pod: newPod("p", limits("cpu", "3")),
			reason: "OutOfcpu", message: "Node didn't have enough resource: cpu, requested: 3000, used: 0, capacity: 2000"},
		{name: "out of ephemeral-storage", pod: newPod("p", requests("ephemeral-storage", "11Gi")),
			reason: "OutOfephemeral-storage", message: "Node didn't have enough resource: ephemeral-storage, requested: 11811160064, used: 0, capacity: 10737418240"},
		{name: "an advertised extended resource used up", pod: newPod("p", requests("example.com/dongle", "1")),
			admitted: []*v1.Pod{running("a", requests("example.com/dongle", "2"))},
			reason:   "OutOfexample.com/dongle", message: "Node didn't have enough resource: example.com/dongle, requested: 1, used: 2, capacity: 2"},
		{name: "an extended resource the node does not advertise is not counted", pod: newPod("p", requests("example.com/cluster-license", "5"))},
		{name: "hugepages the node lacks", pod: newPod("p", requests("hugepages-2Mi", "4Mi")),
			reason: "OutOfhugepages-2Mi", message: "Node didn't have enough resource: hugepages-2Mi, requested: 4194304, used: 0, capacity: 0"},
		{name: "a regular init container counts alone", pod: newPod("p", requests("cpu", "500m"), initRequests(false, "cpu", "1500m")),
			admitted: []*v1.Pod{running("a", requests("cpu", "1"))},
			reason:   "OutOfcpu", message: "Node didn't have enough resource: cpu, requested: 1500, used: 1000, capacity: 2000"},
		{name: "a sidecar adds to the app containers", pod: newPod("p", requests("cpu", "1"), initRequests(true, "cpu", "600m")),
			admitted: []*v1.Pod{running("a", requests("cpu", "500m"))},
			reason:   "OutOfcpu", message: "Node didn't have enough resource: cpu, requested: 1600, used: 500, capacity: 2000"},
		{name: "pod-level requests stand for the containers'", pod: newPod("p", requests("cpu", "100m"), podLevel("cpu", "2500m")),
			reason: "OutOfcpu", message: "Node didn't have enough resource: cpu, requested: 2500, used: 0, capacity: 2000"},
		{name: "overhead counts", pod: newPod("p", requests("memory", "1000Mi"), overhead("memory", "100Mi")),
			reason: "OutOfmemory", message: "Node didn't have enough resource: memory, requested: 1153433600, used: 0, capacity: 1073741824"},
		{name: "pods before cpu", pod: newPod("p", requests("cpu", "3")), node: func(n *AdmitNode) { n.Allocatable[v1.ResourcePods] = resource.MustParse("1") },
			admitted: []*v1.Pod{running("a")},
			reason:   "OutOfpods", message: "Node didn't have enough resource: pods, requested: 1, used: 1, capacity: 1"},
		{name: "cpu before memory", pod: newPod("p", requests("cpu", "3", "memory", "2Gi")),
			reason: "OutOfcpu", message: "Node didn't have enough resource: cpu, requested: 3000, used: 0, capacity: 2000"},

		// NodeAffinity: nodeSelector and required node affinity.
		{name: "a matching node selector", pod: newPod("p", selector("disk", "ssd", "zone", "a"))},
		{name: "a node selector with one mismatch", pod: newPod("p", selector("disk", "ssd", "zone", "b")), reason: "NodeAffinity", message: affinityMsg},
		{name: "required affinity matching one of its terms", pod: newPod("p", affinity(labelIn("zone", "b"), labelIn("zone", "a", "c")))},
		{name: "required affinity to another node's hostname", pod: newPod("p", affinity(labelIn(v1.LabelHostname, "node2"))),
			reason: "NodeAffinity", message: affinityMsg},
		{name: "required affinity on the node's name field", pod: newPod("p", affinity(nameIn("node1")))},
		{name: "required affinity on another node's name field", pod: newPod("p", affinity(nameIn("node2"))), reason: "NodeAffinity", message: affinityMsg},
		{name: "selector and affinity must both match", pod: newPod("p", selector("disk", "hdd"), affinity(labelIn("zone", "a"))),
			reason: "NodeAffinity", message: affinityMsg},
		{name: "resources before node affinity", pod: newPod("p", requests("cpu", "3"), selector("disk", "hdd")),
			reason: "OutOfcpu", message: "Node didn't have enough resource: cpu, requested: 3000, used: 0, capacity: 2000"},

		// NodeName.
		{name: "bound to another node", pod: newPod("p", nodeName("node2")),
			reason: "NodeName", message: "Predicate NodeName failed: node(s) didn't match the requested node name"},
		{name: "node affinity before node name", pod: newPod("p", nodeName("node2"), selector("disk", "hdd")), reason: "NodeAffinity", message: affinityMsg},

		// NodePorts.
		{name: "a free host port", pod: newPod("p", port("", "", 8080)), admitted: []*v1.Pod{running("a", port("", "", 8081))}},
		{name: "a host port taken (TCP by default)", pod: newPod("p", port("", "", 8080)), admitted: []*v1.Pod{running("a", port("", v1.ProtocolTCP, 8080))},
			reason: "NodePorts", message: portsMsg},
		{name: "the same port for another protocol", pod: newPod("p", port("", v1.ProtocolUDP, 8080)), admitted: []*v1.Pod{running("a", port("", "", 8080))}},
		{name: "all addresses against one address", pod: newPod("p", port("0.0.0.0", "", 8080)), admitted: []*v1.Pod{running("a", port("10.0.0.1", "", 8080))},
			reason: "NodePorts", message: portsMsg},
		{name: "one address against all addresses", pod: newPod("p", port("10.0.0.1", "", 8080)), admitted: []*v1.Pod{running("a", port("", "", 8080))},
			reason: "NodePorts", message: portsMsg},
		{name: "two different addresses", pod: newPod("p", port("10.0.0.2", "", 8080)), admitted: []*v1.Pod{running("a", port("10.0.0.1", "", 8080))}},
		{name: "the same address", pod: newPod("p", port("10.0.0.1", v1.ProtocolSCTP, 8080)), admitted: []*v1.Pod{running("a", port("10.0.0.1", v1.ProtocolSCTP, 8080))},
			reason: "NodePorts", message: portsMsg},
		{name: "a running sidecar's port", pod: newPod("p", port("", "", 8080)), admitted: []*v1.Pod{running("a", initPort(true, 8080))},
			reason: "NodePorts", message: portsMsg},
		{name: "a regular init container's port is not held", pod: newPod("p", port("", "", 8080)), admitted: []*v1.Pod{running("a", initPort(false, 8080))}},
		{name: "a container port without a host port", pod: newPod("p", port("", "", 0)), admitted: []*v1.Pod{running("a", port("", "", 0))}},
		{name: "node name before node ports", pod: newPod("p", nodeName("node2"), port("", "", 8080)), admitted: []*v1.Pod{running("a", port("", "", 8080))},
			reason: "NodeName", message: "Predicate NodeName failed: node(s) didn't match the requested node name"},

		// TaintToleration: NoExecute only, static pods exempt.
		{name: "an untolerated NoExecute taint", pod: newPod("p", tolerations()), reason: "TaintToleration", message: taintMsg},
		{name: "the NoExecute taint tolerated", pod: newPod("p", tolerations(v1.Toleration{Key: "dedicated", Operator: v1.TolerationOpEqual, Value: "db", Effect: v1.TaintEffectNoExecute}))},
		{name: "a toleration of another value", pod: newPod("p", tolerations(v1.Toleration{Key: "dedicated", Operator: v1.TolerationOpEqual, Value: "web", Effect: v1.TaintEffectNoExecute})),
			reason: "TaintToleration", message: taintMsg},
		{name: "NoSchedule taints are the scheduler's", pod: newPod("p", tolerations()), node: func(n *AdmitNode) { n.Taints = n.Taints[1:] }},
		{name: "a static pod tolerates every taint", pod: newPod("p", tolerations(), static)},
		{name: "node ports before taints", pod: newPod("p", tolerations(), port("", "", 8080)), admitted: []*v1.Pod{running("a", port("", "", 8080))},
			reason: "NodePorts", message: portsMsg},

		// supplementalGroupsPolicy Strict needs the runtime's support.
		{name: "Strict on a runtime with it", pod: newPod("p", strict)},
		{name: "Strict on a runtime without it", pod: newPod("p", strict, requests("cpu", "3")), node: func(n *AdmitNode) { n.SupplementalGroupsPolicy = false },
			reason: "SupplementalGroupsPolicyNotSupported", message: "SupplementalGroupsPolicy=Strict is not supported in this node"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := node
			n.Allocatable = node.Allocatable.DeepCopy()
			if tt.node != nil {
				tt.node(&n)
			}
			checkRejection(t, Admit(tt.pod, tt.admitted, n), tt.reason, tt.message)
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
