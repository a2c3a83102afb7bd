package node

import (
	"net"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// The names upstream's kubelet and cloud controller managers share (k8s.io/cloud-provider).
const (
	// TaintExternalCloudProvider marks a Node the cloud controller manager has not
	// initialised yet; with --cloud-provider=external the Node registers with it.
	TaintExternalCloudProvider = "node.cloudprovider.kubernetes.io/uninitialized"
	// AnnotationProvidedNodeIP carries --node-ip to the cloud controller manager,
	// which picks the Node's addresses.
	AnnotationProvidedNodeIP = "alpha.kubernetes.io/provided-node-ip"
)

// providedNodeIP is the annotation value for --node-ip: the addresses given,
// comma-separated; "" when none was given explicitly (an unspecified address only
// picks a family).
func providedNodeIP(ips []net.IP) string {
	var out []string
	for _, ip := range ips {
		if ip == nil || ip.IsUnspecified() {
			return ""
		}
		out = append(out, ip.String())
	}
	return strings.Join(out, ",")
}

// setCloudProviderMeta keeps the provided-node-ip annotation as upstream: set
// with an external cloud provider and an explicit --node-ip, removed otherwise
// (a stale one from an earlier configuration goes).
func (c *Controller) setCloudProviderMeta(n *v1.Node) {
	ip := providedNodeIP(c.cfg.NodeIPs)
	if c.cfg.ExternalCloudProvider && ip != "" {
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[AnnotationProvidedNodeIP] = ip
		return
	}
	delete(n.Annotations, AnnotationProvidedNodeIP)
}

// addressesFromCloud says whether the Node's addresses are left as they are:
// with an external cloud provider, once anything (the cloud controller manager)
// set them. Before that the agent reports its own, as upstream, so a new Node
// is reachable while it waits to be initialised.
func (c *Controller) addressesFromCloud(st *v1.NodeStatus) bool {
	return c.cfg.ExternalCloudProvider && len(st.Addresses) > 0
}
