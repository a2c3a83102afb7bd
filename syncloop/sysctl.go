package syncloop

import (
	"fmt"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"
	utilsysctl "k8s.io/component-helpers/node/util/sysctl"
)

// SysctlForbiddenReason is upstream's status reason for a pod whose sysctls the
// node does not allow.
const SysctlForbiddenReason = "SysctlForbidden"

// safeSysctls are upstream's safe sysctls (namespaced and isolated from other
// pods), always allowed.
var safeSysctls = []string{
	"kernel.shm_rmid_forced",
	"net.ipv4.ip_local_port_range",
	"net.ipv4.tcp_syncookies",
	"net.ipv4.ping_group_range",
	"net.ipv4.ip_unprivileged_port_start",
	"net.ipv4.tcp_keepalive_time",
	"net.ipv4.tcp_fin_timeout",
	"net.ipv4.tcp_keepalive_intvl",
	"net.ipv4.tcp_keepalive_probes",
}

// newerSafeSysctls are safe only from the kernel version that namespaced them.
var newerSafeSysctls = []struct{ name, kernel string }{
	{"net.ipv4.ip_local_reserved_ports", "3.16"},
	{"net.ipv4.tcp_rmem", "4.15"},
	{"net.ipv4.tcp_wmem", "4.15"},
}

// SafeSysctls returns upstream's safe sysctl list for a kernel release
// (/proc/sys/kernel/osrelease). An unreadable release gets the sysctls safe on
// every kernel only, as upstream.
func SafeSysctls(kernelRelease string) []string {
	out := append([]string(nil), safeSysctls...)
	kv, err := version.ParseGeneric(kernelRelease)
	if err != nil {
		return out
	}
	for _, s := range newerSafeSysctls {
		if kv.AtLeast(version.MustParseGeneric(s.kernel)) {
			out = append(out, s.name)
		}
	}
	return out
}

// sysctlPattern is what a sysctl name or pattern (a trailing *) must look like
// (the API's validation), at most 253 characters.
var sysctlPattern = regexp.MustCompile(`^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\./])*([a-z0-9][-_a-z0-9]*)?[a-z0-9*]$`)

// SysctlAllowlist holds the sysctls a pod may set: the safe ones and the
// config's allowedUnsafeSysctls, each with the kernel namespace it lives in.
type SysctlAllowlist struct {
	sysctls  map[string]utilsysctl.Namespace
	prefixes map[string]utilsysctl.Namespace
}

// NewSysctlAllowlist builds an allowlist of sysctl names and patterns ending in
// "*". A pattern that is malformed or not known to be namespaced is an error:
// such a sysctl would reach beyond the pod (upstream refuses to start too).
func NewSysctlAllowlist(patterns []string) (*SysctlAllowlist, error) {
	w := &SysctlAllowlist{sysctls: map[string]utilsysctl.Namespace{}, prefixes: map[string]utilsysctl.Namespace{}}
	for _, p := range patterns {
		if len(p) > 253 || !sysctlPattern.MatchString(p) {
			return nil, fmt.Errorf("sysctl %q must have at most 253 characters and match regex %s", p, sysctlPattern)
		}
		ns, name, prefixed := utilsysctl.GetNamespace(p)
		if ns == utilsysctl.UnknownNamespace {
			return nil, fmt.Errorf("the sysctls %q are not known to be namespaced", name)
		}
		if prefixed {
			w.prefixes[name] = ns
		} else {
			w.sysctls[name] = ns
		}
	}
	return w, nil
}

// check says why a pod may not set sysctl: it is not allowlisted, or its
// namespace is the host's (hostNetwork for net.*, hostIPC for IPC sysctls).
func (w *SysctlAllowlist) check(sysctl string, hostNet, hostIPC bool) error {
	sysctl = utilsysctl.NormalizeName(sysctl)
	ns, found := w.sysctls[sysctl]
	if !found {
		for p, pns := range w.prefixes {
			if strings.HasPrefix(sysctl, p) {
				ns, found = pns, true
				break
			}
		}
	}
	if !found {
		return fmt.Errorf("%q not allowlisted", sysctl)
	}
	if (ns == utilsysctl.IPCNamespace && hostIPC) || (ns == utilsysctl.NetNamespace && hostNet) {
		return fmt.Errorf("%q not allowed with host %s enabled", sysctl, ns)
	}
	return nil
}
