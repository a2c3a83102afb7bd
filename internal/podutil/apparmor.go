package podutil

import (
	"strings"

	v1 "k8s.io/api/core/v1"
)

// AppArmorProfile is the AppArmor profile container c runs with, as upstream
// chooses it: the container's field, else the deprecated
// container.apparmor.security.beta.kubernetes.io/<name> annotation (static
// pods may still carry only that), else the pod's field; nil when none says.
func AppArmorProfile(pod *v1.Pod, c *v1.Container) *v1.AppArmorProfile {
	if c.SecurityContext != nil && c.SecurityContext.AppArmorProfile != nil {
		return c.SecurityContext.AppArmorProfile
	}
	if p := appArmorAnnotationProfile(pod.Annotations, c.Name); p != nil {
		return p
	}
	if pod.Spec.SecurityContext != nil {
		return pod.Spec.SecurityContext.AppArmorProfile
	}
	return nil
}

// appArmorAnnotationProfile reads the deprecated per-container annotation:
// runtime/default, unconfined or localhost/<name>; any other value is ignored,
// as upstream ignores it.
func appArmorAnnotationProfile(annotations map[string]string, container string) *v1.AppArmorProfile {
	val, ok := annotations[v1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix+container]
	if !ok {
		return nil
	}
	switch {
	case val == v1.DeprecatedAppArmorBetaProfileRuntimeDefault:
		return &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeRuntimeDefault}
	case val == v1.DeprecatedAppArmorBetaProfileNameUnconfined:
		return &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeUnconfined}
	case strings.HasPrefix(val, v1.DeprecatedAppArmorBetaProfileNamePrefix):
		// An empty name stays a Localhost profile: admission refuses it.
		name := strings.TrimPrefix(val, v1.DeprecatedAppArmorBetaProfileNamePrefix)
		return &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeLocalhost, LocalhostProfile: &name}
	}
	return nil
}

// NeedsAppArmor reports whether the pod asks for any AppArmor profile other
// than Unconfined, in a field of the pod or of any container (ephemeral ones
// included) or in a deprecated annotation: such a pod needs AppArmor on the
// host. Upstream stops at the first annotation it meets in map order; any
// annotation asking for confinement counts here, which is the same for the
// pods that carry a single one.
func NeedsAppArmor(pod *v1.Pod) bool {
	confined := func(p *v1.AppArmorProfile) bool { return p != nil && p.Type != v1.AppArmorProfileTypeUnconfined }
	if pod.Spec.SecurityContext != nil && confined(pod.Spec.SecurityContext.AppArmorProfile) {
		return true
	}
	for _, c := range AllContainers(pod) {
		if c.SecurityContext != nil && confined(c.SecurityContext.AppArmorProfile) {
			return true
		}
	}
	for k, v := range pod.Annotations {
		if strings.HasPrefix(k, v1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix) && v != v1.DeprecatedAppArmorBetaProfileNameUnconfined {
			return true
		}
	}
	return false
}

// AllContainers returns copies of the pod's init, app and ephemeral
// containers, in that order.
func AllContainers(pod *v1.Pod) []v1.Container {
	out := make([]v1.Container, 0, len(pod.Spec.InitContainers)+len(pod.Spec.Containers)+len(pod.Spec.EphemeralContainers))
	out = append(out, pod.Spec.InitContainers...)
	out = append(out, pod.Spec.Containers...)
	for _, ec := range pod.Spec.EphemeralContainers {
		out = append(out, v1.Container(ec.EphemeralContainerCommon))
	}
	return out
}
