package config

import (
	"fmt"
	"net"
	"strconv"

	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

// ServingWarning is a setting that opens the kubelet API to everyone who can reach a
// non-loopback address. The configuration is valid (upstream accepts it, and
// flags-only mode defaults to it), so nodelet starts, but says so at error level.
type ServingWarning struct {
	Setting string // the KubeletConfiguration field
	Value   string
	Address string // where it is served
	Message string // what anyone who reaches Address can do
	Fix     string
}

// ServingWarnings returns the warnings for o's configuration: anonymous
// authentication or AlwaysAllow authorization on the HTTPS port, or the
// unauthenticated read-only port, on an address other than loopback.
func ServingWarnings(o *Options) []ServingWarning {
	kc := o.Config
	if kc == nil || isLoopback(kc.Address) {
		return nil
	}
	fix := "set it in the KubeletConfiguration given with --config (see deploy/config.yaml), or serve on loopback only (address: 127.0.0.1)"
	if o.ConfigFile == "" {
		fix = "nodelet was started without --config, so the upstream kubelet's legacy flags-only defaults apply " +
			"(anonymous authentication, authorization mode AlwaysAllow, readOnlyPort 10255); " + fix
	}
	var out []ServingWarning
	add := func(setting, value string, port int32, msg, want string) {
		out = append(out, ServingWarning{Setting: setting, Value: value, Address: net.JoinHostPort(kc.Address, strconv.Itoa(int(port))),
			Message: msg, Fix: fmt.Sprintf("%s; %s", want, fix)})
	}
	if kc.Port != 0 && ptr.Deref(kc.Authentication.Anonymous.Enabled, false) {
		add("authentication.anonymous.enabled", "true", kc.Port,
			"The kubelet API accepts requests without credentials on a non-loopback address: anyone who can reach it is system:anonymous",
			"set authentication.anonymous.enabled: false")
	}
	if kc.Port != 0 && kc.Authorization.Mode == kubeletconfigv1beta1.KubeletAuthorizationModeAlwaysAllow {
		add("authorization.mode", string(kc.Authorization.Mode), kc.Port,
			"The kubelet API authorizes every caller for every endpoint on a non-loopback address: exec, run, attach, portForward, container logs, and /pods with env values",
			"set authorization.mode: Webhook (with authentication.webhook.enabled: true)")
	}
	if kc.ReadOnlyPort != 0 {
		add("readOnlyPort", strconv.Itoa(int(kc.ReadOnlyPort)), kc.ReadOnlyPort,
			"The read-only port serves /pods (with env values), /stats and /metrics over plain HTTP without authentication on a non-loopback address",
			"set readOnlyPort: 0")
	}
	return out
}

// isLoopback reports whether addr only accepts local connections; "" and the
// unspecified addresses listen on every interface.
func isLoopback(addr string) bool {
	ip := net.ParseIP(addr)
	return ip != nil && ip.IsLoopback()
}
