package stats

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// The summary's kubelet, runtime and misc system containers come from the
// configured cgroups, each only when named, as upstream.
func TestSystemContainersFromCgroups(t *testing.T) {
	dir := t.TempDir()
	root, proc, cg := filepath.Join(dir, "root"), filepath.Join(dir, "proc"), filepath.Join(dir, "cgroup")
	write(t, filepath.Join(root, "x"), "")
	write(t, filepath.Join(proc, "meminfo"), "MemTotal: 1000 kB\nMemFree: 500 kB\n")
	write(t, filepath.Join(cg, "nodelet.slice/memory.current"), "3000\n")
	write(t, filepath.Join(cg, "nodelet.slice/memory.stat"), "inactive_file 1000\nanon 1500\n")
	write(t, filepath.Join(cg, "system.slice/containerd.service/memory.current"), "9000\n")
	write(t, filepath.Join(cg, "system.slice/containerd.service/memory.stat"), "inactive_file 0\n")
	clk := clocktesting.NewFakeClock(time.Unix(2000, 0))
	for _, tc := range []struct {
		kubelet, runtime, misc string
		want                   map[string]uint64 // name → working set
	}{
		{want: map[string]uint64{}},
		{kubelet: "/nodelet.slice", runtime: "/system.slice/containerd.service", misc: "/system.slice",
			want: map[string]uint64{"kubelet": 2000, "runtime": 9000, "misc": 0}},
	} {
		p := New(Config{RootDir: root, ProcRoot: proc, CgroupRoot: cg, Unified: true,
			KubeletCgroup: tc.kubelet, RuntimeCgroup: tc.runtime, MiscCgroup: tc.misc},
			&fakeRuntime{}, func() []*v1.Pod { return nil }, clk)
		snap, err := p.Snapshot(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]uint64{}
		for _, c := range snap.Summary.Node.SystemContainers {
			var ws uint64
			if c.Memory != nil && c.Memory.WorkingSetBytes != nil {
				ws = *c.Memory.WorkingSetBytes
			}
			got[c.Name] = ws
		}
		if len(got) != len(tc.want) {
			t.Errorf("system containers %v, want %v", got, tc.want)
		}
		for name, ws := range tc.want {
			if g, ok := got[name]; !ok || g != ws {
				t.Errorf("%s: working set %d (present %v), want %d", name, g, ok, ws)
			}
		}
	}
}
