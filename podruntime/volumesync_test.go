package podruntime

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/volumes"
)

// countingVolumes records SetUpPod calls and returns err from them.
type countingVolumes struct {
	noVolumes
	mu    sync.Mutex
	calls int
	err   error
}

func (c *countingVolumes) SetUpPod(context.Context, *v1.Pod) (map[string]volumes.HostVolume, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	return map[string]volumes.HostVolume{}, c.err
}

func (c *countingVolumes) set(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = err
}

func (c *countingVolumes) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

func (r *syncRig) managerWith(vols Volumes, rec record.EventRecorder) *Manager {
	cfg := Config{RootDir: r.root, PodLogsDir: filepath.Join(r.root, "logs")}
	return New(cfg, Deps{Runtime: r.client, Images: r.client, Volumes: vols, Env: fakeSecrets{}, Node: func() NodeFacts { return NodeFacts{Name: "node1"} }, Recorder: rec, Clock: clock.RealClock{}})
}

// Every sync of a running pod sets its volumes up again (the refresh that brings
// changed configMaps, secrets, labels and annotations), even one with nothing to
// start; before, only syncs that started something did.
func TestEverySyncRefreshesVolumes(t *testing.T) {
	r := newSyncRig(t)
	ctx := context.Background()
	vols := &countingVolumes{}
	m := r.managerWith(vols, record.NewFakeRecorder(100))
	pod := syncPod("refresh", v1.RestartPolicyAlways, nil, "app")
	if _, err := m.SyncPod(ctx, pod, r.status(pod)); err != nil {
		t.Fatal(err)
	}
	r.containerID(pod, "app", runtimeapi.ContainerState_CONTAINER_RUNNING)
	for i := 2; i <= 3; i++ {
		r.fake.ResetCalls()
		res, err := m.SyncPod(ctx, pod, r.status(pod))
		if err != nil || res.Changed {
			t.Fatalf("sync %d of a running pod: changed %v, err %v; want a no-op", i, res.Changed, err)
		}
		if got := vols.count(); got != i {
			t.Fatalf("SetUpPod calls after %d syncs = %d, want %d", i, got, i)
		}
		if calls := r.fake.Calls(); slices.Contains(calls, "CreateContainer") || slices.Contains(calls, "RunPodSandbox") {
			t.Fatalf("a refresh sync created something: %v", calls)
		}
	}
}

// A refresh that failed but kept every volume's content does not stop the pod:
// FailedMount with upstream's per-volume wording, and a container that exited is
// restarted. A volume that is missing blocks the start, as before.
func TestVolumeRefreshFailure(t *testing.T) {
	r := newSyncRig(t)
	ctx := context.Background()
	vols := &countingVolumes{}
	rec := record.NewFakeRecorder(100)
	m := r.managerWith(vols, rec)
	pod := syncPod("kept", v1.RestartPolicyAlways, nil, "app")
	if _, err := m.SyncPod(ctx, pod, r.status(pod)); err != nil {
		t.Fatal(err)
	}
	drain(rec)
	r.fake.ExitContainer(r.containerID(pod, "app", runtimeapi.ContainerState_CONTAINER_RUNNING), 1, "")

	vols.set(errors.Join(&volumes.SetUpError{Volume: "cfg", Err: errors.New(`configmap "cfg" not found`), KeptContent: true}))
	if _, err := m.SyncPod(ctx, pod, r.status(pod)); err != nil {
		t.Fatalf("sync with a kept volume: %v", err)
	}
	if got := r.containers(pod, "app"); !slices.Contains(got, runtimeapi.ContainerState_CONTAINER_RUNNING) {
		t.Errorf("app states %v: the exited container was not restarted", got)
	}
	events := drain(rec)
	want := `Warning FailedMount MountVolume.SetUp failed for volume "cfg" : configmap "cfg" not found`
	if !slices.Contains(events, want) {
		t.Errorf("events %q; want %q", events, want)
	}

	other := syncPod("blocked", v1.RestartPolicyAlways, nil, "app")
	other.UID = types.UID("uid-blocked")
	vols.set(errors.Join(&volumes.SetUpError{Volume: "cfg", Err: errors.New(`configmap "cfg" not found`)}))
	r.fake.ResetCalls()
	if _, err := m.SyncPod(ctx, other, r.status(other)); err == nil {
		t.Fatal("sync with a missing volume succeeded")
	}
	if slices.Contains(r.fake.Calls(), "RunPodSandbox") {
		t.Error("a sandbox was created while a volume is missing")
	}
	events = drain(rec)
	if !slices.Equal(events, []string{want}) {
		t.Errorf("events %q; want one %q", events, want)
	}
}

// A claim that could not be processed blocks the pod with upstream's "Unable to
// attach or mount volumes" FailedMount; another volume's failure in the same
// sync gets its own, as upstream's per-volume MountVolume.SetUp event.
func TestUnprocessedClaimEvent(t *testing.T) {
	r := newSyncRig(t)
	ctx := context.Background()
	vols := &countingVolumes{}
	rec := record.NewFakeRecorder(100)
	m := r.managerWith(vols, rec)
	pod := syncPod("claims", v1.RestartPolicyAlways, nil, "app")
	claimErr := &volumes.ClaimError{Volume: "data", Err: errors.New(`error processing PVC default/data: PVC is not bound`)}
	vols.set(errors.Join(
		&volumes.UnprocessedVolumesError{Unmounted: []string{"data"}, Failed: []string{"data"}, Errs: []*volumes.ClaimError{claimErr}},
		&volumes.SetUpError{Volume: "cfg", Err: errors.New(`configmap "cfg" not found`)},
	))
	if _, err := m.SyncPod(ctx, pod, r.status(pod)); err == nil {
		t.Fatal("sync with an unbound claim succeeded")
	}
	if slices.Contains(r.fake.Calls(), "RunPodSandbox") {
		t.Error("a sandbox was created while a claim is unbound")
	}
	events := drain(rec)
	want := []string{
		`Warning FailedMount Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[], failed to process volumes=[data]: error processing PVC default/data: PVC is not bound`,
		`Warning FailedMount MountVolume.SetUp failed for volume "cfg" : configmap "cfg" not found`,
	}
	if !slices.Equal(events, want) {
		t.Errorf("events\n%q\nwant\n%q", events, want)
	}
}

// A volume waiting for its attachment brings the pod back in a second, not
// after the error back-off; a claim that cannot be processed does not.
func TestUnattachedVolumeRequeuesSoon(t *testing.T) {
	r := newSyncRig(t)
	ctx := context.Background()
	vols := &countingVolumes{}
	m := r.managerWith(vols, record.NewFakeRecorder(100))
	pod := syncPod("attach", v1.RestartPolicyAlways, nil, "app")
	for _, tc := range []struct {
		err  *volumes.UnprocessedVolumesError
		want time.Duration
	}{
		{&volumes.UnprocessedVolumesError{Unmounted: []string{"data"}, Unattached: []string{"data"}}, attachRecheck},
		{&volumes.UnprocessedVolumesError{Unmounted: []string{"data"}, Failed: []string{"data"},
			Errs: []*volumes.ClaimError{{Volume: "data", Err: errors.New("PVC is not bound")}}}, 0},
	} {
		vols.set(errors.Join(tc.err)) // as SetUpPod joins its errors
		res, err := m.SyncPod(ctx, pod, r.status(pod))
		if err == nil {
			t.Fatal("sync with a volume not ready succeeded")
		}
		if res.RequeueAfter != tc.want {
			t.Errorf("%v: RequeueAfter = %v, want %v", tc.err, res.RequeueAfter, tc.want)
		}
	}
}
