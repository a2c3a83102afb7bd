package prober

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/testsupport/eventually"
)

func TestNeedsProbeNow(t *testing.T) {
	running := func(started *bool) v1.ContainerStatus {
		return v1.ContainerStatus{Name: "c", ContainerID: "containerd://c1", Started: started,
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}
	}
	tests := []struct {
		name    string
		t       ProbeType
		started *bool
		have    *Result // the cached result, nil: none
		want    bool
	}{
		{"startup without a result", Startup, ptr.To(false), nil, true},
		{"startup with its verdict", Startup, ptr.To(false), ptr.To(Failure), false},
		{"liveness without a result", Liveness, ptr.To(true), nil, true},
		{"liveness with a result", Liveness, ptr.To(true), ptr.To(Success), false},
		{"readiness of a container not started yet, no result", Readiness, ptr.To(false), nil, true},
		{"readiness of a container not started yet, initial failure", Readiness, ptr.To(false), ptr.To(Failure), false},
		// The startup probe just passed: readiness must not wait a period.
		{"readiness of a started container, initial failure", Readiness, ptr.To(true), ptr.To(Failure), true},
		{"readiness of a started container, unready", Readiness, ptr.To(true), ptr.To(Failure), true},
		{"readiness of a started, ready container", Readiness, ptr.To(true), ptr.To(Success), false},
		{"readiness with started unknown, initial failure", Readiness, nil, ptr.To(Failure), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newResults()
			if tt.have != nil {
				r.byID["c1"] = *tt.have
			}
			if got := needsProbeNow(tt.t, running(tt.started), r, "c1"); got != tt.want {
				t.Errorf("needsProbeNow = %v, want %v", got, tt.want)
			}
		})
	}
}

// A readiness probe with a long period runs as soon as its container has
// started (the startup probe passed), not one period later: the conformance
// spec "should be ready immediately after startupProbe succeeds" allows 25s
// against a 30s period.
func TestReadinessRunsOnceStarted(t *testing.T) {
	sidecar := func() *v1.Pod {
		p := podWith(v1.Container{Name: "app"})
		p.Spec.InitContainers = []v1.Container{{Name: "side", RestartPolicy: ptr.To(v1.ContainerRestartPolicyAlways),
			StartupProbe: execProbe("startup", 1, 10), ReadinessProbe: execProbe("ready", 30, 1)}}
		return p
	}
	sidecarStatus := func(started bool, since time.Time) v1.PodStatus {
		return v1.PodStatus{Phase: v1.PodPending, PodIP: "10.0.0.1", InitContainerStatuses: []v1.ContainerStatus{{
			Name: "side", ContainerID: "containerd://c1", Started: ptr.To(started),
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(since)}},
		}}}
	}
	tests := []struct {
		name      string
		pod       func() *v1.Pod
		container string
		status    func(started bool, since time.Time) v1.PodStatus
	}{
		{"app container", func() *v1.Pod {
			return podWith(v1.Container{Name: "app", StartupProbe: execProbe("startup", 1, 10), ReadinessProbe: execProbe("ready", 30, 1)})
		}, "app", runningStatus},
		{"sidecar", sidecar, "side", sidecarStatus},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			pod := tt.pod()
			h.exec.set("startup", true)
			h.status.set(pod.UID, tt.status(false, h.clk.Now()))
			h.m.AddPod(h.ctx, pod)
			h.m.UpdatePodStatus(pod, tt.status(false, h.clk.Now()))
			eventually.True(t, "a startup probe", func() bool { return h.exec.count("startup") >= 1 })
			if h.m.Started(pod.UID, tt.container, "c1") || h.m.Ready(pod.UID, tt.container, "c1") {
				t.Fatal("started or ready before the startup probe passed")
			}
			h.exec.set("startup", false)
			h.tick(t, time.Second)
			eventually.True(t, "started", func() bool { return h.m.Started(pod.UID, tt.container, "c1") })
			if n := h.exec.count("ready"); n != 0 {
				t.Fatalf("readiness probed %d times before the container started", n)
			}
			// The sync loop stores the started status and tells the manager; no
			// clock step follows, so only that can make the readiness probe run.
			st := tt.status(true, h.clk.Now())
			h.status.set(pod.UID, st)
			h.m.UpdatePodStatus(pod, st)
			eventually.True(t, "ready without waiting a period", func() bool { return h.m.Ready(pod.UID, tt.container, "c1") })
		})
	}
}

// A sidecar's readiness probe waits out initialDelaySeconds and then decides
// its readiness, as an app container's does.
func TestSidecarReadinessInitialDelay(t *testing.T) {
	h := newHarness(t)
	p := execProbe("ready", 1, 1)
	p.InitialDelaySeconds = 5
	pod := podWith(v1.Container{Name: "app"})
	pod.Spec.InitContainers = []v1.Container{{Name: "side", RestartPolicy: ptr.To(v1.ContainerRestartPolicyAlways), ReadinessProbe: p}}
	st := v1.PodStatus{Phase: v1.PodRunning, PodIP: "10.0.0.1", InitContainerStatuses: []v1.ContainerStatus{{
		Name: "side", ContainerID: "containerd://s1", Started: ptr.To(true),
		State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(h.clk.Now())}},
	}}}
	h.status.set(pod.UID, st)
	h.m.AddPod(h.ctx, pod)
	h.m.UpdatePodStatus(pod, st)
	for i := 0; i < 4; i++ {
		h.tick(t, time.Second)
	}
	eventually.True(t, "a waiting worker", h.clk.HasWaiters)
	if n := h.exec.count("ready"); n != 0 {
		t.Fatalf("probed %d times within the initial delay", n)
	}
	if h.m.Ready(pod.UID, "side", "s1") {
		t.Fatal("ready within the initial delay")
	}
	for i := 0; i < 3 && !h.m.Ready(pod.UID, "side", "s1"); i++ {
		h.tick(t, time.Second)
	}
	eventually.True(t, "ready after the initial delay", func() bool { return h.m.Ready(pod.UID, "side", "s1") })
}

// An HTTP liveness probe redirected to another host succeeds (the container is
// not restarted) and says so in a ProbeWarning event, as upstream.
func TestRedirectToAnotherHostWarns(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://0.0.0.0/", http.StatusFound)
	}))
	defer srv.Close()
	host, port := hostPort(t, srv.URL)

	clk := testingclock.NewFakeClock(time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC))
	status := &fakeStatus{s: map[types.UID]v1.PodStatus{}}
	rec := record.NewFakeRecorder(10)
	reg := prometheus.NewRegistry()
	m := NewManager(nil, status, rec, clk, WithMetrics(reg))
	clk.Step(time.Hour)
	h := &harness{clk: clk, status: status, rec: rec, m: m}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	t.Cleanup(func() { h.cancel(); m.Wait() })

	pod := podWith(v1.Container{Name: "app", LivenessProbe: &v1.Probe{PeriodSeconds: 1, FailureThreshold: 1, ProbeHandler: v1.ProbeHandler{
		HTTPGet: &v1.HTTPGetAction{Host: host, Port: intstr.FromInt32(int32(port)), Path: "/redirect"}}}})
	status.set(pod.UID, runningStatus(true, clk.Now()))
	m.AddPod(h.ctx, pod)
	var ev string
	select {
	case ev = <-rec.Events:
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
	}
	want := "Warning ProbeWarning Liveness probe warning: Probe terminated redirects, Response body: <a href=\"http://0.0.0.0/\">Found</a>."
	if !strings.HasPrefix(ev, want) {
		t.Errorf("event = %q, want it to begin %q", ev, want)
	}
	h.tick(t, time.Second)
	eventually.True(t, "two probes counted as successful", func() bool {
		return testutil.ToFloat64(m.metrics.total.WithLabelValues("Liveness", "successful", "app", "web", "default", "uid-1")) == 2
	})
	if p, bad := m.Unhealthy("c1"); bad {
		t.Errorf("unhealthy (%s) after a redirect to another host", p)
	}
}
