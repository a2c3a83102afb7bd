package mountutil

import (
	"errors"
	"fmt"
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

// outsideTree fills dir with files a removal must never reach, and returns a
// check that they are all still there.
func outsideTree(t *testing.T, dir string) func() {
	t.Helper()
	var files []string
	for i := range 20 {
		files = append(files, filepath.Join(dir, fmt.Sprintf("f%d", i)), filepath.Join(dir, "sub", fmt.Sprintf("g%d", i)))
	}
	for _, f := range files {
		write(t, f, "host data")
	}
	return func() {
		t.Helper()
		for _, f := range files {
			if got, err := os.ReadFile(f); err != nil || string(got) != "host data" {
				t.Errorf("outside file %s: %q, %v", f, got, err)
			}
		}
	}
}

// TestRemoveAllDoesNotFollowDirSwappedForSymlink swaps a directory for a
// symlink to a directory full of host files right after RemoveAll checked it
// (a directory on its parent's mount) and before it descends: the link must
// be removed as a link and no host file deleted. This is the race of a pod
// writing its log directory through a hostPath of /var/log.
func TestRemoveAllDoesNotFollowDirSwappedForSymlink(t *testing.T) {
	for _, tc := range []struct {
		name    string
		swap    string // relative to the pod directory; "" is the pod directory itself
		absLink bool
	}{
		{name: "nested relative link", swap: "c/0"},
		{name: "nested absolute link", swap: "c", absLink: true},
		{name: "the removed directory itself", swap: "", absLink: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			outside := filepath.Join(base, "outside")
			untouched := outsideTree(t, outside)
			pod := filepath.Join(base, "logs", "ns_pod_uid")
			write(t, filepath.Join(pod, "c", "0", "0.log"), "log")
			write(t, filepath.Join(pod, "c", "1.log"), "log")
			target := filepath.Join(pod, tc.swap)
			swapped := 0
			r := &remover{beforeOpen: func(p string) {
				if p != target {
					return
				}
				swapped++
				if err := os.Rename(target, filepath.Join(base, "moved")); err != nil {
					t.Errorf("moving %s away: %v", target, err)
				}
				link, _ := filepath.Rel(filepath.Dir(target), outside)
				if tc.absLink {
					link = outside
				}
				if err := os.Symlink(link, target); err != nil {
					t.Errorf("linking %s: %v", target, err)
				}
			}}
			kept, err := r.removeAll(pod)
			if swapped != 1 {
				t.Fatalf("the swap ran %d times, want once", swapped)
			}
			if err != nil || len(kept) > 0 {
				t.Errorf("removeAll = %v, %v; want nothing kept, no error", kept, err)
			}
			untouched()
			if _, err := os.Lstat(pod); !os.IsNotExist(err) {
				t.Errorf("pod directory left: %v", err)
			}
		})
	}
}

// TestRemoveAllKeepsMountAppearingBeforeDescent bind-mounts a host directory
// (same device, so only the mount tells it apart) on a directory after it
// was checked and before it is opened: what was opened is checked again, so
// it is kept, not emptied.
func TestRemoveAllKeepsMountAppearingBeforeDescent(t *testing.T) {
	requireRoot(t)
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	untouched := outsideTree(t, outside)
	pod := filepath.Join(base, "pod")
	target := filepath.Join(pod, "plugins", "mount")
	write(t, filepath.Join(target, "x"), "")
	write(t, filepath.Join(pod, "etc-hosts"), "")
	r := &remover{beforeOpen: func(p string) {
		if p == target {
			bind(t, outside, target)
		}
	}}
	kept, err := r.removeAll(pod)
	if err != nil || !slices.Equal(kept, []string{target}) {
		t.Errorf("removeAll = %v, %v; want %s kept", kept, err, target)
	}
	untouched()
	if _, err := os.Lstat(filepath.Join(pod, "etc-hosts")); !os.IsNotExist(err) {
		t.Errorf("etc-hosts not removed: %v", err)
	}
}

// TestRemoveAllDepthLimit checks a tree deeper than RemoveAll descends is an
// error that keeps it, one within the limit goes, and neither leaks a
// descriptor.
func TestRemoveAllDepthLimit(t *testing.T) {
	base := t.TempDir()
	deep := func(name string, depth int) string {
		top := filepath.Join(base, name)
		p := top
		for range depth {
			p = filepath.Join(p, "d")
		}
		write(t, filepath.Join(p, "f"), "")
		return top
	}
	fdsBefore := openFDs(t)

	ok := deep("ok", maxRemoveDepth-1)
	if kept, err := RemoveAll(ok); err != nil || kept != nil {
		t.Errorf("RemoveAll(%d directories deep) = %v, %v", maxRemoveDepth, kept, err)
	}
	if _, err := os.Lstat(ok); !os.IsNotExist(err) {
		t.Errorf("tree within the limit left: %v", err)
	}

	tooDeep := deep("deep", maxRemoveDepth+5)
	kept, err := RemoveAll(tooDeep)
	if !errors.Is(err, ErrTooDeep) || kept != nil {
		t.Errorf("RemoveAll(%d directories deep) = %v, %v; want %v", maxRemoveDepth+6, kept, err, ErrTooDeep)
	}
	if _, err := os.Lstat(tooDeep); err != nil {
		t.Errorf("too deep a tree was removed in part up to its top: %v", err)
	}
	if n := strings.Count(err.Error(), "\n"); n != 0 {
		t.Errorf("one error expected, got %d lines: %.300s", n+1, err)
	}

	if after := openFDs(t); after != fdsBefore {
		t.Errorf("open descriptors: %d before, %d after", fdsBefore, after)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

func TestCrossesMount(t *testing.T) {
	dir := unix.Statx_t{Mask: unix.STATX_MNT_ID, Mnt_id: 1, Dev_major: 8, Dev_minor: 1}
	for _, tc := range []struct {
		name  string
		entry unix.Statx_t
		want  bool
	}{
		{"same mount and device", unix.Statx_t{Mask: unix.STATX_MNT_ID, Mnt_id: 1, Dev_major: 8, Dev_minor: 1}, false},
		{"bind mount of the same device", unix.Statx_t{Mask: unix.STATX_MNT_ID, Mnt_id: 2, Dev_major: 8, Dev_minor: 1}, true},
		{"mount root flagged", unix.Statx_t{Mask: unix.STATX_MNT_ID, Mnt_id: 1, Dev_major: 8, Dev_minor: 1,
			Attributes_mask: unix.STATX_ATTR_MOUNT_ROOT, Attributes: unix.STATX_ATTR_MOUNT_ROOT}, true},
		{"mount root attribute known and unset", unix.Statx_t{Mask: unix.STATX_MNT_ID, Mnt_id: 1, Dev_major: 8, Dev_minor: 1,
			Attributes_mask: unix.STATX_ATTR_MOUNT_ROOT}, false},
		{"other device", unix.Statx_t{Mask: unix.STATX_MNT_ID, Mnt_id: 1, Dev_major: 0, Dev_minor: 42}, true},
		{"other minor", unix.Statx_t{Mask: unix.STATX_MNT_ID, Mnt_id: 1, Dev_major: 8, Dev_minor: 2}, true},
		{"no mount ID (old kernel), same device", unix.Statx_t{Mnt_id: 0, Dev_major: 8, Dev_minor: 1}, false},
		{"no mount ID (old kernel), other device", unix.Statx_t{Dev_major: 9, Dev_minor: 1}, true},
	} {
		if got := crossesMount(&dir, &tc.entry); got != tc.want {
			t.Errorf("%s: crossesMount = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestUnmountAllUnderDoesNotFollowSwappedLink swaps a directory holding a
// mount point for a symlink to a directory holding a host mount point after
// mountinfo was read: unmounting by path would take the host mount down.
func TestUnmountAllUnderDoesNotFollowSwappedLink(t *testing.T) {
	requireRoot(t)
	base := t.TempDir()
	host := filepath.Join(base, "host", "mnt")
	mkdir(t, host)
	tmpfs(t, host)
	write(t, filepath.Join(host, "f"), "host data")
	pod := filepath.Join(base, "pod")
	mp := filepath.Join(pod, "a", "mnt")
	mkdir(t, mp)
	tmpfs(t, mp)
	moved := filepath.Join(base, "moved")
	t.Cleanup(func() { _ = unix.Unmount(filepath.Join(moved, "mnt"), unix.MNT_DETACH) })
	u := &unmounter{beforeUnmount: func(p string) {
		if p != mp {
			return
		}
		if err := os.Rename(filepath.Join(pod, "a"), moved); err != nil {
			t.Errorf("moving the directory away: %v", err)
		}
		if err := os.Symlink("../host", filepath.Join(pod, "a")); err != nil {
			t.Error(err)
		}
	}}
	if _, err := u.allUnder(pod); !errors.Is(err, unix.ELOOP) {
		t.Errorf("allUnder = %v, want %v (a link on the way to a mount point)", err, unix.ELOOP)
	}
	if m, err := IsMountPoint(host); err != nil || !m {
		t.Errorf("host mount point %s unmounted: %v, %v", host, m, err)
	}
	if got, err := os.ReadFile(filepath.Join(host, "f")); err != nil || string(got) != "host data" {
		t.Errorf("host file: %q, %v", got, err)
	}
}
