package syncloop

import (
	"context"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/testsupport/eventually"
	"github.com/nodelet/nodelet/internal/testsupport/spantest"
	"github.com/nodelet/nodelet/podconfig"
	"github.com/nodelet/nodelet/podruntime"
)

// TestPodLifeIsTraced: with a tracer provider a pod's sync, kill and volume
// teardown are upstream's spans (syncPod, syncTerminatingPod,
// syncTerminatedPod) under the kubelet's instrumentation scope, each with the
// pod's attributes.
func TestPodLifeIsTraced(t *testing.T) {
	tp, exp := spantest.New(t)
	r := newRig(t, nil, func(_ context.Context, _ *rig, _ *podruntime.Deps, deps *Deps) { deps.TracerProvider = tp })
	r.ready()
	pod := newPod("uid-1", "web")
	r.sources.ch <- podconfig.Update{Op: podconfig.OpAdd, Pods: []*v1.Pod{pod}, Source: "api"}
	eventually.True(t, "the container to run", func() bool { return running(r.containers(t, "uid-1")) == 1 })
	del := pod.DeepCopy()
	del.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	r.sources.ch <- podconfig.Update{Op: podconfig.OpUpdate, Pods: []*v1.Pod{del}, Source: "api"}
	eventually.True(t, "the pod's resources to be reclaimed", func() bool { return r.loop.CanDeletePod(del) })

	want := map[attribute.Key]string{"k8s.pod.uid": "uid-1", "k8s.pod": "default/web", "k8s.pod.name": "web", "k8s.namespace.name": "default"}
	var names []string
	for _, s := range exp.GetSpans().Snapshots() {
		names = append(names, s.Name())
		if s.InstrumentationScope().Name != InstrumentationScope {
			t.Errorf("span %s has scope %q, want %q", s.Name(), s.InstrumentationScope().Name, InstrumentationScope)
		}
		got := map[attribute.Key]string{}
		for _, kv := range s.Attributes() {
			got[kv.Key] = kv.Value.AsString()
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("span %s: %s = %q, want %q", s.Name(), k, got[k], v)
			}
		}
	}
	for _, name := range []string{"syncPod", "syncTerminatingPod", "syncTerminatedPod"} {
		if !slices.Contains(names, name) {
			t.Errorf("no %s span among %v", name, names)
		}
	}
}
