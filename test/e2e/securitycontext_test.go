//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/procfs"
	"github.com/nodelet/nodelet/test/e2e/framework"
)

// outputLines waits until container's first log holds a line for each of want
// (a line is the content after the CRI prefix "<time> stdout F ") and returns
// the lines.
func outputLines(ctx context.Context, t *testing.T, n *framework.Nodelet, p *v1.Pod, container string, want ...string) []string {
	t.Helper()
	file := filepath.Join(n.PodLogsDir, p.Namespace+"_"+p.Name+"_"+string(p.UID), container, "0.log")
	var lines []string
	err := framework.WaitFor(ctx, 2*time.Minute, fmt.Sprintf("%q in %s", want, file), func(context.Context) (bool, error) {
		b, err := os.ReadFile(file)
		if err != nil {
			return false, nil
		}
		lines = nil
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.SplitN(l, " ", 4); len(f) == 4 {
				lines = append(lines, f[3])
			}
		}
		for _, w := range want {
			if !slices.Contains(lines, w) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("%v; the container wrote %q", err, lines)
	}
	return lines
}

// statusField reads one field ("Seccomp", "CapEff", ...) of /proc/<pid>/status on the host.
func statusField(t *testing.T, pid int, field string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && k == field {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return ""
}

// sandboxPid is the pid of the pod's sandbox (pause) process, from the runtime's verbose status.
func sandboxPid(ctx context.Context, t *testing.T, f *framework.Framework, uid string) int {
	t.Helper()
	sbs, err := f.CRI.PodSandboxesOf(ctx, uid)
	if err != nil || len(sbs) != 1 {
		t.Fatalf("sandboxes of %s: %v (err %v), want 1", uid, sbs, err)
	}
	st, err := f.CRI.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sbs[0].Id, Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(st.GetInfo()["info"]), &info); err != nil || info.Pid == 0 {
		t.Fatalf("no pid in the sandbox's verbose status %q (err %v)", st.GetInfo()["info"], err)
	}
	return info.Pid
}

// TestSeccompDefaultRuntimeDefault: with seccompDefault, a container that asks
// for no seccomp profile runs under the runtime's default filter (Seccomp: 2
// in its /proc/1/status), one that asks for Unconfined runs without (0), and
// the sandbox's pause process is filtered whatever the pod says, as upstream.
func TestSeccompDefaultRuntimeDefault(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	n := startNode(t, f, framework.NodeletOptions{Config: func(c *kubeletconfigv1beta1.KubeletConfiguration) {
		c.SeccompDefault = ptr.To(true)
	}})
	pod := f.BusyboxPod(ns, "seccomp-default", "sh", "-c", "grep Seccomp: /proc/1/status; exec sleep 3600")
	pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{
		Name: "unconfined", Image: f.Env.BusyboxImage, ImagePullPolicy: v1.PullNever,
		Command:         []string{"sh", "-c", "grep Seccomp: /proc/1/status; exec sleep 3600"},
		SecurityContext: &v1.SecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeUnconfined}},
	})
	created := f.CreatePod(ctx, pod)
	f.WaitForPodReady(ctx, ns, pod.Name, 2*time.Minute)
	outputLines(ctx, t, n, created, "main", "Seccomp:\t2")
	outputLines(ctx, t, n, created, "unconfined", "Seccomp:\t0")
	if got := statusField(t, sandboxPid(ctx, t, f, string(created.UID)), "Seccomp"); got != "2" {
		t.Errorf("sandbox process Seccomp: %s, want 2 (RuntimeDefault)", got)
	}
}

// TestSeccompLocalhostProfile: a Localhost profile is read from
// <root-dir>/seccomp/<localhostProfile>: a profile refusing mkdir makes mkdir
// fail in the container. A static pod naming a profile outside that directory
// ("..": the API server refuses such pods, a manifest cannot be stopped there)
// never gets a container and the Failed event says why.
func TestSeccompLocalhostProfile(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	n := startNode(t, f, framework.NodeletOptions{})
	dir := filepath.Join(n.RootDir, "seccomp", "profiles")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	profile := `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO"}]}`
	if err := os.WriteFile(filepath.Join(dir, "deny-mkdir.json"), []byte(profile), 0o644); err != nil {
		t.Fatal(err)
	}
	pod := f.BusyboxPod(ns, "seccomp-localhost", "sh", "-c",
		"if mkdir /tmp/x; then echo mkdir=allowed; else echo mkdir=refused; fi; grep Seccomp: /proc/1/status; exec sleep 3600")
	pod.Spec.SecurityContext = &v1.PodSecurityContext{SeccompProfile: &v1.SeccompProfile{
		Type: v1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("profiles/deny-mkdir.json")}}
	created := f.CreatePod(ctx, pod)
	f.WaitForPodReady(ctx, ns, pod.Name, 2*time.Minute)
	outputLines(ctx, t, n, created, "main", "mkdir=refused", "Seccomp:\t2")

	escape := f.BusyboxPod("default", "seccomp-escape", "sleep", "3600")
	escape.Spec.SecurityContext = &v1.PodSecurityContext{SeccompProfile: &v1.SeccompProfile{
		Type: v1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("../../../../etc/passwd")}}
	n.WriteStaticPod(escape)
	name := "seccomp-escape-" + f.Env.NodeName
	ev := waitForEvent(ctx, t, f, "default", name, "Failed", 2*time.Minute)
	want := `Error: seccomp localhostProfile "../../../../etc/passwd" must be a relative path below ` + filepath.Join(n.RootDir, "seccomp") + ` without '..'`
	if ev.Message != want {
		t.Errorf("Failed event %q, want %q", ev.Message, want)
	}
	ctrs, err := f.CRI.Containers(ctx, map[string]string{framework.LabelPodName: name, framework.LabelPodNamespace: "default"})
	if err != nil || len(ctrs) != 0 {
		t.Errorf("containers of %s: %v (err %v), want none", name, ctrs, err)
	}
	n.RemoveStaticPod(escape.Name)
}

// groupsImage builds and imports a busybox image whose default user (uid
// 1000) belongs to a group its /etc/group defines (50000), as upstream's
// SupplementalGroupsPolicy conformance image.
func groupsImage(t *testing.T, f *framework.Framework) string {
	t.Helper()
	ref := fmt.Sprintf("nodelet.local/busybox-groups:%d", time.Now().UnixNano())
	tar := filepath.Join(t.TempDir(), "groups.tar")
	run := func(name string, args ...string) {
		t.Helper()
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	run(filepath.Join(f.Env.RigDir, "bin", "mkimage"), "-kind", "busybox", "-bin", "/bin/busybox", "-name", ref, "-o", tar,
		"-passwd", "user-defined-in-image:x:1000:1000::/home/u:/bin/sh",
		"-group", "user-defined-in-image:x:1000:", "-group", "group-defined-in-image:x:50000:user-defined-in-image",
		"-user", "1000")
	run(f.Env.Ctr, "images", "import", tar)
	t.Cleanup(func() { _ = exec.Command(f.Env.Ctr, "images", "rm", ref).Run() })
	return ref
}

// TestSupplementalGroupsPolicyStrict: the same pod with supplementalGroups
// [60000] under Merge gets the group its image's /etc/group gives the user
// (50000), under Strict it does not; `id -G` and status.containerStatuses[].user
// (from the runtime) both say so, and the node reports the feature.
func TestSupplementalGroupsPolicyStrict(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	n := startNode(t, f, framework.NodeletOptions{})
	node := f.WaitForNodeReady(ctx, time.Minute)
	if fs := node.Status.Features; fs == nil || !ptr.Deref(fs.SupplementalGroupsPolicy, false) {
		t.Fatalf("node status.features = %+v, want supplementalGroupsPolicy true on containerd 2", fs)
	}
	image := groupsImage(t, f)
	for _, tc := range []struct {
		policy v1.SupplementalGroupsPolicy
		id     string
		groups []int64
	}{
		{v1.SupplementalGroupsPolicyMerge, "1000 50000 60000", []int64{1000, 50000, 60000}},
		{v1.SupplementalGroupsPolicyStrict, "1000 60000", []int64{1000, 60000}},
	} {
		name := "groups-" + strings.ToLower(string(tc.policy))
		pod := f.BusyboxPod(ns, name, "sh", "-c", "id -G; exec sleep 3600")
		pod.Spec.Containers[0].Image = image
		pod.Spec.SecurityContext = &v1.PodSecurityContext{SupplementalGroups: []int64{60000}, SupplementalGroupsPolicy: ptr.To(tc.policy)}
		created := f.CreatePod(ctx, pod)
		got := f.WaitForPod(ctx, ns, name, 2*time.Minute, "running with its user reported", func(p *v1.Pod) bool {
			return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil && p.Status.ContainerStatuses[0].User != nil
		})
		want := &v1.ContainerUser{Linux: &v1.LinuxContainerUser{UID: 1000, GID: 1000, SupplementalGroups: tc.groups}}
		if d := cmp.Diff(want, got.Status.ContainerStatuses[0].User); d != "" {
			t.Errorf("%s: status user (-want +got):\n%s", tc.policy, d)
		}
		outputLines(ctx, t, n, created, "main", tc.id)
	}
}

// TestContainerSecurityContextEnforced runs one container per field and reads
// what the kernel says in each: readOnlyRootFilesystem refuses writes (a
// volume stays writable), capabilities drop ALL leaves CapEff 0 and adding
// NET_ADMIN to it (upstream passes names as written, the runtime adds CAP_)
// leaves exactly that bit, allowPrivilegeEscalation false sets NoNewPrivs,
// and runAsGroup without runAsUser runs the image's user with that group.
func TestContainerSecurityContextEnforced(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	n := startNode(t, f, framework.NodeletOptions{})
	pod := f.BusyboxPod(ns, "secctx", "sh", "-c",
		"if touch /rootfs-file; then echo root=written; else echo root=refused; fi; if touch /data/f; then echo volume=written; fi; exec sleep 3600")
	pod.Spec.Containers[0].SecurityContext = &v1.SecurityContext{ReadOnlyRootFilesystem: ptr.To(true)}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	status := "grep -E '^(CapEff|NoNewPrivs):' /proc/1/status | tr '\\t' ' '; echo ids=$(id -u) $(id -g); exec sleep 3600"
	for name, sc := range map[string]*v1.SecurityContext{
		"drop-all":     {Capabilities: &v1.Capabilities{Drop: []v1.Capability{"ALL"}}},
		"net-admin":    {Capabilities: &v1.Capabilities{Drop: []v1.Capability{"ALL"}, Add: []v1.Capability{"NET_ADMIN"}}},
		"no-new-privs": {AllowPrivilegeEscalation: ptr.To(false), RunAsGroup: ptr.To[int64](3000)},
	} {
		pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{
			Name: name, Image: f.Env.BusyboxImage, ImagePullPolicy: v1.PullNever, Command: []string{"sh", "-c", status}, SecurityContext: sc,
		})
	}
	created := f.CreatePod(ctx, pod)
	f.WaitForPodReady(ctx, ns, pod.Name, 2*time.Minute)
	outputLines(ctx, t, n, created, "main", "root=refused", "volume=written")
	outputLines(ctx, t, n, created, "drop-all", "CapEff: 0000000000000000", "NoNewPrivs: 0", "ids=0 0")
	outputLines(ctx, t, n, created, "net-admin", "CapEff: "+fmt.Sprintf("%016x", 1<<12)) // CAP_NET_ADMIN is 12
	outputLines(ctx, t, n, created, "no-new-privs", "NoNewPrivs: 1", "ids=0 3000")
}

// TestAppArmorWithoutAppArmorRefused: on a host whose kernel does not enforce
// AppArmor (the rig's), a pod asking for an AppArmor profile is Failed at
// admission with upstream's reason AppArmor, and the node's Ready message
// does not claim AppArmor. On a host with AppArmor the pod runs confined and
// the Ready message says "AppArmor enabled".
func TestAppArmorWithoutAppArmorRefused(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	n := startNode(t, f, framework.NodeletOptions{})
	enabled := procfs.AppArmorEnabled("/sys")
	t.Logf("host AppArmor enabled: %v", enabled)
	node := f.WaitForNodeReady(ctx, time.Minute)
	for _, c := range node.Status.Conditions {
		if c.Type == v1.NodeReady && strings.HasSuffix(c.Message, ". AppArmor enabled") != enabled {
			t.Errorf("Ready message %q on a host with AppArmor %v", c.Message, enabled)
		}
	}
	pod := f.BusyboxPod(ns, "apparmor", "sh", "-c", "cat /proc/1/attr/current; echo read; exec sleep 3600")
	pod.Spec.SecurityContext = &v1.PodSecurityContext{AppArmorProfile: &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeRuntimeDefault}}
	created := f.CreatePod(ctx, pod)
	if enabled {
		f.WaitForPodReady(ctx, ns, pod.Name, 2*time.Minute)
		lines := outputLines(ctx, t, n, created, "main", "read")
		if len(lines) == 0 || strings.HasPrefix(lines[0], "unconfined") {
			t.Errorf("container AppArmor label %q, want a confining profile", lines)
		}
		return
	}
	got := f.WaitForPod(ctx, ns, pod.Name, time.Minute, "rejected by admission", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
	want := "Pod was rejected: Cannot enforce AppArmor: AppArmor is not enabled on the host"
	if got.Status.Reason != "AppArmor" || got.Status.Message != want {
		t.Errorf("pod status %s/%q, want AppArmor/%q", got.Status.Reason, got.Status.Message, want)
	}
	if ctrs, err := f.CRI.PodContainers(ctx, string(created.UID)); err != nil || len(ctrs) != 0 {
		t.Errorf("containers of the refused pod: %v (err %v)", ctrs, err)
	}
	// Unconfined needs no AppArmor.
	ok := f.BusyboxPod(ns, "unconfined", "sleep", "3600")
	ok.Annotations = map[string]string{v1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "main": v1.DeprecatedAppArmorBetaProfileNameUnconfined}
	f.CreatePod(ctx, ok)
	f.WaitForPodReady(ctx, ns, ok.Name, 2*time.Minute)
}
