package volumes

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// mountInfoPath is read to find mount points; /proc/self so it is this
// process's mount namespace, the one the runtime shares on a node.
const mountInfoPath = "/proc/self/mountinfo"

// mountPointsUnder returns the mount points at or below dir, deepest first.
func mountPointsUnder(dir string) ([]string, error) {
	dir = resolvePath(dir)
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
		mp := unescapeMountPath(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", mountInfoPath, err)
	}
	// Deepest first so nested mounts come off before their parents; the
	// same path mounted twice appears twice and is unmounted twice.
	sort.SliceStable(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, nil
}

func isMountPoint(path string) (bool, error) {
	mps, err := mountPointsUnder(path)
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

// mountTmpfs mounts a tmpfs on dir; sizeBytes <= 0 leaves the kernel default.
func mountTmpfs(dir string, sizeBytes int64) error {
	var opts string
	if sizeBytes > 0 {
		opts = "size=" + strconv.FormatInt(sizeBytes, 10)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, opts); err != nil {
		return fmt.Errorf("mounting tmpfs on %s (options %q): %w", dir, opts, err)
	}
	return nil
}

func unmount(path string) error {
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
