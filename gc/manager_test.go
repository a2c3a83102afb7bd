package gc

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/cri"
	"github.com/nodelet/nodelet/internal/testsupport/eventually"
	"github.com/nodelet/nodelet/internal/testsupport/fakecri"
)

const mib = 1 << 20

type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) Eventf(_ runtime.Object, _, reason, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, reason+": "+fmt.Sprintf(format, args...))
}

type env struct {
	fake   *fakecri.Runtime
	client *cri.Client
	ctx    context.Context
}

func newEnv(t *testing.T) *env {
	t.Helper()
	fake := fakecri.New(t)
	ctx := context.Background()
	c, err := cri.New(ctx, fake.Endpoint(), "", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(ctx) })
	return &env{fake: fake, client: c, ctx: ctx}
}

func (e *env) sandbox(t *testing.T, name, uid string) string {
	t.Helper()
	labels := map[string]string{}
	if uid != "" {
		labels = map[string]string{cri.LabelPodUID: uid, cri.LabelPodName: name, cri.LabelPodNamespace: "default"}
	}
	id, err := e.client.RunPodSandbox(e.ctx, &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "default", Uid: name + "-sandbox-uid"},
		Labels:   labels,
	}, "")
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// deadContainer creates, starts and exits a container.
func (e *env) deadContainer(t *testing.T, sandboxID, uid, name string, attempt uint32, image string) string {
	t.Helper()
	labels := map[string]string{}
	if uid != "" {
		labels = map[string]string{cri.LabelPodUID: uid, cri.LabelContainerName: name}
	}
	id, err := e.client.CreateContainer(e.ctx, sandboxID, &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name, Attempt: attempt},
		Image:    &runtimeapi.ImageSpec{Image: image},
		Labels:   labels,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.client.StartContainer(e.ctx, id); err != nil {
		t.Fatal(err)
	}
	e.fake.ExitContainer(id, 0, "")
	return id
}

func (e *env) imageTags(t *testing.T) string {
	t.Helper()
	imgs, err := e.client.ListImages(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var tags []string
	for _, i := range imgs {
		tags = append(tags, i.RepoTags...)
	}
	slices.Sort(tags)
	return strings.Join(tags, ",")
}

func TestImageManagerFreesSpaceLRU(t *testing.T) {
	e := newEnv(t)
	for _, img := range []string{"busybox", "nginx", "pause:3.10", "app"} {
		e.fake.AddImage(img)
	}
	sb := e.sandbox(t, "p", "uid-p")
	e.deadContainer(t, sb, "uid-p", "app", 0, "app") // exited but not GC'd: app stays in use
	nginxCtr := e.deadContainer(t, sb, "uid-p", "web", 0, "nginx")

	clk := clocktesting.NewFakeClock(t0)
	capacity, available := int64(4*mib+mib/2), int64(mib/2)
	var mu sync.Mutex
	statter := func(path string) (int64, int64, error) {
		mu.Lock()
		defer mu.Unlock()
		if path == "" {
			return 0, 0, fmt.Errorf("no path")
		}
		return capacity, available, nil
	}
	rec := &recorder{}
	reg := prometheus.NewRegistry()
	m, err := NewImageManager(ImagePolicy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: 2 * time.Minute, SandboxImage: "pause:3.10"},
		e.client, e.client, t.TempDir(), clk, WithFsStatter(statter), WithRecorder(rec, &v1.ObjectReference{Kind: "Node", Name: "n"}), WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.DetectImages(e.ctx); err != nil { // nginx used now
		t.Fatal(err)
	}
	if err := e.client.RemoveContainer(e.ctx, nginxCtr); err != nil {
		t.Fatal(err)
	}

	// Within the minimum age nothing goes, and GC says it could not free enough.
	freed, err := m.GarbageCollect(e.ctx)
	if freed != 0 || err == nil || !strings.Contains(err.Error(), "only found 0 bytes eligible") {
		t.Fatalf("young images: freed %d err %v", freed, err)
	}

	clk.Step(3 * time.Minute)
	freed, err = m.GarbageCollect(e.ctx)
	if err != nil || freed != mib {
		t.Fatalf("freed %d err %v, want 1MiB", freed, err)
	}
	if got := e.imageTags(t); got != "app:latest,nginx:latest,pause:3.10" {
		t.Errorf("images left %s: busybox (never used) should go before nginx (used 3m ago)", got)
	}

	// Not enough eligible: nginx goes, app (exited container) and pause (sandbox image) stay.
	mu.Lock()
	capacity, available = 10*mib, 0
	mu.Unlock()
	freed, err = m.GarbageCollect(e.ctx)
	want := "Failed to garbage collect required amount of images. Attempted to free 2097152 bytes, but only found 1048576 bytes eligible to free."
	if freed != mib || err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("freed %d err %v", freed, err)
	}
	if got := e.imageTags(t); got != "app:latest,pause:3.10" {
		t.Errorf("images left %s", got)
	}
	rec.mu.Lock()
	if n := len(rec.events); n != 2 || rec.events[n-1] != ReasonFreeDiskSpaceFailed+": "+want {
		t.Errorf("events %q", rec.events)
	}
	rec.mu.Unlock()
	if got := testutil.ToFloat64(m.collected.WithLabelValues("space")); got != 2 {
		t.Errorf("kubelet_image_garbage_collected_total{reason=space} = %v, want 2", got)
	}

	// Below the high threshold: nothing to do.
	mu.Lock()
	capacity, available = 10*mib, 9*mib
	mu.Unlock()
	if freed, err := m.GarbageCollect(e.ctx); freed != 0 || err != nil {
		t.Errorf("below threshold: freed %d err %v", freed, err)
	}

	// Zero capacity is reported.
	mu.Lock()
	capacity = 0
	mu.Unlock()
	if _, err := m.GarbageCollect(e.ctx); err == nil || !strings.Contains(err.Error(), "invalid capacity") {
		t.Errorf("zero capacity: %v", err)
	}
}

func TestImageManagerMaxAgeSurvivesRestart(t *testing.T) {
	tests := []struct {
		name      string
		sameDir   bool
		wantLeft  string
		wantFreed int64
	}{
		{"history persisted: old unused images go", true, "pause:3.10", 2 * mib},
		{"no history: first detection is now, nothing goes", false, "a:latest,b:latest,pause:3.10", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			for _, img := range []string{"a", "b", "pause:3.10"} {
				e.fake.AddImage(img)
			}
			sb := e.sandbox(t, "p", "uid-p")
			ctr := e.deadContainer(t, sb, "uid-p", "c", 0, "a")
			dir := t.TempDir()
			policy := ImagePolicy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: 2 * time.Minute, MaxAge: time.Hour, SandboxImage: "pause:3.10"}
			plenty := WithFsStatter(func(string) (int64, int64, error) { return 100 * mib, 90 * mib, nil })
			m1, err := NewImageManager(policy, e.client, e.client, dir, clocktesting.NewFakeClock(t0), plenty)
			if err != nil {
				t.Fatal(err)
			}
			if err := m1.DetectImages(e.ctx); err != nil {
				t.Fatal(err)
			}
			if err := e.client.RemoveContainer(e.ctx, ctr); err != nil {
				t.Fatal(err)
			}
			if !tc.sameDir {
				dir = t.TempDir()
			}
			reg := prometheus.NewRegistry()
			m2, err := NewImageManager(policy, e.client, e.client, dir, clocktesting.NewFakeClock(t0.Add(90*time.Minute)), plenty, WithRegisterer(reg))
			if err != nil {
				t.Fatal(err)
			}
			freed, err := m2.GarbageCollect(e.ctx)
			if err != nil || freed != tc.wantFreed {
				t.Fatalf("freed %d err %v, want %d", freed, err, tc.wantFreed)
			}
			if got := e.imageTags(t); got != tc.wantLeft {
				t.Errorf("images left %s, want %s", got, tc.wantLeft)
			}
			if got := testutil.ToFloat64(m2.collected.WithLabelValues("age")); got != float64(tc.wantFreed/mib) {
				t.Errorf("age metric %v", got)
			}
		})
	}
}

func TestImageManagerDeleteUnusedAndValidation(t *testing.T) {
	e := newEnv(t)
	for _, img := range []string{"a", "b"} {
		e.fake.AddImage(img)
	}
	clk := clocktesting.NewFakeClock(t0)
	m, err := NewImageManager(ImagePolicy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: time.Minute}, e.client, e.client, t.TempDir(), clk)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.DetectImages(e.ctx); err != nil {
		t.Fatal(err)
	}
	clk.Step(2 * time.Minute)
	if err := m.DeleteUnusedImages(e.ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.imageTags(t); got != "" {
		t.Errorf("images left %q, want none", got)
	}
	for _, p := range []ImagePolicy{
		{HighThresholdPercent: 80, LowThresholdPercent: 85},
		{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: time.Hour, MaxAge: time.Minute},
	} {
		if _, err := NewImageManager(p, e.client, e.client, t.TempDir(), clk); err == nil {
			t.Errorf("policy %+v accepted", p)
		}
	}
	// A corrupt state file does not stop the manager.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, stateFileName), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NewImageManager(ImagePolicy{HighThresholdPercent: 85, LowThresholdPercent: 80}, e.client, e.client, dir, clk); err != nil {
		t.Errorf("corrupt state: %v", err)
	}
}

type podState struct {
	ready   bool
	deleted map[string]bool
}

func (p podState) AllSourcesReady() bool      { return p.ready }
func (p podState) PodDeleted(uid string) bool { return p.deleted[uid] }

func TestContainerGC(t *testing.T) {
	tests := []struct {
		name        string
		ready       bool
		wantCtrs    []string // containers left, by name/attempt
		wantSandbox int
		wantLogDirs string
	}{
		{"sources ready: deleted pod cleaned", true, []string{"live/app/2", "other/x/0"}, 2, "default_live_uid-live"},
		{"sources not ready: deleted pod kept", false, []string{"gone/app/0", "live/app/2", "other/x/0"}, 3, "default_gone_uid-gone,default_live_uid-live"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.fake.AddImage("img")
			live := e.sandbox(t, "live", "uid-live")
			for a := uint32(0); a < 3; a++ {
				e.deadContainer(t, live, "uid-live", "app", a, "img")
			}
			gone := e.sandbox(t, "gone", "uid-gone")
			e.deadContainer(t, gone, "uid-gone", "app", 0, "img")
			if err := e.client.StopPodSandbox(e.ctx, gone); err != nil {
				t.Fatal(err)
			}
			other := e.sandbox(t, "other", "") // not nodelet's: no labels
			e.deadContainer(t, other, "", "x", 0, "img")
			if err := e.client.StopPodSandbox(e.ctx, other); err != nil {
				t.Fatal(err)
			}
			logs := t.TempDir()
			for _, d := range []string{"default_live_uid-live", "default_gone_uid-gone"} {
				if err := os.MkdirAll(filepath.Join(logs, d, "app"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			gc := NewContainerGC(DefaultContainerPolicy(), e.client, podState{ready: tc.ready, deleted: map[string]bool{"uid-gone": true}},
				logs, clocktesting.NewFakeClock(time.Now().Add(time.Hour)))
			if err := gc.GarbageCollect(e.ctx); err != nil {
				t.Fatal(err)
			}
			ctrs, err := e.client.ListContainers(e.ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			sbNames := map[string]string{live: "live", gone: "gone", other: "other"}
			var left []string
			for _, c := range ctrs {
				left = append(left, fmt.Sprintf("%s/%s/%d", sbNames[c.PodSandboxId], c.Metadata.Name, c.Metadata.Attempt))
			}
			slices.Sort(left)
			if strings.Join(left, ",") != strings.Join(tc.wantCtrs, ",") {
				t.Errorf("containers left %v, want %v", left, tc.wantCtrs)
			}
			sbs, err := e.client.ListPodSandbox(e.ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(sbs) != tc.wantSandbox {
				t.Errorf("%d sandboxes left, want %d", len(sbs), tc.wantSandbox)
			}
			entries, err := os.ReadDir(logs)
			if err != nil {
				t.Fatal(err)
			}
			var dirs []string
			for _, d := range entries {
				dirs = append(dirs, d.Name())
			}
			if strings.Join(dirs, ",") != tc.wantLogDirs {
				t.Errorf("log dirs %v, want %s", dirs, tc.wantLogDirs)
			}

			// Reclaim for eviction removes every dead container of ours.
			if err := gc.DeleteAllUnusedContainers(e.ctx); err != nil {
				t.Fatal(err)
			}
			ctrs, err = e.client.ListContainers(e.ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range ctrs {
				if c.Labels[cri.LabelPodUID] != "" {
					t.Errorf("container %s/%d of ours survived DeleteAllUnusedContainers", c.Metadata.Name, c.Metadata.Attempt)
				}
			}
		})
	}
}

func TestImageManagerRunReportsRepeatedFailure(t *testing.T) {
	e := newEnv(t)
	clk := clocktesting.NewFakeClock(t0)
	rec := &recorder{}
	m, err := NewImageManager(ImagePolicy{HighThresholdPercent: 85, LowThresholdPercent: 80}, e.client, e.client, t.TempDir(), clk,
		WithFsStatter(func(string) (int64, int64, error) { return 0, 0, nil }), WithRecorder(rec, &v1.ObjectReference{Kind: "Node", Name: "n"}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx, 0) }()
	waitEvents := func(n int) []string {
		t.Helper()
		var ev []string
		eventually.True(t, fmt.Sprintf("%d events", n), func() bool {
			rec.mu.Lock()
			defer rec.mu.Unlock()
			ev = slices.Clone(rec.events)
			return len(ev) >= n
		})
		return ev
	}
	eventually.True(t, "the image GC timer", clk.HasWaiters)
	clk.Step(DefaultImageGCPeriod)
	if ev := waitEvents(1); ev[0] != ReasonInvalidDiskCapacity+": invalid capacity 0 on image filesystem" {
		t.Errorf("first failure events %q", ev)
	}
	clk.Step(DefaultImageGCPeriod)
	ev := waitEvents(3)
	cancel()
	<-done
	if !strings.HasPrefix(ev[2], ReasonImageGCFailed+": invalid capacity 0") || ev[1] != ev[0] {
		t.Errorf("second failure events %q, want InvalidDiskCapacity then ImageGCFailed", ev)
	}
}

// Run detects the images at once: a reclaim a little later (the eviction manager's, before
// the first collection) finds them old enough to remove.
func TestImageManagerRunDetectsAtStart(t *testing.T) {
	e := newEnv(t)
	e.fake.AddImage("a")
	clk := clocktesting.NewFakeClock(t0)
	m, err := NewImageManager(ImagePolicy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: time.Second}, e.client, e.client, t.TempDir(), clk)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx, 0) }()
	eventually.True(t, "the images detected at start", func() bool { return len(m.Records()) == 1 })
	clk.Step(2 * time.Second)
	if err := m.DeleteUnusedImages(e.ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-done
	if got := e.imageTags(t); got != "" {
		t.Errorf("images left %q: the image detected at start was not old enough to go", got)
	}
}

// TestContainerGCRemovesContainerLogs: removing a dead container removes its
// log and rotated logs (upstream's container log manager Clean); the kept
// dead instance keeps its logs for `logs --previous`.
func TestContainerGCRemovesContainerLogs(t *testing.T) {
	e := newEnv(t)
	e.fake.AddImage("img")
	logs := t.TempDir()
	logDir := filepath.Join(logs, "default_live_uid-live")
	sandbox := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "live", Namespace: "default", Uid: "uid-live"},
		Labels:       map[string]string{cri.LabelPodUID: "uid-live", cri.LabelPodName: "live", cri.LabelPodNamespace: "default"},
		LogDirectory: logDir,
	}
	sb, err := e.client.RunPodSandbox(e.ctx, sandbox, "")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for a := uint32(0); a < 3; a++ {
		logPath := fmt.Sprintf("app/%d.log", a)
		id, err := e.client.CreateContainer(e.ctx, sb, &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "app", Attempt: a},
			Image:    &runtimeapi.ImageSpec{Image: "img"},
			Labels:   map[string]string{cri.LabelPodUID: "uid-live", cri.LabelContainerName: "app"},
			LogPath:  logPath,
		}, sandbox)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.client.StartContainer(e.ctx, id); err != nil {
			t.Fatal(err)
		}
		e.fake.ExitContainer(id, 0, "")
		for _, name := range []string{logPath, logPath + ".20261205-140000.gz", logPath + ".20261205-140010"} {
			if err := os.MkdirAll(filepath.Join(logDir, "app"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(logDir, name), []byte("x\n"), 0o640); err != nil {
				t.Fatal(err)
			}
			if a == 2 {
				want = append(want, filepath.Base(name))
			}
		}
	}
	gc := NewContainerGC(DefaultContainerPolicy(), e.client, podState{ready: true}, logs, clocktesting.NewFakeClock(time.Now().Add(time.Hour)))
	if err := gc.GarbageCollect(e.ctx); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Join(logDir, "app"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, en := range entries {
		got = append(got, en.Name())
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("logs left %v, want only the kept dead instance's %v", got, want)
	}
}

// A sandbox whose RunPodSandbox a runtime crash cut off is not ready but keeps its
// network set up; the pod got a newer sandbox since. GC stops it before removing
// it, as containerd refuses to remove it otherwise (issue 20 scenario 3).
func TestContainerGCStopsLostSandbox(t *testing.T) {
	e := newEnv(t)
	run := func(attempt uint32) string {
		id, err := e.client.RunPodSandbox(e.ctx, &runtimeapi.PodSandboxConfig{
			Metadata: &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "default", Uid: "uid-web", Attempt: attempt},
			Labels:   map[string]string{cri.LabelPodUID: "uid-web", cri.LabelPodName: "web", cri.LabelPodNamespace: "default"},
		}, "")
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	lost := run(0)
	e.fake.LoseSandbox(lost)
	newer := run(1)
	gc := NewContainerGC(DefaultContainerPolicy(), e.client, podState{ready: true}, "", clocktesting.NewFakeClock(time.Now().Add(time.Hour)))
	if err := gc.GarbageCollect(e.ctx); err != nil {
		t.Fatalf("GC: %v", err)
	}
	sbs, err := e.client.ListPodSandbox(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(sbs) != 1 || sbs[0].Id != newer {
		var ids []string
		for _, s := range sbs {
			ids = append(ids, s.Id+" "+s.State.String())
		}
		t.Fatalf("sandboxes left %v, want only the newer %s (lost %s removed)", ids, newer, lost)
	}
}
