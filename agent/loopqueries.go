package agent

import (
	"context"

	v1 "k8s.io/api/core/v1"
)

// loopQueries carries the questions that parts the sync loop is built from ask the
// loop: the status manager (may a deleted pod's API object go?) and the QoS cgroups
// (which pods are active?). They cannot hold the loop, which needs them first; the
// channels exist before either side, and serve answers from the built loop in the
// run phase. serve runs in the last stage, so it outlives every asker; a question
// asked after serve returned gets the cautious answer (no pods, do not delete).
type loopQueries struct {
	active    chan chan []*v1.Pod
	canDelete chan canDeleteQuery
	stopped   chan struct{}
}

type canDeleteQuery struct {
	pod   *v1.Pod
	reply chan bool
}

func newLoopQueries() *loopQueries {
	return &loopQueries{active: make(chan chan []*v1.Pod), canDelete: make(chan canDeleteQuery), stopped: make(chan struct{})}
}

// activePods is the loop's ActivePods.
func (q *loopQueries) activePods() []*v1.Pod {
	reply := make(chan []*v1.Pod, 1)
	select {
	case q.active <- reply:
		return <-reply
	case <-q.stopped:
		return nil
	}
}

// canDeletePod is the loop's CanDeletePod.
func (q *loopQueries) canDeletePod(pod *v1.Pod) bool {
	reply := make(chan bool, 1)
	select {
	case q.canDelete <- canDeleteQuery{pod: pod, reply: reply}:
		return <-reply
	case <-q.stopped:
		return false
	}
}

// podLoop is what loopQueries asks: the sync loop.
type podLoop interface {
	ActivePods() []*v1.Pod
	CanDeletePod(pod *v1.Pod) bool
}

// serve answers from loop until ctx ends. Call it once.
func (q *loopQueries) serve(ctx context.Context, loop podLoop) {
	defer close(q.stopped)
	for {
		select {
		case <-ctx.Done():
			return
		case reply := <-q.active:
			reply <- loop.ActivePods()
		case c := <-q.canDelete:
			c.reply <- loop.CanDeletePod(c.pod)
		}
	}
}
