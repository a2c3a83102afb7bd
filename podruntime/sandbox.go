package podruntime

import (
	"fmt"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
	utilsysctl "k8s.io/component-helpers/node/util/sysctl"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/cgroups"
	"github.com/nodelet/nodelet/cri"
)

// PodLogDir is the directory of a pod's container logs: <podLogsDir>/<ns>_<name>_<uid>.
func PodLogDir(podLogsDir string, pod *v1.Pod) string {
	return filepath.Join(podLogsDir, fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID))
}

// SandboxConfig builds the CRI sandbox config for pod. It is deterministic, so the
// same config can be passed again with CreateContainer.
func (m *Manager) SandboxConfig(pod *v1.Pod, attempt uint32) (*runtimeapi.PodSandboxConfig, error) {
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{
			Name:      pod.Name,
			Namespace: pod.Namespace,
			Uid:       string(pod.UID),
			Attempt:   attempt,
		},
		Labels:       sandboxLabels(pod),
		Annotations:  copyMap(pod.Annotations),
		LogDirectory: PodLogDir(m.cfg.PodLogsDir, pod),
	}
	if !pod.Spec.HostNetwork {
		// A host-network sandbox cannot set a hostname (no private UTS namespace).
		hostname, err := podHostname(pod)
		if err != nil {
			return nil, err
		}
		cfg.Hostname = hostname
	}
	dns, err := m.dnsConfig(pod)
	if err != nil {
		return nil, err
	}
	cfg.DnsConfig = dns
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.HostPort == 0 {
				continue
			}
			cfg.PortMappings = append(cfg.PortMappings, &runtimeapi.PortMapping{
				Protocol:      protocol(p.Protocol),
				ContainerPort: p.ContainerPort,
				HostPort:      p.HostPort,
				HostIp:        p.HostIP,
			})
		}
	}
	ns := &runtimeapi.NamespaceOption{
		Network: runtimeapi.NamespaceMode_POD,
		Pid:     runtimeapi.NamespaceMode_CONTAINER,
		Ipc:     runtimeapi.NamespaceMode_POD,
	}
	if pod.Spec.HostNetwork {
		ns.Network = runtimeapi.NamespaceMode_NODE
	}
	if pod.Spec.HostPID {
		ns.Pid = runtimeapi.NamespaceMode_NODE
	} else if pod.Spec.ShareProcessNamespace != nil && *pod.Spec.ShareProcessNamespace {
		ns.Pid = runtimeapi.NamespaceMode_POD
	}
	if pod.Spec.HostIPC {
		ns.Ipc = runtimeapi.NamespaceMode_NODE
	}
	sc, err := sandboxSecurityContext(pod, ns)
	if err != nil {
		return nil, err
	}
	linux := &runtimeapi.LinuxPodSandboxConfig{SecurityContext: sc, CgroupParent: m.cgroupParent(pod)}
	if psc := pod.Spec.SecurityContext; psc != nil && len(psc.Sysctls) > 0 {
		linux.Sysctls = map[string]string{}
		for _, s := range psc.Sysctls {
			// Dots as separators, as upstream converts them before runc checks them.
			linux.Sysctls[utilsysctl.NormalizeName(s.Name)] = s.Value
		}
	}
	// The pod's summed resources and its overhead (from its RuntimeClass), for
	// runtimes that size the sandbox (VM-based handlers), as upstream.
	linux.Resources, linux.Overhead = cgroups.SandboxResources(pod, m.cfg.Resources)
	cfg.Linux = linux
	return cfg, nil
}

func sandboxLabels(pod *v1.Pod) map[string]string {
	l := copyMap(pod.Labels)
	l[cri.LabelPodName] = pod.Name
	l[cri.LabelPodNamespace] = pod.Namespace
	l[cri.LabelPodUID] = string(pod.UID)
	return l
}

func copyMap(in map[string]string) map[string]string {
	out := make(map[string]string, len(in)+4)
	for k, v := range in {
		out[k] = v
	}
	return out
}

func protocol(p v1.Protocol) runtimeapi.Protocol {
	switch p {
	case v1.ProtocolUDP:
		return runtimeapi.Protocol_UDP
	case v1.ProtocolSCTP:
		return runtimeapi.Protocol_SCTP
	default:
		return runtimeapi.Protocol_TCP
	}
}

// podHostname is spec.hostnameOverride when set (beta HostnameOverride, on by
// default: it wins over hostname and subdomain, and the API limits it), else
// spec.hostname or the pod name, cut to 63 characters as upstream.
func podHostname(pod *v1.Pod) (string, error) {
	if o := pod.Spec.HostnameOverride; o != nil && *o != "" {
		return *o, nil
	}
	h := pod.Spec.Hostname
	if h == "" {
		h = pod.Name
	}
	if len(h) > 63 {
		h = strings.TrimRight(h[:63], "-.")
	}
	if h == "" {
		return "", fmt.Errorf("pod %s/%s has no usable hostname", pod.Namespace, pod.Name)
	}
	return h, nil
}
