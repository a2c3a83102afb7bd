package envvars

import (
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// masterServiceName is the service whose variables every pod gets, even with
// enableServiceLinks=false: in-cluster clients read KUBERNETES_SERVICE_HOST.
const masterServiceName = "kubernetes"

// serviceIPSet reports whether a service has a usable cluster IP (headless
// "None" and ExternalName "" services get no variables).
func serviceIPSet(s *v1.Service) bool {
	return s.Spec.ClusterIP != v1.ClusterIPNone && s.Spec.ClusterIP != ""
}

// selectServices picks the services whose variables a pod in namespace ns
// gets: all services of ns with a cluster IP when links are enabled, plus the
// master "kubernetes" service of masterNS. A same-named service of the pod's
// own namespace wins over the master one. The result is sorted by name so
// the environment is stable across calls.
func selectServices(ns, masterNS string, links bool, nsServices, masterServices []*v1.Service) []*v1.Service {
	byName := make(map[string]*v1.Service)
	for _, s := range masterServices {
		if s != nil && s.Namespace == masterNS && s.Name == masterServiceName && serviceIPSet(s) {
			byName[s.Name] = s
		}
	}
	if links {
		for _, s := range nsServices {
			if s != nil && s.Namespace == ns && serviceIPSet(s) {
				byName[s.Name] = s
			}
		}
	}
	out := make([]*v1.Service, 0, len(byName))
	for _, s := range byName {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// serviceEnv returns the variables for the given services, in a fixed order
// per service: _SERVICE_HOST, _SERVICE_PORT, _SERVICE_PORT_<NAME> for named
// ports, then the docker-link style _PORT, _PORT_<port>_<PROTO>{,_PROTO,_PORT,_ADDR}.
func serviceEnv(services []*v1.Service) []kv {
	var out []kv
	for _, s := range services {
		if !serviceIPSet(s) {
			continue
		}
		prefix := envName(s.Name)
		ip := s.Spec.ClusterIP
		out = append(out, kv{prefix + "_SERVICE_HOST", ip})
		if len(s.Spec.Ports) == 0 {
			continue
		}
		out = append(out, kv{prefix + "_SERVICE_PORT", strconv.Itoa(int(s.Spec.Ports[0].Port))})
		for _, p := range s.Spec.Ports {
			if p.Name != "" {
				out = append(out, kv{prefix + "_SERVICE_PORT_" + envName(p.Name), strconv.Itoa(int(p.Port))})
			}
		}
		for i, p := range s.Spec.Ports {
			proto := string(p.Protocol)
			if proto == "" {
				proto = string(v1.ProtocolTCP)
			}
			lower := strings.ToLower(proto)
			port := strconv.Itoa(int(p.Port))
			url := fmt.Sprintf("%s://%s", lower, net.JoinHostPort(ip, port))
			if i == 0 {
				out = append(out, kv{prefix + "_PORT", url})
			}
			pp := fmt.Sprintf("%s_PORT_%d_%s", prefix, p.Port, strings.ToUpper(proto))
			out = append(out,
				kv{pp, url},
				kv{pp + "_PROTO", lower},
				kv{pp + "_PORT", port},
				kv{pp + "_ADDR", ip},
			)
		}
	}
	return out
}

func envName(s string) string {
	return strings.ToUpper(strings.ReplaceAll(s, "-", "_"))
}
