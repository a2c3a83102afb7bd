package prober

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/testsupport/eventually"
)

func TestCarriedReady(t *testing.T) {
	start := time.Date(2026, 12, 6, 20, 0, 0, 0, time.UTC)
	running := func(since time.Time) v1.ContainerState {
		return v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(since)}}
	}
	before, after := start.Add(-time.Hour), start.Add(time.Second)
	for name, tc := range map[string]struct {
		api    v1.ContainerStatus
		wantID string
		want   bool
	}{
		"ready, running before the start":  {v1.ContainerStatus{Ready: true, ContainerID: "containerd://c1", Started: ptr.To(true), State: running(before)}, "c1", true},
		"started unset (older API server)": {v1.ContainerStatus{Ready: true, ContainerID: "containerd://c1", State: running(before)}, "c1", true},
		"not ready":                        {v1.ContainerStatus{Ready: false, ContainerID: "containerd://c1", Started: ptr.To(true), State: running(before)}, "", false},
		"started after the start":          {v1.ContainerStatus{Ready: true, ContainerID: "containerd://c1", Started: ptr.To(true), State: running(after)}, "", false},
		"started at the start":             {v1.ContainerStatus{Ready: true, ContainerID: "containerd://c1", Started: ptr.To(true), State: running(start)}, "", false},
		"no start time":                    {v1.ContainerStatus{Ready: true, ContainerID: "containerd://c1", Started: ptr.To(true), State: running(time.Time{})}, "", false},
		"not running":                      {v1.ContainerStatus{Ready: true, ContainerID: "containerd://c1", State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{}}}, "", false},
		"no container ID":                  {v1.ContainerStatus{Ready: true, Started: ptr.To(true), State: running(before)}, "", false},
		"startup probe not passed":         {v1.ContainerStatus{Ready: true, ContainerID: "containerd://c1", Started: ptr.To(false), State: running(before)}, "", false},
	} {
		id, ok := CarriedReady(tc.api, start)
		if id != tc.wantID || ok != tc.want {
			t.Errorf("%s: CarriedReady = %q, %v; want %q, %v", name, id, ok, tc.wantID, tc.want)
		}
	}
}

// After a restart, a container the API shows running and ready since before
// this nodelet started stays Ready, with no readiness update, until its probe
// decides (issue 20 scenario 2: 110 running pods flapped Ready→NotReady→Ready
// on every restart, 184 Ready transitions); then the probe rules.
func TestReadinessCarriedAcrossRestart(t *testing.T) {
	h := newHarness(t)
	started := h.m.start.Add(-time.Hour) // before this manager (nodelet) started
	pod := podWith(v1.Container{Name: "app", ReadinessProbe: execProbe("ready", 1, 1)})
	pod.Status = runningStatus(true, started)
	pod.Status.ContainerStatuses[0].Ready = true
	other := podWith(v1.Container{Name: "app", ReadinessProbe: execProbe("ready", 1, 1)})
	other.UID = "uid-2"
	other.Status = runningStatus(true, started)
	other.Status.ContainerStatuses[0].ContainerID = "containerd://c2"
	other.Status.ContainerStatuses[0].Ready = false // the API says not ready: nothing carried

	h.exec.set("ready", false)
	h.m.AddPod(h.ctx, pod)
	h.m.AddPod(h.ctx, other)
	if !h.m.Ready(pod.UID, "app", "c1") {
		t.Fatal("a container ready before the restart is not ready before its first probe")
	}
	if h.m.Ready(other.UID, "app", "c2") {
		t.Fatal("a container the API shows not ready is ready before its first probe")
	}

	// The worker sees the container (the first sync's status) and probes it: success.
	st := runningStatus(true, started)
	h.status.set(pod.UID, st)
	h.m.UpdatePodStatus(pod, st)
	h.tick(t, time.Second)
	eventually.True(t, "a first probe", func() bool { return h.exec.count("ready") >= 1 })
	if !h.m.Ready(pod.UID, "app", "c1") {
		t.Fatal("not ready after a successful probe")
	}
	select {
	case u := <-h.m.ReadinessUpdates():
		t.Fatalf("readiness update %+v: a carried Ready that the probe confirms changes nothing", u)
	default:
	}

	// The probe rules from then on: a failure (failureThreshold 1) makes it unready.
	h.exec.set("ready", true)
	before := h.exec.count("ready")
	h.tick(t, time.Second)
	eventually.True(t, "a failed probe", func() bool { return h.exec.count("ready") > before })
	eventually.True(t, "unready after the failure", func() bool { return !h.m.Ready(pod.UID, "app", "c1") })
	if u := <-h.m.ReadinessUpdates(); u.ContainerID != "c1" || u.Result != Failure {
		t.Errorf("readiness update = %+v, want c1 Failure", u)
	}
}
