package syncloop

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/testsupport/eventually"
	"github.com/nodelet/nodelet/podconfig"
	"github.com/nodelet/nodelet/podruntime"
	"github.com/nodelet/nodelet/prober"
)

// withProbes wires a real prober.Manager, exec probes answered by the fake runtime.
func withProbes(ctx context.Context, r *rig, rt *podruntime.Deps, deps *Deps) {
	m := prober.NewManager(r.client, r.status, r.rec, clock.RealClock{})
	rt.Probes = m
	rt.Hooks = prober.NewHandler(r.client)
	deps.Probes = m
}

func (r *rig) hasEvent(sub string) bool {
	for {
		select {
		case e := <-r.rec.Events:
			if strings.Contains(e, sub) {
				return true
			}
		default:
			return false
		}
	}
}

func TestActiveDeadlineExceeded(t *testing.T) {
	r := newRig(t, nil)
	r.ready()
	pod := newPod("uid-deadline", "deadline")
	pod.Spec.ActiveDeadlineSeconds = ptr.To[int64](1)
	r.sources.ch <- podconfig.Update{Op: podconfig.OpAdd, Pods: []*v1.Pod{pod}, Source: "api"}
	eventually.True(t, "the pod to run", func() bool { return running(r.containers(t, "uid-deadline")) == 1 })
	eventually.True(t, "the pod to fail with DeadlineExceeded", func() bool {
		s, _ := r.status.GetPodStatus(pod.UID)
		return s.Phase == v1.PodFailed && s.Reason == "DeadlineExceeded" &&
			s.Message == "Pod was active on the node longer than the specified deadline"
	})
	if n := running(r.containers(t, "uid-deadline")); n != 0 {
		t.Errorf("%d containers still run after the deadline", n)
	}
	if !r.hasEvent("Normal DeadlineExceeded Pod was active on the node longer than the specified deadline") {
		t.Error("no DeadlineExceeded event")
	}
}

func TestProbesDriveStatusAndRestarts(t *testing.T) {
	r := newRig(t, nil, withProbes)
	var ready, alive atomic.Bool
	alive.Store(true)
	r.fake.SetExecSync(func(_ string, cmd []string) ([]byte, []byte, int32) {
		ok := (cmd[0] == "ready" && ready.Load()) || (cmd[0] == "alive" && alive.Load())
		if ok {
			return nil, nil, 0
		}
		return []byte(cmd[0] + " failed"), nil, 1
	})
	r.ready()
	pod := newPod("uid-probes", "probes")
	pod.Spec.Containers[0].ReadinessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"ready"}}}, PeriodSeconds: 1, FailureThreshold: 1}
	pod.Spec.Containers[0].LivenessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"alive"}}}, PeriodSeconds: 1, FailureThreshold: 1}
	r.sources.ch <- podconfig.Update{Op: podconfig.OpAdd, Pods: []*v1.Pod{pod}, Source: "api"}

	readyIs := func(want bool) func() bool {
		return func() bool {
			s, _ := r.status.GetPodStatus(pod.UID)
			cond := map[v1.PodConditionType]v1.ConditionStatus{}
			for _, c := range s.Conditions {
				cond[c.Type] = c.Status
			}
			st := v1.ConditionFalse
			if want {
				st = v1.ConditionTrue
			}
			return s.Phase == v1.PodRunning && len(s.ContainerStatuses) == 1 && s.ContainerStatuses[0].Ready == want &&
				cond[v1.PodReady] == st && cond[v1.ContainersReady] == st
		}
	}
	eventually.True(t, "running but not ready", readyIs(false))
	ready.Store(true)
	eventually.True(t, "ready", readyIs(true))
	ready.Store(false)
	eventually.True(t, "unready again", readyIs(false))

	first := r.containers(t, "uid-probes")[0].Id
	alive.Store(false)
	eventually.True(t, "the container killed and restarted", func() bool {
		list := r.containers(t, "uid-probes")
		return len(list) == 2 && running(list) == 1
	})
	alive.Store(true)
	if list := r.containers(t, "uid-probes"); list[0].Id == first && list[1].Id == first {
		t.Fatal("no new container")
	}
	if !r.hasEvent("Normal Killing Container app failed liveness probe, will be restarted") {
		t.Error("no Killing event naming the liveness probe")
	}
	eventually.True(t, "restart count 1", func() bool {
		s, _ := r.status.GetPodStatus(pod.UID)
		return len(s.ContainerStatuses) == 1 && s.ContainerStatuses[0].RestartCount == 1
	})
}
