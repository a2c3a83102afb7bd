package syncloop

import (
	"context"
	"sync/atomic"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pleg"
	"github.com/nodelet/nodelet/podconfig"
	"github.com/nodelet/nodelet/prober"
)

// stopProbes answers Ready as the probe manager does: ready until nodelet's
// stop tears its workers down, then what a container with a readiness worker
// and no result reads as (not ready). AddPod, which a sync calls before it
// generates the status, can be held at a gate.
type stopProbes struct {
	torn atomic.Bool
	hold atomic.Pointer[gate]
}

func (p *stopProbes) AddPod(context.Context, *v1.Pod) {
	if g := p.hold.Load(); g != nil {
		_ = g.wait()
	}
}
func (p *stopProbes) RemovePod(types.UID)                    {}
func (p *stopProbes) StopLivenessAndStartup(types.UID)       {}
func (p *stopProbes) UpdatePodStatus(*v1.Pod, v1.PodStatus)  {}
func (p *stopProbes) Started(types.UID, string, string) bool { return true }
func (p *stopProbes) Ready(types.UID, string, string) bool   { return !p.torn.Load() }
func (p *stopProbes) LivenessUpdates() <-chan prober.Update  { return nil }
func (p *stopProbes) ReadinessUpdates() <-chan prober.Update { return nil }
func (p *stopProbes) StartupUpdates() <-chan prober.Update   { return nil }

// Issue 33 (one of 110 pods went Ready true→false across a nodelet restart, and
// back once the new nodelet probed it): the stop ends the sync loop and the probe
// workers at once, the workers forget their results on the way out, and the
// status manager, stopped after them, writes what the loop stored last. A sync
// in flight at the stop generated its status from that torn-down state and
// stored it. A status generated after the loop's context ended is not stored.
func TestStatusGeneratedDuringStopIsNotStored(t *testing.T) {
	s := newStepLoop(t)
	probes := &stopProbes{}
	s.deps.Probes = probes
	pod := newPod("uid-stop", "web")
	// Adopted: its container runs since before this nodelet started.
	s.rt.mu.Lock()
	s.rt.pods[pod.UID] = &pleg.PodStatus{
		UID: pod.UID, Name: pod.Name, Namespace: pod.Namespace,
		Sandboxes: []*runtimeapi.PodSandboxStatus{{Id: "sb-stop", State: runtimeapi.PodSandboxState_SANDBOX_READY}},
		Containers: []*runtimeapi.ContainerStatus{{Id: "c-stop", State: runtimeapi.ContainerState_CONTAINER_RUNNING,
			Metadata: &runtimeapi.ContainerMetadata{Name: "app"}, StartedAt: 1}},
	}
	s.rt.mu.Unlock()
	s.addSynced(t, pod)
	w := s.worker(pod.UID)
	waitClosed(t, w.exitedChan(s.Loop), "the first sync to end")
	if !ready(s.status, pod.UID) {
		t.Fatalf("status after the first sync: %+v, want the container running and ready", mustStatus(s.status, pod.UID))
	}

	// The next sync is in flight (held before it generates its status) when nodelet stops.
	g := newGate(t)
	probes.hold.Store(g)
	s.handleUpdate(s.ctx, podconfig.Update{Op: podconfig.OpUpdate, Pods: []*v1.Pod{pod}, Source: "api"})
	waitClosed(t, g.entered, "the second sync")
	s.stop()
	probes.torn.Store(true) // the probe workers stopped and forgot their results
	g.open()
	waitClosed(t, w.exitedChan(s.Loop), "the second sync to end")
	if !ready(s.status, pod.UID) {
		t.Errorf("stored status after the stop: %+v, want it Ready as last observed (the stop's view must not be stored)", mustStatus(s.status, pod.UID))
	}
}

func ready(s *fakeStatus, uid types.UID) bool {
	st, ok := s.GetPodStatus(uid)
	return ok && len(st.ContainerStatuses) == 1 && st.ContainerStatuses[0].State.Running != nil && st.ContainerStatuses[0].Ready
}

func mustStatus(s *fakeStatus, uid types.UID) v1.PodStatus {
	st, _ := s.GetPodStatus(uid)
	return st
}
