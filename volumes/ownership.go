package volumes

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// Permission bits added for the fsGroup, as upstream SetVolumeOwnership
// does: group read (read-only volumes) or read-write, plus search and
// setgid on directories so new files inherit the group.
const (
	rwMask   = os.FileMode(0o660)
	roMask   = os.FileMode(0o440)
	execMask = os.FileMode(0o110)
)

func fsGroupOf(pod *v1.Pod) *int64 {
	if pod.Spec.SecurityContext == nil {
		return nil
	}
	return pod.Spec.SecurityContext.FSGroup
}

// fsUserOf returns the user every init and app container runs as, when they
// all agree and it is known (container runAsUser, else the pod's); nil
// otherwise. Upstream gives projected tokens to that user (mode 0600).
func fsUserOf(pod *v1.Pod) *int64 {
	var podUser *int64
	if pod.Spec.SecurityContext != nil {
		podUser = pod.Spec.SecurityContext.RunAsUser
	}
	var user *int64
	all := append(append([]v1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
	for _, c := range all {
		u := podUser
		if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
			u = c.SecurityContext.RunAsUser
		}
		if u == nil || (user != nil && *user != *u) {
			return nil
		}
		user = u
	}
	return user
}

// fsGroupWalk gives a volume to the pod's fsGroup. The pod may be running
// and changing the tree while it is walked, so every entry is opened with
// O_NOFOLLOW relative to its parent's descriptor and changed through what
// was opened: a directory swapped for a symlink after it was listed is seen
// as the symlink (and only the link itself gets the group), never followed.
// The walk stays on the root's filesystem. Its zero value is ready to use.
type fsGroupWalk struct {
	// beforeOpen, when set (tests only), runs after an entry of dir was
	// listed and before it is opened: the window a racing pod has. An error
	// fails the walk.
	beforeOpen func(dir, name string) error
}

// maxFSGroupDepth bounds the directories held open at once. A walk by path
// stops at PATH_MAX (4096 bytes, about 2048 levels); this one would not.
const maxFSGroupDepth = 2048

// apply changes group ownership of everything under dir, symlinks included
// (the link itself, as upstream's Lchown), and adds the group bits above
// (plus search and setgid on directories) to all but symlinks.
func (w fsGroupWalk) apply(dir string, gid int64, readOnly bool) error {
	mask := uint32(rwMask)
	if readOnly {
		mask = uint32(roMask)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening volume %s for fsGroup: %w", dir, err)
	}
	root := os.NewFile(uintptr(fd), dir)
	defer root.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("fstat volume %s for fsGroup: %w", dir, err)
	}
	c := fsGroupChange{walk: w, gid: int(gid), mask: mask, dev: st.Dev}
	if err := c.change(fd, dir, &st); err != nil {
		return err
	}
	return c.dir(root, dir, 1)
}

// fsGroupChange is one walk's state.
type fsGroupChange struct {
	walk fsGroupWalk
	gid  int
	mask uint32
	dev  uint64 // the root's filesystem
}

// dir changes every entry of the open directory d (at path p, for messages).
func (c *fsGroupChange) dir(d *os.File, p string, depth int) error {
	if depth > maxFSGroupDepth {
		return fmt.Errorf("setting fsGroup under %s: deeper than %d directories", p, maxFSGroupDepth)
	}
	names, err := d.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("listing %s for fsGroup: %w", p, err)
	}
	for _, name := range names {
		if err := c.entry(d, p, name, depth); err != nil {
			return err
		}
	}
	return nil
}

func (c *fsGroupChange) entry(d *os.File, dirPath, name string, depth int) error {
	p := filepath.Join(dirPath, name)
	if c.walk.beforeOpen != nil {
		if err := c.walk.beforeOpen(dirPath, name); err != nil {
			return err
		}
	}
	// O_PATH: opening a FIFO or device this way has no side effects.
	fd, err := unix.Openat(int(d.Fd()), name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil // removed since it was listed
	}
	if err != nil {
		return fmt.Errorf("opening %s for fsGroup: %w", p, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return fmt.Errorf("fstat %s for fsGroup: %w", p, err)
	}
	if st.Dev != c.dev {
		unix.Close(fd)
		return nil // a mount point: another filesystem, not this volume's
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		defer unix.Close(fd)
		return c.change(fd, p, &st)
	}
	// Reopened through fd itself, so it is the directory fstat'ed above
	// whatever now has its name.
	dfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	unix.Close(fd) // one descriptor per level held while below
	if err != nil {
		return fmt.Errorf("opening directory %s for fsGroup: %w", p, err)
	}
	sub := os.NewFile(uintptr(dfd), p)
	defer sub.Close()
	if err := c.change(dfd, p, &st); err != nil {
		return err
	}
	return c.dir(sub, p, depth+1)
}

// change sets the group and mode of the file open as fd (O_PATH or not),
// whose fstat is st. Links get the group only: a mode change on a link
// would reach its target.
func (c *fsGroupChange) change(fd int, p string, st *unix.Stat_t) error {
	if int(st.Gid) != c.gid {
		if err := unix.Fchownat(fd, "", -1, c.gid, unix.AT_EMPTY_PATH); err != nil {
			return fmt.Errorf("setting group %d on %s: %w", c.gid, p, err)
		}
	}
	typ := st.Mode & unix.S_IFMT
	if typ == unix.S_IFLNK {
		return nil
	}
	add := c.mask
	if typ == unix.S_IFDIR {
		add |= unix.S_ISGID | uint32(execMask)
	}
	// The mode read before the chown: a chown clears setuid and setgid of
	// files, and upstream's walk (which stats first) puts them back.
	old := st.Mode & 0o7777
	if int(st.Gid) == c.gid && old|add == old {
		return nil
	}
	if err := fchmodOpened(fd, old|add); err != nil {
		return fmt.Errorf("setting mode of %s for fsGroup: %w", p, err)
	}
	return nil
}

// fchmodOpened changes the mode of the file open as fd, which may be an
// O_PATH descriptor (fchmod refuses those): fchmodat2(AT_EMPTY_PATH) on
// Linux 6.6+, else chmod of /proc/self/fd/N, which the kernel resolves to
// the open file itself, not by name (glibc's fallback too).
func fchmodOpened(fd int, mode uint32) error {
	err := unix.Fchmodat(fd, "", mode, unix.AT_EMPTY_PATH)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) {
		return chmodProcFd(fd, mode)
	}
	return err
}

func chmodProcFd(fd int, mode uint32) error {
	return unix.Chmod("/proc/self/fd/"+strconv.Itoa(fd), mode)
}

// fsGroupChangePolicyOf is the pod's fsGroupChangePolicy; unset is Always.
func fsGroupChangePolicyOf(pod *v1.Pod) v1.PodFSGroupChangePolicy {
	if sc := pod.Spec.SecurityContext; sc != nil && sc.FSGroupChangePolicy != nil {
		return *sc.FSGroupChangePolicy
	}
	return v1.FSGroupChangeAlways
}

// fsGroupChangeNeeded is upstream's OnRootMismatch test: the change is
// skipped only when the volume's root is a directory that already has the
// group, the group bits fsGroupWalk would add and the setgid bit. A root
// that is a symlink needs the change (and the walk then refuses it).
func fsGroupChangeNeeded(dir string, gid int64, readOnly bool) bool {
	fi, err := os.Lstat(dir)
	if err != nil || !fi.IsDir() {
		return true
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int64(st.Gid) != gid {
		return true
	}
	want := rwMask
	if readOnly {
		want = roMask
	}
	want |= execMask
	return fi.Mode().Perm()&want != want || fi.Mode()&os.ModeSetgid == 0
}
