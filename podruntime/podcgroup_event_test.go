package podruntime

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
)

type failingPodCgroups struct{ err error }

func (f failingPodCgroups) EnsurePodCgroup(context.Context, *v1.Pod) error { return f.err }

// A pod whose cgroup cannot be made gets upstream's FailedCreatePodContainer
// warning, and no sandbox.
func TestPodCgroupFailureEvent(t *testing.T) {
	r := newSyncRig(t)
	rec := record.NewFakeRecorder(10)
	cfg := Config{RootDir: r.root, PodLogsDir: filepath.Join(r.root, "logs")}
	m := New(cfg, Deps{Runtime: r.client, Images: r.client, Volumes: noVolumes{}, Env: fakeSecrets{}, Node: func() NodeFacts { return NodeFacts{Name: "node1"} }, Recorder: rec, Clock: clock.RealClock{}, PodCgroups: failingPodCgroups{errors.New("no memory controller")}})
	pod := syncPod("cg", v1.RestartPolicyAlways, nil, "app")
	if _, err := m.SyncPod(context.Background(), pod, r.status(pod)); err == nil {
		t.Fatal("SyncPod succeeded without the pod cgroup")
	}
	want := "Warning FailedCreatePodContainer unable to ensure pod container exists: no memory controller"
	select {
	case e := <-rec.Events:
		if e != want {
			t.Errorf("event = %q, want %q", e, want)
		}
	default:
		t.Errorf("no event, want %q", want)
	}
}
