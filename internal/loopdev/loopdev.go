// Package loopdev attaches and detaches Linux loop devices with the LOOP_*
// ioctls, and finds them by backing file as losetup -j does (through
// /sys/block/loop*/loop/backing_file, which names the path the file was
// opened by, so two bind mounts of one device node are told apart).
package loopdev

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// sysBlock is where the kernel lists block devices.
const sysBlock = "/sys/block"

// attachTries bounds the race with another attach taking the free device.
const attachTries = 10

// Attach attaches a free loop device to the file (or block device) at path
// and returns the device's path. The backing file is opened read-write, or
// read-only when it cannot be written (a read-only mount): the device is
// then read-only too. The device stays attached until Detach.
func Attach(path string) (string, error) {
	backing, err := os.OpenFile(path, os.O_RDWR|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.EROFS) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
		backing, err = os.OpenFile(path, os.O_RDONLY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return "", fmt.Errorf("opening the loop device's backing file: %w", err)
	}
	defer backing.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("opening /dev/loop-control: %w", err)
	}
	defer ctl.Close()
	for i := 0; i < attachTries; i++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return "", fmt.Errorf("finding a free loop device: %w", err)
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		busy, err := setFD(dev, backing, path)
		if err != nil {
			return "", err
		}
		if !busy {
			return dev, nil
		}
	}
	return "", fmt.Errorf("attaching a loop device to %s: every free device was taken by another attach %d times", path, attachTries)
}

// setFD attaches dev to backing; busy when another attach took it first.
func setFD(dev string, backing *os.File, path string) (busy bool, err error) {
	f, err := os.OpenFile(dev, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, fmt.Errorf("opening %s: %w", dev, err)
	}
	defer f.Close()
	if err := unix.IoctlSetInt(int(f.Fd()), unix.LOOP_SET_FD, int(backing.Fd())); err != nil {
		if errors.Is(err, unix.EBUSY) {
			return true, nil
		}
		return false, fmt.Errorf("attaching %s to %s: %w", dev, path, err)
	}
	// The name is what losetup shows; the kernel's backing_file is the real path.
	var info unix.LoopInfo64
	copy(info.File_name[:len(info.File_name)-1], path)
	if err := unix.IoctlLoopSetStatus64(int(f.Fd()), &info); err != nil {
		_ = unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0)
		return false, fmt.Errorf("setting the status of %s: %w", dev, err)
	}
	return false, nil
}

// Find returns the loop devices whose backing file is path (symlinks in it
// resolved), sorted by name; none when there are none.
func Find(path string) ([]string, error) {
	want := filepath.Clean(path)
	if r, err := filepath.EvalSymlinks(want); err == nil {
		want = r
	}
	files, err := filepath.Glob(filepath.Join(sysBlock, "loop*", "loop", "backing_file"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // detached meanwhile
			}
			return nil, fmt.Errorf("reading %s: %w", f, err)
		}
		name := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), " (deleted)")
		if name == want {
			out = append(out, filepath.Join("/dev", filepath.Base(filepath.Dir(filepath.Dir(f)))))
		}
	}
	return out, nil
}

// Detach detaches the loop device dev. One already detached is no error.
// A device still open elsewhere is detached by the kernel when last closed.
func Detach(dev string) error {
	f, err := os.OpenFile(dev, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("opening %s: %w", dev, err)
	}
	defer f.Close()
	if err := unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0); err != nil && !errors.Is(err, unix.ENXIO) {
		return fmt.Errorf("detaching %s: %w", dev, err)
	}
	return nil
}

// DetachAll detaches every loop device backed by path.
func DetachAll(path string) error {
	devs, err := Find(path)
	if err != nil {
		return fmt.Errorf("finding the loop devices of %s: %w", path, err)
	}
	var errs []error
	for _, d := range devs {
		errs = append(errs, Detach(d))
	}
	return errors.Join(errs...)
}

// EnsureAttached returns the loop device backed by path, attaching one when
// there is none.
func EnsureAttached(path string) (string, error) {
	devs, err := Find(path)
	if err != nil {
		return "", fmt.Errorf("finding the loop devices of %s: %w", path, err)
	}
	if len(devs) > 0 {
		return devs[0], nil
	}
	return Attach(path)
}
