package mountutil

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount (bind mounts and tmpfs in a temp dir)")
	}
}

// bind bind-mounts src on dst and unmounts it when the test ends.
func bind(t *testing.T, src, dst string) {
	t.Helper()
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind-mounting %s on %s: %v", src, dst, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dst, unix.MNT_DETACH) })
}

func tmpfs(t *testing.T, dst string) {
	t.Helper()
	if err := unix.Mount("tmpfs", dst, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mounting tmpfs on %s: %v", dst, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dst, unix.MNT_DETACH) })
}

func write(t *testing.T, p, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestRemoveAllKeepsMountedData builds a pod directory with what an earlier
// kubelet can leave behind (a CSI-style directory bind mount, a subPath file
// bind mount, a tmpfs, a symlink out) and checks RemoveAll deletes the
// pod's own files but no byte behind a mount or a link.
func TestRemoveAllKeepsMountedData(t *testing.T) {
	requireRoot(t)
	base := t.TempDir()
	precious := filepath.Join(base, "precious")
	write(t, filepath.Join(precious, "dir", "data"), "dir data")
	write(t, filepath.Join(precious, "file"), "file data")
	pod := filepath.Join(base, "pods", "uid")
	write(t, filepath.Join(pod, "containers", "c", "0"), "")
	write(t, filepath.Join(pod, "etc-hosts"), "")
	csi := filepath.Join(pod, "plugins", "kubernetes.io~csi", "pv", "mount")
	mkdir(t, csi)
	bind(t, filepath.Join(precious, "dir"), csi)
	sub := filepath.Join(pod, "volume-subpaths", "v", "c", "0")
	write(t, sub, "")
	bind(t, filepath.Join(precious, "file"), sub)
	mem := filepath.Join(pod, "volumes", "kubernetes.io~empty-dir", "mem")
	mkdir(t, mem)
	tmpfs(t, mem)
	write(t, filepath.Join(mem, "x"), "in tmpfs")
	if err := os.Symlink(precious, filepath.Join(pod, "link")); err != nil {
		t.Fatal(err)
	}

	kept, err := RemoveAll(pod)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(kept)
	if want := []string{csi, sub, mem}; !slices.Equal(kept, want) {
		t.Errorf("kept %v, want %v", kept, want)
	}
	for p, want := range map[string]string{
		filepath.Join(precious, "dir", "data"): "dir data",
		filepath.Join(precious, "file"):        "file data",
		filepath.Join(mem, "x"):                "in tmpfs",
	} {
		if got, err := os.ReadFile(p); err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", p, got, err, want)
		}
	}
	for _, gone := range []string{"containers", "etc-hosts", "link"} {
		if _, err := os.Lstat(filepath.Join(pod, gone)); !os.IsNotExist(err) {
			t.Errorf("%s not removed: %v", gone, err)
		}
	}

	// Once unmounted, the rest goes.
	if n, err := UnmountAndRemoveAll(pod); err != nil || n != 3 {
		t.Fatalf("UnmountAndRemoveAll = %d, %v; want 3", n, err)
	}
	if _, err := os.Lstat(pod); !os.IsNotExist(err) {
		t.Errorf("pod directory left: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(precious, "dir", "data")); err != nil || string(got) != "dir data" {
		t.Errorf("precious data after unmount and removal: %q, %v", got, err)
	}
}

func TestRemoveAllOfAMountPointKeepsIt(t *testing.T) {
	requireRoot(t)
	base := t.TempDir()
	src, dst := filepath.Join(base, "src"), filepath.Join(base, "dst")
	write(t, filepath.Join(src, "f"), "data")
	mkdir(t, dst)
	bind(t, src, dst)
	kept, err := RemoveAll(dst)
	if err != nil || !slices.Equal(kept, []string{dst}) {
		t.Fatalf("RemoveAll(mount point) kept %v, %v", kept, err)
	}
	if _, err := os.Stat(filepath.Join(src, "f")); err != nil {
		t.Errorf("data behind the mount point: %v", err)
	}
}

func TestRemoveAllMissingAndSymlink(t *testing.T) {
	base := t.TempDir()
	if kept, err := RemoveAll(filepath.Join(base, "absent")); err != nil || kept != nil {
		t.Errorf("RemoveAll(absent) = %v, %v", kept, err)
	}
	write(t, filepath.Join(base, "target", "f"), "x")
	link := filepath.Join(base, "link")
	if err := os.Symlink("target", link); err != nil {
		t.Fatal(err)
	}
	if kept, err := RemoveAll(link); err != nil || kept != nil {
		t.Errorf("RemoveAll(link) = %v, %v", kept, err)
	}
	if _, err := os.Lstat(link); !os.IsNotExist(err) {
		t.Errorf("link left: %v", err)
	}
	if _, err := os.Stat(filepath.Join(base, "target", "f")); err != nil {
		t.Errorf("link target touched: %v", err)
	}
}

func TestIsMountPointWithEscapedName(t *testing.T) {
	requireRoot(t)
	dir := filepath.Join(t.TempDir(), "with space\tand tab")
	mkdir(t, dir)
	if m, err := IsMountPoint(dir); err != nil || m {
		t.Fatalf("before mount: %v, %v", m, err)
	}
	tmpfs(t, dir)
	if m, err := IsMountPoint(dir); err != nil || !m {
		t.Fatalf("after mount: %v, %v", m, err)
	}
	if err := Unmount(dir); err != nil {
		t.Fatal(err)
	}
	if err := Unmount(dir); err != nil {
		t.Errorf("second unmount: %v", err)
	}
}

func TestRemoveAt(t *testing.T) {
	requireRoot(t)
	base := t.TempDir()
	dir := filepath.Join(base, "dir")
	write(t, filepath.Join(dir, "file"), "x")
	write(t, filepath.Join(base, "outside"), "precious")
	if err := os.Symlink("../outside", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	mkdir(t, filepath.Join(dir, "empty"))
	write(t, filepath.Join(dir, "full", "f"), "x")
	// A file bind mount on the same filesystem: only the mount says it is not the dir's.
	write(t, filepath.Join(dir, "bound"), "")
	bind(t, filepath.Join(base, "outside"), filepath.Join(dir, "bound"))
	mkdir(t, filepath.Join(dir, "tmp"))
	tmpfs(t, filepath.Join(dir, "tmp"))

	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, tc := range []struct {
		name    string
		kept    bool
		wantErr bool
		stays   bool // the entry exists afterwards
	}{
		{name: "file"},
		{name: "link"},
		{name: "empty"},
		{name: "absent"},
		{name: "bound", kept: true, stays: true},
		{name: "tmp", kept: true, stays: true},
		{name: "full", wantErr: true, stays: true},
		{name: "../outside", wantErr: true},
		{name: "..", wantErr: true},
	} {
		kept, err := RemoveAt(d, tc.name)
		if kept != tc.kept || (err != nil) != tc.wantErr {
			t.Errorf("RemoveAt(%q) = %v, %v; want kept %v, error %v", tc.name, kept, err, tc.kept, tc.wantErr)
		}
		if strings.Contains(tc.name, "/") || tc.name == ".." {
			continue
		}
		_, err = os.Lstat(filepath.Join(dir, tc.name))
		if exists := err == nil; exists != tc.stays {
			t.Errorf("after RemoveAt(%q): exists %v, want %v", tc.name, exists, tc.stays)
		}
	}
	if got, err := os.ReadFile(filepath.Join(base, "outside")); err != nil || string(got) != "precious" {
		t.Errorf("file behind the link and the bind mount: %q, %v", got, err)
	}
}
