package podruntime

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
)

var (
	runtimeDefault = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
	unconfined     = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}
)

func localhost(ref string) *runtimeapi.SecurityProfile {
	return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: ref}
}

// wantedError fails the test unless err is exactly the wanted one (none when
// want is empty); it reports whether an error was wanted.
func wantedError(t *testing.T, err error, want string) bool {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatal(err)
	case want != "" && (err == nil || err.Error() != want):
		t.Fatalf("err = %v, want %q", err, want)
	}
	return want != ""
}

func securityPod(psc *v1.PodSecurityContext, csc *v1.SecurityContext) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"},
		Spec: v1.PodSpec{
			SecurityContext: psc,
			Containers:      []v1.Container{{Name: "c", Image: "busybox", SecurityContext: csc}},
		},
	}
}

// TestSandboxSecurityContext maps the pod to CRI LinuxSandboxSecurityContext
// as upstream's generatePodSandboxLinuxConfig: the pod's user, group, groups
// (fsGroup first), their policy and SELinux options, privileged when any
// container is (ephemeral ones too), and RuntimeDefault seccomp whatever the
// pod asks for its containers.
func TestSandboxSecurityContext(t *testing.T) {
	ns := &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_CONTAINER, Ipc: runtimeapi.NamespaceMode_POD}
	tests := []struct {
		name    string
		pod     func(*v1.Pod)
		want    *runtimeapi.LinuxSandboxSecurityContext
		wantErr string
	}{
		{
			name: "no security context: RuntimeDefault seccomp only",
			want: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: ns, Seccomp: runtimeDefault},
		},
		{
			name: "pod fields",
			pod: func(p *v1.Pod) {
				p.Spec.SecurityContext = &v1.PodSecurityContext{
					RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](3000),
					FSGroup: ptr.To[int64](2000), SupplementalGroups: []int64{4000, 5000},
					SupplementalGroupsPolicy: ptr.To(v1.SupplementalGroupsPolicyStrict),
					SELinuxOptions:           &v1.SELinuxOptions{User: "u", Role: "r", Type: "t", Level: "s0:c1,c2"},
					// The containers' profile, not the sandbox's.
					SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("a.json")},
					RunAsNonRoot:   ptr.To(true),
				}
			},
			want: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: ns, Seccomp: runtimeDefault,
				RunAsUser: &runtimeapi.Int64Value{Value: 1000}, RunAsGroup: &runtimeapi.Int64Value{Value: 3000},
				SupplementalGroups:       []int64{2000, 4000, 5000},
				SupplementalGroupsPolicy: runtimeapi.SupplementalGroupsPolicy_Strict,
				SelinuxOptions:           &runtimeapi.SELinuxOption{User: "u", Role: "r", Type: "t", Level: "s0:c1,c2"},
			},
		},
		{
			name: "explicit Merge",
			pod: func(p *v1.Pod) {
				p.Spec.SecurityContext = &v1.PodSecurityContext{SupplementalGroupsPolicy: ptr.To(v1.SupplementalGroupsPolicyMerge)}
			},
			want: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: ns, Seccomp: runtimeDefault, SupplementalGroupsPolicy: runtimeapi.SupplementalGroupsPolicy_Merge},
		},
		{
			name: "privileged init container",
			pod: func(p *v1.Pod) {
				p.Spec.InitContainers = []v1.Container{{Name: "i", SecurityContext: &v1.SecurityContext{Privileged: ptr.To(true)}}}
			},
			want: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: ns, Seccomp: runtimeDefault, Privileged: true},
		},
		{
			name: "privileged ephemeral container",
			pod: func(p *v1.Pod) {
				p.Spec.EphemeralContainers = []v1.EphemeralContainer{{EphemeralContainerCommon: v1.EphemeralContainerCommon{
					Name: "dbg", SecurityContext: &v1.SecurityContext{Privileged: ptr.To(true)}}}}
			},
			want: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: ns, Seccomp: runtimeDefault, Privileged: true},
		},
		{
			name: "privileged false is not privileged",
			pod: func(p *v1.Pod) {
				p.Spec.Containers[0].SecurityContext = &v1.SecurityContext{Privileged: ptr.To(false)}
			},
			want: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: ns, Seccomp: runtimeDefault},
		},
		{
			name: "unknown supplementalGroupsPolicy",
			pod: func(p *v1.Pod) {
				p.Spec.SecurityContext = &v1.PodSecurityContext{SupplementalGroupsPolicy: ptr.To(v1.SupplementalGroupsPolicy("Loose"))}
			},
			wantErr: "unsupported supplementalGroupsPolicy: Loose",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := securityPod(nil, nil)
			if tt.pod != nil {
				tt.pod(pod)
			}
			got, err := sandboxSecurityContext(pod, ns)
			if wantedError(t, err, tt.wantErr) {
				return
			}
			if d := cmp.Diff(tt.want, got, protocmp.Transform()); d != "" {
				t.Errorf("sandbox security context (-want +got):\n%s", d)
			}
		})
	}
}

// TestContainerSecurityContext maps pod and container to CRI
// LinuxContainerSecurityContext as upstream's determineEffectiveSecurityContext.
func TestContainerSecurityContext(t *testing.T) {
	root := "/var/lib/kubelet/seccomp"
	imageRoot := imageUserInfo{uid: ptr.To[int64](0)}
	// base is what every container gets unless a case says otherwise: the
	// image's uid, the default /proc paths and no seccomp confinement.
	base := func() *runtimeapi.LinuxContainerSecurityContext {
		return &runtimeapi.LinuxContainerSecurityContext{
			RunAsUser:     &runtimeapi.Int64Value{Value: 0},
			MaskedPaths:   defaultMaskedPaths(),
			ReadonlyPaths: defaultReadonlyPaths(),
			Seccomp:       unconfined,
		}
	}
	tests := []struct {
		name           string
		psc            *v1.PodSecurityContext
		csc            *v1.SecurityContext
		annotations    map[string]string
		seccompDefault bool
		img            *imageUserInfo
		want           func(*runtimeapi.LinuxContainerSecurityContext)
		wantErr        string
	}{
		{name: "nothing set"},
		// Seccomp.
		{
			name: "seccompDefault gives RuntimeDefault to a container asking for none", seccompDefault: true,
			want: func(sc *runtimeapi.LinuxContainerSecurityContext) { sc.Seccomp = runtimeDefault },
		},
		{
			name: "pod profile applies to the container",
			psc:  &v1.PodSecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("profiles/audit.json")}},
			want: func(sc *runtimeapi.LinuxContainerSecurityContext) {
				sc.Seccomp = localhost(root + "/profiles/audit.json")
			},
		},
		{
			name: "container profile wins over the pod's",
			psc:  &v1.PodSecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeRuntimeDefault}},
			csc:  &v1.SecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("a.json")}},
			want: func(sc *runtimeapi.LinuxContainerSecurityContext) { sc.Seccomp = localhost(root + "/a.json") },
		},
		{
			name: "an explicit Unconfined stays Unconfined under seccompDefault", seccompDefault: true,
			csc: &v1.SecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeUnconfined}},
		},
		{
			name:        "seccomp annotations are ignored, as upstream",
			annotations: map[string]string{"seccomp.security.alpha.kubernetes.io/pod": "runtime/default", "container.seccomp.security.alpha.kubernetes.io/c": "runtime/default"},
		},
		{
			name:    "Localhost without a name",
			csc:     &v1.SecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeLocalhost}},
			wantErr: "localhostProfile must be set if seccompProfile type is Localhost.",
		},
		{
			name:    "Localhost escaping the profile root",
			psc:     &v1.PodSecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("../../../etc/shadow")}},
			wantErr: `seccomp localhostProfile "../../../etc/shadow" must be a relative path below /var/lib/kubelet/seccomp without '..'`,
		},
		{
			name:    "Localhost with an absolute name",
			csc:     &v1.SecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("/etc/x.json")}},
			wantErr: `seccomp localhostProfile "/etc/x.json" must be a relative path below /var/lib/kubelet/seccomp without '..'`,
		},
		{
			name:    "Localhost with .. inside, refused as the API does",
			csc:     &v1.SecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("a/../b.json")}},
			wantErr: `seccomp localhostProfile "a/../b.json" must be a relative path below /var/lib/kubelet/seccomp without '..'`,
		},
		// AppArmor.
		{
			name: "container AppArmor field",
			csc:  &v1.SecurityContext{AppArmorProfile: &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeRuntimeDefault}},
			want: func(sc *runtimeapi.LinuxContainerSecurityContext) {
				sc.Apparmor, sc.ApparmorProfile = runtimeDefault, "runtime/default"
			},
		},
		{
			name: "pod AppArmor field",
			psc:  &v1.PodSecurityContext{AppArmorProfile: &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeLocalhost, LocalhostProfile: ptr.To("k8s-deny-write")}},
			want: func(sc *runtimeapi.LinuxContainerSecurityContext) {
				sc.Apparmor, sc.ApparmorProfile = localhost("k8s-deny-write"), "localhost/k8s-deny-write"
			},
		},
		{
			name:        "deprecated annotation wins over the pod field",
			psc:         &v1.PodSecurityContext{AppArmorProfile: &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeRuntimeDefault}},
			annotations: map[string]string{"container.apparmor.security.beta.kubernetes.io/c": "unconfined"},
			want: func(sc *runtimeapi.LinuxContainerSecurityContext) {
				sc.Apparmor, sc.ApparmorProfile = unconfined, "unconfined"
			},
		},
		{
			name:        "container field wins over the annotation",
			csc:         &v1.SecurityContext{AppArmorProfile: &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeUnconfined}},
			annotations: map[string]string{"container.apparmor.security.beta.kubernetes.io/c": "localhost/x"},
			want: func(sc *runtimeapi.LinuxContainerSecurityContext) {
				sc.Apparmor, sc.ApparmorProfile = unconfined, "unconfined"
			},
		},
		{
			name:        "annotation localhost profile",
			annotations: map[string]string{"container.apparmor.security.beta.kubernetes.io/c": "localhost/k8s-a"},
			want: func(sc *runtimeapi.LinuxContainerSecurityContext) {
				sc.Apparmor, sc.ApparmorProfile = localhost("k8s-a"), "localhost/k8s-a"
			},
		},
		{
			name:        "an invalid annotation or another container's is ignored",
			annotations: map[string]string{"container.apparmor.security.beta.kubernetes.io/c": "bogus", "container.apparmor.security.beta.kubernetes.io/other": "runtime/default"},
		},
		{
			name:    "Localhost AppArmor without a name",
			csc:     &v1.SecurityContext{AppArmorProfile: &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeLocalhost}},
			wantErr: "missing localhost apparmor profile name",
		},
		// Users and groups.
		{
			name: "image user name when no runAsUser", img: &imageUserInfo{username: "nobody"},
			psc: &v1.PodSecurityContext{RunAsGroup: ptr.To[int64](3000)},
			want: func(sc *runtimeapi.LinuxContainerSecurityContext) {
				sc.RunAsUser, sc.RunAsUsername, sc.RunAsGroup = nil, "nobody", &runtimeapi.Int64Value{Value: 3000}
			},
		},
		{
			name: "image uid when no runAsUser", img: &imageUserInfo{uid: ptr.To[int64](1234)},
			want: func(sc *runtimeapi.LinuxContainerSecurityContext) { sc.RunAsUser = &runtimeapi.Int64Value{Value: 1234} },
		},
		{
			name: "pod runAsUser and runAsGroup", img: &imageUserInfo{username: "nobody"},
			psc: &v1.PodSecurityContext{RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](3000)},
			want: func(sc *runtimeapi.LinuxContainerSecurityContext) {
				sc.RunAsUser, sc.RunAsGroup = &runtimeapi.Int64Value{Value: 1000}, &runtimeapi.Int64Value{Value: 3000}
			},
		},
		{
			name: "container runAsUser and runAsGroup win",
			psc:  &v1.PodSecurityContext{RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](3000)},
			csc:  &v1.SecurityContext{RunAsUser: ptr.To[int64](1001), RunAsGroup: ptr.To[int64](3001)},
			want: func(sc *runtimeapi.LinuxContainerSecurityContext) {
				sc.RunAsUser, sc.RunAsGroup = &runtimeapi.Int64Value{Value: 1001}, &runtimeapi.Int64Value{Value: 3001}
			},
		},
		{
			name: "supplemental groups, fsGroup first, and Strict",
			psc: &v1.PodSecurityContext{FSGroup: ptr.To[int64](2000), SupplementalGroups: []int64{4000},
				SupplementalGroupsPolicy: ptr.To(v1.SupplementalGroupsPolicyStrict)},
			want: func(sc *runtimeapi.LinuxContainerSecurityContext) {
				sc.SupplementalGroups, sc.SupplementalGroupsPolicy = []int64{2000, 4000}, runtimeapi.SupplementalGroupsPolicy_Strict
			},
		},
		{
			name:    "unknown supplementalGroupsPolicy",
			psc:     &v1.PodSecurityContext{SupplementalGroupsPolicy: ptr.To(v1.SupplementalGroupsPolicy("Loose"))},
			wantErr: "unsupported supplementalGroupsPolicy: Loose",
		},
		// SELinux.
		{
			name: "pod SELinux options",
			psc:  &v1.PodSecurityContext{SELinuxOptions: &v1.SELinuxOptions{Type: "spc_t", Level: "s0:c1"}},
			want: func(sc *runtimeapi.LinuxContainerSecurityContext) {
				sc.SelinuxOptions = &runtimeapi.SELinuxOption{Type: "spc_t", Level: "s0:c1"}
			},
		},
		{
			name: "container SELinux options replace the pod's whole",
			psc:  &v1.PodSecurityContext{SELinuxOptions: &v1.SELinuxOptions{Type: "spc_t", Level: "s0:c1"}},
			csc:  &v1.SecurityContext{SELinuxOptions: &v1.SELinuxOptions{User: "system_u"}},
			want: func(sc *runtimeapi.LinuxContainerSecurityContext) {
				sc.SelinuxOptions = &runtimeapi.SELinuxOption{User: "system_u"}
			},
		},
		// Container-only fields.
		{
			name: "privileged keeps the default /proc paths (the runtime drops them)",
			csc:  &v1.SecurityContext{Privileged: ptr.To(true)},
			want: func(sc *runtimeapi.LinuxContainerSecurityContext) { sc.Privileged = true },
		},
		{
			name: "procMount Unmasked: no masked or read-only paths",
			csc:  &v1.SecurityContext{ProcMount: ptr.To(v1.UnmaskedProcMount)},
			want: func(sc *runtimeapi.LinuxContainerSecurityContext) {
				sc.MaskedPaths, sc.ReadonlyPaths = []string{}, []string{}
			},
		},
		{
			name: "procMount Default",
			csc:  &v1.SecurityContext{ProcMount: ptr.To(v1.DefaultProcMount)},
		},
		{
			name: "readOnlyRootFilesystem",
			csc:  &v1.SecurityContext{ReadOnlyRootFilesystem: ptr.To(true)},
			want: func(sc *runtimeapi.LinuxContainerSecurityContext) { sc.ReadonlyRootfs = true },
		},
		{
			name: "capabilities passed as written, ALL included",
			csc:  &v1.SecurityContext{Capabilities: &v1.Capabilities{Add: []v1.Capability{"NET_ADMIN", "sys_time"}, Drop: []v1.Capability{"ALL"}}},
			want: func(sc *runtimeapi.LinuxContainerSecurityContext) {
				sc.Capabilities = &runtimeapi.Capability{AddCapabilities: []string{"NET_ADMIN", "sys_time"}, DropCapabilities: []string{"ALL"}}
			},
		},
		{
			name: "allowPrivilegeEscalation false sets no_new_privs",
			csc:  &v1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false)},
			want: func(sc *runtimeapi.LinuxContainerSecurityContext) { sc.NoNewPrivs = true },
		},
		{
			name: "allowPrivilegeEscalation true leaves it unset",
			csc:  &v1.SecurityContext{AllowPrivilegeEscalation: ptr.To(true)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := securityPod(tt.psc, tt.csc)
			pod.Annotations = tt.annotations
			img := imageRoot
			if tt.img != nil {
				img = *tt.img
			}
			got, err := containerSecurityContext(pod, &pod.Spec.Containers[0], securityOptions{seccompDefault: tt.seccompDefault, seccompRoot: root}, img)
			if wantedError(t, err, tt.wantErr) {
				return
			}
			want := base()
			if tt.want != nil {
				tt.want(want)
			}
			if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
				t.Errorf("container security context (-want +got):\n%s", d)
			}
			// An Unmasked container must send empty lists, never nil: a nil
			// list lets some runtimes fall back to their own defaults.
			if tt.csc != nil && tt.csc.ProcMount != nil && *tt.csc.ProcMount == v1.UnmaskedProcMount && (got.MaskedPaths == nil || got.ReadonlyPaths == nil) {
				t.Error("Unmasked gave nil path lists")
			}
		})
	}
}

// TestSecurityContextReachesTheRuntime syncs pods over the fake CRI: the
// sandbox and container configs carry the mapping, sysctls get dots as
// separators, the image's uid stands in for an unset runAsUser, and a
// Localhost seccomp profile escaping <root>/seccomp keeps the container from
// being created, with upstream's CreateContainerConfigError and a Failed event.
func TestSecurityContextReachesTheRuntime(t *testing.T) {
	r := newSyncRig(t)
	ctx := context.Background()
	r.fake.SetImageUser("busybox:1", ptr.To[int64](1234), "")
	pod := syncPod("secctx", v1.RestartPolicyNever, nil, "app", "escape")
	pod.Spec.SecurityContext = &v1.PodSecurityContext{
		RunAsGroup:     ptr.To[int64](3000),
		SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("profiles/audit.json")},
		Sysctls:        []v1.Sysctl{{Name: "net/ipv4/ip_local_port_range", Value: "1024 65000"}},
	}
	pod.Spec.Containers[0].SecurityContext = &v1.SecurityContext{Capabilities: &v1.Capabilities{Drop: []v1.Capability{"ALL"}}}
	pod.Spec.Containers[1].SecurityContext = &v1.SecurityContext{
		SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("../../../../etc/passwd")},
	}
	m, rec := r.managerWithEvents()
	res, err := m.SyncPod(ctx, pod, r.status(pod))
	if err == nil {
		t.Fatal("the escaping profile did not fail the sync")
	}
	st := r.status(pod)
	sb := r.fake.SandboxConfig(st.Sandboxes[0].Id)
	if got := sb.GetLinux().GetSecurityContext().GetSeccomp(); !cmp.Equal(got, runtimeDefault, protocmp.Transform()) {
		t.Errorf("sandbox seccomp = %v, want RuntimeDefault", got)
	}
	if got := sb.GetLinux().GetSysctls(); len(got) != 1 || got["net.ipv4.ip_local_port_range"] != "1024 65000" {
		t.Errorf("sandbox sysctls = %v, want the name with dots", got)
	}
	var app *runtimeapi.ContainerConfig
	for _, c := range st.Containers {
		if containerName(c) == "app" {
			app = r.fake.ContainerConfig(c.Id)
		}
		if containerName(c) == "escape" {
			t.Errorf("the escaping container was created")
		}
	}
	if app == nil {
		t.Fatal("app was not created")
	}
	sc := app.GetLinux().GetSecurityContext()
	if sc.GetRunAsUser().GetValue() != 1234 || sc.GetRunAsGroup().GetValue() != 3000 {
		t.Errorf("app user/group = %v/%v, want the image's uid 1234 with the pod's group 3000", sc.GetRunAsUser(), sc.GetRunAsGroup())
	}
	if want := localhost(SeccompProfileRoot(r.root) + "/profiles/audit.json"); !cmp.Equal(sc.GetSeccomp(), want, protocmp.Transform()) {
		t.Errorf("app seccomp = %v, want %v", sc.GetSeccomp(), want)
	}
	if !slices.Equal(sc.GetCapabilities().GetDropCapabilities(), []string{"ALL"}) {
		t.Errorf("app capabilities = %v, want drop ALL", sc.GetCapabilities())
	}
	w := res.Waiting["escape"]
	if w.Reason != "CreateContainerConfigError" || !strings.Contains(w.Message, `seccomp localhostProfile "../../../../etc/passwd" must be a relative path below`) {
		t.Errorf("escape waiting = %+v, want CreateContainerConfigError naming the profile", w)
	}
	if events := drain(rec); !slices.Contains(events, "Warning Failed Error: "+w.Message) {
		t.Errorf("events %q lack the Failed event", events)
	}
}
