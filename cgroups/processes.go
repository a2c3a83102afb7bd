package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// CleanCgroupPath checks a cgroupfs path from the configuration (kubeletCgroups,
// systemCgroups): absolute, without "." or ".." steps, so it stays under the
// hierarchy's mount point.
func CleanCgroupPath(field, p string) (string, error) {
	if !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("%s %q: must be an absolute cgroup path such as /system.slice/nodelet.service", field, p)
	}
	for _, step := range strings.Split(p, "/") {
		if step == "." || step == ".." {
			return "", fmt.Errorf("%s %q: must not contain %q", field, p, step)
		}
	}
	return path.Clean(p), nil
}

// Procs lists the processes in the cgroup at fsPath: on v1 as the memory
// hierarchy sees them (the one the QoS cgroups check too).
func Procs(root string, mode Mode, fsPath string) ([]int, error) {
	dir := filepath.Join(root, fsPath)
	if mode != ModeV2 {
		dir = filepath.Join(root, "memory", fsPath)
	}
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, fmt.Errorf("listing the processes of cgroup %s: %w", fsPath, err)
	}
	return ParseProcs(data), nil
}

// ParseProcs parses a cgroup.procs file: one pid a line.
func ParseProcs(data []byte) []int {
	var out []int
	for _, f := range strings.Fields(string(data)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// MoveProcess creates the cgroup at fsPath (in every v1 hierarchy) and moves pid
// into it. On v2 a cgroup with controllers enabled for children cannot hold
// processes: the kernel's EBUSY is returned as it is.
func MoveProcess(root string, mode Mode, fsPath string, pid int) error {
	for _, dir := range Dirs(root, mode, fsPath) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("creating cgroup %s: %w", dir, err)
		}
		f, err := os.OpenFile(filepath.Join(dir, "cgroup.procs"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return fmt.Errorf("moving process %d to cgroup %s: %w", pid, dir, err)
		}
		_, werr := f.WriteString(strconv.Itoa(pid) + "\n")
		cerr := f.Close()
		if werr != nil || cerr != nil {
			return fmt.Errorf("moving process %d to cgroup %s: %w", pid, dir, errors.Join(werr, cerr))
		}
	}
	return nil
}
