package prober

import (
	"context"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/podutil"
)

// ProbeType is startup, liveness or readiness.
type ProbeType int

const (
	Liveness ProbeType = iota
	Readiness
	Startup
)

// String is the capitalised name events use ("Liveness probe failed: ...").
func (t ProbeType) String() string {
	return [...]string{"Liveness", "Readiness", "Startup"}[t]
}

// StatusGetter returns the latest status nodelet computed for a pod.
type StatusGetter interface {
	GetPodStatus(uid types.UID) (v1.PodStatus, bool)
}

type workerKey struct {
	uid       types.UID
	container string
	probe     ProbeType
}

// Manager runs probe workers and keeps their results.
type Manager struct {
	handler  *Handler
	status   StatusGetter
	recorder record.EventRecorder
	clock    clock.WithTicker
	// start is when the manager was made: workers started within one period of
	// it are delayed by a random fraction of the period, so the pods adopted at
	// start-up do not all probe in the same instant.
	start time.Time

	mu      sync.Mutex
	workers map[workerKey]*worker
	// stopped is set when Run's context ended: no worker starts after it.
	stopped bool
	wg      sync.WaitGroup

	liveness, readiness, startup *results
	metrics                      *metrics // nil without WithMetrics
}

// NewManager returns a Manager. exec runs exec probes (CRI ExecSync); status
// gives the container IDs and states workers probe.
func NewManager(exec Execer, status StatusGetter, recorder record.EventRecorder, clk clock.WithTicker, opts ...Option) *Manager {
	m := &Manager{
		handler: NewHandler(exec), status: status, recorder: recorder, clock: clk, start: clk.Now(),
		workers:  map[workerKey]*worker{},
		liveness: newResults(), readiness: newResults(), startup: newResults(),
	}
	for _, o := range opts {
		o(m)
	}
	return m
}

// LivenessUpdates reports changed liveness results.
func (m *Manager) LivenessUpdates() <-chan Update { return m.liveness.updates }

// ReadinessUpdates reports changed readiness results.
func (m *Manager) ReadinessUpdates() <-chan Update { return m.readiness.updates }

// StartupUpdates reports changed startup results.
func (m *Manager) StartupUpdates() <-chan Update { return m.startup.updates }

func (m *Manager) resultsFor(t ProbeType) *results {
	switch t {
	case Liveness:
		return m.liveness
	case Readiness:
		return m.readiness
	default:
		return m.startup
	}
}

// probedContainers are the containers probes apply to: app containers and
// sidecars (restartable init containers).
func probedContainers(pod *v1.Pod) []*v1.Container {
	var out []*v1.Container
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if podutil.IsRestartableInitContainer(c) {
			out = append(out, c)
		}
	}
	for i := range pod.Spec.Containers {
		out = append(out, &pod.Spec.Containers[i])
	}
	return out
}

func probeOf(c *v1.Container, t ProbeType) *v1.Probe {
	switch t {
	case Liveness:
		return c.LivenessProbe
	case Readiness:
		return c.ReadinessProbe
	default:
		return c.StartupProbe
	}
}

// AddPod starts a worker for every probe of pod that has none yet. Workers run
// until RemovePod, until the pod or container is done for good, until ctx ends, or
// until the manager stops (Run); after that AddPod starts nothing.
func (m *Manager) AddPod(ctx context.Context, pod *v1.Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		klog.FromContext(ctx).V(4).Info("Probe manager stopped: no probe workers started", "pod", klog.KObj(pod), "podUID", pod.UID)
		return
	}
	for _, c := range probedContainers(pod) {
		for _, t := range []ProbeType{Startup, Readiness, Liveness} {
			p := probeOf(c, t)
			if p == nil {
				continue
			}
			k := workerKey{pod.UID, c.Name, t}
			if _, ok := m.workers[k]; ok {
				continue
			}
			wctx, cancel := context.WithCancel(ctx)
			w := newWorker(m, k, pod, c, p, cancel)
			if t == Readiness {
				m.carryReadiness(ctx, w, pod, c.Name)
			}
			m.workers[k] = w
			m.wg.Add(1)
			go func() {
				defer m.wg.Done()
				defer close(w.done)
				w.run(wctx)
			}()
		}
	}
}

// carryReadiness gives a new readiness worker's container the Ready its API
// status shows when CarriedReady says so: the result is in place before the
// worker's first probe (which may wait up to a period, the start-up jitter),
// so the container's status stays Ready meanwhile. It reports no update: the
// API already says ready.
func (m *Manager) carryReadiness(ctx context.Context, w *worker, pod *v1.Pod, name string) {
	api, ok := apiContainerStatus(pod, name)
	if !ok {
		return
	}
	id, carry := CarriedReady(api, m.start)
	if !carry || !m.readiness.setIfAbsent(id, Success) {
		return
	}
	w.carriedID = id
	klog.FromContext(ctx).V(2).Info("Readiness carried across the restart until the first probe result",
		"pod", klog.KObj(pod), "podUID", pod.UID, "container", name, "containerID", id)
}

// RemovePod stops the pod's workers (they forget their results on the way out)
// and returns once they have: nothing probes the pod's containers after it.
func (m *Manager) RemovePod(uid types.UID) {
	m.mu.Lock()
	var stopped []*worker
	for k, w := range m.workers {
		if k.uid == uid {
			w.remove()
			stopped = append(stopped, w)
		}
	}
	// Unlocked: an exiting worker takes mu to unregister itself.
	m.mu.Unlock()
	for _, w := range stopped {
		<-w.done
	}
}

// StopLivenessAndStartup stops the pod's liveness and startup workers: a pod
// being stopped is not restarted for failing them. Readiness keeps running.
// It does not wait for them: RemovePod and Run do.
func (m *Manager) StopLivenessAndStartup(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, w := range m.workers {
		if k.uid == uid && k.probe != Readiness {
			w.remove()
		}
	}
}

// Run blocks until ctx ends, then stops every worker and returns once all of them
// have returned. Workers added before Run are covered too; none starts after.
// The results stay: until nodelet exits, Ready and Started answer what the
// probes last observed, not what a container without a result reads as.
func (m *Manager) Run(ctx context.Context) {
	<-ctx.Done()
	m.mu.Lock()
	m.stopped = true
	for _, w := range m.workers {
		w.stop()
	}
	m.mu.Unlock()
	// No wg.Add can follow: AddPod adds under mu only while !stopped.
	m.wg.Wait()
	klog.FromContext(ctx).V(2).Info("Probe workers stopped")
}

// Wait blocks until every worker has returned (after ctx ended, RemovePod or Run).
func (m *Manager) Wait() { m.wg.Wait() }

// workerCount is for tests.
func (m *Manager) workerCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.workers)
}

func (m *Manager) removeWorker(w *worker) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.workers[w.key] == w {
		delete(m.workers, w.key)
	}
}

func (m *Manager) getWorker(uid types.UID, container string, t ProbeType) *worker {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.workers[workerKey{uid, container, t}]
}

// Ready reports whether a running container is ready: its readiness result, or
// false while a readiness probe has not passed yet, or true without one.
func (m *Manager) Ready(uid types.UID, container, containerID string) bool {
	if r, ok := m.readiness.get(containerID); ok {
		return r == Success
	}
	return m.getWorker(uid, container, Readiness) == nil
}

// Started reports whether a running container has started: its startup probe
// passed, or it has none.
func (m *Manager) Started(uid types.UID, container, containerID string) bool {
	if r, ok := m.startup.get(containerID); ok {
		return r == Success
	}
	return m.getWorker(uid, container, Startup) == nil
}

// Unhealthy says whether a running container failed its liveness or startup
// probe and must be killed, and which probe it failed ("liveness", "startup").
func (m *Manager) Unhealthy(containerID string) (string, bool) {
	if r, ok := m.liveness.get(containerID); ok && r == Failure {
		return "liveness", true
	}
	if r, ok := m.startup.get(containerID); ok && r == Failure {
		return "startup", true
	}
	return "", false
}

// UpdatePodStatus is told each status the sync loop stored. Like upstream it
// asks workers to probe now rather than up to a period later, so a container
// turns started and Ready as soon as it can: a startup or liveness worker whose
// running container has no result yet, and a readiness worker whose started
// container is not ready yet (its startup probe just passed, or it just started
// without one). Sidecars count like app containers.
func (m *Manager) UpdatePodStatus(pod *v1.Pod, status v1.PodStatus) {
	for _, list := range [][]v1.ContainerStatus{status.InitContainerStatuses, status.ContainerStatuses} {
		for _, cs := range list {
			if cs.State.Running == nil || cs.ContainerID == "" {
				continue
			}
			id := rawID(cs.ContainerID)
			for _, t := range []ProbeType{Startup, Readiness, Liveness} {
				if !needsProbeNow(t, cs, m.resultsFor(t), id) {
					continue
				}
				if w := m.getWorker(pod.UID, cs.Name, t); w != nil {
					w.trigger()
				}
			}
		}
	}
}

// needsProbeNow says whether the worker of probe type t should probe the running
// container id at once.
func needsProbeNow(t ProbeType, cs v1.ContainerStatus, r *results, id string) bool {
	res, known := r.get(id)
	if t == Readiness && cs.Started != nil && *cs.Started {
		return res != Success
	}
	return !known
}

// rawID strips the "<runtime>://" prefix of a status container ID.
func rawID(id string) string {
	if i := strings.Index(id, "://"); i >= 0 {
		return id[i+3:]
	}
	return id
}

func (m *Manager) event(pod *v1.Pod, reason, format string, args ...any) {
	if m.recorder != nil {
		m.recorder.Eventf(pod, v1.EventTypeWarning, reason, format, args...)
	}
}

func (m *Manager) logger(ctx context.Context) klog.Logger { return klog.FromContext(ctx) }
