package syncloop

import (
	"context"
	"errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/internal/testsupport/eventually"
	"github.com/nodelet/nodelet/pleg"
	"github.com/nodelet/nodelet/podconfig"
)

func TestOldLifeStatus(t *testing.T) {
	deleting := metav1.Now()
	for _, tc := range []struct {
		name      string
		objPhase  v1.PodPhase
		deleting  bool
		prevPhase v1.PodPhase
		want      bool
	}{
		{name: "static pod put back: the old life ended Succeeded", prevPhase: v1.PodSucceeded, want: true},
		{name: "static pod put back: the old life ended Failed", prevPhase: v1.PodFailed, want: true},
		{name: "the old life had not ended", prevPhase: v1.PodRunning},
		{name: "the pod object itself is terminal (a finished Job's pod)", objPhase: v1.PodSucceeded, prevPhase: v1.PodSucceeded},
		{name: "the pod is being deleted", deleting: true, prevPhase: v1.PodFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := newPod("u", "p")
			pod.Status.Phase = tc.objPhase
			if tc.deleting {
				pod.DeletionTimestamp = &deleting
			}
			if got := oldLifeStatus(pod, v1.PodStatus{Phase: tc.prevPhase}); got != tc.want {
				t.Errorf("oldLifeStatus = %v, want %v", got, tc.want)
			}
		})
	}
}

// staticPod is a file-source pod, whose UID is a hash of its manifest: put back
// unchanged, it comes back under the same UID.
func staticPod(uid, name string) *v1.Pod {
	pod := newPod(uid, name)
	pod.Annotations = map[string]string{podutil.AnnotationConfigSource: podutil.SourceFile, podutil.AnnotationConfigHash: uid}
	return pod
}

// TestStaticPodPutBackRunsAgain: a static pod's manifest removed and restored
// brings the pod back under the same UID. Wherever its old life is when it comes
// back (being killed, being removed, or already forgotten), the old life ends
// as it would have (one kill, one removal), and the pod then runs again in a new
// worker whose sync sees no terminal status from the old life. On main the pod
// never ran again: the old worker stayed finished while the pod was wanted, or a
// new worker inherited the old life's terminal phase and stopped at once.
func TestStaticPodPutBackRunsAgain(t *testing.T) {
	for _, tc := range []struct {
		name string
		// block holds the old life in an operation while the pod comes back
		// ("" : it comes back after the old worker was dropped).
		block string
	}{
		{name: "while being killed", block: "KillPod"},
		{name: "while being removed", block: "RemovePod"},
		{name: "after the old worker was dropped"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStepLoop(t)
			pod := staticPod("uid-static", "kube-apiserver-node1")
			s.addSynced(t, pod)
			s.rt.mu.Lock()
			s.rt.syncHook = nil
			s.rt.mu.Unlock()
			old := s.worker(pod.UID)

			var g *gate
			switch tc.block {
			case "KillPod":
				g = newGate(t)
				s.rt.mu.Lock()
				s.rt.killHook = func(context.Context, *v1.Pod, *int64) error { return g.wait() }
				s.rt.mu.Unlock()
			case "RemovePod":
				g = s.holdRemovePod(t)
			}

			s.removeFile(pod)
			if tc.block != "" {
				waitClosed(t, g.entered, tc.block)
			} else {
				eventually.True(t, "the old life to be reclaimed", func() bool { return s.CanDeletePod(pod) })
				if st, _ := s.status.GetPodStatus(pod.UID); !podutil.IsTerminal(st.Phase) {
					t.Fatalf("old life ended in phase %q, want a terminal one", st.Phase)
				}
				s.housekeeping(s.ctx, true)
				if s.worker(pod.UID) != nil {
					t.Fatal("the old worker was not dropped")
				}
			}

			s.addFile(pod) // the manifest is put back
			if tc.block != "" {
				if s.worker(pod.UID) != old {
					t.Fatal("a second worker started while the old life still ran")
				}
				if st, ok := s.status.GetPodStatus(pod.UID); ok {
					t.Errorf("the old life's status (%q) was kept once the pod came back", st.Phase)
				}
				g.open()
				eventually.True(t, "the old life to be reclaimed", func() bool {
					w := s.worker(pod.UID)
					return w == old && s.CanDeletePod(pod) && isClosed(w.exitedChan(s.Loop))
				})
				if st, ok := s.status.GetPodStatus(pod.UID); ok {
					t.Errorf("the old life wrote its final status (%q) after the pod came back", st.Phase)
				}
				s.housekeeping(s.ctx, true) // drops the old worker and starts the pod again
			}

			eventually.True(t, "the pod to run again", func() bool { return s.rt.running(pod.UID) })
			if w := s.worker(pod.UID); w == nil || w == old {
				t.Fatal("the pod does not run in a new worker")
			}
			// The new life's sync wrote its status (from before its containers
			// started: Pending), not kept the old life's terminal phase.
			eventually.True(t, "the new life's status", func() bool {
				st, ok := s.status.GetPodStatus(pod.UID)
				return ok && st.Phase == v1.PodPending
			})
			for call, want := range map[string]int{"KillPod": 1, "RemovePod": 1, "SyncPod": 2} {
				if n := s.rt.count(call, pod.UID); n != want {
					t.Errorf("%s called %d times, want %d", call, n, want)
				}
			}
			if n := s.rt.maxActive(pod.UID); n != 1 {
				t.Errorf("%d runtime calls for the pod ran at once, want 1 (one goroutine per UID)", n)
			}
			// Housekeeping leaves the new life alone.
			w := s.worker(pod.UID)
			s.housekeeping(s.ctx, true)
			if s.worker(pod.UID) != w || s.rt.count("KillPod", pod.UID) != 1 {
				t.Error("housekeeping disturbed the new life")
			}
		})
	}
}

// A pod removed again before its restart happened is not restarted.
func TestStaticPodRemovedAgainBeforeRestartStaysGone(t *testing.T) {
	s := newStepLoop(t)
	pod := staticPod("uid-static2", "etcd-node1")
	s.addSynced(t, pod)
	g := s.holdRemovePod(t)
	s.removeFile(pod)
	waitClosed(t, g.entered, "RemovePod")
	s.addFile(pod)
	s.removeFile(pod)
	g.open()
	eventually.True(t, "the pod to be reclaimed", func() bool { return s.CanDeletePod(pod) })
	eventually.True(t, "the old worker to be dropped", func() bool {
		s.housekeeping(s.ctx, true)
		return s.worker(pod.UID) == nil
	})
	if n := s.rt.count("SyncPod", pod.UID); n != 1 || s.rt.running(pod.UID) {
		t.Errorf("SyncPod called %d times (running: %v), want the one of the first life", n, s.rt.running(pod.UID))
	}
}

func (s *stepLoop) addFile(pod *v1.Pod) {
	s.handleUpdate(s.ctx, podconfig.Update{Op: podconfig.OpAdd, Pods: []*v1.Pod{pod}, Source: podutil.SourceFile})
}

func (s *stepLoop) removeFile(pod *v1.Pod) {
	s.handleUpdate(s.ctx, podconfig.Update{Op: podconfig.OpRemove, Pods: []*v1.Pod{pod}, Source: podutil.SourceFile})
}

// exitedChan is the channel closed when w's last goroutine returned.
func (w *worker) exitedChan(l *Loop) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w.exited == nil {
		return closedChan()
	}
	return w.exited
}

func closedChan() <-chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}

// A pod the runtime already runs when nodelet starts (an earlier nodelet admitted
// it) is not rejected by the pressure or shutdown admitters: a restart under
// DiskPressure must not kill it. A new pod still is.
func TestRunningPodSkipsPressureAdmissionAfterRestart(t *testing.T) {
	s := newStepLoop(t)
	s.deps.Admitters = []func(*v1.Pod) *Rejection{func(*v1.Pod) *Rejection {
		return &Rejection{Reason: "Evicted", Message: "The node had condition: [DiskPressure]."}
	}}
	old := newPod("uid-ran", "ran-before")
	s.rt.mu.Lock()
	s.rt.pods[old.UID] = &pleg.PodStatus{UID: old.UID, Name: old.Name, Namespace: old.Namespace,
		Sandboxes: []*runtimeapi.PodSandboxStatus{{Id: "sb-ran", State: runtimeapi.PodSandboxState_SANDBOX_READY}}}
	s.rt.mu.Unlock()
	fresh := newPod("uid-new", "new")

	s.add(old)
	s.add(fresh)
	if st, ok := s.status.GetPodStatus(old.UID); ok && st.Phase == v1.PodFailed {
		t.Errorf("the pod the runtime already ran was rejected: %s %q", st.Reason, st.Message)
	}
	if st, ok := s.status.GetPodStatus(fresh.UID); !ok || st.Phase != v1.PodFailed || st.Reason != "Evicted" {
		t.Errorf("a new pod under pressure: status %+v, want Failed/Evicted", st)
	}
}

// failingDevices fails every allocation, as a device plugin not registered
// again after a restart would.
type failingDevices struct{}

func (failingDevices) Allocate(context.Context, *v1.Pod, []*v1.Pod, bool) error {
	return errors.New("requested number of devices unavailable for example.com/gpu. Requested: 1, Available: 0")
}

// A pod the runtime already runs is never rejected for its devices (they are
// in the device checkpoint); a new pod is, with UnexpectedAdmissionError.
func TestRunningPodSkipsDeviceAdmissionFailureAfterRestart(t *testing.T) {
	s := newStepLoop(t)
	s.deps.Resources = failingDevices{}
	old := newPod("uid-ran", "ran-before")
	s.rt.mu.Lock()
	s.rt.pods[old.UID] = &pleg.PodStatus{UID: old.UID, Name: old.Name, Namespace: old.Namespace,
		Sandboxes: []*runtimeapi.PodSandboxStatus{{Id: "sb-ran", State: runtimeapi.PodSandboxState_SANDBOX_READY}}}
	s.rt.mu.Unlock()
	fresh := newPod("uid-new", "new")

	s.add(old)
	s.add(fresh)
	if st, ok := s.status.GetPodStatus(old.UID); ok && st.Phase == v1.PodFailed {
		t.Errorf("the pod the runtime already ran was rejected: %s %q", st.Reason, st.Message)
	}
	if st, ok := s.status.GetPodStatus(fresh.UID); !ok || st.Phase != v1.PodFailed || st.Reason != "UnexpectedAdmissionError" {
		t.Errorf("a new pod without devices: status %+v, want Failed/UnexpectedAdmissionError", st)
	}
}

// After a restart the API holds a pod rejected (Failed) before it: it uses nothing and must
// not count against the pods admitted after it, even before its worker has found it terminal
// (CI: a running pod was refused OutOf<resource> for a rejected pod's request).
func TestTerminalPodDoesNotCountAtAdmission(t *testing.T) {
	s := newStepLoop(t)
	rejected := newPod("uid-rejected", "greedy")
	rejected.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse("2")}
	rejected.Status.Phase = v1.PodFailed
	rejected.Status.Reason = "OutOfcpu"
	running := newPod("uid-running", "running")
	running.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")}

	s.add(rejected)
	s.add(running)
	if st, ok := s.status.GetPodStatus(running.UID); ok && st.Phase == v1.PodFailed {
		t.Errorf("a pod that fits was rejected after a terminal pod: %s %q", st.Reason, st.Message)
	}
}
