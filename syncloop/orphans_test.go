package syncloop

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"golang.org/x/sys/unix"

	"github.com/nodelet/nodelet/internal/mountutil"
	"github.com/nodelet/nodelet/pleg"
	"github.com/nodelet/nodelet/volumes"
)

// emptyPLEG lists no pods: every pod directory is an orphan.
type emptyPLEG struct{}

func (emptyPLEG) Watch() <-chan *pleg.Event  { return nil }
func (emptyPLEG) Pods() []*pleg.PodStatus    { return nil }
func (emptyPLEG) Relist(ctx context.Context) {}
func (emptyPLEG) RequestReinspect(types.UID) {}

// TestCleanupOrphanedPodDirsNeverDeletesThroughMounts is a node that switched
// from the upstream kubelet: a dead pod's directory still holds a subPath bind
// mount in volume-subpaths and a CSI-style bind mount under plugins. Before
// the fix, os.RemoveAll of the pod directory deleted the data behind both.
func TestCleanupOrphanedPodDirsNeverDeletesThroughMounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to bind-mount in a temp dir")
	}
	root := t.TempDir()
	t.Cleanup(func() { _, _ = mountutil.UnmountAllUnder(root) })
	subpathData, csiData := t.TempDir(), t.TempDir()
	for _, d := range []string{subpathData, csiData} {
		if err := os.WriteFile(filepath.Join(d, "data"), []byte("keep me"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pods := filepath.Join(root, "pods")
	mounted, plain := filepath.Join(pods, "dead-1"), filepath.Join(pods, "dead-2")
	subpath := filepath.Join(mounted, "volume-subpaths", "data", "app", "0")
	csi := filepath.Join(mounted, "plugins", "kubernetes.io~csi", "pv", "mount")
	for _, d := range []string{subpath, csi, filepath.Join(mounted, "containers", "app"), filepath.Join(plain, "containers", "app")} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	for mp, src := range map[string]string{subpath: subpathData, csi: csiData} {
		if err := unix.Mount(src, mp, "", unix.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
	}

	vols := volumes.NewManager(root, nil, clocktesting.NewFakeClock(time.Unix(0, 0)))
	l := New(Config{RootDir: root}, Deps{PLEG: emptyPLEG{}, Volumes: vols})
	l.cleanupOrphanedPodDirs(context.Background(), map[types.UID]bool{})

	for _, d := range []string{subpathData, csiData} {
		if got, err := os.ReadFile(filepath.Join(d, "data")); err != nil || string(got) != "keep me" {
			t.Errorf("data behind a mount in the pod directory: %q, %v", got, err)
		}
	}
	if _, err := os.Lstat(plain); !os.IsNotExist(err) {
		t.Errorf("orphan without mounts not removed: %v", err)
	}
	// nodelet's own kind of mount (volume-subpaths) is undone; the foreign one stays.
	if _, err := os.Lstat(filepath.Join(mounted, "volume-subpaths")); !os.IsNotExist(err) {
		t.Errorf("volume-subpaths left: %v", err)
	}
	if m, _ := mountutil.IsMountPoint(csi); !m {
		t.Error("CSI mount point removed or unmounted")
	}
	if _, err := os.Lstat(filepath.Join(mounted, "containers")); !os.IsNotExist(err) {
		t.Errorf("unmounted parts of the kept pod directory left: %v", err)
	}
}

func TestOrphanKeptError(t *testing.T) {
	dir := "/var/lib/kubelet/pods/u1"
	for _, tt := range []struct {
		kept []string
		want string
	}{
		{[]string{dir + "/plugins/kubernetes.io~csi/pv/mount", dir + "/volume-subpaths/v/c/0"}, `orphaned pod "u1" found, but volume subpaths are still present on disk`},
		{[]string{dir + "/volumes/kubernetes.io~csi/pv/mount"}, `orphaned pod "u1" found, but volume paths are still present on disk`},
		{[]string{dir + "/plugins/x"}, `orphaned pod "u1" found, but mount points are still present on disk`},
	} {
		if got := orphanKeptError(dir, "u1", tt.kept).Error(); got != tt.want {
			t.Errorf("%v: %q, want %q", tt.kept, got, tt.want)
		}
	}
}
