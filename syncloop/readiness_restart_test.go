package syncloop

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/testsupport/eventually"
	"github.com/nodelet/nodelet/podconfig"
	"github.com/nodelet/nodelet/podruntime"
)

// readyHistory records, per pod, the Ready of its one container in every
// status the loop stored while the container ran.
type readyHistory struct {
	*fakeStatus
	mu   sync.Mutex
	seen map[types.UID][]bool
}

func (h *readyHistory) SetPodStatus(pod *v1.Pod, s v1.PodStatus) {
	h.fakeStatus.SetPodStatus(pod, s)
	if len(s.ContainerStatuses) != 1 || s.ContainerStatuses[0].State.Running == nil {
		return
	}
	h.mu.Lock()
	h.seen[pod.UID] = append(h.seen[pod.UID], s.ContainerStatuses[0].Ready)
	h.mu.Unlock()
}

func (h *readyHistory) of(uid types.UID) []bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]bool(nil), h.seen[uid]...)
}

// Issue 20 scenario 2: after a restart, a running container keeps the Ready
// the API shows until its readiness probe decides: a ready one is never
// reported unready meanwhile (it was: NotReady until its first probe, 184
// Ready transitions for 110 pods), and an unready one is never reported
// ready (it was, in the first status, made before its probe worker existed).
func TestReadinessAcrossRestartDoesNotFlap(t *testing.T) {
	first := newRig(t, nil, withProbes)
	release := make(chan struct{})
	var releaseOnce sync.Once
	open := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(open)
	var restarted atomic.Bool
	first.fake.SetExecSync(func(_ string, cmd []string) ([]byte, []byte, int32) {
		if cmd[0] != "ready-a" {
			return []byte("no"), nil, 1
		}
		if restarted.Load() {
			// The restarted nodelet's first probe of a hangs until the test
			// has seen the statuses made before it: the carried Ready's window.
			<-release
		}
		return nil, nil, 0
	})
	probe := func(cmd string) *v1.Probe {
		return &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{cmd}}}, PeriodSeconds: 1, TimeoutSeconds: 60, FailureThreshold: 1}
	}
	a, b := newPod("uid-ready-a", "ready-a"), newPod("uid-ready-b", "ready-b")
	a.Spec.Containers[0].ReadinessProbe = probe("ready-a")
	b.Spec.Containers[0].ReadinessProbe = probe("ready-b")
	first.ready()
	first.sources.ch <- podconfig.Update{Op: podconfig.OpAdd, Pods: []*v1.Pod{a, b}, Source: "api"}
	runningReady := func(s *fakeStatus, uid types.UID, want bool) func() bool {
		return func() bool {
			st, _ := s.GetPodStatus(uid)
			return len(st.ContainerStatuses) == 1 && st.ContainerStatuses[0].State.Running != nil && st.ContainerStatuses[0].Ready == want
		}
	}
	eventually.True(t, "a running and ready", runningReady(first.status, a.UID, true))
	eventually.True(t, "b running, not ready", runningReady(first.status, b.UID, false))
	// The first nodelet stops; its pods keep running. What the API holds:
	apiA, apiB := a.DeepCopy(), b.DeepCopy()
	apiA.Status, _ = first.status.GetPodStatus(a.UID)
	apiB.Status, _ = first.status.GetPodStatus(b.UID)
	first.cancel()
	<-first.done
	ids := map[types.UID]string{a.UID: first.containers(t, string(a.UID))[0].Id, b.UID: first.containers(t, string(b.UID))[0].Id}

	// The same pods after the restart; a's probe now hangs (see above).
	restarted.Store(true)
	var hist *readyHistory
	second := newRig(t, first.fake, withProbes, func(_ context.Context, r *rig, _ *podruntime.Deps, deps *Deps) {
		hist = &readyHistory{fakeStatus: r.status, seen: map[types.UID][]bool{}}
		deps.Status = hist
	})
	second.ready()
	second.sources.ch <- podconfig.Update{Op: podconfig.OpAdd, Pods: []*v1.Pod{apiA, apiB}, Source: "api"}
	eventually.True(t, "statuses of both pods", func() bool { return len(hist.of(a.UID)) > 0 && len(hist.of(b.UID)) > 0 })
	// More syncs while a's first probe hangs, each storing a status.
	for range 3 {
		n := len(hist.of(a.UID))
		second.sources.ch <- podconfig.Update{Op: podconfig.OpUpdate, Pods: []*v1.Pod{apiA, apiB}, Source: "api"}
		eventually.True(t, "another status of a", func() bool { return len(hist.of(a.UID)) > n })
	}
	for _, r := range hist.of(a.UID) {
		if !r {
			t.Fatalf("a, ready before the restart, was reported unready before its first probe: %v", hist.of(a.UID))
		}
	}
	eventually.True(t, "b's probe to fail", func() bool { return len(hist.of(b.UID)) > 1 })
	for _, r := range hist.of(b.UID) {
		if r {
			t.Fatalf("b, unready before the restart, was reported ready: %v", hist.of(b.UID))
		}
	}
	for uid, id := range ids {
		if got := second.containers(t, string(uid)); len(got) != 1 || got[0].Id != id {
			t.Errorf("%s: containers %v after the restart, want %s only (adopted, not restarted)", uid, got, id)
		}
	}
	open()
}
