package volumes

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"golang.org/x/sys/unix"

	"github.com/nodelet/nodelet/internal/mountutil"
	"github.com/nodelet/nodelet/internal/safepath"
)

// subPathRig is a manager with one pod whose emptyDir "scratch" and hostPath
// "host" are set up, and a directory "outside" no sub path may reach.
type subPathRig struct {
	m       *Manager
	root    string
	pod     *v1.Pod
	vols    map[string]HostVolume
	outside string
}

func newSubPathRig(t *testing.T) *subPathRig {
	t.Helper()
	requireRoot(t)
	m, root, _ := newTestManager(t, nil)
	// Last resort if a test fails half-way: no mount outlives the test.
	t.Cleanup(func() { _, _ = mountutil.UnmountAllUnder(root) })
	host := filepath.Join(t.TempDir(), "host")
	if err := os.MkdirAll(filepath.Join(host, "keep"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(host, "keep", "data"), []byte("host data"), 0o644); err != nil {
		t.Fatal(err)
	}
	pod := testPod(
		v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		v1.Volume{Name: "host", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: host}}},
	)
	tearDownOnCleanup(t, m, pod.UID)
	vols, err := m.SetUpPod(context.Background(), pod)
	if err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.Mkdir(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	return &subPathRig{m: m, root: root, pod: pod, vols: vols, outside: outside}
}

func (r *subPathRig) prepare(t *testing.T, vol, sub string, index int) (string, error) {
	t.Helper()
	return r.m.PrepareSubPath(context.Background(), r.pod, r.vols[vol], SubPath{Volume: vol, Container: "main", Index: index, Path: sub})
}

// plant does what a container can do in its emptyDir.
func (r *subPathRig) plant(t *testing.T, name, linkTarget string) {
	t.Helper()
	if err := os.Symlink(linkTarget, filepath.Join(r.vols["scratch"].Path, name)); err != nil {
		t.Fatal(err)
	}
}

func (r *subPathRig) target(vol string, index int) string {
	return filepath.Join(r.root, "pods", string(r.pod.UID), "volume-subpaths", vol, "main", strconv.Itoa(index))
}

func sameInode(t *testing.T, a, b string) bool {
	t.Helper()
	var sa, sb unix.Stat_t
	if err := unix.Stat(a, &sa); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(b, &sb); err != nil {
		t.Fatal(err)
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino
}

// TestPrepareSubPathRefusesPlantedLinks is the CVE-2017-1002101 scenario: a
// container links escape -> / (or to another host directory) in its emptyDir
// and the next container mounts the volume with subPath escape or escape/a/b.
func TestPrepareSubPathRefusesPlantedLinks(t *testing.T) {
	r := newSubPathRig(t)
	r.plant(t, "escape", "/")
	r.plant(t, "elsewhere", r.outside)
	r.plant(t, "up", "../../../../..")
	tests := []struct {
		sub    string
		create bool
	}{
		{sub: "escape"},
		{sub: "escape/etc"},
		{sub: "elsewhere/a/b"},
		{sub: "up/a"},
	}
	for i, tt := range tests {
		target, err := r.prepare(t, "scratch", tt.sub, i)
		if err == nil {
			t.Fatalf("subPath %q prepared as %s, want an error", tt.sub, target)
		}
		var se *SubPathError
		if !errors.As(err, &se) || !errors.Is(err, safepath.ErrEscape) {
			t.Errorf("subPath %q: error %v, want a SubPathError wrapping ErrEscape", tt.sub, err)
		}
	}
	if entries, _ := os.ReadDir(r.outside); len(entries) != 0 {
		t.Errorf("created outside the volume: %v", entries)
	}
	if mps, _ := mountutil.PointsUnder(filepath.Join(r.root, "pods")); len(mps) != 0 {
		t.Errorf("mounts after refused sub paths: %v", mps)
	}
}

func TestPrepareSubPathMountsCreatesAndReuses(t *testing.T) {
	r := newSubPathRig(t)
	vol := r.vols["scratch"].Path
	target, err := r.prepare(t, "scratch", "data/new", 0)
	if err != nil {
		t.Fatal(err)
	}
	if target != r.target("scratch", 0) {
		t.Errorf("target %s, want %s", target, r.target("scratch", 0))
	}
	for _, p := range []string{"data", "data/new"} {
		// The emptyDir's 0777, so a non-root container can write there too.
		if md := mode(t, filepath.Join(vol, p)); md != 0o777 {
			t.Errorf("%s created with mode %v, want 0777", p, md)
		}
	}
	if !sameInode(t, target, filepath.Join(vol, "data/new")) {
		t.Fatal("target is not the sub path")
	}
	if err := os.WriteFile(filepath.Join(target, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, filepath.Join(vol, "data/new/f")); got != "x" {
		t.Errorf("written through the mount: %q", got)
	}

	// A restarted container gets the same mount back.
	again, err := r.prepare(t, "scratch", "data/new", 0)
	if err != nil || again != target {
		t.Fatalf("second prepare = %s, %v", again, err)
	}
	if mps, _ := mountutil.PointsUnder(target); len(mps) != 1 {
		t.Errorf("mounts at target after reuse: %v", mps)
	}

	// The container replaced the directory: the stale mount is swapped.
	if err := os.Rename(filepath.Join(vol, "data/new"), filepath.Join(vol, "data/old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(vol, "data/new"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := r.prepare(t, "scratch", "data/new", 0); err != nil {
		t.Fatal(err)
	}
	if !sameInode(t, target, filepath.Join(vol, "data/new")) {
		t.Error("target still shows the replaced directory")
	}
	if mps, _ := mountutil.PointsUnder(target); len(mps) != 1 {
		t.Errorf("mounts at target after replacement: %v", mps)
	}
}

// TestPrepareSubPathFileThroughInVolumeLink mounts a file reached through
// links inside the volume, as a configMap key is (key -> ..data/key).
func TestPrepareSubPathFileThroughInVolumeLink(t *testing.T) {
	r := newSubPathRig(t)
	vol := r.vols["scratch"].Path
	if err := os.MkdirAll(filepath.Join(vol, "..2024"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vol, "..2024", "key"), []byte("conf"), 0o644); err != nil {
		t.Fatal(err)
	}
	r.plant(t, "..data", "..2024")
	r.plant(t, "key", "..data/key")
	target, err := r.prepare(t, "scratch", "key", 1)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(target); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("target %s: %v, %v; want a file", target, fi, err)
	}
	if got := mustRead(t, target); got != "conf" {
		t.Errorf("target reads %q", got)
	}
}

// TestTearDownPodRemovesSubPathsKeepingHostData: teardown unmounts the sub
// path mounts (nodelet's and those an earlier kubelet left) and removes
// volume-subpaths without deleting what was behind them.
func TestTearDownPodRemovesSubPathsKeepingHostData(t *testing.T) {
	r := newSubPathRig(t)
	if _, err := r.prepare(t, "host", "keep", 0); err != nil {
		t.Fatal(err)
	}
	// What the upstream kubelet leaves for a dead pod: a bind mount in
	// volume-subpaths of a directory nodelet never set up.
	left := r.target("legacy", 3)
	if err := os.MkdirAll(left, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(r.outside, left, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.outside, "pv-data"), []byte("pv"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.m.TearDownPod(context.Background(), r.pod.UID); err != nil {
		t.Fatal(err)
	}
	subpaths := filepath.Join(r.root, "pods", string(r.pod.UID), "volume-subpaths")
	if _, err := os.Lstat(subpaths); !os.IsNotExist(err) {
		t.Errorf("volume-subpaths left: %v", err)
	}
	if mps, _ := mountutil.PointsUnder(r.root); len(mps) != 0 {
		t.Errorf("mounts left: %v", mps)
	}
	if got := mustRead(t, filepath.Join(r.vols["host"].Path, "keep", "data")); got != "host data" {
		t.Errorf("hostPath data: %q", got)
	}
	if got := mustRead(t, filepath.Join(r.outside, "pv-data")); got != "pv" {
		t.Errorf("data behind the leftover mount: %q", got)
	}
	// TearDownSubPaths on its own is idempotent.
	if err := r.m.TearDownSubPaths(context.Background(), types.UID("uid-1")); err != nil {
		t.Error(err)
	}
}
