// Package cgroupfstest emulates, on temp-dir trees shaped like /sys/fs/cgroup, what
// the kernel does when a cgroup directory is made, for tests of code that then
// reads the new cgroup's interface files (as opencontainers/cgroups does).
package cgroupfstest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// MkdirAll creates dir and its missing parents as mkdir on cgroupfs would: a new
// cgroup below a cgroup2 one (its parent has cgroup.controllers) gets a
// cgroup.controllers listing what the parent's cgroup.subtree_control enables; a new
// v1 cpuset cgroup (its parent has cpuset.cpus) gets empty cpuset.cpus and
// cpuset.mems.
func MkdirAll(dir string) error {
	if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := MkdirAll(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
		return err
	}
	files := map[string]string{}
	if exists(filepath.Join(parent, "cgroup.controllers")) {
		sub, err := os.ReadFile(filepath.Join(parent, "cgroup.subtree_control"))
		if err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("emulating mkdir %s: %w", dir, err)
		}
		files["cgroup.controllers"] = strings.Join(strings.Fields(strings.ReplaceAll(string(sub), "+", "")), " ") + "\n"
	}
	if exists(filepath.Join(parent, "cpuset.cpus")) {
		files["cpuset.cpus"], files["cpuset.mems"] = "\n", "\n"
	}
	for f, v := range files {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(v), 0o644); err != nil {
			return fmt.Errorf("emulating mkdir %s: %w", dir, err)
		}
	}
	return nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
