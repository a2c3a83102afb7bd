package podruntime

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/podutil"
)

// securityOptions are the node settings the security context mapping depends on.
type securityOptions struct {
	// seccompDefault (KubeletConfiguration seccompDefault) gives containers that
	// ask for no seccomp profile RuntimeDefault instead of Unconfined.
	seccompDefault bool
	// seccompRoot is <root-dir>/seccomp, where Localhost profiles live.
	seccompRoot string
}

func (m *Manager) securityOptions() securityOptions {
	return securityOptions{seccompDefault: m.cfg.SeccompDefault, seccompRoot: SeccompProfileRoot(m.cfg.RootDir)}
}

// SeccompProfileRoot is the directory of Localhost seccomp profiles: <root-dir>/seccomp.
func SeccompProfileRoot(rootDir string) string { return filepath.Join(rootDir, "seccomp") }

// imageUserInfo is what the image says the container runs as, from CRI
// ImageStatus: a uid or a user name (see imageUser in nonroot.go).
type imageUserInfo struct {
	uid      *int64
	username string
}

// sandboxSecurityContext is the sandbox's security context as upstream builds
// it from the pod: the pod's user, group, supplemental groups (fsGroup first),
// their policy and SELinux options; privileged when any container is; and
// always the RuntimeDefault seccomp profile, whatever the pod asks for its
// containers (upstream, kubernetes#84623: the pause process needs no more).
func sandboxSecurityContext(pod *v1.Pod, ns *runtimeapi.NamespaceOption) (*runtimeapi.LinuxSandboxSecurityContext, error) {
	sc := &runtimeapi.LinuxSandboxSecurityContext{
		NamespaceOptions: ns,
		Seccomp:          &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
	}
	for _, c := range podutil.AllContainers(pod) {
		if c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged {
			sc.Privileged = true
		}
	}
	psc := pod.Spec.SecurityContext
	if psc == nil {
		return sc, nil
	}
	if psc.RunAsUser != nil {
		sc.RunAsUser = &runtimeapi.Int64Value{Value: *psc.RunAsUser}
	}
	if psc.RunAsGroup != nil {
		sc.RunAsGroup = &runtimeapi.Int64Value{Value: *psc.RunAsGroup}
	}
	sc.SupplementalGroups = podGroups(psc)
	policy, err := supplementalGroupsPolicy(psc)
	if err != nil {
		return nil, err
	}
	sc.SupplementalGroupsPolicy = policy
	sc.SelinuxOptions = selinuxOption(psc.SELinuxOptions)
	return sc, nil
}

// containerSecurityContext is container c's security context as upstream
// passes it to CreateContainer: the container's fields over the pod's
// (runAsUser, runAsGroup, seLinuxOptions), the image's user when neither sets
// runAsUser, the container-only fields (privileged, readOnlyRootFilesystem,
// capabilities as written, allowPrivilegeEscalation as no_new_privs,
// procMount as the masked and read-only /proc paths), the seccomp and
// AppArmor profiles, and the pod's supplemental groups and their policy.
// Namespace options are the caller's (they depend on the sandbox).
func containerSecurityContext(pod *v1.Pod, c *v1.Container, opts securityOptions, img imageUserInfo) (*runtimeapi.LinuxContainerSecurityContext, error) {
	sc := &runtimeapi.LinuxContainerSecurityContext{}
	psc, csc := pod.Spec.SecurityContext, c.SecurityContext
	if csc == nil {
		csc = &v1.SecurityContext{}
	}
	var podUser, podGroup *int64
	var podSELinux *v1.SELinuxOptions
	if psc != nil {
		podUser, podGroup, podSELinux = psc.RunAsUser, psc.RunAsGroup, psc.SELinuxOptions
	}
	if u := firstSet(csc.RunAsUser, podUser); u != nil {
		sc.RunAsUser = &runtimeapi.Int64Value{Value: *u}
	} else {
		// As upstream: the image's uid (0 when the image names no user), or its
		// user name, so that runAsGroup always comes with a user.
		if img.uid != nil {
			sc.RunAsUser = &runtimeapi.Int64Value{Value: *img.uid}
		}
		sc.RunAsUsername = img.username
	}
	if g := firstSet(csc.RunAsGroup, podGroup); g != nil {
		sc.RunAsGroup = &runtimeapi.Int64Value{Value: *g}
	}
	if csc.SELinuxOptions != nil {
		sc.SelinuxOptions = selinuxOption(csc.SELinuxOptions)
	} else {
		sc.SelinuxOptions = selinuxOption(podSELinux)
	}
	sc.Privileged = csc.Privileged != nil && *csc.Privileged
	sc.ReadonlyRootfs = csc.ReadOnlyRootFilesystem != nil && *csc.ReadOnlyRootFilesystem
	// no_new_privs only when allowPrivilegeEscalation is false: unset leaves
	// the runtime's default, as upstream.
	sc.NoNewPrivs = csc.AllowPrivilegeEscalation != nil && !*csc.AllowPrivilegeEscalation
	if caps := csc.Capabilities; caps != nil {
		// As written: the runtime adds the CAP_ prefix and knows ALL.
		sc.Capabilities = &runtimeapi.Capability{AddCapabilities: capStrings(caps.Add), DropCapabilities: capStrings(caps.Drop)}
	}
	// Privileged containers get the default paths too: the runtime drops them
	// for privileged containers, as it does for upstream's.
	if csc.ProcMount != nil && *csc.ProcMount == v1.UnmaskedProcMount {
		sc.MaskedPaths, sc.ReadonlyPaths = []string{}, []string{}
	} else {
		sc.MaskedPaths, sc.ReadonlyPaths = defaultMaskedPaths(), defaultReadonlyPaths()
	}
	var err error
	if sc.Seccomp, err = seccompProfile(pod, csc, opts); err != nil {
		return nil, err
	}
	if sc.Apparmor, sc.ApparmorProfile, err = appArmorProfile(podutil.AppArmorProfile(pod, c)); err != nil {
		return nil, err
	}
	if psc != nil {
		sc.SupplementalGroups = podGroups(psc)
		if sc.SupplementalGroupsPolicy, err = supplementalGroupsPolicy(psc); err != nil {
			return nil, err
		}
	}
	return sc, nil
}

func firstSet(vals ...*int64) *int64 {
	for _, v := range vals {
		if v != nil {
			return v
		}
	}
	return nil
}

func capStrings(caps []v1.Capability) []string {
	out := make([]string, len(caps))
	for i, c := range caps {
		out[i] = string(c)
	}
	return out
}

// podGroups are the supplemental groups every container of the pod gets:
// fsGroup first, then supplementalGroups, in upstream's order.
func podGroups(psc *v1.PodSecurityContext) []int64 {
	var out []int64
	if psc.FSGroup != nil {
		out = append(out, *psc.FSGroup)
	}
	return append(out, psc.SupplementalGroups...)
}

// supplementalGroupsPolicy maps supplementalGroupsPolicy by name, as upstream:
// unset is Merge (the CRI zero value); a name CRI does not know is an error.
func supplementalGroupsPolicy(psc *v1.PodSecurityContext) (runtimeapi.SupplementalGroupsPolicy, error) {
	if psc.SupplementalGroupsPolicy == nil {
		return runtimeapi.SupplementalGroupsPolicy_Merge, nil
	}
	v, ok := runtimeapi.SupplementalGroupsPolicy_value[string(*psc.SupplementalGroupsPolicy)]
	if !ok {
		return 0, fmt.Errorf("unsupported supplementalGroupsPolicy: %s", *psc.SupplementalGroupsPolicy)
	}
	return runtimeapi.SupplementalGroupsPolicy(v), nil
}

func selinuxOption(o *v1.SELinuxOptions) *runtimeapi.SELinuxOption {
	if o == nil {
		return nil
	}
	return &runtimeapi.SELinuxOption{User: o.User, Role: o.Role, Type: o.Type, Level: o.Level}
}

// seccompProfile is the container's seccomp profile: its own field, else the
// pod's, else RuntimeDefault under seccompDefault and Unconfined otherwise.
// The seccomp annotations are gone upstream and ignored here too.
func seccompProfile(pod *v1.Pod, csc *v1.SecurityContext, opts securityOptions) (*runtimeapi.SecurityProfile, error) {
	p := csc.SeccompProfile
	if p == nil && pod.Spec.SecurityContext != nil {
		p = pod.Spec.SecurityContext.SeccompProfile
	}
	if p == nil {
		if opts.seccompDefault {
			return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, nil
		}
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, nil
	}
	switch p.Type {
	case v1.SeccompProfileTypeRuntimeDefault:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, nil
	case v1.SeccompProfileTypeLocalhost:
		if p.LocalhostProfile == nil || *p.LocalhostProfile == "" {
			return nil, fmt.Errorf("localhostProfile must be set if seccompProfile type is Localhost.")
		}
		ref, err := localhostSeccompRef(opts.seccompRoot, *p.LocalhostProfile)
		if err != nil {
			return nil, err
		}
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: ref}, nil
	}
	return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, nil
}

// localhostSeccompRef is the absolute path of a Localhost profile: name joined
// to the profile root, as upstream passes it to the runtime (which reads it).
// name comes from the pod: like the API's validation, an absolute name or
// one with a ".." element is refused, so the path stays below the root. The
// root's own content is the node administrator's, links included.
func localhostSeccompRef(root, name string) (string, error) {
	if filepath.IsAbs(name) || slices.Contains(strings.Split(filepath.ToSlash(name), "/"), "..") {
		return "", fmt.Errorf("seccomp localhostProfile %q must be a relative path below %s without '..'", name, root)
	}
	return filepath.Join(root, name), nil
}

// appArmorProfile maps the container's AppArmor profile to CRI, with the
// deprecated profile string upstream still sends for older runtimes. nil
// profile: none asked, the runtime's default applies.
func appArmorProfile(p *v1.AppArmorProfile) (*runtimeapi.SecurityProfile, string, error) {
	if p == nil {
		return nil, "", nil
	}
	switch p.Type {
	case v1.AppArmorProfileTypeRuntimeDefault:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, v1.DeprecatedAppArmorBetaProfileRuntimeDefault, nil
	case v1.AppArmorProfileTypeUnconfined:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, v1.DeprecatedAppArmorBetaProfileNameUnconfined, nil
	case v1.AppArmorProfileTypeLocalhost:
		if p.LocalhostProfile == nil {
			return nil, "", fmt.Errorf("missing localhost apparmor profile name")
		}
		name := *p.LocalhostProfile
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: name},
			v1.DeprecatedAppArmorBetaProfileNamePrefix + name, nil
	}
	return nil, "", fmt.Errorf("unknown apparmor profile type: %q", p.Type)
}
