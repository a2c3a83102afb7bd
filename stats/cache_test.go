package stats

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/cri"
	"github.com/nodelet/nodelet/internal/testsupport/eventually"
	"github.com/nodelet/nodelet/internal/testsupport/fakecri"
)

// countingSource numbers its measurements (the node name says which one);
// with gate set, each measurement waits for a value from it.
type countingSource struct {
	mu    sync.Mutex
	calls int
	err   error
	gate  chan struct{}
}

func (s *countingSource) Snapshot(ctx context.Context) (*Snapshot, error) {
	s.mu.Lock()
	s.calls++
	n, err, gate := s.calls, s.err, s.gate
	s.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if err != nil {
		return nil, err
	}
	return &Snapshot{Summary: &statsapi.Summary{Node: statsapi.NodeStats{NodeName: fmt.Sprint(n)}}}, nil
}

func (s *countingSource) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// read returns which measurement a read got.
func read(t *testing.T, c *Cache) string {
	t.Helper()
	s, err := c.Summary(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s.Node.NodeName
}

func TestCacheRunMeasuresEveryPeriod(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	src := &countingSource{}
	c := NewCache(src, 0, clk)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()

	eventually.True(t, "Run's first measurement and its ticker", func() bool { return src.count() == 1 && clk.HasWaiters() })
	for range 3 {
		if got := read(t, c); got != "1" {
			t.Fatalf("read measurement %s, want the first", got)
		}
	}
	if n := src.count(); n != 1 {
		t.Fatalf("reads measured: %d measurements, want Run's 1", n)
	}
	clk.Step(DefaultHousekeepingPeriod)
	eventually.True(t, "the second measurement a period later", func() bool { return src.count() == 2 })
	eventually.True(t, "reads to get it", func() bool { return read(t, c) == "2" })
	cancel()
	<-done
	if n := src.count(); n != 2 {
		t.Errorf("%d measurements, want 2", n)
	}
}

// TestCacheFirstReadsShareOneMeasurement: readers arriving before any
// measurement (Run not started) all get the one the first of them starts.
func TestCacheFirstReadsShareOneMeasurement(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	src := &countingSource{gate: make(chan struct{})}
	c := NewCache(src, time.Second, clk)
	got := make(chan string, 5)
	for range 5 {
		go func() {
			s, err := c.Summary(context.Background())
			if err != nil {
				got <- err.Error()
				return
			}
			got <- s.Node.NodeName
		}()
	}
	eventually.True(t, "the first reader to measure", func() bool { return src.count() == 1 })
	close(src.gate)
	for range 5 {
		if g := <-got; g != "1" {
			t.Errorf("a reader got %q, want measurement 1", g)
		}
	}
	if n := src.count(); n != 1 {
		t.Errorf("%d measurements, want 1", n)
	}
}

func TestCacheNewerThanAndStale(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	src := &countingSource{}
	c := NewCache(src, 10*time.Second, clk)
	ctx := context.Background()
	newer := func(at time.Time) string {
		t.Helper()
		s, err := c.NewerThan(ctx, at)
		if err != nil {
			t.Fatal(err)
		}
		return s.Summary.Node.NodeName
	}

	if got := read(t, c); got != "1" {
		t.Fatalf("first read got %s", got)
	}
	measured := clk.Now()
	clk.Step(5 * time.Second)
	if got := newer(measured); got != "1" {
		t.Errorf("NewerThan(when it was measured) got %s, want the cached 1", got)
	}
	if got := newer(clk.Now()); got != "2" {
		t.Errorf("NewerThan(now) got %s, want a new measurement", got)
	}
	clk.Step(20 * time.Second) // two periods: as if Run had stopped
	if got := read(t, c); got != "2" {
		t.Errorf("read at two periods got %s, want the cached 2", got)
	}
	clk.Step(time.Nanosecond)
	if got := read(t, c); got != "3" {
		t.Errorf("read after two periods got %s, want a new measurement", got)
	}
}

func TestCacheErrors(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	src := &countingSource{err: errors.New("runtime down")}
	c := NewCache(src, time.Second, clk)
	for range 2 {
		if _, err := c.Summary(context.Background()); err == nil || err.Error() != "runtime down" {
			t.Fatalf("err = %v, want the measurement's", err)
		}
	}
	if n := src.count(); n != 1 {
		t.Errorf("%d measurements, want 1: a failed measurement is the last result until the next", n)
	}

	// A reader that gives up while measuring leaves no result behind.
	clk.Step(time.Hour)
	src.mu.Lock()
	src.err, src.gate = nil, make(chan struct{})
	src.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := c.Snapshot(ctx); errc <- err }()
	eventually.True(t, "the measurement to start", func() bool { return src.count() == 2 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	close(src.gate)
	if got := read(t, c); got != "3" {
		t.Errorf("read after a reader gave up got %s, want a new measurement", got)
	}
}

// TestProviderOverCRI: over the wire, a runtime without ListPodSandboxStats
// is asked once, then ListContainerStats serves; one with it is asked for
// nothing else, in one call per measurement.
func TestProviderOverCRI(t *testing.T) {
	for _, sandboxStats := range []bool{false, true} {
		t.Run(fmt.Sprintf("ListPodSandboxStats=%v", sandboxStats), func(t *testing.T) {
			f := fakecri.New(t)
			f.AddImage("img")
			f.SetSandboxStats(sandboxStats)
			ctx := context.Background()
			rt, err := cri.New(ctx, f.Endpoint(), "", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = rt.Close(ctx) })
			sbCfg := &runtimeapi.PodSandboxConfig{
				Metadata: &runtimeapi.PodSandboxMetadata{Name: "a", Namespace: "ns", Uid: "uid-a"},
				Labels:   map[string]string{cri.LabelPodUID: "uid-a"},
			}
			sb, err := rt.RunPodSandbox(ctx, sbCfg, "")
			if err != nil {
				t.Fatal(err)
			}
			id, err := rt.CreateContainer(ctx, sb, &runtimeapi.ContainerConfig{
				Metadata: &runtimeapi.ContainerMetadata{Name: "app"}, Image: &runtimeapi.ImageSpec{Image: "img"},
				Labels: map[string]string{cri.LabelPodUID: "uid-a"},
			}, sbCfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := rt.StartContainer(ctx, id); err != nil {
				t.Fatal(err)
			}
			f.SetMemoryUsage(id, 4096)
			cfg, _, _ := onePod(t)
			cfg.PodCgroup = nil
			p := New(cfg, rt, func() []*v1.Pod { return nil }, clocktesting.NewFakeClock(time.Unix(2000, 0)))
			f.ResetCalls()
			for range 2 {
				s, err := p.Summary(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if len(s.Pods) != 1 || len(s.Pods[0].Containers) != 1 || *s.Pods[0].Containers[0].Memory.WorkingSetBytes != 4096 {
					t.Fatalf("pods = %+v, want pod a with app's 4096 bytes", s.Pods)
				}
				if ps := s.Pods[0]; sandboxStats && (ps.ProcessStats == nil || *ps.ProcessStats.ProcessCount != 1) {
					t.Errorf("process stats = %+v, want the runtime's 1", ps.ProcessStats)
				}
			}
			calls := map[string]int{}
			for _, c := range f.Calls() {
				calls[c]++
			}
			want := map[string]int{"ListPodSandboxStats": 1, "ListContainerStats": 2}
			if sandboxStats {
				want = map[string]int{"ListPodSandboxStats": 2, "ListContainerStats": 0}
			}
			for m, n := range want {
				if calls[m] != n {
					t.Errorf("%s called %d times, want %d (calls %v)", m, calls[m], n, calls)
				}
			}
		})
	}
}
