package syncloop

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/testsupport/eventually"
	"github.com/nodelet/nodelet/podconfig"
	"github.com/nodelet/nodelet/podruntime"
)

// fakeObjects records what the loop registers.
type fakeObjects struct {
	mu  sync.Mutex
	log []string // "register <uid>" / "unregister <uid>" (+ " after teardown")
	// tornDown says whether the pod's volumes are torn down yet.
	tornDown func(types.UID) bool
}

func (f *fakeObjects) RegisterPod(pod *v1.Pod) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log = append(f.log, "register "+string(pod.UID))
}

func (f *fakeObjects) UnregisterPod(uid types.UID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	entry := "unregister " + string(uid)
	if f.tornDown != nil && f.tornDown(uid) {
		entry += " after teardown"
	}
	f.log = append(f.log, entry)
}

func (f *fakeObjects) calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.log)
}

func withObjects(o *fakeObjects) rigOption {
	return func(_ context.Context, _ *rig, _ *podruntime.Deps, deps *Deps) { deps.Objects = o }
}

func withSyncFrequency(d time.Duration) rigOption {
	return func(_ context.Context, r *rig, _ *podruntime.Deps, _ *Deps) {
		r.loopConfig = func(c *Config) { c.SyncFrequency = d }
	}
}

// A running pod is synced again every syncFrequency, and each of those syncs
// sets its volumes up (the refresh of configMap/secret content).
func TestPeriodicResyncRefreshesVolumes(t *testing.T) {
	r := newRig(t, nil, withSyncFrequency(200*time.Millisecond))
	r.ready()
	pod := newPod("uid-resync", "resync")
	r.sources.ch <- podconfig.Update{Op: podconfig.OpAdd, Pods: []*v1.Pod{pod}, Source: "api"}
	eventually.True(t, "the container to run", func() bool { return running(r.containers(t, "uid-resync")) == 1 })
	n := len(r.vols.setUpsOf(pod.UID))
	eventually.True(t, "three more volume set-ups from resyncs of the running pod", func() bool {
		return len(r.vols.setUpsOf(pod.UID)) >= n+3
	})
	if got := len(r.containers(t, "uid-resync")); got != 1 {
		t.Fatalf("resyncs of a running pod made %d containers, want 1", got)
	}
}

// A label change arrives as a pod update and is synced (volumes set up with the
// new labels, the downwardAPI refresh) at once, not at the next periodic resync
// (1m here). The pod's objects are registered on its syncs and unregistered once
// its volumes are torn down.
func TestPodUpdateRefreshesVolumesAndObjectsFollowThePod(t *testing.T) {
	objs := &fakeObjects{}
	r := newRig(t, nil, withObjects(objs))
	objs.tornDown = func(uid types.UID) bool {
		r.vols.mu.Lock()
		defer r.vols.mu.Unlock()
		return r.vols.tornDown[uid]
	}
	r.ready()
	pod := newPod("uid-labels", "labels")
	pod.Labels = map[string]string{"v": "1"}
	r.sources.ch <- podconfig.Update{Op: podconfig.OpAdd, Pods: []*v1.Pod{pod}, Source: "api"}
	eventually.True(t, "the container to run", func() bool { return running(r.containers(t, "uid-labels")) == 1 })
	if c := objs.calls(); len(c) == 0 || c[0] != "register uid-labels" {
		t.Fatalf("objects calls %v; want the pod registered by its first sync", c)
	}

	upd := pod.DeepCopy()
	upd.Labels = map[string]string{"v": "2"}
	r.sources.ch <- podconfig.Update{Op: podconfig.OpUpdate, Pods: []*v1.Pod{upd}, Source: "api"}
	eventually.True(t, "a volume set-up with the new labels", func() bool {
		for _, l := range r.vols.setUpsOf(pod.UID) {
			if maps.Equal(l, upd.Labels) {
				return true
			}
		}
		return false
	})

	del := upd.DeepCopy()
	now := metav1.Now()
	del.DeletionTimestamp = &now
	r.sources.ch <- podconfig.Update{Op: podconfig.OpUpdate, Pods: []*v1.Pod{del}, Source: "api"}
	eventually.True(t, "the pod's resources to be reclaimed", func() bool { return r.loop.CanDeletePod(del) })
	c := objs.calls()
	const want = "unregister uid-labels after teardown"
	if c[len(c)-1] != want || slices.Index(c, want) != len(c)-1 {
		t.Fatalf("objects calls %v; want one %q, last", c, want)
	}
}
