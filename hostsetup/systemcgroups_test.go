package hostsetup

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/cgroups"
)

// fakeProcfs makes /proc/<pid>/exe and /proc/<pid>/ns/pid links: kernel threads
// have no exe; pids in a container have another pid namespace.
func fakeProcfs(t *testing.T, user, kernel []int, otherNS map[int]bool) string {
	t.Helper()
	root := t.TempDir()
	for _, pid := range append(append([]int{1}, user...), kernel...) {
		dir := filepath.Join(root, strconv.Itoa(pid), "ns")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		ns := "pid:[4026531836]"
		if otherNS[pid] {
			ns = "pid:[4026532999]"
		}
		if err := os.Symlink(ns, filepath.Join(dir, "pid")); err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(kernel, pid) {
			if err := os.Symlink("/usr/bin/prog", filepath.Join(root, strconv.Itoa(pid), "exe")); err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
}

func writeProcs(t *testing.T, dir string, pids ...int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, p := range pids {
		b.WriteString(strconv.Itoa(p) + "\n")
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readProcsFile(t *testing.T, dir string) []int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(data)) {
		n, _ := strconv.Atoi(f)
		out = append(out, n)
	}
	return out
}

// kubeletCgroups keeps nodelet's process in that cgroup (unless nodelet runs in
// a container's pid namespace); systemCgroups receives every non-kernel process
// of the root cgroup but init, as upstream. Checked on v2 and v1 cgroupfs trees.
func TestKubeletAndSystemCgroups(t *testing.T) {
	ctx := context.Background()
	const self = 300
	clk := clocktesting.NewFakeClock(time.Now())

	t.Run("cgroup v2", func(t *testing.T) {
		cgfs := t.TempDir()
		writeProcs(t, cgfs, 1, 2, 3, 100, 200, self)
		procfs := fakeProcfs(t, []int{100, 200, self}, []int{2, 3}, nil)
		p, err := NewCgroupPlacement("/nodelet.slice", "/system.slice", "/", cgroups.ModeV2, cgfs, procfs, self, clk)
		if err != nil || p == nil {
			t.Fatalf("NewCgroupPlacement: %v %v", p, err)
		}
		if err := p.ensure(ctx); err != nil {
			t.Fatal(err)
		}
		if got := readProcsFile(t, filepath.Join(cgfs, "system.slice")); !slices.Equal(got, []int{100, 200, self}) {
			t.Errorf("system.slice holds %v, want the non-kernel processes but init: [100 200 300]", got)
		}
		if got := readProcsFile(t, filepath.Join(cgfs, "nodelet.slice")); !slices.Equal(got, []int{self}) {
			t.Errorf("nodelet.slice holds %v, want nodelet (%d)", got, self)
		}
		// Already in place: nodelet is not written again.
		if err := p.ensure(ctx); err != nil {
			t.Fatal(err)
		}
		if got := readProcsFile(t, filepath.Join(cgfs, "nodelet.slice")); !slices.Equal(got, []int{self}) {
			t.Errorf("after a second pass nodelet.slice holds %v, want [%d] once", got, self)
		}
	})

	t.Run("cgroup v1: every hierarchy, cpu,cpuacct once", func(t *testing.T) {
		cgfs := t.TempDir()
		writeProcs(t, filepath.Join(cgfs, "memory"), 1, 2, 100, self)
		for _, h := range []string{"pids", "cpu,cpuacct"} {
			writeProcs(t, filepath.Join(cgfs, h), 1, 2, 100, self)
		}
		for _, l := range []string{"cpu", "cpuacct"} {
			if err := os.Symlink("cpu,cpuacct", filepath.Join(cgfs, l)); err != nil {
				t.Fatal(err)
			}
		}
		procfs := fakeProcfs(t, []int{100, self}, []int{2}, nil)
		p, err := NewCgroupPlacement("/nodelet", "/system", "/", cgroups.ModeV1, cgfs, procfs, self, clk)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.ensure(ctx); err != nil {
			t.Fatal(err)
		}
		for _, h := range []string{"memory", "pids", "cpu,cpuacct"} {
			if got := readProcsFile(t, filepath.Join(cgfs, h, "system")); !slices.Equal(got, []int{100, self}) {
				t.Errorf("%s/system holds %v, want [100 300]", h, got)
			}
			if got := readProcsFile(t, filepath.Join(cgfs, h, "nodelet")); !slices.Equal(got, []int{self}) {
				t.Errorf("%s/nodelet holds %v, want [300]", h, got)
			}
		}
	})

	t.Run("nodelet in a container's pid namespace stays put", func(t *testing.T) {
		cgfs := t.TempDir()
		writeProcs(t, cgfs, 1, self)
		procfs := fakeProcfs(t, []int{self}, nil, map[int]bool{self: true})
		p, err := NewCgroupPlacement("/nodelet.slice", "", "", cgroups.ModeV2, cgfs, procfs, self, clk)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.ensure(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(cgfs, "nodelet.slice")); err == nil {
			t.Error("nodelet.slice created for a nodelet outside the host's pid namespace")
		}
	})

	t.Run("a move the kernel refuses is reported", func(t *testing.T) {
		cgfs := t.TempDir()
		writeProcs(t, cgfs, 1, 100)
		// A file where the cgroup should be: it cannot be created.
		if err := os.WriteFile(filepath.Join(cgfs, "system.slice"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		procfs := fakeProcfs(t, []int{100}, nil, nil)
		p, err := NewCgroupPlacement("", "/system.slice", "/", cgroups.ModeV2, cgfs, procfs, self, clk)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.ensure(ctx); err == nil || !strings.Contains(err.Error(), `failed to move PID 100 into the system container "/system.slice"`) {
			t.Errorf("ensure = %v, want the failed move named", err)
		}
	})

	t.Run("configuration checks", func(t *testing.T) {
		for _, tc := range []struct {
			kubelet, system, root string
			err                   string // "" = accepted
			none                  bool
		}{
			{none: true},
			{kubelet: "/nodelet.slice", root: ""},
			{system: "/", root: "/", err: `system container cannot be root ("/")`},
			{system: "/system.slice", root: "", err: "systemCgroups (--system-cgroups) was specified and cgroupRoot (--cgroup-root) was not specified"},
			{kubelet: "nodelet.slice", err: "kubeletCgroups \"nodelet.slice\": must be an absolute cgroup path"},
			{system: "/a/../../etc", root: "/", err: `systemCgroups "/a/../../etc": must not contain ".."`},
		} {
			p, err := NewCgroupPlacement(tc.kubelet, tc.system, tc.root, cgroups.ModeV2, t.TempDir(), t.TempDir(), self, clk)
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("%+v: %v", tc, err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("%+v: error %v, want %q", tc, err, tc.err)
			case tc.err == "" && (p == nil) != tc.none:
				t.Errorf("%+v: placement %v, want nil %v", tc, p, tc.none)
			}
		}
	})
}
