package volumes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func TestEmptyDirSetUpNeeded(t *testing.T) {
	for _, tc := range []struct {
		ready, dirExists, mounted, memory bool
		setUp, dropMarker                 bool
	}{
		{ready: false, dirExists: false, setUp: true},
		{ready: false, dirExists: true, setUp: true},
		{ready: true, dirExists: true},
		{ready: true, dirExists: false, setUp: true, dropMarker: true},
		{ready: false, dirExists: true, mounted: true, memory: true, setUp: true},
		{ready: true, dirExists: true, mounted: true, memory: true},
		{ready: true, dirExists: true, mounted: false, memory: true, setUp: true},
		{ready: true, dirExists: false, memory: true, setUp: true},
	} {
		setUp, drop := emptyDirSetUpNeeded(tc.ready, tc.dirExists, tc.mounted, tc.memory)
		if setUp != tc.setUp || drop != tc.dropMarker {
			t.Errorf("emptyDirSetUpNeeded(ready %v, dir %v, mounted %v, memory %v) = %v, %v; want %v, %v",
				tc.ready, tc.dirExists, tc.mounted, tc.memory, setUp, drop, tc.setUp, tc.dropMarker)
		}
	}
}

func fsGroupEmptyDirPod() *v1.Pod {
	pod := testPod(v1.Volume{Name: "e", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}})
	pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr.To[int64](2000)}
	return pod
}

// writePodFile stands for a file the pod wrote in its emptyDir: not of the
// fsGroup, not group-readable.
func writePodFile(t *testing.T, p string) fileState {
	t.Helper()
	_ = os.Remove(p)
	if err := os.WriteFile(p, []byte("pod data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, -1, 0); err != nil {
		t.Fatal(err)
	}
	return lstate(t, p)
}

// countWalks makes m count the entries its fsGroup walks open.
func countWalks(m *Manager) *int {
	n := new(int)
	m.fsGroupWalk.beforeOpen = func(string, string) error { *n++; return nil }
	return n
}

// TestEmptyDirWalkedOnceAcrossRestarts: an emptyDir given to the fsGroup
// carries upstream's ready marker, so a restarted nodelet (a new manager on
// the same root) never walks the pod's files again.
func TestEmptyDirWalkedOnceAcrossRestarts(t *testing.T) {
	requireRoot(t)
	m, root, clk := newTestManager(t, nil, WithoutTmpfs())
	pod := fsGroupEmptyDirPod()
	tearDownOnCleanup(t, m, pod.UID)
	ctx := context.Background()
	if _, err := m.SetUpPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(root, "pods", string(pod.UID), "plugins", "kubernetes.io~empty-dir", "e", "ready")
	if fi, err := os.Lstat(marker); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("ready marker %s: %v", marker, err)
	}
	data := filepath.Join(volPath(root, pod.UID, pluginEmptyDir, "e"), "data")
	want := writePodFile(t, data)

	m2 := NewManager(root, nil, clk, WithoutTmpfs())
	walks := countWalks(m2)
	if _, err := m2.SetUpPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if *walks != 0 {
		t.Errorf("restarted manager walked %d entries of a ready emptyDir", *walks)
	}
	if got := lstate(t, data); got != want {
		t.Errorf("pod file after restart: %+v, want %+v untouched", got, want)
	}
}

// TestEmptyDirFailedWalkRetried: a walk that fails leaves no marker and is
// retried on the next sync; once one succeeds, neither this manager nor a
// restarted one walks again.
func TestEmptyDirFailedWalkRetried(t *testing.T) {
	requireRoot(t)
	m, root, clk := newTestManager(t, nil, WithoutTmpfs())
	pod := fsGroupEmptyDirPod()
	tearDownOnCleanup(t, m, pod.UID)
	ctx := context.Background()
	// Content from before the marker existed (an earlier nodelet version,
	// or a restart between the setup and the walk).
	dir := volPath(root, pod.UID, pluginEmptyDir, "e")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	writePodFile(t, data)
	marker := filepath.Join(root, "pods", string(pod.UID), "plugins", "kubernetes.io~empty-dir", "e", "ready")

	walks := 0
	m.fsGroupWalk.beforeOpen = func(string, string) error {
		walks++
		if walks == 1 {
			return fmt.Errorf("injected walk failure")
		}
		return nil
	}
	if _, err := m.SetUpPod(ctx, pod); err == nil {
		t.Fatal("SetUpPod succeeded with a failing walk")
	}
	if _, err := os.Lstat(marker); !os.IsNotExist(err) {
		t.Fatalf("ready marker after a failed walk: %v", err)
	}
	if _, err := m.SetUpPod(ctx, pod); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if walks != 2 {
		t.Errorf("walked %d entries, want the failed walk and its retry", walks)
	}
	if got := lstate(t, data); got.gid != 2000 || got.mode != 0o660 {
		t.Errorf("after the retried walk: %+v, want gid 2000 mode 0660", got)
	}
	if _, err := os.Lstat(marker); err != nil {
		t.Errorf("no ready marker after a successful walk: %v", err)
	}
	want := writePodFile(t, data)
	if _, err := m.SetUpPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	m2 := NewManager(root, nil, clk, WithoutTmpfs())
	walks2 := countWalks(m2)
	if _, err := m2.SetUpPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if walks != 2 || *walks2 != 0 {
		t.Errorf("walks after success: %d more here, %d by a restarted manager; want none", walks-2, *walks2)
	}
	if got := lstate(t, data); got != want {
		t.Errorf("pod file: %+v, want %+v untouched", got, want)
	}
}

// TestEmptyDirMarkerWithoutDirectory: a marker whose directory is gone is
// dropped and the volume set up (and walked) again, as upstream.
func TestEmptyDirMarkerWithoutDirectory(t *testing.T) {
	requireRoot(t)
	m, root, clk := newTestManager(t, nil, WithoutTmpfs())
	pod := fsGroupEmptyDirPod()
	tearDownOnCleanup(t, m, pod.UID)
	ctx := context.Background()
	if _, err := m.SetUpPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	dir := volPath(root, pod.UID, pluginEmptyDir, "e")
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	m2 := NewManager(root, nil, clk, WithoutTmpfs())
	if _, err := m2.SetUpPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if got := lstate(t, dir); got.gid != 2000 || got.mode != os.ModeDir|os.ModeSetgid|0o777 {
		t.Errorf("re-created emptyDir: %+v, want gid 2000, setgid 0777", got)
	}
}
