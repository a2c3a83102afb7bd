// Package safepath opens paths below a root directory that untrusted
// processes can write to (a pod's volume), so that no symlink, planted before
// or swapped in during the walk, leads outside the root.
//
// Each component is opened with openat(O_PATH|O_NOFOLLOW) relative to the
// descriptor of its parent. Symlinks found on the way are resolved by this
// package, not by the kernel, against the descriptors already held: a link
// that stays inside the root is followed (configMap and secret volumes are
// made of such links), one that is absolute or climbs above the root is an
// error. ".." is never sent to the kernel, so a directory moved away during
// the walk cannot take it elsewhere.
//
// MkdirAll creates the missing directories below the root the same way, with
// the root's mode.
package safepath

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

var (
	// ErrAbsolute is a sub path that starts with "/".
	ErrAbsolute = errors.New("must not be an absolute path")
	// ErrBackstep is a sub path with a ".." element (names like "v1..2" are fine).
	ErrBackstep = errors.New("must not contain '..'")
	// ErrEscape is a symlink on the way that is absolute or leads above the root.
	ErrEscape = errors.New("path is not within the root")
	// ErrSymlink is a symlink met by OpenNoFollow, which follows none.
	ErrSymlink = errors.New("is a symbolic link")
	// ErrNotRegular is a file Reopen will not open for reading: a FIFO, device,
	// socket or link (or a directory where none is allowed).
	ErrNotRegular = errors.New("not a regular file")
)

// maxSymlinks is the kernel's limit on links followed in one lookup.
const maxSymlinks = 40

// CheckRelative rejects sub paths that are absolute or contain a ".." element.
func CheckRelative(sub string) error {
	if path.IsAbs(sub) {
		return ErrAbsolute
	}
	for _, el := range strings.Split(sub, "/") {
		if el == ".." {
			return ErrBackstep
		}
	}
	return nil
}

// Open opens root/sub without leaving root. The file is opened with O_PATH:
// it can be stat'ed, used as a directory descriptor, or bind-mounted through
// /proc/self/fd/N, but not read; opening a FIFO or device this way has no
// side effects.
func Open(root, sub string) (*os.File, error) {
	return walk(root, sub, false, true)
}

// OpenNoFollow is Open for files no link may lead to (container logs): a
// symlink in any component of sub, inside the root or not, is ErrSymlink.
// The root itself is the caller's and may be reached through links.
func OpenNoFollow(root, sub string) (*os.File, error) {
	return walk(root, sub, false, false)
}

// OpenRegularNoFollow opens root/sub for reading if no component of sub is a
// link and sub is a regular file; a FIFO or device there is never opened for
// reading (a FIFO would block the reader, opening a device can act on it).
func OpenRegularNoFollow(root, sub string) (*os.File, error) {
	f, err := OpenNoFollow(root, sub)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Reopen(f, false)
}

// Reopen opens for reading the file that f (from Open or OpenNoFollow, O_PATH)
// refers to, if fstat says it is a regular file or, with dirs, a directory;
// anything else is ErrNotRegular and is never opened. The new descriptor comes
// from /proc/self/fd/N, which reaches the very inode f holds, not whatever the
// name means now; the device and inode are compared all the same.
func Reopen(f *os.File, dirs bool) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, &os.PathError{Op: "fstat", Path: f.Name(), Err: err}
	}
	flags := unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOCTTY
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFDIR:
		if !dirs {
			return nil, fmt.Errorf("%s is a directory: %w", f.Name(), ErrNotRegular)
		}
		flags |= unix.O_DIRECTORY
	default:
		return nil, fmt.Errorf("%s is a %s: %w", f.Name(), fileType(st.Mode), ErrNotRegular)
	}
	fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), flags, 0)
	if err != nil {
		return nil, &os.PathError{Op: "reopen", Path: f.Name(), Err: err}
	}
	var again unix.Stat_t
	if err := unix.Fstat(fd, &again); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "fstat", Path: f.Name(), Err: err}
	}
	if again.Dev != st.Dev || again.Ino != st.Ino {
		unix.Close(fd)
		return nil, fmt.Errorf("%s changed while being reopened: %w", f.Name(), ErrNotRegular)
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

// fileType names what a non-regular file is, for errors.
func fileType(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "FIFO"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFLNK:
		return "symbolic link"
	}
	return fmt.Sprintf("file of type %#o", mode&unix.S_IFMT)
}

// MkdirAll is Open, but first creates the directories of sub that are
// missing, each with the mode of root (so a subdirectory of a world-writable
// emptyDir is world-writable too, whatever the umask). The last component
// may be an existing file. Components reached through a symlink are never
// created: a dangling link is an error.
func MkdirAll(root, sub string) (*os.File, error) {
	return walk(root, sub, true, true)
}

// component is one path element still to resolve; fromLink marks those that
// came from a symlink's target.
type component struct {
	name     string
	fromLink bool
}

func split(p string, fromLink bool) []component {
	var out []component
	for _, el := range strings.Split(p, "/") {
		if el != "" && el != "." {
			out = append(out, component{el, fromLink})
		}
	}
	return out
}

func walk(root, sub string, create, follow bool) (*os.File, error) {
	if err := CheckRelative(sub); err != nil {
		return nil, fmt.Errorf("sub path %q: %w", sub, err)
	}
	rootFd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: root, Err: err}
	}
	// dirs holds the descriptors from root down to the current position; the
	// last one is where the next component is looked up.
	dirs := []int{rootFd}
	defer func() {
		for _, fd := range dirs {
			unix.Close(fd)
		}
	}()
	var perm uint32
	if create {
		var st unix.Stat_t
		if err := unix.Fstat(rootFd, &st); err != nil {
			return nil, &os.PathError{Op: "fstat", Path: root, Err: err}
		}
		perm = st.Mode & 0o7777
	}

	todo := split(sub, false)
	links := 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		if c.name == ".." { // only from a link target: CheckRelative refused it in sub
			if len(dirs) == 1 {
				return nil, fmt.Errorf("sub path %q of %s: %w", sub, root, ErrEscape)
			}
			unix.Close(dirs[len(dirs)-1])
			dirs = dirs[:len(dirs)-1]
			continue
		}
		cur := dirs[len(dirs)-1]
		fd, err := unix.Openat(cur, c.name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) && create && !c.fromLink {
			fd, err = mkdirOpen(cur, c.name, perm)
		}
		if err != nil {
			return nil, fmt.Errorf("sub path %q of %s: opening %q: %w", sub, root, c.name, err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("sub path %q of %s: fstat %q: %w", sub, root, c.name, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFLNK {
			dirs = append(dirs, fd)
			continue
		}
		if !follow {
			unix.Close(fd)
			return nil, fmt.Errorf("sub path %q of %s: %q %w", sub, root, c.name, ErrSymlink)
		}
		target, err := readlink(fd)
		unix.Close(fd)
		if err != nil {
			return nil, fmt.Errorf("sub path %q of %s: reading link %q: %w", sub, root, c.name, err)
		}
		if links++; links > maxSymlinks {
			return nil, fmt.Errorf("sub path %q of %s: %w", sub, root, unix.ELOOP)
		}
		if path.IsAbs(target) {
			// Absolute links name the container's view, never this host's.
			return nil, fmt.Errorf("sub path %q of %s: link %q to %q: %w", sub, root, c.name, target, ErrEscape)
		}
		todo = append(split(target, true), todo...)
	}
	fd := dirs[len(dirs)-1]
	dirs = dirs[:len(dirs)-1]
	return os.NewFile(uintptr(fd), path.Join(root, sub)), nil
}

// mkdirOpen creates name in dir and opens it. The mode is set with fchmod on
// the opened directory (never by path, which a racing process could turn into
// a symlink); mkdirat's own mode is 0700 so the directory is private until then.
// If something else created name first, it is opened as found and resolved
// like any other component.
func mkdirOpen(dir int, name string, perm uint32) (int, error) {
	if err := unix.Mkdirat(dir, name, 0o700); errors.Is(err, unix.EEXIST) {
		return unix.Openat(dir, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	} else if err != nil {
		return -1, err
	}
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.Fchmod(fd, perm); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// readlink reads the target of the symlink opened (O_PATH|O_NOFOLLOW) as fd.
func readlink(fd int) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(fd, "", buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}
