package gc

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodelet/nodelet/internal/mountutil"
)

// TestRemoveLogDirsNeverDeletesThroughMounts: a deleted pod's log directory
// with a bind mount in it. Before the fix os.RemoveAll emptied the mounted
// directory.
func TestRemoveLogDirsNeverDeletesThroughMounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to bind-mount in a temp dir")
	}
	logs, precious := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(precious, "data"), []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	podLogs := filepath.Join(logs, "default_gone_uid-gone")
	mp := filepath.Join(podLogs, "app", "mnt")
	if err := os.MkdirAll(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(podLogs, "app", "0.log"), []byte("log"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(precious, mp, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mp, unix.MNT_DETACH) })

	g := &ContainerGC{podLogsDir: logs}
	if err := g.removeLogDirs(func(uid string) bool { return uid == "uid-gone" }); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(precious, "data")); err != nil || string(got) != "keep me" {
		t.Errorf("data behind the mount: %q, %v", got, err)
	}
	if _, err := os.Lstat(filepath.Join(podLogs, "app", "0.log")); !os.IsNotExist(err) {
		t.Errorf("log file not removed: %v", err)
	}
	if m, _ := mountutil.IsMountPoint(mp); !m {
		t.Error("mount point removed")
	}
}
