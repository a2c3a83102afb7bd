package volumes

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// fileState is what an fsGroup walk may change.
type fileState struct {
	gid  uint32
	mode os.FileMode
}

func lstate(t *testing.T, p string) fileState {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fileState{fi.Sys().(*syscall.Stat_t).Gid, fi.Mode()}
}

// outsideTree is a host directory a pod must never reach: a directory, a
// setuid file and a plain file, none of group 2000 nor group-writable.
type outsideTree struct {
	dir   string
	files map[string]fileState
}

func newOutsideTree(t *testing.T, dir string) outsideTree {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "etc"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, mode := range map[string]os.FileMode{"etc/shadow": 0o600, "bin": 0o4755} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("host"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	o := outsideTree{dir: dir, files: map[string]fileState{}}
	for _, name := range []string{".", "etc", "etc/shadow", "bin"} {
		o.files[name] = lstate(t, filepath.Join(dir, name))
	}
	return o
}

func (o outsideTree) assertUntouched(t *testing.T) {
	t.Helper()
	for name, want := range o.files {
		if got := lstate(t, filepath.Join(o.dir, name)); got != want {
			t.Errorf("outside %s: gid %d mode %v, want gid %d mode %v (the walk followed a link out of the volume)",
				name, got.gid, got.mode, want.gid, want.mode)
		}
	}
}

// TestFSGroupWalkDoesNotFollowSwappedEntries swaps, between the listing of
// an entry and its use, a directory and a file of the volume for symlinks to
// a host directory and a host file. The walk must change only the links
// themselves; a walk by path (the Lchown then Chmod of before) chmods the
// host directory through the link and walks into it.
func TestFSGroupWalkDoesNotFollowSwappedEntries(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		name, swap, target string
	}{
		{"directory at the root", "d", "."},
		{"file at the root", "f", "bin"},
		{"directory below", "d/sub", "."},
		{"file below", "d/g", "etc/shadow"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmp := t.TempDir()
			out := newOutsideTree(t, filepath.Join(tmp, "host"))
			vol := filepath.Join(tmp, "vol")
			if err := os.MkdirAll(filepath.Join(vol, "d", "sub"), 0o777); err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{"f", "d/g", "d/sub/h"} {
				if err := os.WriteFile(filepath.Join(vol, f), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Chmod(filepath.Join(vol, "d"), 0o755); err != nil {
				t.Fatal(err)
			}
			swapped := false
			w := fsGroupWalk{beforeOpen: func(dir, name string) error {
				p := filepath.Join(dir, name)
				if swapped || p != filepath.Join(vol, tc.swap) {
					return nil
				}
				swapped = true
				if err := os.Rename(p, p+".moved"); err != nil {
					return err
				}
				return os.Symlink(filepath.Join(out.dir, tc.target), p)
			}}
			if err := w.apply(vol, 2000, false); err != nil {
				t.Fatalf("walk: %v", err)
			}
			if !swapped {
				t.Fatalf("the walk never reached %s", tc.swap)
			}
			out.assertUntouched(t)
			// The link itself gets the group (upstream's Lchown), the rest
			// of the volume the group and its bits.
			if got := lstate(t, filepath.Join(vol, tc.swap)); got.gid != 2000 || got.mode&os.ModeSymlink == 0 {
				t.Errorf("swapped-in link: gid %d mode %v, want a link of group 2000", got.gid, got.mode)
			}
			if got := lstate(t, filepath.Join(vol, "d")); tc.swap != "d" && (got.gid != 2000 || got.mode != os.ModeDir|os.ModeSetgid|0o775) {
				t.Errorf("d: gid %d mode %v, want 2000 and setgid 0775", got.gid, got.mode)
			}
			if got := lstate(t, filepath.Join(vol, "f")); tc.swap != "f" && (got.gid != 2000 || got.mode != 0o664) {
				t.Errorf("f: gid %d mode %v, want 2000 and 0664", got.gid, got.mode)
			}
		})
	}
}

// TestFSGroupWalkUnderRenameExchange races walks against a pod that keeps
// exchanging a directory of its volume with a symlink to a host directory
// (renameat2 RENAME_EXCHANGE, so the name always exists): whatever the
// interleaving, no host file is changed.
func TestFSGroupWalkUnderRenameExchange(t *testing.T) {
	requireRoot(t)
	tmp := t.TempDir()
	out := newOutsideTree(t, filepath.Join(tmp, "host"))
	vol := filepath.Join(tmp, "vol")
	race, asLink := filepath.Join(vol, "race"), filepath.Join(vol, "race.link")
	if err := os.MkdirAll(filepath.Join(race, "sub"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(out.dir, asLink); err != nil {
		t.Fatal(err)
	}
	exchange := func() error {
		return unix.Renameat2(unix.AT_FDCWD, race, unix.AT_FDCWD, asLink, unix.RENAME_EXCHANGE)
	}
	if err := exchange(); errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		t.Skipf("the temp dir's filesystem cannot exchange names: %v", err)
	} else if err != nil || exchange() != nil {
		t.Fatalf("exchanging %s and %s: %v", race, asLink, err)
	}
	stop := make(chan struct{})
	swapErr := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				swapErr <- nil
				return
			default:
			}
			if err := exchange(); err != nil {
				swapErr <- err
				return
			}
		}
	}()
	var w fsGroupWalk
	for i := 0; i < 1000; i++ {
		if err := w.apply(vol, int64(2000+i%2), false); err != nil {
			t.Errorf("walk %d: %v", i, err)
		}
	}
	close(stop)
	if err := <-swapErr; err != nil {
		t.Fatalf("swapping: %v", err)
	}
	out.assertUntouched(t)
}

// TestFSGroupWalkStopsAtMountPoints leaves a filesystem mounted inside the
// volume alone, mount point included.
func TestFSGroupWalkStopsAtMountPoints(t *testing.T) {
	requireRoot(t)
	vol := t.TempDir()
	mp := filepath.Join(vol, "mnt")
	if err := os.Mkdir(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", mp, "tmpfs", 0, "mode=0755"); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mp, unix.MNT_DETACH) })
	inner := filepath.Join(mp, "file")
	if err := os.WriteFile(inner, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	beforeMP, beforeInner := lstate(t, mp), lstate(t, inner)
	if err := (fsGroupWalk{}).apply(vol, 2000, false); err != nil {
		t.Fatal(err)
	}
	if got := lstate(t, mp); got != beforeMP {
		t.Errorf("mount point changed: %+v, was %+v", got, beforeMP)
	}
	if got := lstate(t, inner); got != beforeInner {
		t.Errorf("file on the mounted filesystem changed: %+v, was %+v", got, beforeInner)
	}
	if got := lstate(t, vol); got.gid != 2000 {
		t.Errorf("volume root gid %d, want 2000", got.gid)
	}
}

// TestFSGroupWalkRefusesSymlinkRoot: a volume root that is a link is not
// walked (nor its target changed).
func TestFSGroupWalkRefusesSymlinkRoot(t *testing.T) {
	requireRoot(t)
	tmp := t.TempDir()
	out := newOutsideTree(t, filepath.Join(tmp, "host"))
	link := filepath.Join(tmp, "vol")
	if err := os.Symlink(out.dir, link); err != nil {
		t.Fatal(err)
	}
	if err := (fsGroupWalk{}).apply(link, 2000, false); err == nil {
		t.Error("walk of a symlink root succeeded")
	}
	out.assertUntouched(t)
}

// TestChmodProcFd checks the fallback used before Linux 6.6 on an O_PATH
// descriptor, which fchmod refuses.
func TestChmodProcFd(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(p, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := chmodProcFd(fd, 0o640); err != nil {
		t.Fatal(err)
	}
	if got := lstate(t, p).mode; got != 0o640 {
		t.Errorf("mode %v, want 0640", got)
	}
}
