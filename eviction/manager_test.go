package eviction

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/testsupport/eventually"
)

type fakeNode struct {
	mu        sync.Mutex
	stats     Stats
	calls     int
	notBefore []time.Time // what each Stats call asked for
	reclaimed []string
	// onReclaim changes the stats as a reclaim would.
	onReclaim func(s *Stats)
	onEvict   func() // runs as EvictPod stops the pod
	evicted   []string
	graces    []int64
	statuses  []v1.PodStatus
	events    []string
	synced    chan struct{}
	statsErr  error
	evictErr  map[string]error // by pod name
}

func (f *fakeNode) Stats(_ context.Context, notBefore time.Time) (Stats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	f.notBefore = append(f.notBefore, notBefore)
	if f.synced != nil {
		select {
		case f.synced <- struct{}{}:
		default:
		}
	}
	return f.stats, f.statsErr
}

func (f *fakeNode) DeleteUnusedImages(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reclaimed = append(f.reclaimed, "images")
	if f.onReclaim != nil {
		f.onReclaim(&f.stats)
	}
	return nil
}

func (f *fakeNode) DeleteAllUnusedContainers(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reclaimed = append(f.reclaimed, "containers")
	return errors.New("runtime down") // logged, not fatal
}

func (f *fakeNode) EvictPod(_ context.Context, pod *v1.Pod, grace int64, st v1.PodStatus) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.evicted = append(f.evicted, pod.Name)
	f.graces = append(f.graces, grace)
	f.statuses = append(f.statuses, st)
	if f.onEvict != nil {
		f.onEvict()
	}
	return f.evictErr[pod.Name]
}

func (f *fakeNode) Eventf(_ runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, reason+": "+fmt.Sprintf(messageFmt, args...))
}

func (f *fakeNode) AnnotatedEventf(o runtime.Object, ann map[string]string, eventtype, reason, messageFmt string, args ...any) {
	if ann != nil {
		messageFmt += " starved=" + ann[AnnotationStarvedResource]
	}
	f.Eventf(o, eventtype, reason, messageFmt, args...)
}

func (f *fakeNode) setMemory(ws uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stats.MemoryCapacity, f.stats.MemoryWorkingSet = u(1000*mi), u(ws)
}

func TestManagerMemoryEvictionAndConditions(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	be := newPod("besteffort")
	guaranteed := newPod("guaranteed", memReq("500Mi"))
	node := &fakeNode{}
	node.stats.Pods = []PodStats{memStats(be, 100*mi), memStats(guaranteed, 400*mi)}
	node.setMemory(500 * mi)
	reg := prometheus.NewRegistry()
	m := mustManager(t)(NewManager(Config{
		Thresholds:               mustParse(t, map[string]string{"memory.available": "100Mi"}),
		PressureTransitionPeriod: time.Minute,
		NodeRef:                  &v1.ObjectReference{Kind: "Node", Name: "n1"},
	}, clk, node, node, node, func() []*v1.Pod { return []*v1.Pod{guaranteed, be} }, node, WithRegisterer(reg)))
	ctx := context.Background()

	if _, err := m.Synchronize(ctx); err != nil {
		t.Fatal(err)
	}
	if len(node.evicted) != 0 || len(m.Conditions()) != 0 {
		t.Fatalf("no pressure: evicted %v conditions %v", node.evicted, m.Conditions())
	}
	if r := m.Admit(be); !r.Admit {
		t.Errorf("best effort refused without pressure: %+v", r)
	}

	node.setMemory(950 * mi)
	clk.Step(10 * time.Second)
	d, err := m.Synchronize(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(node.evicted) != 1 || node.evicted[0] != "besteffort" || node.graces[0] != 1 {
		t.Fatalf("evicted %v graces %v, want besteffort with 1s; %s", node.evicted, node.graces, d.Explanation)
	}
	if len(node.reclaimed) != 0 {
		t.Errorf("memory pressure ran node reclaim %v", node.reclaimed)
	}
	if got := testutil.ToFloat64(m.evictions.WithLabelValues("memory.available")); got != 1 {
		t.Errorf("kubelet_evictions{eviction_signal=memory.available} = %v, want 1", got)
	}
	if node.statuses[0].Reason != "Evicted" || !strings.HasPrefix(node.statuses[0].Message, "The node was low on resource: memory.") {
		t.Errorf("status %+v", node.statuses[0])
	}
	if !m.HasCondition(v1.NodeMemoryPressure) {
		t.Error("MemoryPressure not reported")
	}
	if len(node.events) < 2 || !strings.Contains(node.events[1], "Decision: signal memory.available observed 50Mi, threshold 100Mi (hard); ranking: 1. default/besteffort") ||
		!strings.HasSuffix(node.events[1], "starved=memory") {
		t.Errorf("Evicted event lacks the decision: %q", node.events)
	}
	if r := m.Admit(be); r.Admit {
		t.Error("best effort admitted under memory pressure")
	}
	if r := m.Admit(guaranteed); !r.Admit {
		t.Error("guaranteed refused under memory pressure")
	}
	wantEvents := []string{"EvictionThresholdMet: Attempting to reclaim memory", "Evicted: The node was low on resource: memory."}
	for i, w := range wantEvents {
		if i >= len(node.events) || !strings.HasPrefix(node.events[i], w) {
			t.Errorf("events %q, want prefix %q at %d", node.events, w, i)
		}
	}

	// Relieved: condition stays for the transition period, then clears.
	node.setMemory(500 * mi)
	clk.Step(50 * time.Second)
	if _, err := m.Synchronize(ctx); err != nil {
		t.Fatal(err)
	}
	if !m.HasCondition(v1.NodeMemoryPressure) || len(node.evicted) != 1 {
		t.Errorf("50s after: conditions %v evicted %v", m.Conditions(), node.evicted)
	}
	clk.Step(10 * time.Second)
	if _, err := m.Synchronize(ctx); err != nil {
		t.Fatal(err)
	}
	if len(m.Conditions()) != 0 {
		t.Errorf("60s after: conditions %v, want none", m.Conditions())
	}
}

func diskNode(avail uint64) Stats {
	return Stats{NodeFs: FsStats{CapacityBytes: u(1000), AvailableBytes: u(avail)}}
}

func TestManagerDiskReclaimFirst(t *testing.T) {
	pod := newPod("writer")
	tests := []struct {
		name        string
		afterGC     uint64
		wantEvicted []string
	}{
		{"image GC enough: no eviction", 500, nil},
		{"image GC not enough: evict", 60, []string{"writer"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Now())
			node := &fakeNode{stats: diskNode(50)}
			node.stats.Pods = []PodStats{diskStats(pod, 100, 0, 300)}
			node.onReclaim = func(s *Stats) { s.NodeFs.AvailableBytes = u(tc.afterGC) }
			m := mustManager(t)(NewManager(Config{Thresholds: mustParse(t, map[string]string{"nodefs.available": "10%"})},
				clk, node, node, node, func() []*v1.Pod { return []*v1.Pod{pod} }, nil))
			d, err := m.Synchronize(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(node.reclaimed, ",") != "containers,images" {
				t.Errorf("reclaimed %v, want containers,images", node.reclaimed)
			}
			if strings.Join(node.evicted, ",") != strings.Join(tc.wantEvicted, ",") {
				t.Errorf("evicted %v, want %v; %s", node.evicted, tc.wantEvicted, d.Explanation)
			}
			if !m.HasCondition(v1.NodeDiskPressure) {
				t.Error("DiskPressure not reported")
			}
			if r := m.Admit(newPod("new", memReq("1Mi"))); r.Admit || r.Message != "The node had condition: [DiskPressure]. " {
				t.Errorf("admission under disk pressure: %+v", r)
			}
		})
	}
}

func TestManagerSoftGraceAndStatsError(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	pod := newPod("p")
	node := &fakeNode{}
	node.stats.Pods = []PodStats{memStats(pod, 100*mi)}
	node.setMemory(950 * mi)
	th, err := ParseThresholds(nil, map[string]string{"memory.available": "100Mi"}, map[string]string{"memory.available": "30s"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := mustManager(t)(NewManager(Config{Thresholds: th, MaxPodGracePeriodSeconds: 5}, clk, node, node, node, func() []*v1.Pod { return []*v1.Pod{pod} }, nil))
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if _, err := m.Synchronize(ctx); err != nil {
			t.Fatal(err)
		}
		clk.Step(10 * time.Second)
	}
	if len(node.evicted) != 0 {
		t.Fatalf("evicted %v before the 30s grace period", node.evicted)
	}
	if _, err := m.Synchronize(ctx); err != nil {
		t.Fatal(err)
	}
	if len(node.evicted) != 1 || node.graces[0] != 5 {
		t.Fatalf("evicted %v graces %v, want one with 5s", node.evicted, node.graces)
	}
	node.statsErr = errors.New("cadvisor gone")
	if _, err := m.Synchronize(ctx); err == nil || !strings.Contains(err.Error(), "cadvisor gone") {
		t.Errorf("err = %v", err)
	}
}

func TestManagerRunTicks(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	node := &fakeNode{synced: make(chan struct{}, 1)}
	node.setMemory(100 * mi)
	m := mustManager(t)(NewManager(Config{Thresholds: mustParse(t, map[string]string{"memory.available": "100Mi"})},
		clk, node, node, node, func() []*v1.Pod { return nil }, nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	wait := func(what string) {
		select {
		case <-node.synced:
		case <-time.After(10 * time.Second):
			t.Fatalf("no synchronize %s", what)
		}
	}
	wait("at start")
	for i := 0; i < 2; i++ {
		eventually.True(t, "the monitoring timer", clk.HasWaiters)
		clk.Step(DefaultMonitoringInterval)
		wait(fmt.Sprintf("after tick %d", i+1))
	}
	cancel()
	<-done
	node.mu.Lock()
	defer node.mu.Unlock()
	if node.calls != 3 {
		t.Errorf("stats read %d times, want 3", node.calls)
	}
}

func mustManager(t *testing.T) func(*Manager, error) *Manager {
	return func(m *Manager, err error) *Manager {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
}

// Pods over their local storage limits are evicted before node pressure is looked
// at, all in one cycle, with upstream's status and event; node pressure waits for
// the next cycle, critical pods are left alone, and none of it runs with
// localStorageCapacityIsolation off or without stats.
func TestManagerLocalStorageLimits(t *testing.T) {
	const mib = 1 << 20
	overDir := newPod("over-emptydir", emptyDir("data", "", "10Mi"))
	overCtr := newPod("over-container", containers("app=10Mi", "big=100Mi"))
	fine := newPod("fine", containers("app=10Mi"), memReq("1Mi"))
	critical := newPod("critical", static(), emptyDir("data", "", "10Mi"))
	stats := func() Stats {
		s := Stats{Pods: []PodStats{
			storageStats(overDir, 30*mib, []string{"data=" + fmt.Sprint(30*mib)}),
			storageStats(overCtr, 20*mib, nil, fmt.Sprintf("app=%d/0", 20*mib), "big=0/0"),
			storageStats(fine, mib, nil, fmt.Sprintf("app=%d/0", mib)),
			storageStats(critical, 30*mib, []string{"data=" + fmt.Sprint(30*mib)}),
		}}
		for i := range s.Pods {
			s.Pods[i].MemoryWorkingSet = u(10 * mi)
		}
		s.Pods[2].MemoryWorkingSet = u(900 * mi) // the node-pressure victim
		return s
	}
	memPressure := mustParse(t, map[string]string{"memory.available": "100Mi"})
	tests := []struct {
		name        string
		isolation   bool
		thresholds  []Threshold
		evictErr    map[string]error
		wantEvicted []string
		wantErr     string
		// nextCycle is evicted by the following cycle, without the evicted pods.
		nextCycle string
	}{
		{name: "no thresholds configured: limits still enforced", isolation: true,
			wantEvicted: []string{"over-emptydir", "over-container"}},
		{name: "under memory pressure too: limits first, node pressure next cycle", isolation: true, thresholds: memPressure,
			wantEvicted: []string{"over-emptydir", "over-container"}, nextCycle: "fine"},
		{name: "one eviction fails: the others still happen, the error is returned", isolation: true,
			evictErr:    map[string]error{"over-emptydir": errors.New("runtime down")},
			wantEvicted: []string{"over-emptydir", "over-container"}, wantErr: "evicting pod default/over-emptydir: runtime down"},
		{name: "localStorageCapacityIsolation off, no thresholds: nothing", isolation: false},
		{name: "localStorageCapacityIsolation off: only node pressure", isolation: false, thresholds: memPressure,
			wantEvicted: []string{"fine"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node := &fakeNode{stats: stats(), evictErr: tt.evictErr}
			node.setMemory(950 * mi)
			pods := func() []*v1.Pod {
				var out []*v1.Pod
				for _, p := range []*v1.Pod{overDir, overCtr, fine, critical} {
					if !slices.Contains(node.evicted, p.Name) {
						out = append(out, p)
					}
				}
				return out
			}
			reg := prometheus.NewRegistry()
			m := mustManager(t)(NewManager(Config{Thresholds: tt.thresholds, LocalStorageCapacityIsolation: tt.isolation},
				clocktesting.NewFakeClock(t0()), node, node, node, pods, node, WithRegisterer(reg)))
			d, err := m.Synchronize(context.Background())
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
			if strings.Join(node.evicted, ",") != strings.Join(tt.wantEvicted, ",") {
				t.Fatalf("evicted %v, want %v; %s", node.evicted, tt.wantEvicted, d.Explanation)
			}
			if !tt.isolation {
				return
			}
			if tt.thresholds != nil && !m.HasCondition(v1.NodeMemoryPressure) {
				t.Error("MemoryPressure not reported in a cycle that evicted for local storage")
			}
			wantMsgs := []string{
				`Usage of EmptyDir volume "data" exceeds the limit "10Mi". `,
				`Container app exceeded its local ephemeral storage limit "10Mi". `,
			}
			for i, st := range node.statuses {
				if st.Phase != v1.PodFailed || st.Reason != "Evicted" || st.Message != wantMsgs[i] || len(st.Conditions) != 0 || node.graces[i] != 1 {
					t.Errorf("eviction %d: grace %d status %+v, want 1s, Failed/Evicted %q, no condition", i, node.graces[i], st, wantMsgs[i])
				}
			}
			if got, want := strings.Join(node.events, "|"), "Evicted: "+wantMsgs[0]+"|Evicted: "+wantMsgs[1]; got != want {
				t.Errorf("events %q, want %q", got, want)
			}
			for sig, want := range map[Signal]float64{SignalEmptyDirFsLimit: 1, SignalEphemeralContainerFsLimit: 1, SignalMemoryAvailable: 0} {
				if tt.evictErr != nil && sig == SignalEmptyDirFsLimit {
					want = 0
				}
				if got := testutil.ToFloat64(m.evictions.WithLabelValues(string(sig))); got != want {
					t.Errorf("kubelet_evictions{eviction_signal=%s} = %v, want %v", sig, got, want)
				}
			}
			if len(d.LocalStorage) != 3 || d.Threshold != nil {
				t.Errorf("decision: %d local storage violations (want 3, the critical one included), threshold %v", len(d.LocalStorage), d.Threshold)
			}
			if tt.nextCycle == "" {
				return
			}
			if _, err := m.Synchronize(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := node.evicted[len(node.evicted)-1]; len(node.evicted) != 3 || got != tt.nextCycle {
				t.Errorf("next cycle evicted %v, want %s last", node.evicted, tt.nextCycle)
			}
		})
	}
}

// A critical pod over its limit is not evicted and does not hold up node pressure.
func TestManagerLocalStorageCriticalPodLeftAlone(t *testing.T) {
	critical := newPod("critical", static(), emptyDir("data", "", "1Mi"))
	other := newPod("other")
	node := &fakeNode{stats: Stats{Pods: []PodStats{storageStats(critical, 2<<20, []string{"data=2097152"}), memStats(other, 100*mi)}}}
	node.setMemory(950 * mi)
	m := mustManager(t)(NewManager(Config{Thresholds: mustParse(t, map[string]string{"memory.available": "100Mi"}), LocalStorageCapacityIsolation: true},
		clocktesting.NewFakeClock(t0()), node, node, node, func() []*v1.Pod { return []*v1.Pod{critical, other} }, nil))
	if _, err := m.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	if strings.Join(node.evicted, ",") != "other" {
		t.Errorf("evicted %v, want only the node-pressure victim", node.evicted)
	}
}

// TestManagerAsksForStatsNewerThanWhatItFreed: a quiet cycle takes the last
// (cached) measurement; after a reclaim it re-reads stats measured after it,
// and the cycle after an eviction asks for stats measured after the evicted
// pod stopped, so it does not evict again for pressure already relieved.
func TestManagerAsksForStatsNewerThanWhatItFreed(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(t0)
	pod := newPod("writer")
	node := &fakeNode{stats: diskNode(500)}
	node.stats.Pods = []PodStats{diskStats(pod, 100, 0, 300)}
	m := mustManager(t)(NewManager(Config{Thresholds: mustParse(t, map[string]string{"nodefs.available": "10%"})},
		clk, node, node, node, func() []*v1.Pod { return []*v1.Pod{pod} }, nil))
	ctx := context.Background()

	if _, err := m.Synchronize(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Step(10 * time.Second)
	node.mu.Lock()
	node.stats.NodeFs.AvailableBytes = u(50)
	node.onReclaim = func(s *Stats) { clk.Step(time.Second); s.NodeFs.AvailableBytes = u(60) } // not enough
	node.onEvict = func() { clk.Step(2 * time.Second) }
	node.mu.Unlock()
	if _, err := m.Synchronize(ctx); err != nil {
		t.Fatal(err)
	}
	if len(node.evicted) != 1 {
		t.Fatalf("evicted %v, want the writer", node.evicted)
	}
	clk.Step(10 * time.Second)
	if _, err := m.Synchronize(ctx); err != nil {
		t.Fatal(err)
	}
	// Cycle 2 reclaims (1s) and evicts (2s); cycle 3, still under pressure,
	// reclaims again after asking for stats newer than the eviction.
	reclaimed, evicted, reclaimedAgain := t0.Add(11*time.Second), t0.Add(13*time.Second), t0.Add(24*time.Second)
	want := []time.Time{{}, {}, reclaimed, evicted, reclaimedAgain}
	if !slices.EqualFunc(node.notBefore, want, time.Time.Equal) {
		t.Errorf("stats asked not before %v, want %v", node.notBefore, want)
	}
}
