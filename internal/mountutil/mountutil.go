// Package mountutil finds, removes and steps around mount points, so that
// nodelet never deletes data through a mount left in a pod directory (its own
// volume and subPath mounts, or an earlier kubelet's CSI and subPath mounts on
// a node that switched agents). Mount points come from /proc/self/mountinfo;
// RemoveAll never crosses a mount point or a device, and everything nodelet
// deletes under the root dir and podLogsDir goes through it.
package mountutil

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// PointsUnder returns the mount points at or below dir, deepest first, as the
// kernel spells them in /proc/self/mountinfo (this process's mount namespace,
// the one the runtime shares on a node), read with github.com/moby/sys/mountinfo:
// symlinks resolved, octal escapes undone; a path mounted twice appears twice.
func PointsUnder(dir string) ([]string, error) {
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(resolvePath(dir)))
	if err != nil {
		return nil, fmt.Errorf("reading the mount table: %w", err)
	}
	out := make([]string, 0, len(mounts))
	for _, m := range mounts {
		out = append(out, m.Mountpoint)
	}
	// Deepest first so nested mounts come off before their parents; the
	// same path mounted twice appears twice and is unmounted twice.
	sort.SliceStable(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, nil
}

// IsMountPoint reports whether path is a mount point.
func IsMountPoint(path string) (bool, error) {
	mps, err := PointsUnder(path)
	if err != nil {
		return false, err
	}
	p := resolvePath(path)
	for _, mp := range mps {
		if mp == p {
			return true, nil
		}
	}
	return false, nil
}

// UnmountAllUnder unmounts every mount point at or below dir, deepest first,
// and returns how many it unmounted. Mount points are the kernel's resolved
// paths, so a symlink on the way to one (a directory swapped for a link
// since mountinfo was read) is refused, never followed to another mount.
func UnmountAllUnder(dir string) (int, error) {
	return (&unmounter{}).allUnder(dir)
}

type unmounter struct {
	// beforeUnmount, set by tests only, runs after mountinfo was read and
	// before mp is unmounted: the window in which a path can change.
	beforeUnmount func(mp string)
}

func (u *unmounter) allUnder(dir string) (int, error) {
	mps, err := PointsUnder(dir)
	if err != nil {
		return 0, err
	}
	var errs []error
	for _, mp := range mps {
		if u.beforeUnmount != nil {
			u.beforeUnmount(mp)
		}
		if err := unmountResolved(mp); err != nil {
			errs = append(errs, err)
		}
	}
	return len(mps), errors.Join(errs...)
}

// unmountResolved is Unmount for a path with no symlink in it (as mountinfo
// spells mount points): its directory is opened with RESOLVE_NO_SYMLINKS and
// the mount point unmounted through that descriptor, not followed if a link.
func unmountResolved(mp string) error {
	dirFd, err := unix.Openat2(unix.AT_FDCWD, filepath.Dir(mp), &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS,
	})
	if errors.Is(err, unix.ENOSYS) {
		// Before Linux 5.6: the last component at least is not followed.
		if err := unmount(mp, unix.UMOUNT_NOFOLLOW); err != nil {
			return fmt.Errorf("unmounting %s: %w", mp, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("unmounting %s: opening its directory: %w", mp, err)
	}
	defer unix.Close(dirFd)
	// /proc/self/fd/N is the directory opened above, whatever its path now.
	err = unmount(fmt.Sprintf("/proc/self/fd/%d/%s", dirFd, filepath.Base(mp)), unix.UMOUNT_NOFOLLOW)
	if err != nil {
		return fmt.Errorf("unmounting %s: %w", mp, err)
	}
	return nil
}

// UnmountAndRemoveAll unmounts everything at or below dir and then removes
// dir, never crossing a mount point that is still there (which is an error).
// It returns how many mount points it unmounted.
func UnmountAndRemoveAll(dir string) (int, error) {
	n, err := UnmountAllUnder(dir)
	if err != nil {
		return n, err
	}
	return n, RemoveAllUnmounted(dir)
}

// RemoveAllUnmounted is RemoveAll for a caller that wants dir gone: a mount
// point that keeps part of it (never crossed) is an error naming it.
func RemoveAllUnmounted(dir string) error {
	kept, err := RemoveAll(dir)
	if err != nil {
		return err
	}
	if len(kept) > 0 {
		return fmt.Errorf("removing %s: still mounted %v", dir, kept)
	}
	return nil
}

// Unmount unmounts path; a path that is not a mount point is not an error.
func Unmount(path string) error {
	if err := unmount(path, 0); err != nil {
		return fmt.Errorf("unmounting %s: %w", path, err)
	}
	return nil
}

// unmount unmounts path with flags, detaching it when busy; a path that is
// not a mount point is not an error.
func unmount(path string, flags int) error {
	err := unix.Unmount(path, flags)
	if errors.Is(err, unix.EINVAL) {
		// Not a mount point (any more): nothing to do.
		return nil
	}
	if errors.Is(err, unix.EBUSY) {
		// Still in use (a container not yet gone); detach so it is freed
		// when released instead of pinning the pod directory forever.
		err = unix.Unmount(path, flags|unix.MNT_DETACH)
	}
	return err
}

// RemoveAt removes the entry name of the directory open as dir, resolving
// nothing by path again (dir may be an O_PATH descriptor from safepath), with
// RemoveAll's rule for one entry: a mount point (a file or directory bind
// mount) or an entry on another device than dir is left alone and reported as
// kept. A symlink is removed, never followed; a directory only when empty. An
// entry already gone is not an error.
func RemoveAt(dir *os.File, name string) (kept bool, err error) {
	if name == "" || name == "." || name == ".." || strings.Contains(name, "/") {
		return false, fmt.Errorf("removing %q in %s: not a directory entry name", name, dir.Name())
	}
	var d, e unix.Statx_t
	if err := unix.Statx(int(dir.Fd()), "", unix.AT_EMPTY_PATH, statxMask, &d); err != nil {
		return false, fmt.Errorf("removing %s/%s: stat of the directory: %w", dir.Name(), name, err)
	}
	err = unix.Statx(int(dir.Fd()), name, unix.AT_SYMLINK_NOFOLLOW, statxMask, &e)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("removing %s/%s: %w", dir.Name(), name, err)
	}
	if crossesMount(&d, &e) {
		return true, nil
	}
	flags := 0
	if e.Mode&unix.S_IFMT == unix.S_IFDIR {
		flags = unix.AT_REMOVEDIR
	}
	if err := unix.Unlinkat(int(dir.Fd()), name, flags); err != nil && !errors.Is(err, unix.ENOENT) {
		return false, fmt.Errorf("removing %s/%s: %w", dir.Name(), name, err)
	}
	return false, nil
}

// RemoveAll removes path and everything below it, as os.RemoveAll does,
// but never crosses into another filesystem: an entry that is a mount point
// or lies on another device than its directory is left alone, with the
// directories above it, and returned in kept. Symlinks are removed, never
// followed. A kept entry is not an error; the caller decides what it means.
//
// Only path's parent is resolved by path. Below it every directory is opened
// relative to its parent's descriptor with O_NOFOLLOW, checked again once
// open (same device and mount as the parent, not a mount root), listed and
// emptied through that descriptor: a directory swapped for a symlink during
// the removal is removed as a link, never followed.
func RemoveAll(path string) (kept []string, err error) {
	return (&remover{}).removeAll(path)
}

// maxRemoveDepth bounds how deep RemoveAll descends: each level holds a
// directory descriptor until its entries are gone, so an unbounded tree (a
// pod can build one) would exhaust this process's descriptors.
const maxRemoveDepth = 512

// ErrTooDeep is RemoveAll's error for a tree deeper than it descends; the
// part below the limit, and the directories above it, stay.
var ErrTooDeep = fmt.Errorf("directory tree deeper than %d levels", maxRemoveDepth)

// statxMask is what the mount checks need of an entry.
const statxMask = unix.STATX_TYPE | unix.STATX_MNT_ID

type remover struct {
	mounts map[string]bool
	kept   []string
	errs   []error
	// beforeOpen, set by tests only, runs after an entry was checked to be
	// a directory on its parent's mount and before it is opened: the window
	// in which a swap for a symlink happens.
	beforeOpen func(path string)
}

func (r *remover) removeAll(path string) ([]string, error) {
	// Resolve only the parent: path itself, if a symlink, is removed as one.
	parent, name := resolvePath(filepath.Dir(path)), filepath.Base(path)
	if name == "/" || name == "." || name == ".." {
		return nil, fmt.Errorf("removing %s: not a directory entry", path)
	}
	path = filepath.Join(parent, name)
	all, err := mountinfo.GetMounts(nil)
	if err != nil {
		return nil, fmt.Errorf("removing %s: reading the mount table: %w", path, err)
	}
	r.mounts = make(map[string]bool, len(all))
	for _, m := range all {
		r.mounts[m.Mountpoint] = true
	}
	dirFd, err := unix.Open(parent, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("removing %s: opening its directory: %w", path, err)
	}
	defer unix.Close(dirFd)
	var dir unix.Statx_t
	if err := unix.Statx(dirFd, "", unix.AT_EMPTY_PATH, statxMask, &dir); err != nil {
		return nil, fmt.Errorf("removing %s: stat of its directory: %w", path, err)
	}
	r.remove(dirFd, &dir, name, path, 0)
	return r.kept, errors.Join(r.errs...)
}

// remove deletes the entry name of the directory open as dirFd (stat'ed as
// dir), and what is below it, keeping mount points and other devices; path
// names it in kept and errors. It reports whether the entry is gone: a
// directory stays if anything below it stays.
func (r *remover) remove(dirFd int, dir *unix.Statx_t, name, path string, depth int) bool {
	var st unix.Statx_t
	err := unix.Statx(dirFd, name, unix.AT_SYMLINK_NOFOLLOW, statxMask, &st)
	if errors.Is(err, unix.ENOENT) {
		return true
	}
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("removing %s: %w", path, err))
		return false
	}
	if r.mounts[path] || crossesMount(dir, &st) {
		r.kept = append(r.kept, path)
		return false
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return r.unlink(dirFd, name, path, 0)
	}
	if depth >= maxRemoveDepth {
		r.errs = append(r.errs, fmt.Errorf("removing %s: %w", path, ErrTooDeep))
		return false
	}
	if r.beforeOpen != nil {
		r.beforeOpen(path)
	}
	fd, err := unix.Openat(dirFd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR):
		// No longer a directory (swapped for a link or a file since the
		// check): unlink what is there now, which never follows it.
		return r.unlink(dirFd, name, path, 0)
	case errors.Is(err, unix.ENOENT):
		return true
	case err != nil:
		r.errs = append(r.errs, fmt.Errorf("removing %s: opening it: %w", path, err))
		return false
	}
	defer unix.Close(fd)
	// Check what was opened, not what was looked at: another directory may
	// have been moved to name in between.
	var self unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, statxMask, &self); err != nil {
		r.errs = append(r.errs, fmt.Errorf("removing %s: stat of the opened directory: %w", path, err))
		return false
	}
	if crossesMount(dir, &self) {
		r.kept = append(r.kept, path)
		return false
	}
	names, err := readDirNames(fd)
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("removing %s: reading it: %w", path, err))
		return false
	}
	gone := true
	for _, n := range names {
		if !r.remove(fd, &self, n, path+"/"+n, depth+1) {
			gone = false
		}
	}
	if !gone {
		return false
	}
	return r.unlink(dirFd, name, path, unix.AT_REMOVEDIR)
}

// unlink removes the entry name of dirFd; one already gone is not an error.
func (r *remover) unlink(dirFd int, name, path string, flags int) bool {
	if err := unix.Unlinkat(dirFd, name, flags); err != nil && !errors.Is(err, unix.ENOENT) {
		r.errs = append(r.errs, fmt.Errorf("removing %s: %w", path, err))
		return false
	}
	return true
}

// readDirNames lists the directory open as fd (without "." and "..").
func readDirNames(fd int) ([]string, error) {
	var names []string
	buf := make([]byte, 16*1024)
	for {
		n, err := unix.Getdents(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
}

// crossesMount decides whether entry (stat'ed without following it) lies on
// another filesystem than dir, the directory it is in: it is a mount root
// (a bind mount of the same device included), on another mount, or on
// another device. Kernels without mount IDs (before 5.8) leave only the
// device, which callers complete with /proc/self/mountinfo.
func crossesMount(dir, entry *unix.Statx_t) bool {
	mountRoot := entry.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 && entry.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0
	otherMount := dir.Mask&entry.Mask&unix.STATX_MNT_ID != 0 && dir.Mnt_id != entry.Mnt_id
	return mountRoot || otherMount || dir.Dev_major != entry.Dev_major || dir.Dev_minor != entry.Dev_minor
}

// resolvePath resolves symlinks in p so it compares equal to the kernel's
// view in mountinfo; a path that does not exist is returned cleaned.
func resolvePath(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return filepath.Clean(p)
}
