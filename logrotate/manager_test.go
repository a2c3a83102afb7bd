package logrotate

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/testsupport/eventually"
	"github.com/nodelet/nodelet/internal/testsupport/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

// fakeRuntime is the runtime as rotation sees it: containers with a state and
// a log path, and ReopenContainerLog creating the log file as containerd does.
type fakeRuntime struct {
	mu        sync.Mutex
	ctrs      []*runtimeapi.Container
	logPaths  map[string]string
	reopenErr error
	reopened  []string
	lists     int
	// inStatus, when set, runs inside every ContainerStatus call.
	inStatus func(id string)
}

func (f *fakeRuntime) add(id string, state runtimeapi.ContainerState, logPath string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.logPaths == nil {
		f.logPaths = map[string]string{}
	}
	f.ctrs = append(f.ctrs, &runtimeapi.Container{Id: id, State: state})
	f.logPaths[id] = logPath
}

func (f *fakeRuntime) ListContainers(context.Context, *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	return slices.Clone(f.ctrs), nil // unfiltered: the manager must check the state itself
}

func (f *fakeRuntime) ContainerStatus(_ context.Context, id string, _ bool) (*runtimeapi.ContainerStatusResponse, error) {
	f.mu.Lock()
	hook, p := f.inStatus, f.logPaths[id]
	f.mu.Unlock()
	if hook != nil {
		hook(id)
	}
	return &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{Id: id, LogPath: p}}, nil
}

func (f *fakeRuntime) ReopenContainerLog(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reopened = append(f.reopened, id)
	if f.reopenErr != nil {
		return f.reopenErr
	}
	file, err := os.OpenFile(f.logPaths[id], os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return err
	}
	return file.Close()
}

func (f *fakeRuntime) listCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lists
}

type rig struct {
	t      *testing.T
	root   string // podLogsDir
	logDir string // one container's log directory
	rt     *fakeRuntime
	clock  *testingclock.FakeClock
	m      *Manager
}

func newRig(t *testing.T, pol Policy) *rig {
	root := t.TempDir()
	logDir := filepath.Join(root, "default_web_1234", "app")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	rt := &fakeRuntime{}
	clk := testingclock.NewFakeClock(time.Date(2026, 12, 5, 14, 0, 0, 0, time.Local))
	return &rig{t: t, root: root, logDir: logDir, rt: rt, clock: clk,
		m: New(Config{PodLogsDir: root, Policy: pol, Workers: 1, Interval: 10 * time.Second}, rt, clk)}
}

// write appends data to the container's live log, as the runtime does.
func (r *rig) write(name, data string) {
	r.t.Helper()
	f, err := os.OpenFile(filepath.Join(r.logDir, name), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		r.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(data); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) files() []string {
	r.t.Helper()
	entries, err := os.ReadDir(r.logDir)
	if err != nil {
		r.t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func (r *rig) read(name string) string {
	r.t.Helper()
	data, err := os.ReadFile(filepath.Join(r.logDir, name))
	if err != nil {
		r.t.Fatal(err)
	}
	if filepath.Ext(name) == ".gz" {
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			r.t.Fatalf("%s: %v", name, err)
		}
		if data, err = io.ReadAll(zr); err != nil {
			r.t.Fatalf("%s: %v", name, err)
		}
	}
	return string(data)
}

// TestManagerRotatesKeepsMaxFiles drives one container through four rounds
// over the limit: each renames the live file with the time, compresses the
// older ones, and the oldest goes so that maxFiles (3) files remain.
func TestManagerRotatesKeepsMaxFiles(t *testing.T) {
	r := newRig(t, Policy{MaxSize: 100, MaxFiles: 3})
	r.rt.add("c1", runtimeapi.ContainerState_CONTAINER_RUNNING, filepath.Join(r.logDir, "0.log"))
	ctx := context.Background()

	r.write("0.log", "small\n")
	if err := r.m.Rotate(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	if got := r.files(); !slices.Equal(got, []string{"0.log"}) || len(r.rt.reopened) != 0 {
		t.Fatalf("below the limit: files %v, reopened %v", got, r.rt.reopened)
	}

	round := func(content string) {
		t.Helper()
		r.write("0.log", content)
		r.clock.Step(10 * time.Second)
		if err := r.m.Rotate(ctx, "c1"); err != nil {
			t.Fatal(err)
		}
	}
	a, b, c, d := string(bytes.Repeat([]byte("a"), 120)), string(bytes.Repeat([]byte("b"), 100)), string(bytes.Repeat([]byte("c"), 300)), string(bytes.Repeat([]byte("d"), 101))
	round(a[6:]) // with "small\n": 120 bytes
	if got, want := r.files(), []string{"0.log", "0.log.20261205-140010"}; !slices.Equal(got, want) {
		t.Fatalf("after the first rotation: %v, want %v", got, want)
	}
	if got := r.read("0.log.20261205-140010"); got != "small\n"+a[6:] {
		t.Errorf("rotated content %q", got)
	}
	if got := r.read("0.log"); got != "" {
		t.Errorf("the live log after reopen holds %q, want it new and empty", got)
	}
	round(b)
	round(c)
	round(d)
	want := []string{"0.log", "0.log.20261205-140030.gz", "0.log.20261205-140040"}
	if got := r.files(); !slices.Equal(got, want) {
		t.Fatalf("after four rotations: %v, want %v", got, want)
	}
	if got := r.read(want[1]); got != c {
		t.Errorf("compressed log holds %d bytes, want the third round's %d", len(got), len(c))
	}
	if got := r.read(want[2]); got != d {
		t.Errorf("newest rotated log holds %q", got)
	}
	st, err := os.Stat(filepath.Join(r.logDir, want[1]))
	if err != nil || st.Mode().Perm() != 0o640 {
		t.Errorf("compressed log mode %v (%v), want the log's 0640", st.Mode(), err)
	}
	if len(r.rt.reopened) != 4 {
		t.Errorf("ReopenContainerLog called %d times, want once per rotation (4)", len(r.rt.reopened))
	}
}

// TestManagerReopenFailureRenamesBack: a runtime that cannot reopen keeps
// writing to its file, so the name goes back and nothing is lost.
func TestManagerReopenFailureRenamesBack(t *testing.T) {
	r := newRig(t, Policy{MaxSize: 10, MaxFiles: 5})
	r.rt.add("c1", runtimeapi.ContainerState_CONTAINER_RUNNING, filepath.Join(r.logDir, "2.log"))
	r.rt.reopenErr = errors.New("container is stopping")
	r.write("2.log", "more than ten bytes\n")
	err := r.m.Rotate(context.Background(), "c1")
	if err == nil || !errors.Is(err, r.rt.reopenErr) {
		t.Fatalf("Rotate = %v, want the reopen error", err)
	}
	if got := r.files(); !slices.Equal(got, []string{"2.log"}) {
		t.Fatalf("files %v, want the log renamed back", got)
	}
	if got := r.read("2.log"); got != "more than ten bytes\n" {
		t.Errorf("log content %q", got)
	}
}

// TestManagerCleansLeftoversOnRotation: an interrupted compression leaves a
// ".tmp" or a rotated file next to its ".gz"; both go at the next rotation.
func TestManagerCleansLeftoversOnRotation(t *testing.T) {
	r := newRig(t, Policy{MaxSize: 10, MaxFiles: 5})
	r.rt.add("c1", runtimeapi.ContainerState_CONTAINER_RUNNING, filepath.Join(r.logDir, "0.log"))
	r.write("0.log.20261205-130000.tmp", "partial gzip")
	r.write("0.log.20261205-130500", "already compressed")
	gz := filepath.Join(r.logDir, "0.log.20261205-130500.gz")
	if err := os.WriteFile(gz, gzipped(t, "already compressed"), 0o640); err != nil {
		t.Fatal(err)
	}
	r.write("0.log", "over the limit\n")
	// Another container's files and a non-regular entry are not this log's.
	r.write("1.log.20261205-120000.tmp", "other instance")
	if err := os.Mkdir(filepath.Join(r.logDir, "0.log.dir.tmp"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := r.m.Rotate(context.Background(), "c1"); err != nil {
		t.Fatal(err)
	}
	want := []string{"0.log", "0.log.20261205-130500.gz", "0.log.20261205-140000", "0.log.dir.tmp", "1.log.20261205-120000.tmp"}
	if got := r.files(); !slices.Equal(got, want) {
		t.Fatalf("files %v, want %v", got, want)
	}
}

func gzipped(t *testing.T, s string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestManagerMissingLogReopens: a live log that is gone is made again by the
// runtime, as upstream asks it to.
func TestManagerMissingLogReopens(t *testing.T) {
	r := newRig(t, Policy{MaxSize: 10, MaxFiles: 5})
	r.rt.add("c1", runtimeapi.ContainerState_CONTAINER_RUNNING, filepath.Join(r.logDir, "0.log"))
	if err := r.m.Rotate(context.Background(), "c1"); err != nil {
		t.Fatal(err)
	}
	if got := r.files(); !slices.Equal(got, []string{"0.log"}) || !slices.Equal(r.rt.reopened, []string{"c1"}) {
		t.Fatalf("files %v, reopened %v; want the log reopened", got, r.rt.reopened)
	}
}

// TestManagerHostileLogPaths: a log path from the runtime is only followed
// inside podLogsDir; links out of it and a live log that is a link are refused
// and the files they point at stay untouched.
func TestManagerHostileLogPaths(t *testing.T) {
	r := newRig(t, Policy{MaxSize: 1, MaxFiles: 2})
	outside := t.TempDir()
	precious := filepath.Join(outside, "0.log")
	if err := os.WriteFile(precious, []byte("precious data\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(precious+".20200101-000000", []byte("precious too\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(r.root, "default_evil_1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(r.root, "default_evil_1", "c")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(precious, filepath.Join(r.logDir, "0.log")); err != nil {
		t.Fatal(err)
	}
	for id, p := range map[string]string{
		"outside":       precious,
		"dotdot":        r.root + "/default_web_1234/../../" + filepath.Base(outside) + "/0.log",
		"relative":      "default_web_1234/app/0.log",
		"dir link out":  filepath.Join(r.root, "default_evil_1", "c", "0.log"),
		"live is link":  filepath.Join(r.logDir, "0.log"),
		"podLogsDir it": r.root,
	} {
		r.rt.add(id, runtimeapi.ContainerState_CONTAINER_RUNNING, p)
		if err := r.m.Rotate(context.Background(), id); err == nil {
			t.Errorf("%s: Rotate(%s) = nil, want refused", id, p)
		}
	}
	entries, _ := os.ReadDir(outside)
	if len(entries) != 2 {
		t.Errorf("outside dir now holds %d entries, want its 2 files untouched", len(entries))
	}
	if data, err := os.ReadFile(precious); err != nil || string(data) != "precious data\n" {
		t.Errorf("file outside podLogsDir: %q, %v", data, err)
	}
	if len(r.rt.reopened) != 0 {
		t.Errorf("ReopenContainerLog called for %v", r.rt.reopened)
	}
}

// TestCompressCancelled: a compression cut short by a stop leaves the
// rotated log as it was and no ".tmp" behind.
func TestCompressCancelled(t *testing.T) {
	r := newRig(t, Policy{MaxSize: 1, MaxFiles: 2})
	r.write("0.log.20261205-130000", "rotated\n")
	dir, err := os.Open(r.logDir)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := compress(ctx, dir, "0.log.20261205-130000"); !errors.Is(err, context.Canceled) {
		t.Fatalf("compress = %v, want context.Canceled", err)
	}
	if got := r.files(); !slices.Equal(got, []string{"0.log.20261205-130000"}) {
		t.Errorf("files %v after a cancelled compression", got)
	}
}

// TestRotateAllWorkersInParallel: containerLogMaxWorkers containers are
// handled at once (three status calls that wait for each other all return),
// never more, and only running containers are looked at.
func TestRotateAllWorkersInParallel(t *testing.T) {
	for _, workers := range []int{1, 3} {
		r := newRig(t, Policy{MaxSize: 1 << 20, MaxFiles: 5})
		r.m.cfg.Workers = workers
		var mu sync.Mutex
		var inFlight, most int
		var seen []string
		arrived := sync.NewCond(&mu)
		r.rt.inStatus = func(id string) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, id)
			inFlight++
			most = max(most, inFlight)
			arrived.Broadcast()
			// Calls wait until `workers` of them were in flight at once, so
			// a pass only ends if they overlap.
			for most < workers {
				arrived.Wait()
			}
			inFlight--
		}
		for i, st := range []runtimeapi.ContainerState{
			runtimeapi.ContainerState_CONTAINER_RUNNING, runtimeapi.ContainerState_CONTAINER_EXITED,
			runtimeapi.ContainerState_CONTAINER_RUNNING, runtimeapi.ContainerState_CONTAINER_RUNNING,
			runtimeapi.ContainerState_CONTAINER_CREATED, runtimeapi.ContainerState_CONTAINER_RUNNING,
			runtimeapi.ContainerState_CONTAINER_RUNNING, runtimeapi.ContainerState_CONTAINER_RUNNING,
		} {
			id := string(rune('a' + i))
			r.rt.add(id, st, filepath.Join(r.logDir, id+".log"))
			r.write(id+".log", "x\n")
		}
		done := make(chan error, 1)
		go func() { done <- r.m.RotateAll(context.Background()) }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(eventually.Timeout):
			t.Fatalf("workers %d: the pass did not end: its status calls did not overlap %d at a time", workers, workers)
		}
		slices.Sort(seen)
		if want := []string{"a", "c", "d", "f", "g", "h"}; !slices.Equal(seen, want) {
			t.Errorf("workers %d: looked at %v, want the running containers %v", workers, seen, want)
		}
		if most > workers {
			t.Errorf("workers %d: %d containers handled at once", workers, most)
		}
	}
}

// TestRunEveryInterval: a pass at start, then one per monitor interval; Run
// returns when its context ends.
func TestRunEveryInterval(t *testing.T) {
	r := newRig(t, Policy{MaxSize: 100, MaxFiles: 3})
	r.m.cfg.Interval = 3 * time.Second
	r.rt.add("c1", runtimeapi.ContainerState_CONTAINER_RUNNING, filepath.Join(r.logDir, "0.log"))
	r.write("0.log", string(bytes.Repeat([]byte("x"), 150)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.m.Run(ctx)
	}()
	eventually.True(t, "the rotation of the first pass, at start", func() bool {
		return slices.Equal(r.files(), []string{"0.log", "0.log.20261205-140000"}) && r.clock.HasWaiters()
	})
	r.write("0.log", string(bytes.Repeat([]byte("y"), 150)))
	r.clock.Step(2 * time.Second)
	if n := r.rt.listCalls(); n != 1 {
		t.Errorf("%d passes before the interval", n)
	}
	r.clock.Step(time.Second)
	eventually.True(t, "a pass after the interval", func() bool { return r.rt.listCalls() == 2 })
	eventually.True(t, "the second rotation", func() bool { return len(r.files()) == 3 })
	cancel()
	<-done
}

// TestRemoveLogs: removing a container takes its live and rotated logs, not
// another instance's, nor anything outside podLogsDir.
func TestRemoveLogs(t *testing.T) {
	r := newRig(t, Policy{MaxSize: 1, MaxFiles: 3})
	for _, n := range []string{"0.log", "0.log.20261205-130000.gz", "0.log.20261205-130500", "0.log.20261205-130600.tmp", "1.log", "1.log.20261205-130000"} {
		r.write(n, "x\n")
	}
	if err := RemoveLogs(r.root, filepath.Join(r.logDir, "0.log")); err != nil {
		t.Fatal(err)
	}
	if got, want := r.files(), []string{"1.log", "1.log.20261205-130000"}; !slices.Equal(got, want) {
		t.Errorf("files %v, want %v", got, want)
	}
	if err := RemoveLogs(r.root, filepath.Join(r.root, "default_gone_1", "app", "0.log")); err != nil {
		t.Errorf("logs of a pod whose directory is gone: %v", err)
	}
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "0.log"), []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := RemoveLogs(r.root, filepath.Join(outside, "0.log")); !errors.Is(err, ErrNotBelowPodLogsDir) {
		t.Errorf("a log outside podLogsDir: %v, want ErrNotBelowPodLogsDir", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "0.log")); err != nil {
		t.Errorf("the file outside podLogsDir: %v", err)
	}
}
