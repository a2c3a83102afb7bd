package node

import (
	"errors"
	"fmt"
	"net"

	v1 "k8s.io/api/core/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

func chooseHostInterface() (net.IP, error) { return utilnet.ChooseHostInterface() }

// nodeAddresses returns the InternalIP address(es) followed by the Hostname address.
func (c *Controller) nodeAddresses() ([]v1.NodeAddress, error) {
	var ips []net.IP
	switch {
	case len(c.cfg.NodeIPs) == 0:
		ip, err := c.detectNodeIP(false, false)
		if err != nil {
			return nil, err
		}
		ips = []net.IP{ip}
	case len(c.cfg.NodeIPs) == 1 && c.cfg.NodeIPs[0].IsUnspecified():
		// --node-ip=0.0.0.0 or :: asks for detection restricted to that family.
		v6 := c.cfg.NodeIPs[0].To4() == nil
		ip, err := c.detectNodeIP(true, v6)
		if err != nil {
			return nil, err
		}
		ips = []net.IP{ip}
	default:
		ips = c.cfg.NodeIPs
	}
	out := make([]v1.NodeAddress, 0, len(ips)+1)
	seen := map[string]bool{}
	for _, ip := range ips {
		if s := ip.String(); !seen[s] {
			seen[s] = true
			out = append(out, v1.NodeAddress{Type: v1.NodeInternalIP, Address: s})
		}
	}
	return append(out, v1.NodeAddress{Type: v1.NodeHostName, Address: c.cfg.Hostname}), nil
}

// detectNodeIP follows upstream's order: the hostname if it is an IP; else the hostname's
// DNS addresses that are usable and on this host (IPv4 preferred); else the address of the
// default-route interface.
func (c *Controller) detectNodeIP(familyFixed, wantV6 bool) (net.IP, error) {
	familyOK := func(ip net.IP) bool { return !familyFixed || (ip.To4() == nil) == wantV6 }
	if ip := net.ParseIP(c.cfg.Hostname); ip != nil && familyOK(ip) {
		return ip, nil
	}
	var found net.IP
	if addrs, err := c.lookupIP(c.cfg.Hostname); err == nil {
		local := c.localIPs()
		for _, ip := range addrs {
			if !usableNodeIP(ip) || !familyOK(ip) || !local[ip.String()] {
				continue
			}
			if ip.To4() != nil {
				found = ip
				break
			}
			if found == nil {
				found = ip
			}
		}
	}
	if found != nil {
		return found, nil
	}
	ip, err := c.defaultRouteIP()
	if err != nil {
		return nil, fmt.Errorf("detecting the node IP (hostname %q resolves to no usable local address): %w", c.cfg.Hostname, err)
	}
	if ip == nil || !familyOK(ip) {
		return nil, errors.New("detecting the node IP: no address of the requested family on the default-route interface")
	}
	return ip, nil
}

func usableNodeIP(ip net.IP) bool {
	return !ip.IsLoopback() && !ip.IsUnspecified() && !ip.IsMulticast() &&
		!ip.IsLinkLocalUnicast() && !ip.IsLinkLocalMulticast()
}

func (c *Controller) localIPs() map[string]bool {
	out := map[string]bool{}
	addrs, err := c.interfaceAddrs()
	if err != nil {
		return out
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			out[ipn.IP.String()] = true
		}
	}
	return out
}

// HostIPs returns the node's host IPs for pod status.hostIP/hostIPs: the first InternalIP
// (or ExternalIP when there is none), then the first address of the other IP family, if any.
func HostIPs(n *v1.Node) []string {
	if n == nil {
		return nil
	}
	var all []net.IP
	for _, t := range []v1.NodeAddressType{v1.NodeInternalIP, v1.NodeExternalIP} {
		for _, a := range n.Status.Addresses {
			if a.Type != t {
				continue
			}
			if ip := net.ParseIP(a.Address); ip != nil {
				all = append(all, ip)
			}
		}
	}
	if len(all) == 0 {
		return nil
	}
	out := []string{all[0].String()}
	firstV6 := all[0].To4() == nil
	for _, ip := range all[1:] {
		if (ip.To4() == nil) != firstV6 {
			out = append(out, ip.String())
			break
		}
	}
	return out
}
