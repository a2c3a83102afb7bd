package podruntime

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Limits the kubelet applies to a pod's resolv.conf.
const (
	maxDNSSearches    = 32
	maxDNSNameservers = 3
)

type resolv struct {
	servers, searches, options []string
}

func parseResolvConf(data []byte) resolv {
	var r resolv
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexAny(line, "#;"); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "nameserver":
			r.servers = append(r.servers, f[1])
		case "search":
			r.searches = f[1:]
		case "domain":
			r.searches = []string{f[1]}
		case "options":
			r.options = append(r.options, f[1:]...)
		}
	}
	return r
}

func (m *Manager) hostResolv() (resolv, error) {
	if m.cfg.ResolvConf == "" {
		return resolv{}, nil
	}
	data, err := os.ReadFile(m.cfg.ResolvConf)
	if err != nil {
		return resolv{}, fmt.Errorf("reading resolvConf %s: %w", m.cfg.ResolvConf, err)
	}
	return parseResolvConf(data), nil
}

// dnsConfig applies dnsPolicy and dnsConfig as the upstream kubelet does.
func (m *Manager) dnsConfig(pod *v1.Pod) (*runtimeapi.DNSConfig, error) {
	policy := pod.Spec.DNSPolicy
	if policy == "" {
		policy = v1.DNSClusterFirst
	}
	// ClusterFirst on the host network means the host's resolver.
	if policy == v1.DNSClusterFirst && pod.Spec.HostNetwork {
		policy = v1.DNSDefault
	}
	if (policy == v1.DNSClusterFirst || policy == v1.DNSClusterFirstWithHostNet) && len(m.cfg.ClusterDNS) == 0 {
		// No cluster DNS configured: fall back to the host's, as upstream does.
		policy = v1.DNSDefault
	}
	var r resolv
	switch policy {
	case v1.DNSNone:
	case v1.DNSDefault:
		host, err := m.hostResolv()
		if err != nil {
			return nil, err
		}
		r = host
	default: // ClusterFirst, ClusterFirstWithHostNet
		host, err := m.hostResolv()
		if err != nil {
			return nil, err
		}
		r.servers = append([]string(nil), m.cfg.ClusterDNS...)
		if d := m.cfg.ClusterDomain; d != "" {
			r.searches = []string{pod.Namespace + ".svc." + d, "svc." + d, d}
		}
		r.searches = append(r.searches, host.searches...)
		r.options = []string{"ndots:5"}
	}
	if dc := pod.Spec.DNSConfig; dc != nil {
		r.servers = append(r.servers, dc.Nameservers...)
		r.searches = append(r.searches, dc.Searches...)
		r.options = mergeOptions(r.options, dc.Options)
	}
	r.servers = dedup(r.servers)
	if len(r.servers) > maxDNSNameservers {
		r.servers = r.servers[:maxDNSNameservers]
	}
	r.searches = dedup(r.searches)
	if len(r.searches) > maxDNSSearches {
		r.searches = r.searches[:maxDNSSearches]
	}
	return &runtimeapi.DNSConfig{Servers: r.servers, Searches: r.searches, Options: r.options}, nil
}

// mergeOptions lets pod options override same-named ones (ndots:2 replaces ndots:5).
func mergeOptions(base []string, extra []v1.PodDNSConfigOption) []string {
	idx := map[string]int{}
	out := []string{}
	add := func(name, s string) {
		if i, ok := idx[name]; ok {
			out[i] = s
			return
		}
		idx[name] = len(out)
		out = append(out, s)
	}
	for _, o := range base {
		add(strings.SplitN(o, ":", 2)[0], o)
	}
	for _, o := range extra {
		s := o.Name
		if o.Value != nil {
			s += ":" + *o.Value
		}
		add(o.Name, s)
	}
	return out
}

func dedup(in []string) []string {
	seen := map[string]bool{}
	out := in[:0:0]
	for _, s := range in {
		if s == "" || seen[s] {
			continue
		}
		seen[s] = true
		out = append(out, s)
	}
	return out
}
