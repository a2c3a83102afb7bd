package cgroups

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// DefaultRoot is where the cgroup filesystems are mounted.
const DefaultRoot = "/sys/fs/cgroup"

// Mode is the cgroup layout of the host.
type Mode int

const (
	// ModeUnknown is the zero value; DetectMode never returns it without an error.
	ModeUnknown Mode = iota
	// ModeV1 is the legacy layout: one v1 hierarchy per controller, no cgroup2.
	ModeV1
	// ModeHybrid has the v1 controllers plus an (empty) cgroup2 at <root>/unified.
	// Resources are still set through v1, so callers treat it like V1.
	ModeHybrid
	// ModeV2 is the unified layout: root is a cgroup2 filesystem.
	ModeV2
)

func (m Mode) String() string {
	switch m {
	case ModeV1:
		return "v1"
	case ModeHybrid:
		return "hybrid"
	case ModeV2:
		return "v2"
	}
	return "unknown"
}

// Unified reports whether resources are set through cgroup v2 files.
func (m Mode) Unified() bool { return m == ModeV2 }

// StatfsFunc returns the filesystem magic of path (unix.Statfs_t.Type).
type StatfsFunc func(path string) (int64, error)

// Statfs is the real StatfsFunc.
func Statfs(path string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, err
	}
	return int64(st.Type), nil
}

// v1Controllers are the hierarchies whose directories mark a v1 layout.
var v1Controllers = []string{"cpu", "cpuacct", "cpuset", "memory", "pids", "blkio", "devices", "freezer", "hugetlb", "net_cls", "perf_event"}

// DetectMode inspects root (normally /sys/fs/cgroup) with the real statfs.
func DetectMode(root string) (Mode, error) { return DetectModeWith(root, Statfs) }

// DetectModeWith is DetectMode with an injectable statfs. A directory counts as
// cgroup2 when statfs says so or when it holds a cgroup.controllers file (which
// only cgroup2 has), so temp-dir trees can stand in for the real mounts.
func DetectModeWith(root string, statfs StatfsFunc) (Mode, error) {
	fi, err := os.Stat(root)
	if err != nil {
		return ModeUnknown, fmt.Errorf("detecting cgroup mode: %w", err)
	}
	if !fi.IsDir() {
		return ModeUnknown, fmt.Errorf("detecting cgroup mode: %s is not a directory", root)
	}
	if isCgroup2(root, statfs) {
		return ModeV2, nil
	}
	hasV1 := false
	for _, c := range v1Controllers {
		if fi, err := os.Stat(filepath.Join(root, c)); err == nil && fi.IsDir() {
			hasV1 = true
			break
		}
	}
	if !hasV1 {
		return ModeUnknown, fmt.Errorf("detecting cgroup mode: %s is neither cgroup2 nor holds v1 controller directories", root)
	}
	if unified := filepath.Join(root, "unified"); isDir(unified) && isCgroup2(unified, statfs) {
		return ModeHybrid, nil
	}
	return ModeV1, nil
}

func isCgroup2(dir string, statfs StatfsFunc) bool {
	if statfs != nil {
		if t, err := statfs(dir); err == nil && t == unix.CGROUP2_SUPER_MAGIC {
			return true
		}
	}
	_, err := os.Stat(filepath.Join(dir, "cgroup.controllers"))
	return err == nil
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// SwapControllerAvailable reports whether swap can be limited per cgroup, as the
// upstream kubelet checks it: on v2 <root>/<selfCgroup>/memory.swap.max exists
// (selfCgroup is this process's cgroup from /proc/self/cgroup, "/" if unknown); on
// v1 and hybrid <root>/memory/memory.memsw.limit_in_bytes exists.
func SwapControllerAvailable(root string, mode Mode, selfCgroup string) bool {
	var p string
	if mode == ModeV2 {
		p = filepath.Join(root, filepath.Clean("/"+selfCgroup), "memory.swap.max")
	} else {
		p = filepath.Join(root, "memory", "memory.memsw.limit_in_bytes")
	}
	_, err := os.Stat(p)
	return err == nil
}
