package cpumanager

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/cpuset"

	"github.com/nodelet/nodelet/resourcemanager/topologymanager"
)

type fakeRuntime struct {
	mu      sync.Mutex
	updates map[string]string
}

func (f *fakeRuntime) UpdateContainerResources(_ context.Context, id string, r *runtimeapi.ContainerResources) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.updates == nil {
		f.updates = map[string]string{}
	}
	f.updates[id] = r.GetLinux().GetCpusetCpus()
	return nil
}

func (f *fakeRuntime) take() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	u := f.updates
	f.updates = nil
	return u
}

// admitPod admits a pod as the agent does: the topology manager (policy
// none here) allocates each container, and a refusal takes back what it got.
func admitPod(m *Manager, pod *v1.Pod) error {
	tm, err := topologymanager.New(topologymanager.Config{Policy: topologymanager.PolicyNone, Scope: topologymanager.ScopeContainer, NUMA: topologymanager.NUMAInfo{Nodes: []int{0}}}, m)
	if err != nil {
		return err
	}
	return tm.Admit(context.Background(), pod)
}

// twoCPUManager is the rig shape: 2 CPUs, reservedSystemCPUs "0".
func twoCPUManager(t *testing.T, root string, running *[]RunningContainer, active *[]*v1.Pod) (*Manager, *fakeRuntime) {
	t.Helper()
	p, err := NewStaticPolicy(mustTopology(t, fixtureOneSocketTwoCores(t)), mustParse(t, "0"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	rt := &fakeRuntime{}
	m, err := New(Config{Policy: PolicyStatic, Static: p, RootDir: root, ReconcilePeriod: 10 * time.Second}, rt,
		func(context.Context) ([]RunningContainer, error) { return *running, nil },
		func() []*v1.Pod { return *active }, testclock.NewFakeClock(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	return m, rt
}

func TestManagerAdmitCreateReconcileRelease(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	g := guaranteed("g", "app", "1")
	be := withUID(pod(nil, container("app", "", "")), "be")
	var running []RunningContainer
	var active []*v1.Pod
	m, rt := twoCPUManager(t, root, &running, &active)

	// BestEffort first: created on the whole pool.
	if err := admitPod(m, be); err != nil {
		t.Fatal("BestEffort refused")
	}
	if got := m.CPUSetFor(be.UID, "app"); got != "0-1" {
		t.Errorf("BestEffort before any exclusive pod: %q, want 0-1", got)
	}
	active, running = []*v1.Pod{be}, []RunningContainer{{ID: "be1", PodUID: "be", Name: "app"}}
	m.Reconcile(ctx)
	rt.take()

	if err := admitPod(m, g); err != nil {
		t.Fatal("Guaranteed refused")
	}
	if got := m.CPUSetFor(g.UID, "app"); got != "1" {
		t.Errorf("Guaranteed 1 CPU: %q, want 1", got)
	}
	if got := m.ExclusiveCPUs("g", "app"); got.String() != "1" {
		t.Errorf("ExclusiveCPUs: %q", got)
	}
	// The pool shrank: the running BestEffort container is moved to 0.
	active = []*v1.Pod{be, g}
	running = append(running, RunningContainer{ID: "g1", PodUID: "g", Name: "app"})
	m.Reconcile(ctx)
	if got := rt.take(); got["be1"] != "0" || got["g1"] != "1" {
		t.Errorf("updates %v, want be1=0 g1=1", got)
	}
	m.Reconcile(ctx)
	if got := rt.take(); len(got) != 0 {
		t.Errorf("nothing changed, yet updates %v", got)
	}
	// No CPU left: upstream's reason.
	if err := admitPod(m, guaranteed("g2", "app", "1")); err == nil || !strings.Contains(err.Error(), "not enough cpus available to satisfy request") {
		t.Errorf("got %v, want not enough cpus", err)
	}

	// A restart restores the assignment from the checkpoint.
	m2, _ := twoCPUManager(t, root, &running, &active)
	if got := m2.CPUSetFor(g.UID, "app"); got != "1" {
		t.Errorf("after restart: %q, want 1", got)
	}

	// The Guaranteed pod stops: released after two reconciles without it,
	// and the BestEffort container gets the pool back.
	active, running = []*v1.Pod{be}, running[:1]
	m2.Reconcile(ctx)
	if got := m2.ExclusiveCPUs("g", "app"); got.String() != "1" {
		t.Errorf("released on the first inactive reconcile (a just-admitted pod would lose its CPUs)")
	}
	m2.Reconcile(ctx)
	if got := m2.ExclusiveCPUs("g", "app"); !got.IsEmpty() {
		t.Errorf("still assigned %q", got)
	}
	if got := m2.CPUSetFor("be", "app"); got != "0-1" {
		t.Errorf("BestEffort after release: %q", got)
	}
}

func TestManagerRemovePod(t *testing.T) {
	var running []RunningContainer
	var active []*v1.Pod
	m, _ := twoCPUManager(t, t.TempDir(), &running, &active)
	g := guaranteed("g", "app", "1")
	if err := admitPod(m, g); err != nil {
		t.Fatal("refused")
	}
	m.RemovePod(context.Background(), g.UID)
	if got := m.CPUSetFor("x", "y"); got != "0-1" {
		t.Errorf("pool after removal %q, want 0-1", got)
	}
}

func TestManagerAdmitSMTAlignment(t *testing.T) {
	p, err := NewStaticPolicy(mustTopology(t, fixtureTwoNUMASMT(t)), mustParse(t, "0,8"), Options{FullPCPUsOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Policy: PolicyStatic, Static: p, RootDir: t.TempDir()}, &fakeRuntime{}, nil, nil, testclock.NewFakeClock(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	// The first container fits, the second does not: nothing is kept.
	odd := withUID(pod(nil, container("a", "2", "2"), container("b", "3", "3")), "odd")
	var smt SMTAlignmentError
	if err := admitPod(m, odd); !errors.As(err, &smt) || !strings.Contains(smt.Error(), "not multiple cpus per core") {
		t.Errorf("got %v, want an SMTAlignmentError", err)
	}
	if got := m.ExclusiveCPUs("odd", "a"); !got.IsEmpty() {
		t.Errorf("a refused pod kept %q", got)
	}
}

func TestManagerRefusesCheckpoint(t *testing.T) {
	tests := []struct {
		name    string
		write   func(path string) error
		wantErr string
	}{
		{"another policy", func(path string) error { return writeCheckpoint(path, PolicyNone, State{DefaultCPUSet: cpuset.New()}) },
			`configured policy "static" differs from state checkpoint policy "none"`},
		{"another machine", func(path string) error {
			return writeCheckpoint(path, PolicyStatic, State{DefaultCPUSet: cpuset.New(0, 1, 2, 3)})
		}, "doesn't match with CPUs in state"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			path := filepath.Join(root, CheckpointFile)
			if err := tc.write(path); err != nil {
				t.Fatal(err)
			}
			p, err := NewStaticPolicy(mustTopology(t, fixtureOneSocketTwoCores(t)), mustParse(t, "0"), Options{})
			if err != nil {
				t.Fatal(err)
			}
			_, err = New(Config{Policy: PolicyStatic, Static: p, RootDir: root}, &fakeRuntime{}, nil, nil, testclock.NewFakeClock(time.Now()))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "delete the CPU manager checkpoint file") {
				t.Errorf("got %v", err)
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("the refused checkpoint must stay for the operator: %v", err)
			}
		})
	}
}

func TestManagerRunStopsWithContext(t *testing.T) {
	var running []RunningContainer
	var active []*v1.Pod
	clk := testclock.NewFakeClock(time.Now())
	p, _ := NewStaticPolicy(mustTopology(t, fixtureOneSocketTwoCores(t)), mustParse(t, "0"), Options{})
	rt := &fakeRuntime{}
	m, err := New(Config{Policy: PolicyStatic, Static: p, RootDir: t.TempDir(), ReconcilePeriod: 10 * time.Second}, rt,
		func(context.Context) ([]RunningContainer, error) { return running, nil },
		func() []*v1.Pod { return active }, clk)
	if err != nil {
		t.Fatal(err)
	}
	running = []RunningContainer{{ID: "c1", PodUID: "be", Name: "app"}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if clk.HasWaiters() {
			clk.Step(10 * time.Second)
		}
		rt.mu.Lock()
		got := rt.updates["c1"]
		rt.mu.Unlock()
		if got == "0-1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no reconcile on the period")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
}

func TestDecideUpdates(t *testing.T) {
	s := State{DefaultCPUSet: cpuset.New(0), Assignments: map[string]map[string]cpuset.CPUSet{"g": {"app": cpuset.New(1)}}}
	running := []RunningContainer{{"a", "be", "app"}, {"b", "g", "app"}, {"c", "be2", "app"}}
	got := decideUpdates(s, running, map[string]cpuset.CPUSet{"a": cpuset.New(0), "c": cpuset.New(0, 1)})
	if len(got) != 2 || got[0].ID != "b" || got[0].CPUs.String() != "1" || got[1].ID != "c" || got[1].CPUs.String() != "0" {
		t.Errorf("got %+v", got)
	}
	empty := State{DefaultCPUSet: cpuset.New()}
	if got := decideUpdates(empty, running[:1], nil); len(got) != 0 {
		t.Errorf("an empty pool must not be applied: %+v", got)
	}
}

func TestRunningFromCRI(t *testing.T) {
	l := listerFunc(func() []*runtimeapi.Container {
		return []*runtimeapi.Container{
			{Id: "1", Labels: map[string]string{"uid": "p", "name": "c"}},
			{Id: "2", Labels: map[string]string{}},
		}
	})
	got, err := RunningFromCRI(l, "uid", "name")(context.Background())
	if err != nil || len(got) != 1 || got[0] != (RunningContainer{"1", "p", "c"}) {
		t.Errorf("got %+v %v", got, err)
	}
}

type listerFunc func() []*runtimeapi.Container

func (f listerFunc) ListContainers(_ context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	if filter.GetState().GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return nil, nil
	}
	return f(), nil
}

// A pod on the shared pool changes nothing, so nothing is written.
func TestManagerAdmitSharedPoolWritesNothing(t *testing.T) {
	var running []RunningContainer
	var active []*v1.Pod
	root := t.TempDir()
	m, _ := twoCPUManager(t, root, &running, &active)
	path := filepath.Join(root, CheckpointFile)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := admitPod(m, withUID(pod(nil, container("app", "", "")), "be")); err != nil {
		t.Fatal("refused")
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("a BestEffort admission wrote the checkpoint (%v)", err)
	}
	if err := admitPod(m, guaranteed("g", "app", "1")); err != nil {
		t.Fatal("refused")
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("an exclusive assignment was not checkpointed: %v", err)
	}
}

// Under policy none a corrupt checkpoint loses nothing: it is set aside and the manager
// starts (the fault suite's corrupt-state scenario); under static it is refused.
func TestCorruptCheckpointUnderNoneIsSetAside(t *testing.T) {
	for _, content := range []string{"", "\x00\x00garbage"} {
		root := t.TempDir()
		path := filepath.Join(root, CheckpointFile)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := New(Config{Policy: PolicyNone, RootDir: root}, &fakeRuntime{}, nil, nil, testclock.NewFakeClock(time.Now())); err != nil {
			t.Fatalf("policy none with checkpoint %q: %v", content, err)
		}
		ents, _ := os.ReadDir(root)
		var aside bool
		for _, e := range ents {
			aside = aside || strings.Contains(e.Name(), CheckpointFile+".corrupt-")
		}
		if !aside {
			t.Errorf("checkpoint %q not set aside; dir has %v", content, ents)
		}

		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		p, err := NewStaticPolicy(mustTopology(t, fixtureOneSocketTwoCores(t)), mustParse(t, "0"), Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := New(Config{Policy: PolicyStatic, Static: p, RootDir: root}, &fakeRuntime{}, nil, nil, testclock.NewFakeClock(time.Now())); err == nil {
			t.Errorf("static with checkpoint %q started", content)
		}
	}
}
