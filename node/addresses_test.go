package node

import (
	"errors"
	"net"
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestNodeAddresses(t *testing.T) {
	ipnet := func(s string) net.Addr { return &net.IPNet{IP: net.ParseIP(s), Mask: net.CIDRMask(24, 32)} }
	local := []net.Addr{ipnet("127.0.0.1"), ipnet("192.168.1.10"), ipnet("fd00::10")}
	tests := []struct {
		name      string
		hostname  string
		nodeIPs   []net.IP
		dns       []net.IP
		dnsErr    error
		routeIP   net.IP
		routeErr  error
		want      []string // InternalIP addresses; Hostname is always last
		wantError bool
	}{
		{name: "explicit node IPs, dual-stack, deduplicated", nodeIPs: []net.IP{net.ParseIP("10.0.0.5"), net.ParseIP("fd00::5"), net.ParseIP("10.0.0.5")}, want: []string{"10.0.0.5", "fd00::5"}},
		{name: "hostname is an IP", hostname: "192.168.1.10", want: []string{"192.168.1.10"}},
		{name: "DNS: loopback (Debian 127.0.1.1) skipped, IPv4 preferred", dns: []net.IP{net.ParseIP("127.0.1.1"), net.ParseIP("fd00::10"), net.ParseIP("192.168.1.10")}, want: []string{"192.168.1.10"}},
		{name: "DNS: only IPv6 local", dns: []net.IP{net.ParseIP("fd00::10")}, want: []string{"fd00::10"}},
		{name: "DNS: address not on this host falls back to the default route", dns: []net.IP{net.ParseIP("203.0.113.7")}, routeIP: net.ParseIP("192.168.1.10"), want: []string{"192.168.1.10"}},
		{name: "DNS fails: default route", dnsErr: errors.New("no such host"), routeIP: net.ParseIP("192.168.1.10"), want: []string{"192.168.1.10"}},
		{name: "nothing works", dnsErr: errors.New("no such host"), routeErr: errors.New("no routes"), wantError: true},
		{name: "unspecified IPv6 node IP asks for an IPv6 address", nodeIPs: []net.IP{net.IPv6unspecified}, dns: []net.IP{net.ParseIP("192.168.1.10"), net.ParseIP("fd00::10")}, want: []string{"fd00::10"}},
		{name: "unspecified IPv4 node IP, route gives IPv6 only", nodeIPs: []net.IP{net.IPv4zero}, dnsErr: errors.New("x"), routeIP: net.ParseIP("fd00::10"), wantError: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			host := tc.hostname
			if host == "" {
				host = "n1"
			}
			c, err := New(nil, nil, Config{NodeName: "n1", Hostname: host, NodeIPs: tc.nodeIPs}, nil, nil, nil, WithMachineInfo(testMachine()))
			if err != nil {
				t.Fatal(err)
			}
			c.lookupIP = func(h string) ([]net.IP, error) {
				if h != host {
					t.Errorf("looked up %q, want %q", h, host)
				}
				return tc.dns, tc.dnsErr
			}
			c.interfaceAddrs = func() ([]net.Addr, error) { return local, nil }
			c.defaultRouteIP = func() (net.IP, error) { return tc.routeIP, tc.routeErr }
			got, err := c.nodeAddresses()
			if tc.wantError {
				if err == nil {
					t.Fatalf("want error, got %v", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var want []v1.NodeAddress
			for _, a := range tc.want {
				want = append(want, v1.NodeAddress{Type: v1.NodeInternalIP, Address: a})
			}
			want = append(want, v1.NodeAddress{Type: v1.NodeHostName, Address: host})
			if !reflect.DeepEqual(got, want) {
				t.Errorf("addresses = %v, want %v", got, want)
			}
		})
	}
}

func TestHostIPs(t *testing.T) {
	addr := func(typ v1.NodeAddressType, a string) v1.NodeAddress { return v1.NodeAddress{Type: typ, Address: a} }
	tests := []struct {
		name  string
		addrs []v1.NodeAddress
		want  []string
	}{
		{name: "none", want: nil},
		{name: "hostname only", addrs: []v1.NodeAddress{addr(v1.NodeHostName, "n1")}, want: nil},
		{name: "single", addrs: []v1.NodeAddress{addr(v1.NodeInternalIP, "10.0.0.5"), addr(v1.NodeHostName, "n1")}, want: []string{"10.0.0.5"}},
		{name: "dual stack, first of other family", addrs: []v1.NodeAddress{addr(v1.NodeInternalIP, "10.0.0.5"), addr(v1.NodeInternalIP, "10.0.0.6"), addr(v1.NodeInternalIP, "fd00::5"), addr(v1.NodeInternalIP, "fd00::6")}, want: []string{"10.0.0.5", "fd00::5"}},
		{name: "internal before external", addrs: []v1.NodeAddress{addr(v1.NodeExternalIP, "203.0.113.1"), addr(v1.NodeInternalIP, "fd00::5")}, want: []string{"fd00::5", "203.0.113.1"}},
		{name: "external only", addrs: []v1.NodeAddress{addr(v1.NodeExternalIP, "203.0.113.1")}, want: []string{"203.0.113.1"}},
		{name: "garbage skipped", addrs: []v1.NodeAddress{addr(v1.NodeInternalIP, "not-an-ip"), addr(v1.NodeInternalIP, "10.0.0.5")}, want: []string{"10.0.0.5"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := HostIPs(&v1.Node{Status: v1.NodeStatus{Addresses: tc.addrs}})
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("HostIPs = %v, want %v", got, tc.want)
			}
		})
	}
	if HostIPs(nil) != nil {
		t.Error("HostIPs(nil) != nil")
	}
}
