package volumes

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"golang.org/x/sys/unix"

	"github.com/nodelet/nodelet/internal/mountutil"
	"github.com/nodelet/nodelet/internal/safepath"
)

// SubPath is one volumeMount's subPath (or expanded subPathExpr).
type SubPath struct {
	Volume    string // the volume's name
	Container string
	Index     int    // the volumeMount's index in the container
	Path      string // relative to the volume
}

// SubPathError is a sub path that could not be prepared. Its message names
// host paths: log it, and tell users only which step failed.
type SubPathError struct {
	// Create is set when creating the missing directories failed, unset when
	// opening or bind-mounting an existing path did.
	Create bool
	Err    error
}

func (e *SubPathError) Error() string { return e.Err.Error() }
func (e *SubPathError) Unwrap() error { return e.Err }

// subPathsDir is <rootDir>/pods/<uid>/volume-subpaths, as upstream names it.
func (m *Manager) subPathsDir(uid types.UID) string {
	return filepath.Join(m.rootDir, "pods", string(uid), "volume-subpaths")
}

// PrepareSubPath resolves sp inside the volume hv without following any link
// out of it, creating missing directories with the volume's mode, and
// bind-mounts what it opened onto
// <rootDir>/pods/<uid>/volume-subpaths/<volume>/<container>/<index>, which
// it returns for the runtime. What the runtime mounts is then exactly what
// was checked, whatever the pod's containers do to the volume meanwhile.
// An existing mount of the same source (a restarted container) is reused.
func (m *Manager) PrepareSubPath(ctx context.Context, pod *v1.Pod, hv HostVolume, sp SubPath) (string, error) {
	for _, name := range []string{sp.Volume, sp.Container} {
		if err := validateVolumeName(name); err != nil {
			return "", &SubPathError{Err: fmt.Errorf("sub path of container %q: %w", sp.Container, err)}
		}
	}
	st := m.state(pod.UID)
	st.mu.Lock()
	defer st.mu.Unlock()

	f, err := safepath.Open(hv.Path, sp.Path)
	if errors.Is(err, fs.ErrNotExist) {
		f, err = safepath.MkdirAll(hv.Path, sp.Path)
		if err != nil {
			return "", &SubPathError{Create: true, Err: fmt.Errorf("creating sub path of volume %q: %w", sp.Volume, err)}
		}
	}
	if err != nil {
		return "", &SubPathError{Err: fmt.Errorf("opening sub path of volume %q: %w", sp.Volume, err)}
	}
	defer f.Close()
	target := filepath.Join(m.subPathsDir(pod.UID), sp.Volume, sp.Container, strconv.Itoa(sp.Index))
	reused, err := bindMount(f, target)
	if err != nil {
		return "", &SubPathError{Err: fmt.Errorf("bind-mounting sub path %q of volume %q: %w", sp.Path, sp.Volume, err)}
	}
	if !reused {
		klog.FromContext(ctx).V(2).Info("Mounted volume sub path", "pod", klog.KObj(pod), "podUID", pod.UID,
			"volume", sp.Volume, "container", sp.Container, "subPath", sp.Path, "target", target)
	}
	return target, nil
}

// bindMount bind-mounts src (through /proc/self/fd, so no path is looked
// up again) onto target, creating target as a file or a directory like src.
// A target that already is a mount of src is kept (reused = true); a mount of
// anything else is replaced.
func bindMount(src *os.File, target string) (reused bool, err error) {
	var want unix.Stat_t
	if err := unix.Fstat(int(src.Fd()), &want); err != nil {
		return false, fmt.Errorf("fstat of %s: %w", src.Name(), err)
	}
	isDir := want.Mode&unix.S_IFMT == unix.S_IFDIR
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		return false, fmt.Errorf("creating %s: %w", filepath.Dir(target), err)
	}
	mounted, err := mountutil.IsMountPoint(target)
	if err != nil {
		return false, err
	}
	if mounted {
		if sameFile(target, &want) {
			return true, nil
		}
		if err := mountutil.Unmount(target); err != nil {
			return false, err
		}
	}
	if fi, err := os.Lstat(target); err == nil && (fi.IsDir() != isDir || fi.Mode()&os.ModeSymlink != 0) {
		if err := os.Remove(target); err != nil {
			return false, fmt.Errorf("replacing %s: %w", target, err)
		}
	}
	if isDir {
		if err := os.Mkdir(target, 0o750); err != nil && !errors.Is(err, fs.ErrExist) {
			return false, fmt.Errorf("creating %s: %w", target, err)
		}
	} else {
		tf, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|unix.O_NOFOLLOW, 0o640)
		if err != nil {
			return false, fmt.Errorf("creating %s: %w", target, err)
		}
		tf.Close()
	}
	source := fmt.Sprintf("/proc/self/fd/%d", src.Fd())
	if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
		return false, fmt.Errorf("mounting %s (%s) on %s: %w", source, src.Name(), target, err)
	}
	if !sameFile(target, &want) {
		err := fmt.Errorf("%s is not %s after mounting it", target, src.Name())
		return false, errors.Join(err, mountutil.Unmount(target))
	}
	return false, nil
}

func sameFile(p string, want *unix.Stat_t) bool {
	var st unix.Stat_t
	return unix.Stat(p, &st) == nil && st.Dev == want.Dev && st.Ino == want.Ino
}

// TearDownSubPaths unmounts and removes the pod's volume-subpaths directory.
// It removes nothing behind a mount that could not be unmounted.
func (m *Manager) TearDownSubPaths(ctx context.Context, podUID types.UID) error {
	st := m.state(podUID)
	st.mu.Lock()
	defer st.mu.Unlock()
	return m.tearDownSubPaths(ctx, podUID)
}

func (m *Manager) tearDownSubPaths(ctx context.Context, podUID types.UID) error {
	dir := m.subPathsDir(podUID)
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	n, err := mountutil.UnmountAndRemoveAll(dir)
	if err != nil {
		return fmt.Errorf("removing volume sub paths of pod %s: %w", podUID, err)
	}
	klog.FromContext(ctx).V(2).Info("Removed volume sub paths", "podUID", podUID, "unmounted", n)
	return nil
}
