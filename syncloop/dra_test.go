package syncloop

import (
	"context"
	"errors"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/testsupport/eventually"
	"github.com/nodelet/nodelet/podconfig"
	"github.com/nodelet/nodelet/podruntime"
)

// fakeUnprepare records, at each UnprepareResources, how many of the pod's
// containers ran and whether its status was already terminal; it fails the
// first fail calls.
type fakeUnprepare struct {
	r    *rig
	t    *testing.T
	mu   sync.Mutex
	fail int
	seen []string
}

func (f *fakeUnprepare) UnprepareResources(_ context.Context, pod *v1.Pod) error {
	s, _ := f.r.status.GetPodStatus(pod.UID)
	seen := "running"
	if running(f.r.containers(f.t, string(pod.UID))) == 0 {
		seen = "stopped"
	}
	if s.Phase == v1.PodFailed || s.Phase == v1.PodSucceeded {
		seen += ",terminal"
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen = append(f.seen, seen)
	if f.fail > 0 {
		f.fail--
		return errors.New("unprepare dynamic resources: NodeUnprepareResources: driver busy")
	}
	return nil
}

func (f *fakeUnprepare) calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.seen...)
}

// A deleted pod's claims are unprepared once its containers stopped and
// before its final status, as upstream; a failed unprepare is retried and
// holds the pod's reclaim.
func TestDynamicResourcesUnpreparedAfterContainersStop(t *testing.T) {
	dr := &fakeUnprepare{t: t, fail: 1}
	r := newRig(t, nil, func(_ context.Context, r *rig, _ *podruntime.Deps, deps *Deps) {
		dr.r = r
		deps.DynamicResources = dr
	})
	r.ready()
	pod := newPod("uid-1", "web")
	r.sources.ch <- podconfig.Update{Op: podconfig.OpAdd, Pods: []*v1.Pod{pod}, Source: "api"}
	eventually.True(t, "the container to run", func() bool { return running(r.containers(t, "uid-1")) == 1 })
	if got := dr.calls(); len(got) != 0 {
		t.Fatalf("claims unprepared for a running pod: %v", got)
	}
	del := pod.DeepCopy()
	now := metav1.Now()
	del.DeletionTimestamp = &now
	r.sources.ch <- podconfig.Update{Op: podconfig.OpUpdate, Pods: []*v1.Pod{del}, Source: "api"}
	eventually.True(t, "the pod's resources to be reclaimed", func() bool { return r.loop.CanDeletePod(del) })
	got := dr.calls()
	if len(got) != 2 || got[0] != "stopped" || got[1] != "stopped" {
		t.Fatalf("UnprepareResources saw %v, want two calls (one failed, retried) with the containers stopped and no final status yet", got)
	}
}
