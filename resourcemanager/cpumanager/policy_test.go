package cpumanager

import (
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/cpuset"
	"k8s.io/utils/ptr"
)

func container(name, cpuReq, cpuLim string) v1.Container {
	c := v1.Container{Name: name}
	if cpuReq != "" {
		c.Resources.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpuReq), v1.ResourceMemory: resource.MustParse("64Mi")}
	}
	if cpuLim != "" {
		c.Resources.Limits = v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpuLim), v1.ResourceMemory: resource.MustParse("64Mi")}
	}
	return c
}

func pod(init []v1.Container, cs ...v1.Container) *v1.Pod {
	return &v1.Pod{Spec: v1.PodSpec{InitContainers: init, Containers: cs}}
}

func withUID(p *v1.Pod, uid string) *v1.Pod { p.UID = types.UID(uid); return p }

func guaranteed(uid, name, cpus string) *v1.Pod {
	return withUID(pod(nil, container(name, cpus, cpus)), uid)
}

func TestReservedCPUs(t *testing.T) {
	q := resource.MustParse
	tests := []struct {
		name         string
		root         func(*testing.T) string
		explicit     string
		kube, system resource.Quantity
		want         string
		wantErr      string
	}{
		{name: "explicit set", root: fixtureOneSocketTwoCores, explicit: "0", want: "0"},
		{name: "explicit set outside the machine", root: fixtureOneSocketTwoCores, explicit: "5", wantErr: "outside the machine"},
		{name: "fractions round up to whole CPUs", root: fixtureOneSocketTwoCores, kube: q("100m"), system: q("200m"), want: "0"},
		{name: "SMT: two CPUs are one whole core", root: fixtureTwoNUMASMT, kube: q("1"), system: q("500m"), want: "0,8"},
		{name: "SMT: three CPUs are a core and the next thread", root: fixtureTwoNUMASMT, kube: q("2"), system: q("1"), want: "0-1,8"},
		{name: "2 sockets: lowest-numbered core by topology", root: fixtureTwoSockets, system: q("2"), want: "0,4"},
		{name: "2 sockets: five CPUs take a whole socket first", root: fixtureTwoSockets, system: q("5"), want: "0-2,4-5"},
		{name: "nothing reserved is refused", root: fixtureOneSocketTwoCores, wantErr: "greater than zero"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReservedCPUs(mustTopology(t, tc.root(t)), tc.explicit, tc.kube, tc.system)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got.String() != tc.want {
				t.Errorf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestParseOptions(t *testing.T) {
	tests := []struct {
		name    string
		policy  string
		in      map[string]string
		want    Options
		wantErr string
	}{
		{name: "none", policy: PolicyStatic},
		{name: "all three", policy: PolicyStatic, in: map[string]string{
			"full-pcpus-only": "true", "distribute-cpus-across-numa": "true", "strict-cpu-reservation": "true",
		}, want: Options{FullPCPUsOnly: true, DistributeCPUsAcrossNUMA: true, StrictCPUReservation: true}},
		{name: "false is off", policy: PolicyStatic, in: map[string]string{"full-pcpus-only": "false"}},
		{name: "unknown refused by name", policy: PolicyStatic, in: map[string]string{"align-by-socket": "true"}, wantErr: `"align-by-socket"`},
		{name: "bad value", policy: PolicyStatic, in: map[string]string{"full-pcpus-only": "yes please"}, wantErr: `"full-pcpus-only"`},
		{name: "options need the static policy", policy: PolicyNone, in: map[string]string{"full-pcpus-only": "true"}, wantErr: "only supported with"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseOptions(tc.policy, tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// step is one decision in a sequence: allocate a pod's container, or
// release one (release set).
type step struct {
	pod       *v1.Pod
	container string
	release   bool
	want      string // the exclusive cpuset assigned ("" for the shared pool)
	wantErr   string
	wantPool  string // the shared pool after the step, when set
}

func TestStaticPolicyAllocate(t *testing.T) {
	initPod := withUID(pod([]v1.Container{container("init", "2", "2")}, container("app", "2", "2")), "init")
	sidecarPod := withUID(pod([]v1.Container{func() v1.Container {
		c := container("sidecar", "2", "2")
		c.RestartPolicy = ptr.To(v1.ContainerRestartPolicyAlways)
		return c
	}()}, container("app", "2", "2")), "side")
	tests := []struct {
		name     string
		root     func(*testing.T) string
		reserved string
		opts     Options
		steps    []step
	}{
		{name: "2 CPUs, 0 reserved: Guaranteed 1 CPU gets 1, BestEffort shares 0", root: fixtureOneSocketTwoCores, reserved: "0", steps: []step{
			{pod: guaranteed("g", "c", "1"), container: "c", want: "1", wantPool: "0"},
			{pod: withUID(pod(nil, container("c", "", "")), "be"), container: "c", want: "", wantPool: "0"},
			{pod: guaranteed("g2", "c", "1"), container: "c", wantErr: "not enough cpus available to satisfy request: requested=1, available=0"},
			{pod: guaranteed("g", "c", "1"), container: "c", release: true, wantPool: "0-1"},
			{pod: guaranteed("g2", "c", "1"), container: "c", want: "1"},
		}},
		{name: "not whole CPUs or not Guaranteed share the pool", root: fixtureOneSocketTwoCores, reserved: "0", steps: []step{
			{pod: guaranteed("frac", "c", "500m"), container: "c", want: "", wantPool: "0-1"},
			{pod: withUID(pod(nil, container("c", "1", "2")), "burst"), container: "c", want: "", wantPool: "0-1"},
		}},
		{name: "pod-level resources stay on the shared pool", root: fixtureOneSocketTwoCores, reserved: "0", steps: []step{
			{pod: func() *v1.Pod {
				p := guaranteed("plr", "c", "1")
				p.Spec.Resources = &v1.ResourceRequirements{Requests: p.Spec.Containers[0].Resources.Requests, Limits: p.Spec.Containers[0].Resources.Limits}
				return p
			}(), container: "c", want: "", wantPool: "0-1"},
		}},
		{name: "SMT: whole cores before threads, partly used cores filled first", root: fixtureTwoNUMASMT, reserved: "0,8", steps: []step{
			{pod: guaranteed("a", "c", "2"), container: "c", want: "1,9"},
			{pod: guaranteed("b", "c", "3"), container: "c", want: "2-3,10"},
			{pod: guaranteed("c", "c", "1"), container: "c", want: "11"},
		}},
		{name: "SMT: a request of a NUMA node's size takes a whole free node", root: fixtureTwoNUMASMT, reserved: "0,8", steps: []step{
			{pod: guaranteed("a", "c", "8"), container: "c", want: "4-7,12-15", wantPool: "0-3,8-11"},
		}},
		{name: "2 sockets: a socket-sized request takes the free socket", root: fixtureTwoSockets, reserved: "0", steps: []step{
			{pod: guaranteed("a", "c", "4"), container: "c", want: "2-3,6-7"},
			{pod: guaranteed("b", "c", "2"), container: "c", want: "1,5"},
			{pod: guaranteed("c", "c", "1"), container: "c", want: "4"},
		}},
		{name: "2 sockets: whole cores come from the fuller socket first", root: fixtureTwoSockets, reserved: "2", steps: []step{
			{pod: guaranteed("a", "c", "2"), container: "c", want: "3,7"},
			{pod: guaranteed("b", "c", "1"), container: "c", want: "6"},
			{pod: guaranteed("c", "c", "2"), container: "c", want: "0,4"},
		}},
		{name: "full-pcpus-only refuses odd requests and half-free cores", root: fixtureTwoNUMASMT, reserved: "0", opts: Options{FullPCPUsOnly: true}, steps: []step{
			{pod: guaranteed("odd", "c", "3"), container: "c", wantErr: "SMT Alignment Error: requested 3 cpus not multiple cpus per core = 2"},
			{pod: guaranteed("a", "c", "2"), container: "c", want: "1,9"},
			{pod: guaranteed("big", "c", "14"), container: "c", wantErr: "not enough free physical CPUs: available physical CPUs = 12, requested CPUs = 14"},
		}},
		{name: "full-pcpus-only on a machine without SMT accepts any count", root: fixtureOneSocketTwoCores, reserved: "0", opts: Options{FullPCPUsOnly: true}, steps: []step{
			{pod: guaranteed("a", "c", "1"), container: "c", want: "1"},
		}},
		{name: "distribute-cpus-across-numa splits a large request evenly", root: fixtureTwoNUMASMT, reserved: "0,8", opts: Options{DistributeCPUsAcrossNUMA: true}, steps: []step{
			{pod: guaranteed("a", "c", "12"), container: "c", want: "1-6,9-14", wantPool: "0,7-8,15"},
		}},
		{name: "distribute-cpus-across-numa packs a request one node holds", root: fixtureTwoNUMASMT, reserved: "0,8", opts: Options{DistributeCPUsAcrossNUMA: true}, steps: []step{
			{pod: guaranteed("a", "c", "4"), container: "c", want: "1-2,9-10"},
		}},
		{name: "strict-cpu-reservation keeps reserved CPUs out of the shared pool", root: fixtureTwoSockets, reserved: "0,4", opts: Options{StrictCPUReservation: true}, steps: []step{
			{pod: withUID(pod(nil, container("c", "", "")), "be"), container: "c", want: "", wantPool: "1-3,5-7"},
			{pod: guaranteed("a", "c", "2"), container: "c", want: "1,5", wantPool: "2-3,6-7"},
		}},
		{name: "init container CPUs are reused by the app container", root: fixtureTwoNUMASMT, reserved: "0,8", steps: []step{
			{pod: initPod, container: "init", want: "1,9", wantPool: "0,2-8,10-15"},
			{pod: initPod, container: "app", want: "1,9", wantPool: "0,2-8,10-15"},
			{pod: initPod, container: "init", release: true, wantPool: "0,2-8,10-15"},
			{pod: initPod, container: "app", release: true, wantPool: "0-15"},
		}},
		{name: "sidecar CPUs are not reused", root: fixtureTwoNUMASMT, reserved: "0,8", steps: []step{
			{pod: sidecarPod, container: "sidecar", want: "1,9"},
			{pod: sidecarPod, container: "app", want: "2,10"},
		}},
		{name: "an existing assignment is kept", root: fixtureOneSocketTwoCores, reserved: "0", steps: []step{
			{pod: guaranteed("g", "c", "1"), container: "c", want: "1"},
			{pod: guaranteed("g", "c", "1"), container: "c", want: "1", wantPool: "0"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			topo := mustTopology(t, tc.root(t))
			p, err := NewStaticPolicy(topo, mustParse(t, tc.reserved), tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			s := p.InitialState()
			for i, st := range tc.steps {
				before := s.Clone()
				if st.release {
					s = p.Release(s, string(st.pod.UID), st.container)
				} else {
					var c *v1.Container
					for j := range st.pod.Spec.InitContainers {
						if st.pod.Spec.InitContainers[j].Name == st.container {
							c = &st.pod.Spec.InitContainers[j]
						}
					}
					for j := range st.pod.Spec.Containers {
						if st.pod.Spec.Containers[j].Name == st.container {
							c = &st.pod.Spec.Containers[j]
						}
					}
					next, got, err := p.Allocate(s, st.pod, c, 0)
					if st.wantErr != "" {
						if err == nil || !strings.Contains(err.Error(), st.wantErr) {
							t.Fatalf("step %d: err %v, want %q", i, err, st.wantErr)
						}
						continue
					}
					if err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
					if got.String() != st.want {
						t.Errorf("step %d: assigned %q, want %q", i, got, st.want)
					}
					if !before.DefaultCPUSet.Equals(s.DefaultCPUSet) {
						t.Fatalf("step %d: Allocate mutated its input state", i)
					}
					s = next
				}
				if st.wantPool != "" && s.DefaultCPUSet.String() != st.wantPool {
					t.Errorf("step %d: shared pool %q, want %q", i, s.DefaultCPUSet, st.wantPool)
				}
				if err := p.ValidateState(s); err != nil {
					t.Errorf("step %d: state no longer valid: %v", i, err)
				}
			}
		})
	}
}

func TestSMTAlignmentErrorType(t *testing.T) {
	var err error = SMTAlignmentError{RequestedCPUs: 3, CPUsPerCore: 2}
	var smt SMTAlignmentError
	if !errors.As(err, &smt) || smt.Type() != "SMTAlignmentError" {
		t.Errorf("got %v", err)
	}
}

func TestValidateState(t *testing.T) {
	topo := mustTopology(t, fixtureTwoSockets(t))
	set := func(s string) cpuset.CPUSet { return mustParse(t, s) }
	tests := []struct {
		name    string
		opts    Options
		s       State
		wantErr string
	}{
		{name: "initial", s: State{DefaultCPUSet: set("0-7")}},
		{name: "assigned", s: State{DefaultCPUSet: set("0-3"), Assignments: map[string]map[string]cpuset.CPUSet{"p": {"c": set("4-7")}}}},
		{name: "reserved assigned away", s: State{DefaultCPUSet: set("1-7"), Assignments: map[string]map[string]cpuset.CPUSet{"p": {"c": set("0")}}}, wantErr: "not all reserved cpus"},
		{name: "overlap", s: State{DefaultCPUSet: set("0-7"), Assignments: map[string]map[string]cpuset.CPUSet{"p": {"c": set("4")}}}, wantErr: "overlaps with default cpuset"},
		{name: "machine shrank", s: State{DefaultCPUSet: set("0-9")}, wantErr: "doesn't match with CPUs in state"},
		{name: "strict: reserved outside the pool", opts: Options{StrictCPUReservation: true}, s: State{DefaultCPUSet: set("1-7")}},
		{name: "strict: reserved inside the pool", opts: Options{StrictCPUReservation: true}, s: State{DefaultCPUSet: set("0-7")}, wantErr: "strictly reserved"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewStaticPolicy(topo, set("0"), tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			err = p.ValidateState(tc.s)
			if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("err %v, want %q", err, tc.wantErr)
			}
		})
	}
}
