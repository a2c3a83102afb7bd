package agent

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/testsupport/leakcheck"
)

type fakeLoop struct{ pods []*v1.Pod }

func (f fakeLoop) ActivePods() []*v1.Pod         { return f.pods }
func (f fakeLoop) CanDeletePod(pod *v1.Pod) bool { return pod.Name == "gone" }

// TestLoopQueries: questions asked before serve runs wait for it; once serve returned
// they get the cautious answers (no active pods, do not delete) instead of hanging.
func TestLoopQueries(t *testing.T) {
	defer leakcheck.Check(t)()
	q := newLoopQueries()
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "gone"}}
	answers := make(chan bool, 1)
	go func() { answers <- q.canDeletePod(pod) }() // before serve

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); q.serve(ctx, fakeLoop{pods: []*v1.Pod{pod}}) }()
	if !<-answers {
		t.Error("canDeletePod asked before serve: false, want the loop's true")
	}
	if got := q.activePods(); len(got) != 1 {
		t.Errorf("activePods = %v, want the loop's one pod", got)
	}
	cancel()
	<-done
	if q.canDeletePod(pod) || q.activePods() != nil {
		t.Error("after serve returned: want no active pods and no deletion")
	}
}
