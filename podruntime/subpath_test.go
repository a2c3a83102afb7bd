package podruntime

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"golang.org/x/sys/unix"

	"github.com/nodelet/nodelet/envvars"
	"github.com/nodelet/nodelet/internal/mountutil"
	"github.com/nodelet/nodelet/pleg"
	"github.com/nodelet/nodelet/volumes"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to bind-mount sub paths in a temp dir")
	}
}

// volumeRig is a Manager over a real volumes.Manager in a temp root dir, with
// every mount below it undone when the test ends.
type volumeRig struct {
	m    *Manager
	vols *volumes.Manager
	root string
}

func newVolumeRig(t *testing.T) *volumeRig {
	t.Helper()
	requireRoot(t)
	root := t.TempDir()
	t.Cleanup(func() { _, _ = mountutil.UnmountAllUnder(root) })
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	vols := volumes.NewManager(root, nil, clk)
	m := New(Config{RootDir: root}, Deps{Volumes: vols, Node: func() NodeFacts { return NodeFacts{} }, Recorder: record.NewFakeRecorder(100), Clock: clk})
	return &volumeRig{m: m, vols: vols, root: root}
}

// setUp sets the pod's volumes up and returns them.
func (r *volumeRig) setUp(t *testing.T, pod *v1.Pod) map[string]volumes.HostVolume {
	t.Helper()
	t.Cleanup(func() {
		if err := r.vols.TearDownPod(context.Background(), pod.UID); err != nil {
			t.Errorf("tearing down: %v", err)
		}
	})
	vols, err := r.vols.SetUpPod(context.Background(), pod)
	if err != nil {
		t.Fatal(err)
	}
	return vols
}

func subPathPod(containers ...v1.Container) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "ns1", UID: "uid-1"},
		Spec: v1.PodSpec{
			Volumes:    []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}},
			Containers: containers,
		},
	}
}

// TestMountsRefusesSubPathThroughPlantedSymlink: one container plants links
// out of the shared emptyDir; another mounts it by subPath. Before the fix
// the runtime got <volume>/escape (the host's /) and MkdirAll created
// outside/a/b on the host.
func TestMountsRefusesSubPathThroughPlantedSymlink(t *testing.T) {
	r := newVolumeRig(t)
	outside := t.TempDir()
	pod := subPathPod(
		v1.Container{Name: "planter", VolumeMounts: []v1.VolumeMount{{Name: "data", MountPath: "/data"}}},
		v1.Container{Name: "root", VolumeMounts: []v1.VolumeMount{{Name: "data", MountPath: "/host", SubPath: "escape"}}},
		v1.Container{Name: "mkdir", VolumeMounts: []v1.VolumeMount{{Name: "data", MountPath: "/x", SubPath: "elsewhere/a/b"}}},
	)
	vols := r.setUp(t, pod)
	// What `ln -s / /data/escape` in the planter does.
	for name, target := range map[string]string{"escape": "/", "elsewhere": outside} {
		if err := os.Symlink(target, filepath.Join(vols["data"].Path, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range pod.Spec.Containers[1:] {
		got, err := r.m.mounts(context.Background(), pod, &c, vols, nil, 0)
		want := `failed to prepare subPath for volumeMount "data" of container "` + c.Name + `"`
		if err == nil || err.Error() != want {
			t.Errorf("container %s: mounts = %v, error %v; want error %q", c.Name, mountHostPaths(got), err, want)
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("created on the host outside the volume: %v", entries)
	}
}

func mountHostPaths(ms []*runtimeapi.Mount) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.GetHostPath())
	}
	return out
}

// TestMountsSubPathExprFromDownwardAPIEnv is the StatefulSet case: each
// replica's subPathExpr $(POD_NAME), POD_NAME from a fieldRef, must land in
// its own directory. Before the fix it was left as a literal.
func TestMountsSubPathExprFromDownwardAPIEnv(t *testing.T) {
	r := newVolumeRig(t)
	c := v1.Container{
		Name: "app",
		Env: []v1.EnvVar{{Name: "POD_NAME", ValueFrom: &v1.EnvVarSource{
			FieldRef: &v1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}}},
		VolumeMounts: []v1.VolumeMount{
			{Name: "data", MountPath: "/data"},
			{Name: "data", MountPath: "/logs", SubPathExpr: "logs/$(POD_NAME)"},
			{Name: "data", MountPath: "/plain", SubPath: "v1..2"},
		},
	}
	pod := subPathPod(c)
	vols := r.setUp(t, pod)
	envs, err := envvars.ForContainer(context.Background(), pod, &c, nil, envvars.PodInfo{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.m.mounts(context.Background(), pod, &c, vols, envs, 0)
	if err != nil {
		t.Fatal(err)
	}
	vol := vols["data"].Path
	byPath := map[string]string{}
	for _, m := range got {
		byPath[m.GetContainerPath()] = m.GetHostPath()
	}
	if byPath["/data"] != vol {
		t.Errorf("/data from %s, want the volume %s", byPath["/data"], vol)
	}
	subpaths := filepath.Join(r.root, "pods", "uid-1", "volume-subpaths", "data", "app")
	for mountPath, want := range map[string]struct{ target, dir string }{
		"/logs":  {filepath.Join(subpaths, "1"), "logs/web-0"},
		"/plain": {filepath.Join(subpaths, "2"), "v1..2"},
	} {
		if byPath[mountPath] != want.target {
			t.Errorf("%s from %s, want %s", mountPath, byPath[mountPath], want.target)
			continue
		}
		var a, b unix.Stat_t
		if err := unix.Stat(want.target, &a); err != nil {
			t.Fatal(err)
		}
		if err := unix.Stat(filepath.Join(vol, want.dir), &b); err != nil {
			t.Fatalf("%s: %v", want.dir, err)
		}
		if a.Ino != b.Ino || a.Dev != b.Dev {
			t.Errorf("%s is not a mount of %s", want.target, want.dir)
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(vol, "logs")); len(entries) != 1 {
		t.Errorf("logs/ holds %v, want only web-0", entries)
	}
}

func TestSubPathOf(t *testing.T) {
	envs := []*runtimeapi.KeyValue{
		{Key: "POD_NAME", Value: []byte("web-0")}, {Key: "NS", Value: []byte("prod")},
		{Key: "EMPTY"}, {Key: "UP", Value: []byte("..")}, {Key: "ABS", Value: []byte("/etc")},
	}
	tests := []struct {
		vm      v1.VolumeMount
		want    string
		wantErr string
	}{
		{vm: v1.VolumeMount{}, want: ""},
		{vm: v1.VolumeMount{SubPath: "a/b"}, want: "a/b"},
		{vm: v1.VolumeMount{SubPath: "v1..2"}, want: "v1..2"},
		{vm: v1.VolumeMount{SubPath: "..data/key"}, want: "..data/key"},
		{vm: v1.VolumeMount{SubPath: "a/../b"}, wantErr: "unable to provision SubPath `a/../b`: must not contain '..'"},
		{vm: v1.VolumeMount{SubPath: ".."}, wantErr: "unable to provision SubPath `..`: must not contain '..'"},
		{vm: v1.VolumeMount{SubPath: "/etc"}, wantErr: "error SubPath `/etc` must not be an absolute path"},
		{vm: v1.VolumeMount{SubPathExpr: "$(POD_NAME)"}, want: "web-0"},
		{vm: v1.VolumeMount{SubPathExpr: "$(NS)/$(POD_NAME)"}, want: "prod/web-0"},
		{vm: v1.VolumeMount{SubPathExpr: "$POD_NAME"}, want: "$POD_NAME"},
		{vm: v1.VolumeMount{SubPathExpr: "${POD_NAME}"}, want: "${POD_NAME}"},
		{vm: v1.VolumeMount{SubPathExpr: "$$(POD_NAME)"}, want: "$(POD_NAME)"},
		{vm: v1.VolumeMount{SubPathExpr: "$(POD_NAME"}, want: "$(POD_NAME"},
		{vm: v1.VolumeMount{SubPathExpr: "$(NOPE)/$(EMPTY)/$(NOPE)"}, wantErr: "missing value for EMPTY, NOPE"},
		{vm: v1.VolumeMount{SubPathExpr: "$(UP)/x"}, wantErr: "unable to provision SubPath `../x`: must not contain '..'"},
		{vm: v1.VolumeMount{SubPathExpr: "$(ABS)"}, wantErr: "error SubPath `/etc` must not be an absolute path"},
	}
	for _, tt := range tests {
		got, err := subPathOf(&tt.vm, envs)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("%+v: %q, %v; want error %q", tt.vm, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%+v: %q, %v; want %q", tt.vm, got, err, tt.want)
		}
	}
}

// TestRemovePodKeepsDataBehindMounts: before the fix RemovePod's
// os.RemoveAll of plugins/ deleted what a CSI driver (or an earlier kubelet)
// had mounted there.
func TestRemovePodKeepsDataBehindMounts(t *testing.T) {
	r := newVolumeRig(t)
	precious := t.TempDir()
	if err := os.WriteFile(filepath.Join(precious, "pv-data"), []byte("pv"), 0o644); err != nil {
		t.Fatal(err)
	}
	podDir := r.m.PodDir("uid-1")
	csi := filepath.Join(podDir, "plugins", "kubernetes.io~csi", "pv", "mount")
	logDir := filepath.Join(r.root, "logs", "ns1_web-0_uid-1")
	logMount := filepath.Join(logDir, "mnt")
	for _, d := range []string{csi, filepath.Join(podDir, "containers", "c"), logMount} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	for _, mp := range []string{csi, logMount} {
		if err := unix.Mount(precious, mp, "", unix.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.m.RemovePod(context.Background(), "uid-1", &pleg.PodStatus{}, logDir); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(precious, "pv-data")); err != nil || string(got) != "pv" {
		t.Fatalf("data behind the mounts: %q, %v", got, err)
	}
	if _, err := os.Lstat(filepath.Join(podDir, "containers")); !os.IsNotExist(err) {
		t.Errorf("containers/ not removed: %v", err)
	}
	if mounted, _ := mountutil.IsMountPoint(csi); !mounted {
		t.Error("the CSI mount was not kept")
	}
}
