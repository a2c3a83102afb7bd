// Package mountutil finds, removes and steps around mount points, so that
// nodelet never deletes data through a mount left in a pod directory (its
// own volume and subPath mounts, or an earlier kubelet's CSI and subPath
// mounts on a node that switched agents).
package mountutil

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// mountInfoPath is read to find mount points; /proc/self so it is this
// process's mount namespace, the one the runtime shares on a node.
const mountInfoPath = "/proc/self/mountinfo"

// mountPoints lists every mount point, as the kernel spells it (symlinks
// resolved, octal escapes undone); a path mounted twice appears twice.
func mountPoints() ([]string, error) {
	data, err := os.ReadFile(mountInfoPath)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", mountInfoPath, err)
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		out = append(out, unescapeMountPath(fields[4]))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", mountInfoPath, err)
	}
	return out, nil
}

// PointsUnder returns the mount points at or below dir, deepest first.
func PointsUnder(dir string) ([]string, error) {
	dir = resolvePath(dir)
	all, err := mountPoints()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, mp := range all {
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
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
// and returns how many it unmounted.
func UnmountAllUnder(dir string) (int, error) {
	mps, err := PointsUnder(dir)
	if err != nil {
		return 0, err
	}
	var errs []error
	for _, mp := range mps {
		if err := Unmount(mp); err != nil {
			errs = append(errs, err)
		}
	}
	return len(mps), errors.Join(errs...)
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
	err := unix.Unmount(path, 0)
	if errors.Is(err, unix.EINVAL) {
		// Not a mount point (any more): nothing to do.
		return nil
	}
	if errors.Is(err, unix.EBUSY) {
		// Still in use (a container not yet gone); detach so it is freed
		// when released instead of pinning the pod directory forever.
		err = unix.Unmount(path, unix.MNT_DETACH)
	}
	if err != nil {
		return fmt.Errorf("unmounting %s: %w", path, err)
	}
	return nil
}

// RemoveAll removes path and everything below it, as os.RemoveAll does,
// but never crosses into another filesystem: an entry that is a mount point
// or lies on another device than its directory is left alone, with the
// directories above it, and returned in kept. Symlinks are removed, never
// followed. A kept entry is not an error; the caller decides what it means.
func RemoveAll(path string) (kept []string, err error) {
	// Resolve only the parent: path itself, if a symlink, is removed as one.
	path = filepath.Join(resolvePath(filepath.Dir(path)), filepath.Base(path))
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("removing %s: %w", path, err)
	}
	all, err := mountPoints()
	if err != nil {
		return nil, fmt.Errorf("removing %s: %w", path, err)
	}
	r := remover{mounts: make(map[string]bool, len(all))}
	for _, mp := range all {
		r.mounts[mp] = true
	}
	if r.mounts[path] {
		return []string{path}, nil
	}
	r.remove(path, fi)
	return r.kept, errors.Join(r.errs...)
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
	const mask = unix.STATX_TYPE | unix.STATX_MNT_ID
	var d, e unix.Statx_t
	if err := unix.Statx(int(dir.Fd()), "", unix.AT_EMPTY_PATH, mask, &d); err != nil {
		return false, fmt.Errorf("removing %s/%s: stat of the directory: %w", dir.Name(), name, err)
	}
	err = unix.Statx(int(dir.Fd()), name, unix.AT_SYMLINK_NOFOLLOW, mask, &e)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("removing %s/%s: %w", dir.Name(), name, err)
	}
	mountRoot := e.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 && e.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0
	otherMount := d.Mask&e.Mask&unix.STATX_MNT_ID != 0 && d.Mnt_id != e.Mnt_id
	if mountRoot || otherMount || d.Dev_major != e.Dev_major || d.Dev_minor != e.Dev_minor {
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

type remover struct {
	mounts map[string]bool
	kept   []string
	errs   []error
}

// remove deletes p (already lstat'ed as fi) and what is below it, keeping
// mount points and other devices; p stays if anything below it was kept.
func (r *remover) remove(p string, fi fs.FileInfo) {
	keptBefore := len(r.kept)
	if fi.IsDir() {
		entries, err := os.ReadDir(p)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			r.errs = append(r.errs, fmt.Errorf("reading %s: %w", p, err))
			return
		}
		for _, e := range entries {
			child := filepath.Join(p, e.Name())
			cfi, err := os.Lstat(child)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				r.errs = append(r.errs, fmt.Errorf("removing %s: %w", child, err))
				continue
			}
			if r.mounts[child] || device(cfi) != device(fi) {
				r.kept = append(r.kept, child)
				continue
			}
			r.remove(child, cfi)
		}
	}
	if len(r.kept) > keptBefore {
		return
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		r.errs = append(r.errs, fmt.Errorf("removing %s: %w", p, err))
	}
}

func device(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Dev)
	}
	return 0
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for space etc.).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// resolvePath resolves symlinks in p so it compares equal to the kernel's
// view in mountinfo; a path that does not exist is returned cleaned.
func resolvePath(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return filepath.Clean(p)
}
