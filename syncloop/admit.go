package syncloop

import (
	"fmt"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/podutil"
)

// Rejection says why a pod may not run here, with the upstream reason and message.
type Rejection struct {
	Reason  string
	Message string
}

// PodRequests returns the resources the scheduler would count for pod: the larger
// of the sum of app containers (plus sidecars) and the largest init container, plus overhead.
func PodRequests(pod *v1.Pod) v1.ResourceList {
	sum := v1.ResourceList{}
	add := func(list v1.ResourceList, into v1.ResourceList) {
		for k, q := range list {
			cur := into[k]
			cur.Add(q)
			into[k] = cur
		}
	}
	for _, c := range pod.Spec.Containers {
		add(requestsOf(&c), sum)
	}
	sidecars := v1.ResourceList{}
	for _, c := range pod.Spec.InitContainers {
		if podutil.IsRestartableInitContainer(&c) {
			add(requestsOf(&c), sidecars)
			add(requestsOf(&c), sum)
			continue
		}
		// A regular init container runs alongside the sidecars started before it.
		need := v1.ResourceList{}
		add(sidecars, need)
		add(requestsOf(&c), need)
		for k, q := range need {
			if cur := sum[k]; q.Cmp(cur) > 0 {
				sum[k] = q
			}
		}
	}
	add(pod.Spec.Overhead, sum)
	return sum
}

// requestsOf returns a container's requests, defaulted from limits as the API does.
func requestsOf(c *v1.Container) v1.ResourceList {
	out := v1.ResourceList{}
	for k, q := range c.Resources.Limits {
		out[k] = q.DeepCopy()
	}
	for k, q := range c.Resources.Requests {
		out[k] = q.DeepCopy()
	}
	return out
}

// AdmitNode is what admission knows of the node.
type AdmitNode struct {
	Allocatable v1.ResourceList
	Labels      map[string]string
	// OS is the node's operating system (runtime.GOOS).
	OS string
	// Sysctls are the sysctls pods may set; nil allows none.
	Sysctls *SysctlAllowlist
	// Features are the node's status.features as last reported; nil: none yet.
	Features *v1.NodeFeatures
	// AppArmorEnabled says the host can enforce AppArmor profiles.
	AppArmorEnabled bool
}

// Upstream's reasons and messages for a pod meant for another OS.
const (
	reasonOSLabel      = "PodOSSelectorNodeLabelDoesNotMatch"
	messageOSLabel     = "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"
	reasonOSField      = "PodOSNotSupported"
	messageOSField     = "Failed to admit pod as the OS field doesn't match node OS"
	reasonNodeAffinity = "NodeAffinity"
	reasonSGPolicy     = "SupplementalGroupsPolicyNotSupported"
	reasonAppArmor     = "AppArmor"
)

// Admit checks that pod may run on the node next to the already admitted pods,
// in upstream's order: its sysctls (SysctlForbidden), its OS (the
// kubernetes.io/os pod label, then spec.os), supplementalGroupsPolicy Strict
// on a runtime without it (SupplementalGroupsPolicyNotSupported), then pod
// count and resources (OutOfpods, OutOfcpu, OutOfmemory...), then the node
// selector (NodeAffinity), then AppArmor (AppArmor).
func Admit(pod *v1.Pod, admitted []*v1.Pod, node AdmitNode) *Rejection {
	if r := admitSysctls(pod, node.Sysctls); r != nil {
		return r
	}
	// Upstream compares the pod's label (not its node selector) with the node's OS.
	if os, ok := pod.Labels[v1.LabelOSStable]; ok && os != node.OS {
		return &Rejection{Reason: reasonOSLabel, Message: messageOSLabel}
	}
	if pod.Spec.OS != nil && string(pod.Spec.OS.Name) != node.OS {
		return &Rejection{Reason: reasonOSField, Message: messageOSField}
	}
	if psc := pod.Spec.SecurityContext; psc != nil && psc.SupplementalGroupsPolicy != nil &&
		*psc.SupplementalGroupsPolicy == v1.SupplementalGroupsPolicyStrict &&
		(node.Features == nil || !ptr.Deref(node.Features.SupplementalGroupsPolicy, false)) {
		// Upstream refuses rather than silently merging the image's groups.
		return &Rejection{Reason: reasonSGPolicy, Message: fmt.Sprintf("SupplementalGroupsPolicy=%s is not supported in this node", v1.SupplementalGroupsPolicyStrict)}
	}
	allocatable := node.Allocatable
	if max, ok := allocatable[v1.ResourcePods]; ok && int64(len(admitted))+1 > max.Value() {
		return &Rejection{Reason: "OutOfpods", Message: fmt.Sprintf("Node didn't have enough resource: pods, requested: 1, used: %d, capacity: %d", len(admitted), max.Value())}
	}
	used := v1.ResourceList{}
	for _, p := range admitted {
		for k, q := range PodRequests(p) {
			cur := used[k]
			cur.Add(q)
			used[k] = cur
		}
	}
	req := PodRequests(pod)
	for _, name := range sortedResourceNames(req) {
		q := req[name]
		if q.IsZero() {
			continue
		}
		capQ, ok := allocatable[name]
		if !ok {
			if isExtended(name) {
				return &Rejection{Reason: "UnexpectedAdmissionError", Message: fmt.Sprintf("Allocate failed due to no resource %s on the node", name)}
			}
			continue
		}
		total := used[name].DeepCopy()
		total.Add(q)
		if total.Cmp(capQ) > 0 {
			u := used[name]
			return &Rejection{
				Reason:  "OutOf" + string(name),
				Message: fmt.Sprintf("Node didn't have enough resource: %s, requested: %s, used: %s, capacity: %s", name, quantityString(name, q), quantityString(name, u), quantityString(name, capQ)),
			}
		}
	}
	for k, v := range pod.Spec.NodeSelector {
		if node.Labels[k] != v {
			return &Rejection{Reason: reasonNodeAffinity, Message: "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"}
		}
	}
	return admitAppArmor(pod, node.AppArmorEnabled)
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

func isExtended(name v1.ResourceName) bool {
	s := string(name)
	return strings.Contains(s, "/") && !strings.HasPrefix(s, "kubernetes.io/")
}

func quantityString(name v1.ResourceName, q resource.Quantity) string {
	if name == v1.ResourceCPU {
		return fmt.Sprintf("%d", q.MilliValue())
	}
	return fmt.Sprintf("%d", q.Value())
}

func sortedResourceNames(l v1.ResourceList) []v1.ResourceName {
	order := []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage}
	var out []v1.ResourceName
	seen := map[v1.ResourceName]bool{}
	for _, n := range order {
		if _, ok := l[n]; ok {
			out = append(out, n)
			seen[n] = true
		}
	}
	var rest []string
	for n := range l {
		if !seen[n] {
			rest = append(rest, string(n))
		}
	}
	sort.Strings(rest)
	for _, n := range rest {
		out = append(out, v1.ResourceName(n))
	}
	return out
}
