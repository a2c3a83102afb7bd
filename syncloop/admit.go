package syncloop

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/podutil"
)

// Rejection says why a pod may not run here, with the upstream reason and message.
type Rejection struct {
	Reason  string
	Message string
}

// AdmitNode is what admission knows of the node.
type AdmitNode struct {
	// Name, Labels and Taints are the Node object's, as the scheduler saw them.
	Name        string
	Allocatable v1.ResourceList
	Labels      map[string]string
	Taints      []v1.Taint
	// SupplementalGroupsPolicy: the runtime supports supplementalGroupsPolicy
	// Strict (the Node's status.features).
	SupplementalGroupsPolicy bool
	// OS is the node's operating system (runtime.GOOS).
	OS string
	// Sysctls are the sysctls pods may set; nil allows none.
	Sysctls *SysctlAllowlist
	// AppArmorEnabled says the host can enforce AppArmor profiles.
	AppArmorEnabled bool
}

// Upstream's reasons and messages for rejections no preemption can help with.
const (
	reasonOSLabel      = "PodOSSelectorNodeLabelDoesNotMatch"
	messageOSLabel     = "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"
	reasonOSField      = "PodOSNotSupported"
	messageOSField     = "Failed to admit pod as the OS field doesn't match node OS"
	reasonSupplemental = "SupplementalGroupsPolicyNotSupported"
	// reasonUnexpected is upstream's UnexpectedAdmissionError: a critical pod
	// that no preemption can make room for, or a resource manager's allocation
	// error (AllocationRejection).
	reasonUnexpected = "UnexpectedAdmissionError"
	reasonAppArmor   = "AppArmor"
	// reasonSMTAlignment is the CPU manager's refusal under full-pcpus-only.
	reasonSMTAlignment = "SMTAlignmentError"
	// reasonTopologyAffinity is the topology manager's refusal.
	reasonTopologyAffinity = "TopologyAffinityError"
)

// typedAdmissionError is an allocation error that names its own rejection
// reason, as upstream's admission errors do (cpumanager.SMTAlignmentError,
// topologymanager.AffinityError).
type typedAdmissionError interface {
	error
	Type() string
}

// AllocationRejection is the pod rejection for a resource manager's
// allocation error (devices, CPUs), as upstream's resource admit handler
// gives it: the SMT alignment and topology affinity errors by their own
// reason and message, any other as unexpected.
func AllocationRejection(err error) *Rejection {
	var typed typedAdmissionError
	if errors.As(err, &typed) {
		// Each reason spelled out: the events doc test reads them from here.
		switch typed.Type() {
		case reasonSMTAlignment:
			return &Rejection{Reason: reasonSMTAlignment, Message: typed.Error()}
		case reasonTopologyAffinity:
			return &Rejection{Reason: reasonTopologyAffinity, Message: typed.Error()}
		}
	}
	return &Rejection{Reason: reasonUnexpected, Message: fmt.Sprintf("Allocate failed due to %v, which is unexpected", err)}
}

// The scheduler filters upstream's admission runs: a failure's reason is the
// filter's name, its message "Predicate <name> failed: <reason>".
const (
	predicateNodeAffinity    = "NodeAffinity"
	predicateNodeName        = "NodeName"
	predicateNodePorts       = "NodePorts"
	predicateTaintToleration = "TaintToleration"

	unfitNodeAffinity = "node(s) didn't match Pod's node affinity/selector"
	unfitNodeName     = "node(s) didn't match the requested node name"
	unfitNodePorts    = "node(s) didn't have free ports for the requested pod ports"
	unfitTaints       = "node(s) had taints that the pod didn't tolerate"
)

// unfit is one reason the pod does not fit the node: a scheduler filter that
// failed, or a resource the node has too little of.
type unfit struct {
	predicate, why string
	short          *shortage
}

func (u unfit) rejection() *Rejection {
	if s := u.short; s != nil {
		return &Rejection{
			Reason:  "OutOf" + string(s.resource),
			Message: fmt.Sprintf("Node didn't have enough resource: %s, requested: %d, used: %d, capacity: %d", s.resource, s.requested, s.used, s.capacity),
		}
	}
	return &Rejection{Reason: u.predicate, Message: fmt.Sprintf("Predicate %s failed: %s", u.predicate, u.why)}
}

// shortage is a resource the pod requests more of than the node has free, in
// the scheduler's units (millicores for cpu, else the quantity's value).
type shortage struct {
	resource                  v1.ResourceName
	requested, used, capacity int64
}

// missing is how much more the node would need free for the pod to fit.
func (s shortage) missing() int64 { return s.requested - (s.capacity - s.used) }

// Admit checks that pod may run on the node next to the already admitted pods
// (admitted: the running and terminating ones, pod itself not among them), in
// upstream's order, and returns the first reason it may not: its sysctls
// (SysctlForbidden), its OS (the kubernetes.io/os pod label, then spec.os),
// supplementalGroupsPolicy Strict on a runtime without it, then the scheduler's
// filters: pod count and resources (OutOfpods, OutOfcpu, OutOfmemory,
// OutOfephemeral-storage, OutOf<extended resource>), node selector and required
// node affinity (NodeAffinity), spec.nodeName (NodeName), host ports
// (NodePorts), and, but for static pods, the node's NoExecute taints
// (TaintToleration). It does not preempt: see DecideAdmission.
func Admit(pod *v1.Pod, admitted []*v1.Pod, node AdmitNode) *Rejection {
	if rej, unfits := admissionChecks(pod, admitted, node); rej != nil {
		return rej
	} else if len(unfits) > 0 {
		return unfits[0].rejection()
	}
	return admitAppArmor(pod, node.AppArmorEnabled)
}

// admissionChecks returns the first rejection no preemption could help with, or
// else every unfit the scheduler's filters find, in upstream's order.
func admissionChecks(pod *v1.Pod, admitted []*v1.Pod, node AdmitNode) (*Rejection, []unfit) {
	if r := admitSysctls(pod, node.Sysctls); r != nil {
		return r, nil
	}
	// Upstream compares the pod's label (not its node selector) with the node's OS.
	if os, ok := pod.Labels[v1.LabelOSStable]; ok && os != node.OS {
		return &Rejection{Reason: reasonOSLabel, Message: messageOSLabel}, nil
	}
	if pod.Spec.OS != nil && string(pod.Spec.OS.Name) != node.OS {
		return &Rejection{Reason: reasonOSField, Message: messageOSField}, nil
	}
	if sc := pod.Spec.SecurityContext; sc != nil && sc.SupplementalGroupsPolicy != nil &&
		*sc.SupplementalGroupsPolicy == v1.SupplementalGroupsPolicyStrict && !node.SupplementalGroupsPolicy {
		return &Rejection{Reason: reasonSupplemental, Message: fmt.Sprintf("SupplementalGroupsPolicy=%s is not supported in this node", v1.SupplementalGroupsPolicyStrict)}, nil
	}
	var unfits []unfit
	for _, s := range resourceShortages(pod, admitted, node.Allocatable) {
		unfits = append(unfits, unfit{short: &s})
	}
	if matches, _ := nodeaffinity.GetRequiredNodeAffinity(pod).Match(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: node.Name, Labels: node.Labels}}); !matches {
		unfits = append(unfits, unfit{predicate: predicateNodeAffinity, why: unfitNodeAffinity})
	}
	if pod.Spec.NodeName != "" && pod.Spec.NodeName != node.Name {
		unfits = append(unfits, unfit{predicate: predicateNodeName, why: unfitNodeName})
	}
	if hostPortsConflict(pod, admitted) {
		unfits = append(unfits, unfit{predicate: predicateNodePorts, why: unfitNodePorts})
	}
	// Only NoExecute taints concern a node agent (the scheduler owns NoSchedule);
	// static pods are the node's own and tolerate everything.
	if !podutil.IsStaticPod(pod) {
		noExecute := func(t *v1.Taint) bool { return t.Effect == v1.TaintEffectNoExecute }
		// Comparison operators (TaintTolerationComparisonOperators) are off, as nodelet lacks the gate.
		if _, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), node.Taints, pod.Spec.Tolerations, noExecute, false); untolerated {
			unfits = append(unfits, unfit{predicate: predicateTaintToleration, why: unfitTaints})
		}
	}
	return nil, unfits
}

// admitSysctls refuses the pod's first sysctl the allowlist does not allow.
func admitSysctls(pod *v1.Pod, allow *SysctlAllowlist) *Rejection {
	sc := pod.Spec.SecurityContext
	if sc == nil || len(sc.Sysctls) == 0 {
		return nil
	}
	if allow == nil {
		allow = &SysctlAllowlist{}
	}
	for _, s := range sc.Sysctls {
		if err := allow.check(s.Name, pod.Spec.HostNetwork, pod.Spec.HostIPC); err != nil {
			return &Rejection{Reason: SysctlForbiddenReason, Message: fmt.Sprintf("forbidden sysctl: %v", err)}
		}
	}
	return nil
}

// resourceShortages is the scheduler's NodeResourcesFit over allocatable: the
// pod count first, then cpu, memory, ephemeral-storage and the other countable
// resources (extended, hugepages, kubernetes.io/ ones) in name order. An
// extended resource the node does not advertise is not counted for the pod
// (upstream leaves those to cluster-level resources and DRA).
func resourceShortages(pod *v1.Pod, admitted []*v1.Pod, allocatable v1.ResourceList) []shortage {
	var out []shortage
	// A node always advertises pods (maxPods); a test node without it has no limit.
	if q, ok := allocatable[v1.ResourcePods]; ok && int64(len(admitted))+1 > q.Value() {
		out = append(out, shortage{resource: v1.ResourcePods, requested: 1, used: int64(len(admitted)), capacity: q.Value()})
	}
	req := fitRequests(pod)
	for name := range req {
		if _, advertised := allocatable[name]; !advertised && podutil.IsExtendedResourceName(name) {
			delete(req, name)
		}
	}
	used := map[v1.ResourceName]int64{}
	for _, p := range admitted {
		for name, v := range fitRequests(p) {
			used[name] += v
		}
	}
	for _, name := range fitOrder(req) {
		capacity := schedulerValue(name, allocatable[name])
		if r := req[name]; r > 0 && r > capacity-used[name] {
			out = append(out, shortage{resource: name, requested: r, used: used[name], capacity: capacity})
		}
	}
	return out
}

// fitRequests is a pod's requests the scheduler counts, in its units.
func fitRequests(pod *v1.Pod) map[v1.ResourceName]int64 {
	out := map[v1.ResourceName]int64{}
	for name, q := range podutil.PodRequests(pod) {
		switch {
		case name == v1.ResourceCPU, name == v1.ResourceMemory, name == v1.ResourceEphemeralStorage, isScalarResourceName(name):
			out[name] = schedulerValue(name, q)
		}
	}
	return out
}

// fitOrder is the order NodeResourcesFit checks resources in: cpu, memory,
// ephemeral-storage, then the rest by name (upstream walks a map; the order
// only decides which of several shortages is reported).
func fitOrder(req map[v1.ResourceName]int64) []v1.ResourceName {
	var out, rest []v1.ResourceName
	for _, n := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage} {
		if _, ok := req[n]; ok {
			out = append(out, n)
		}
	}
	for n := range req {
		if n != v1.ResourceCPU && n != v1.ResourceMemory && n != v1.ResourceEphemeralStorage {
			rest = append(rest, n)
		}
	}
	sort.Slice(rest, func(i, j int) bool { return rest[i] < rest[j] })
	return append(out, rest...)
}

// schedulerValue is q in the scheduler's units: millicores for cpu, else its value.
func schedulerValue(name v1.ResourceName, q resource.Quantity) int64 {
	if name == v1.ResourceCPU {
		return q.MilliValue()
	}
	return q.Value()
}

// isScalarResourceName: a resource the scheduler counts beside cpu, memory and
// ephemeral-storage.
func isScalarResourceName(name v1.ResourceName) bool {
	s := string(name)
	return podutil.IsExtendedResourceName(name) || strings.HasPrefix(s, v1.ResourceHugePagesPrefix) ||
		strings.Contains(s, v1.ResourceDefaultNamespacePrefix) || strings.HasPrefix(s, v1.ResourceAttachableVolumesPrefix)
}

// hostPort is a port a pod binds on the node, with the scheduler's defaults
// (all addresses, TCP).
type hostPort struct {
	ip       string
	protocol v1.Protocol
	port     int32
}

const allAddresses = "0.0.0.0"

// hostPorts are the host ports of the pod's containers that run for its whole
// life: app containers and sidecars.
func hostPorts(pod *v1.Pod) []hostPort {
	var out []hostPort
	add := func(c *v1.Container) {
		for _, p := range c.Ports {
			if p.HostPort <= 0 {
				continue
			}
			hp := hostPort{ip: p.HostIP, protocol: p.Protocol, port: p.HostPort}
			if hp.ip == "" {
				hp.ip = allAddresses
			}
			if hp.protocol == "" {
				hp.protocol = v1.ProtocolTCP
			}
			out = append(out, hp)
		}
	}
	for i := range pod.Spec.InitContainers {
		if podutil.IsRestartableInitContainer(&pod.Spec.InitContainers[i]) {
			add(&pod.Spec.InitContainers[i])
		}
	}
	for i := range pod.Spec.Containers {
		add(&pod.Spec.Containers[i])
	}
	return out
}

// hostPortsConflict is the scheduler's NodePorts: a port the pod wants is taken
// by an admitted pod for the same protocol, on the same address, on all
// addresses, or on any address when the pod wants all of them.
func hostPortsConflict(pod *v1.Pod, admitted []*v1.Pod) bool {
	want := hostPorts(pod)
	if len(want) == 0 {
		return false
	}
	type protoPort struct {
		protocol v1.Protocol
		port     int32
	}
	inUse := map[string]map[protoPort]bool{} // by address
	for _, p := range admitted {
		for _, hp := range hostPorts(p) {
			if inUse[hp.ip] == nil {
				inUse[hp.ip] = map[protoPort]bool{}
			}
			inUse[hp.ip][protoPort{hp.protocol, hp.port}] = true
		}
	}
	for _, hp := range want {
		pp := protoPort{hp.protocol, hp.port}
		if hp.ip == allAddresses {
			for _, ports := range inUse {
				if ports[pp] {
					return true
				}
			}
			continue
		}
		if inUse[allAddresses][pp] || inUse[hp.ip][pp] {
			return true
		}
	}
	return false
}

// admitAppArmor refuses a pending pod asking for an AppArmor profile (other
// than Unconfined) on a host without AppArmor, or naming an empty Localhost
// profile, as upstream's AppArmor admit handler: the runtime would otherwise
// run it unconfined or fail each container.
func admitAppArmor(pod *v1.Pod, enabled bool) *Rejection {
	if pod.Status.Phase != v1.PodPending || !podutil.NeedsAppArmor(pod) {
		return nil
	}
	reject := func(err string) *Rejection {
		return &Rejection{Reason: reasonAppArmor, Message: "Cannot enforce AppArmor: " + err}
	}
	if !enabled {
		return reject("AppArmor is not enabled on the host")
	}
	for _, c := range podutil.AllContainers(pod) {
		p := podutil.AppArmorProfile(pod, &c)
		if p != nil && p.Type == v1.AppArmorProfileTypeLocalhost && strings.TrimSpace(ptr.Deref(p.LocalhostProfile, "")) == "" {
			return reject(fmt.Sprintf("invalid empty AppArmor profile name for container %q", c.Name))
		}
	}
	return nil
}
