package podruntime

import (
	"maps"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/cgroups"
	"github.com/nodelet/nodelet/internal/testsupport/resourcetest"
	"github.com/nodelet/nodelet/pleg"
)

var restartOnMemory = []v1.ContainerResizePolicy{
	{ResourceName: v1.ResourceCPU, RestartPolicy: v1.NotRequired},
	{ResourceName: v1.ResourceMemory, RestartPolicy: v1.RestartContainer},
}

// resizeFixture is a running pod whose containers run with "ran" and are
// allocated "alloc" (by name).
func resizeFixture(t *testing.T, alloc map[string]v1.ResourceRequirements, policies map[string][]v1.ContainerResizePolicy, states map[string]ctrState, inits ...v1.Container) fixture {
	t.Helper()
	pod := testPod(v1.RestartPolicyAlways)
	pod.Spec.InitContainers = inits
	for _, name := range []string{"a", "b"} {
		if _, ok := alloc[name]; ok {
			pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: name, Image: "busybox", Resources: alloc[name], ResizePolicy: policies[name]})
		}
	}
	f := fixture{pod: pod, st: &pleg.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{readySandbox(0)}}}
	for _, c := range inits {
		f = f.add(c.Name, running)
	}
	for _, c := range pod.Spec.Containers {
		s, ok := states[c.Name]
		if !ok {
			s = running
		}
		f = f.add(c.Name, s)
	}
	return f
}

func names(list []*ContainerResize) []string {
	var out []string
	for _, u := range list {
		out = append(out, u.Name)
	}
	return out
}

// The resize part of ComputeActions: what is updated in place, in which
// order, and what restarts (upstream's computePodResizeAction cases).
func TestComputeResizeActions(t *testing.T) {
	always := ptr.To(v1.ContainerRestartPolicyAlways)
	small, big := rr("100m", "64Mi", "100m", "64Mi"), rr("200m", "128Mi", "200m", "128Mi")
	for _, tc := range []struct {
		name     string
		alloc    map[string]v1.ResourceRequirements
		ran      map[string]v1.ResourceRequirements
		policies map[string][]v1.ContainerResizePolicy
		states   map[string]ctrState
		inits    []v1.Container
		noRecord bool

		wantMemory, wantCPU []string
		wantPod             bool
		wantKill            map[string]string
		wantStart           []int
		wantStartInit       []int
	}{
		{name: "nothing changed", alloc: map[string]v1.ResourceRequirements{"a": small}, ran: map[string]v1.ResourceRequirements{"a": small}},
		{name: "same values, other units", alloc: map[string]v1.ResourceRequirements{"a": rr("0.1", "65536Ki", "100m", "64Mi")}, ran: map[string]v1.ResourceRequirements{"a": small}},
		{
			name: "grow cpu and memory in place", alloc: map[string]v1.ResourceRequirements{"a": big}, ran: map[string]v1.ResourceRequirements{"a": small},
			wantMemory: []string{"a"}, wantCPU: []string{"a"},
		},
		{
			name:       "cpu request only",
			alloc:      map[string]v1.ResourceRequirements{"a": rr("300m", "64Mi", "", "128Mi")},
			ran:        map[string]v1.ResourceRequirements{"a": rr("100m", "64Mi", "", "128Mi")},
			wantMemory: nil, wantCPU: []string{"a"},
		},
		{
			name:  "decreases before increases",
			alloc: map[string]v1.ResourceRequirements{"a": rr("100m", "64Mi", "100m", "64Mi"), "b": rr("300m", "256Mi", "300m", "256Mi")},
			ran:   map[string]v1.ResourceRequirements{"a": rr("200m", "128Mi", "200m", "128Mi"), "b": rr("200m", "128Mi", "200m", "128Mi")},
			// b grows: appended; a shrinks: put first.
			wantMemory: []string{"a", "b"}, wantCPU: []string{"a", "b"},
		},
		{
			name:    "grow one, shrink the other, listed the other way",
			alloc:   map[string]v1.ResourceRequirements{"a": rr("300m", "", "", ""), "b": rr("100m", "", "", "")},
			ran:     map[string]v1.ResourceRequirements{"a": rr("200m", "", "", ""), "b": rr("200m", "", "", "")},
			wantCPU: []string{"b", "a"},
		},
		{
			name: "RestartContainer on memory restarts it", alloc: map[string]v1.ResourceRequirements{"a": big}, ran: map[string]v1.ResourceRequirements{"a": small},
			policies: map[string][]v1.ContainerResizePolicy{"a": restartOnMemory},
			wantPod:  true, wantKill: map[string]string{"a-id": "Container a resize requires restart"}, wantStart: []int{0},
		},
		{
			name:  "RestartContainer on memory, only cpu changed: in place",
			alloc: map[string]v1.ResourceRequirements{"a": rr("200m", "64Mi", "200m", "64Mi")}, ran: map[string]v1.ResourceRequirements{"a": small},
			policies: map[string][]v1.ContainerResizePolicy{"a": restartOnMemory},
			wantCPU:  []string{"a"},
		},
		{
			name:  "an exited container restarts with its allocation: the pod cgroup follows",
			alloc: map[string]v1.ResourceRequirements{"a": small, "b": big}, ran: map[string]v1.ResourceRequirements{"a": small, "b": small},
			states:  map[string]ctrState{"b": exited(1)},
			wantPod: true, wantStart: []int{1},
		},
		{
			name:  "sidecar resized in place",
			inits: []v1.Container{{Name: "side", Image: "busybox", RestartPolicy: always, Resources: rr("50m", "", "", "")}},
			alloc: map[string]v1.ResourceRequirements{"a": small}, ran: map[string]v1.ResourceRequirements{"a": small, "side": rr("20m", "", "", "")},
			wantCPU: []string{"side"},
		},
		{
			name:  "sidecar restarted for its resize",
			inits: []v1.Container{{Name: "side", Image: "busybox", RestartPolicy: always, ResizePolicy: restartOnMemory, Resources: rr("", "32Mi", "", "32Mi")}},
			alloc: map[string]v1.ResourceRequirements{"a": small}, ran: map[string]v1.ResourceRequirements{"a": small, "side": rr("", "16Mi", "", "16Mi")},
			wantPod: true, wantKill: map[string]string{"side-id": "Container side resize requires restart"}, wantStartInit: []int{0},
		},
		{
			name:  "no actuated record: resized to the allocation",
			alloc: map[string]v1.ResourceRequirements{"a": small}, ran: map[string]v1.ResourceRequirements{},
			wantMemory: []string{"a"}, wantCPU: []string{"a"},
		},
		{
			name: "without actuated state nothing is resized", noRecord: true,
			alloc: map[string]v1.ResourceRequirements{"a": big}, ran: map[string]v1.ResourceRequirements{"a": small},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := resizeFixture(t, tc.alloc, tc.policies, tc.states, tc.inits...)
			actuated := map[string]v1.ResourceRequirements{} // nil would resize nothing
			maps.Copy(actuated, tc.ran)
			if tc.noRecord {
				actuated = nil
			}
			a := ComputeActions(Facts{Pod: f.pod, Status: f.st, Now: t0, Actuated: actuated})
			if got := names(a.Resize.Memory); !slices.Equal(got, tc.wantMemory) {
				t.Errorf("memory updates = %v, want %v", got, tc.wantMemory)
			}
			if got := names(a.Resize.CPU); !slices.Equal(got, tc.wantCPU) {
				t.Errorf("cpu updates = %v, want %v", got, tc.wantCPU)
			}
			if a.Resize.UpdatePod != tc.wantPod {
				t.Errorf("UpdatePod = %v, want %v", a.Resize.UpdatePod, tc.wantPod)
			}
			if len(a.KillContainers) != len(tc.wantKill) {
				t.Errorf("kills = %v, want %v", a.KillContainers, tc.wantKill)
			}
			for id, msg := range tc.wantKill {
				if a.KillContainers[id] != msg {
					t.Errorf("kill %s = %q, want %q", id, a.KillContainers[id], msg)
				}
			}
			if !slices.Equal(a.StartContainers, tc.wantStart) || !slices.Equal(a.StartInit, tc.wantStartInit) {
				t.Errorf("start = %v, init %v; want %v, %v", a.StartContainers, a.StartInit, tc.wantStart, tc.wantStartInit)
			}
			if a.KillPod {
				t.Error("a resize killed the pod")
			}
		})
	}
}

// describe renders steps as "pod:memory", "a:cpu", ...
func describe(steps []resizeStep) string {
	var out []string
	for _, s := range steps {
		switch {
		case s.container != nil:
			out = append(out, s.container.Name+":"+string(s.resource))
		case s.pod.CPUShares != nil:
			out = append(out, "pod:cpu-shares")
		case s.pod.CPUQuota != nil:
			out = append(out, "pod:cpu-quota")
		default:
			out = append(out, "pod:"+string(s.resource))
		}
	}
	return strings.Join(out, " ")
}

// Upstream's order: per resource (memory, then cpu), the pod cgroup grows
// before the containers and shrinks after them; limits outside requests.
func TestResizeSteps(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	u64 := func(v uint64) *uint64 { return &v }
	podCfg := func(mem, quota int64, shares uint64) cgroups.ResourceConfig {
		return cgroups.ResourceConfig{Memory: i64(mem), CPUQuota: i64(quota), CPUPeriod: u64(100000), CPUShares: u64(shares)}
	}
	a, b := &ContainerResize{Name: "a"}, &ContainerResize{Name: "b"}
	for _, tc := range []struct {
		name      string
		cur, want cgroups.ResourceConfig
		plan      ResizePlan
		noPod     bool
		steps     string
	}{
		{name: "grow both", cur: podCfg(64<<20, 10000, 102), want: podCfg(128<<20, 20000, 204),
			plan: ResizePlan{Memory: []*ContainerResize{a}, CPU: []*ContainerResize{a}}, steps: "pod:memory a:memory pod:cpu-quota pod:cpu-shares a:cpu"},
		{name: "shrink both", cur: podCfg(128<<20, 20000, 204), want: podCfg(64<<20, 10000, 102),
			plan: ResizePlan{Memory: []*ContainerResize{a}, CPU: []*ContainerResize{a}}, steps: "a:memory pod:memory a:cpu pod:cpu-shares pod:cpu-quota"},
		{name: "memory down, cpu up", cur: podCfg(128<<20, 10000, 102), want: podCfg(64<<20, 20000, 204),
			plan: ResizePlan{Memory: []*ContainerResize{a}, CPU: []*ContainerResize{a}}, steps: "a:memory pod:memory pod:cpu-quota pod:cpu-shares a:cpu"},
		{name: "two containers, net unchanged pod", cur: podCfg(128<<20, 20000, 204), want: podCfg(128<<20, 20000, 204),
			plan: ResizePlan{CPU: []*ContainerResize{b, a}}, steps: "b:cpu a:cpu"},
		{name: "memory only: cpu untouched", cur: podCfg(64<<20, 10000, 102), want: podCfg(128<<20, 20000, 204),
			plan: ResizePlan{Memory: []*ContainerResize{a}}, steps: "pod:memory a:memory"},
		{name: "restart only: the pod cgroup alone", cur: podCfg(64<<20, 10000, 102), want: podCfg(128<<20, 10000, 102),
			plan: ResizePlan{UpdatePod: true}, steps: "pod:memory"},
		{name: "no pod limits: they stay", cur: podCfg(cgroups.Unlimited, -1, 102), want: cgroups.ResourceConfig{CPUShares: u64(204)},
			plan: ResizePlan{Memory: []*ContainerResize{a}, CPU: []*ContainerResize{a}}, steps: "a:memory pod:cpu-shares a:cpu"},
		{name: "no pod cgroups", noPod: true,
			plan: ResizePlan{Memory: []*ContainerResize{a}, CPU: []*ContainerResize{a}, UpdatePod: true}, steps: "a:memory a:cpu"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := describe(resizeSteps(tc.cur, tc.want, tc.plan, !tc.noPod)); got != tc.steps {
				t.Errorf("steps = %q\nwant    %q", got, tc.steps)
			}
		})
	}
}

func TestCheckMemoryDecrease(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	u64 := func(v uint64) *uint64 { return &v }
	cur := cgroups.ResourceConfig{Memory: i64(128 << 20)}
	want := cgroups.ResourceConfig{Memory: i64(64 << 20)}
	shrink := &ContainerResize{Name: "a", Desired: resizeValues{memLimit: 64 << 20}, Current: resizeValues{memLimit: 128 << 20}}
	grow := &ContainerResize{Name: "b", Desired: resizeValues{memLimit: 256 << 20}, Current: resizeValues{memLimit: 128 << 20}}
	checks := memoryDecreases(cur, want, ResizePlan{Memory: []*ContainerResize{shrink, grow}}, true)
	if len(checks) != 2 || checks[0].name != "" || checks[1].name != "a" {
		t.Fatalf("checks = %+v, want the pod and a", checks)
	}
	if got := memoryDecreases(cur, want, ResizePlan{CPU: []*ContainerResize{shrink}}, true); got != nil {
		t.Errorf("a cpu-only resize checks memory: %+v", got)
	}
	if got := memoryDecreases(cgroups.ResourceConfig{Memory: i64(64 << 20)}, cgroups.ResourceConfig{Memory: i64(128 << 20), CPUShares: u64(2)},
		ResizePlan{Memory: []*ContainerResize{grow}}, true); got != nil {
		t.Errorf("growth is checked: %+v", got)
	}

	for _, tc := range []struct {
		name   string
		checks []memoryUsage
		want   string
	}{
		{name: "room left", checks: []memoryUsage{{limit: 64 << 20, usage: i64(10 << 20)}, {name: "a", limit: 64 << 20, usage: i64(1 << 20)}}},
		{name: "container over", checks: []memoryUsage{{name: "a", limit: 10240, usage: i64(2 << 20)}},
			want: `cannot decrease memory limits: attempting to set container "a" memory limit (10240) below current usage (2097152)`},
		{name: "pod over and container unknown", checks: []memoryUsage{{limit: 10240, usage: i64(2 << 20)}, {name: "a", limit: 10240}},
			want: `cannot decrease memory limits: [attempting to set pod memory limit (10240) below current usage (2097152), missing container "a" memory usage]`},
		{name: "pod unknown", checks: []memoryUsage{{limit: 10240}}, want: "cannot decrease memory limits: missing pod memory usage"},
		{name: "equal is over", checks: []memoryUsage{{name: "a", limit: 100, usage: i64(100)}},
			want: `cannot decrease memory limits: attempting to set container "a" memory limit (100) below current usage (100)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkMemoryDecrease(tc.checks)
			if got := errString(err); got != tc.want {
				t.Errorf("err = %q\nwant  %q", got, tc.want)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

var rr = resourcetest.Requirements
