package agent

import (
	"fmt"

	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodelet/nodelet/syncloop"
)

// sysctlAllowlist is what pods may set: the safe sysctls of this kernel and the
// config's allowedUnsafeSysctls. As upstream, a pattern that could reach beyond
// the pod (not namespaced) or is malformed stops the start.
func sysctlAllowlist(kc *kubeletconfigv1beta1.KubeletConfiguration, kernelRelease string) (*syncloop.SysctlAllowlist, error) {
	patterns := append(syncloop.SafeSysctls(kernelRelease), kc.AllowedUnsafeSysctls...)
	w, err := syncloop.NewSysctlAllowlist(patterns)
	if err != nil {
		return nil, fmt.Errorf("reading allowedUnsafeSysctls %q: %w", kc.AllowedUnsafeSysctls, err)
	}
	return w, nil
}
