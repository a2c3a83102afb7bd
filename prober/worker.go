package prober

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/internal/podutil"
)

// worker probes one container of one pod with one probe, every period.
type worker struct {
	m         *Manager
	key       workerKey
	pod       *v1.Pod
	container *v1.Container
	spec      *v1.Probe
	results   *results
	initial   Result

	// cancel ends the worker's context: its wait, a probe in flight, a result
	// being reported. done is closed when its goroutine has returned.
	cancel context.CancelFunc
	done   chan struct{}
	manual chan struct{}
	// forget says its results go with it once it stops: set by RemovePod and
	// StopLivenessAndStartup before they stop it. A worker stopped because
	// nodelet stops (the manager's or the loop's context ended) keeps them:
	// the container did not change, and a result removed while its worker is
	// still registered reads as not ready (Ready), which a status generated
	// during the stop would carry to the API server (issue 33).
	forget atomic.Bool

	// Owned by the worker goroutine.
	containerID string
	lastResult  Result
	resultRun   int
	// onHold stops probing a container that failed liveness or finished its
	// startup verdict, until a new container ID replaces it.
	onHold bool
	// carriedID is the container whose readiness was carried across the
	// restart (carryReadiness): it keeps that result, not the initial one,
	// until its probe decides. Set before the goroutine starts.
	carriedID string
}

func newWorker(m *Manager, k workerKey, pod *v1.Pod, c *v1.Container, p *v1.Probe, cancel context.CancelFunc) *worker {
	w := &worker{
		m: m, key: k, pod: pod, container: c, spec: withDefaults(p), results: m.resultsFor(k.probe),
		cancel: cancel, done: make(chan struct{}), manual: make(chan struct{}, 1),
	}
	switch k.probe {
	case Readiness:
		w.initial = Failure
	case Liveness:
		w.initial = Success
	default:
		w.initial = Unknown
	}
	return w
}

// withDefaults applies the API's probe defaults (static pods may skip defaulting).
func withDefaults(p *v1.Probe) *v1.Probe {
	p = p.DeepCopy()
	if p.PeriodSeconds <= 0 {
		p.PeriodSeconds = 10
	}
	if p.TimeoutSeconds <= 0 {
		p.TimeoutSeconds = 1
	}
	if p.SuccessThreshold <= 0 {
		p.SuccessThreshold = 1
	}
	if p.FailureThreshold <= 0 {
		p.FailureThreshold = 3
	}
	return p
}

func (w *worker) stop() { w.cancel() }

// remove stops the worker and has it forget its results.
func (w *worker) remove() {
	w.forget.Store(true)
	w.cancel()
}

func (w *worker) trigger() {
	select {
	case w.manual <- struct{}{}:
	default:
	}
}

func (w *worker) run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(w.pod), "podUID", w.pod.UID, "container", w.container.Name, "probeType", w.key.probe)
	ctx = klog.NewContext(ctx, logger)
	period := time.Duration(w.spec.PeriodSeconds) * time.Second
	defer func() {
		w.cancel()
		if w.forget.Load() {
			w.forgetResults()
		}
		w.m.removeWorker(w)
		w.forgetMetrics()
	}()

	// Workers made at start-up (adopted pods) begin at a random point of their
	// period, so 110 pods' probes spread over the period instead of firing together.
	if w.m.clock.Since(w.m.start) < period {
		select {
		case <-w.m.clock.After(time.Duration(rand.Float64() * float64(period))):
		case <-ctx.Done():
			return
		}
	}
	// Not periodic.Every: a manual trigger probes early, and a finished worker ends the loop.
	ticker := w.m.clock.NewTicker(period)
	defer ticker.Stop()
	for w.doProbe(ctx) {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		case <-w.manual:
		}
	}
	w.forget.Store(true) // done for good: the pod or container ended
	logger.V(4).Info("Probe worker done")
}

// forgetResults removes the results of the containers the worker probed.
func (w *worker) forgetResults() {
	if w.containerID != "" {
		w.results.remove(w.containerID)
	}
	if w.carriedID != "" && w.carriedID != w.containerID {
		// Carried for a container the worker never saw run.
		w.results.remove(w.carriedID)
	}
}

// findStatus returns the container's status in the pod status.
func (w *worker) findStatus(s v1.PodStatus) *v1.ContainerStatus {
	for _, list := range [][]v1.ContainerStatus{s.ContainerStatuses, s.InitContainerStatuses} {
		for i := range list {
			if list[i].Name == w.container.Name {
				return &list[i]
			}
		}
	}
	return nil
}

// willRestart says whether a terminated container of this pod comes back
// (a sidecar's restartPolicy Always says so too).
func (w *worker) willRestart(t *v1.ContainerStateTerminated) bool {
	return podutil.ContainerShouldRestart(w.container, &w.pod.Spec, t.ExitCode)
}

// doProbe probes once and reports whether the worker should keep going.
func (w *worker) doProbe(ctx context.Context) bool {
	status, ok := w.m.status.GetPodStatus(w.pod.UID)
	if !ok {
		return true // not synced yet
	}
	if podutil.IsTerminal(status.Phase) {
		return false
	}
	cs := w.findStatus(status)
	if cs == nil || cs.ContainerID == "" {
		return true
	}
	id := rawID(cs.ContainerID)
	if w.containerID != id {
		if w.containerID != "" {
			w.results.remove(w.containerID)
		}
		if w.carriedID != "" && id != w.carriedID {
			// The carried container is gone: its result goes with it.
			w.results.remove(w.carriedID)
			w.carriedID = ""
		}
		w.containerID = id
		if id != w.carriedID {
			w.results.set(ctx, id, w.initial, w.pod.UID)
		}
		w.onHold = false
		w.lastResult, w.resultRun = Unknown, 0
	}
	if w.onHold {
		return true
	}
	if cs.State.Running == nil {
		if t := cs.State.Terminated; t != nil {
			w.results.set(ctx, id, Failure, w.pod.UID)
			return w.willRestart(t)
		}
		return true
	}
	if w.pod.DeletionTimestamp != nil && (w.key.probe == Liveness || w.key.probe == Startup) {
		// A terminating pod is not restarted for failing probes.
		w.results.set(ctx, id, Success, w.pod.UID)
		return false
	}
	if w.m.clock.Since(cs.State.Running.StartedAt.Time) < time.Duration(w.spec.InitialDelaySeconds)*time.Second {
		return true
	}
	started := cs.Started != nil && *cs.Started
	if started && w.key.probe == Startup {
		return true // startup is over; keep the worker for the next container instance
	}
	if !started && w.key.probe != Startup {
		return true // startup probe still gates the others
	}

	res := w.probe(ctx, status)
	if res == Unknown {
		return true // an error: keep the previous verdict
	}
	if res == w.lastResult {
		w.resultRun++
	} else {
		w.lastResult, w.resultRun = res, 1
	}
	if (res == Failure && w.resultRun < int(w.spec.FailureThreshold)) ||
		(res == Success && w.resultRun < int(w.spec.SuccessThreshold)) {
		return true
	}
	w.results.set(ctx, id, res, w.pod.UID)
	if (w.key.probe == Liveness || w.key.probe == Startup) && res == Failure {
		// The container is about to be killed; do not probe it again.
		w.onHold = true
		w.resultRun = 0
	}
	if w.key.probe == Startup && res == Success {
		w.onHold = true
	}
	return true
}

// probe runs the action once, recording Unhealthy for failures as upstream does.
func (w *worker) probe(ctx context.Context, status v1.PodStatus) Result {
	ip := status.PodIP
	target := Target{PodIP: ip, Container: w.container, ContainerID: w.containerID}
	start := w.m.clock.Now()
	res, output, err := w.m.handler.Probe(ctx, target, w.spec)
	warned := res == Warning
	if warned {
		res = Success // upstream counts it (and its metric) as a success
	}
	w.observe(res, w.m.clock.Since(start))
	logger := klog.FromContext(ctx)
	switch {
	case ctx.Err() != nil:
		return Unknown // stopped (RemovePod, Run): not the container's fault
	case err != nil:
		logger.V(1).Info("Probe errored", "err", err)
		w.m.event(w.pod, "Unhealthy", "%s probe errored and resulted in unknown state: %v", w.key.probe, err)
		return Unknown
	case res == Failure:
		logger.V(1).Info("Probe failed", "output", output)
		w.m.event(w.pod, "Unhealthy", "%s probe failed: %s", w.key.probe, output)
	case warned:
		// Told on every probe that ends so, as upstream does.
		logger.V(3).Info("Probe succeeded with a warning", "output", output)
		w.m.event(w.pod, "ProbeWarning", "%s probe warning: %s", w.key.probe, output)
	default:
		logger.V(4).Info("Probe succeeded")
	}
	return res
}
