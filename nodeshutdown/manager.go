package nodeshutdown

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/atomicfile"
	"github.com/nodelet/nodelet/internal/podutil"
)

const (
	// StateFileName is the file under the root dir holding the last shutdown's times.
	StateFileName = "graceful_node_shutdown_state"

	PodStatusReason     = "Terminated"
	PodStatusMessage    = "Pod was terminated in response to imminent node shutdown."
	AdmitRejectReason   = "NodeShutdown"
	AdmitRejectMessage  = "Pod was rejected as the node is shutting down."
	DisruptionReason    = "TerminationByKubelet"
	NodeNotReadyMessage = "node is shutting down"
)

// PodKiller stops a pod within grace, applying status to the pod's status on the way. It
// blocks until the pod is stopped or ctx is done.
type PodKiller interface {
	KillPod(ctx context.Context, pod *v1.Pod, grace time.Duration, status func(*v1.PodStatus)) error
}

// PodLister returns the pods to stop (the active pods).
type PodLister func() []*v1.Pod

// State is what the state file holds.
type State struct {
	StartTime time.Time `json:"startTime"`
	EndTime   time.Time `json:"endTime"`
}

// Options configures a Manager.
type Options struct {
	Groups  []Group
	Killer  PodKiller
	Lister  PodLister
	RootDir string
	// Clock defaults to the real clock.
	Clock clock.Clock
	// Registerer, when set, gets the start/end time gauges.
	Registerer prometheus.Registerer
}

// Manager runs a shutdown: groups lowest priority first, each bounded by its grace.
type Manager struct {
	groups  []Group
	killer  PodKiller
	lister  PodLister
	rootDir string
	clock   clock.Clock

	startGauge prometheus.Gauge
	endGauge   prometheus.Gauge

	mu           sync.Mutex
	shuttingDown bool
	running      bool

	// kills are the goroutines of runGroup, which may outlive their group's grace
	// (they end with ProcessShutdown's context); Run waits for them.
	kills sync.WaitGroup
}

// NewManager builds a Manager and, when a previous shutdown left a state file, sets the
// gauges from it so the last shutdown's times survive the reboot.
func NewManager(opts Options) (*Manager, error) {
	if opts.Killer == nil || opts.Lister == nil {
		return nil, errors.New("shutdown manager needs a pod killer and a pod lister")
	}
	m := &Manager{
		groups:  opts.Groups,
		killer:  opts.Killer,
		lister:  opts.Lister,
		rootDir: opts.RootDir,
		clock:   opts.Clock,
		startGauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Subsystem: "kubelet", Name: "graceful_shutdown_start_time_seconds",
			Help: "Last graceful shutdown start time since unix epoch in seconds",
		}),
		endGauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Subsystem: "kubelet", Name: "graceful_shutdown_end_time_seconds",
			Help: "Last graceful shutdown end time since unix epoch in seconds",
		}),
	}
	if m.clock == nil {
		m.clock = clock.RealClock{}
	}
	if opts.Registerer != nil {
		if err := opts.Registerer.Register(m.startGauge); err != nil {
			return nil, fmt.Errorf("registering %s: %w", "kubelet_graceful_shutdown_start_time_seconds", err)
		}
		if err := opts.Registerer.Register(m.endGauge); err != nil {
			return nil, fmt.Errorf("registering %s: %w", "kubelet_graceful_shutdown_end_time_seconds", err)
		}
	}
	if m.rootDir != "" {
		st, err := ReadState(m.rootDir)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			klog.ErrorS(err, "Ignoring unreadable graceful shutdown state file", "path", m.statePath())
		default:
			m.setGauges(st)
		}
	}
	return m, nil
}

// Groups returns the configured groups.
func (m *Manager) Groups() []Group { return m.groups }

// ShuttingDown says whether a shutdown has begun (and not been cancelled).
func (m *Manager) ShuttingDown() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.shuttingDown
}

// CancelShutdown marks the node as no longer shutting down (logind's PrepareForShutdown(false)).
// Pods already stopped stay stopped; cancel ProcessShutdown's context to stop the rest.
func (m *Manager) CancelShutdown() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.shuttingDown = false
}

// Admit refuses every new pod while the node shuts down, whatever it tolerates.
func (m *Manager) Admit(pod *v1.Pod) (ok bool, reason, message string) {
	if m.ShuttingDown() {
		return false, AdmitRejectReason, AdmitRejectMessage
	}
	return true, "", ""
}

// ProcessShutdown stops the listed pods group by group, lowest priority first. Pods of a group
// are stopped in parallel; the next group starts when all of them are stopped or the group's
// grace is up, whichever is first. Kills still running then carry on in the background.
func (m *Manager) ProcessShutdown(ctx context.Context) error {
	m.mu.Lock()
	if m.running {
		m.mu.Unlock()
		return errors.New("a node shutdown is already in progress")
	}
	m.running, m.shuttingDown = true, true
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.running = false
		m.mu.Unlock()
	}()

	st := State{StartTime: m.clock.Now()}
	m.recordState(st)
	defer func() {
		st.EndTime = m.clock.Now()
		m.recordState(st)
	}()

	plan := Plan(m.groups, m.lister())
	klog.InfoS("Node shutdown: stopping pods", "groups", len(plan), "worstCase", PlanDuration(plan))
	for _, g := range plan {
		if g.Empty {
			continue
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("node shutdown stopped before the group of priority %d: %w", g.Priority, err)
		}
		m.runGroup(ctx, g)
	}
	return nil
}

func (m *Manager) runGroup(ctx context.Context, g PlannedGroup) {
	start := m.clock.Now()
	klog.InfoS("Node shutdown: stopping pod group", "priority", g.Priority, "gracePeriod", g.GracePeriod, "pods", len(g.Pods))
	var wg sync.WaitGroup
	for _, p := range g.Pods {
		wg.Add(1)
		m.kills.Add(1)
		go func() {
			defer m.kills.Done()
			defer wg.Done()
			if err := m.killer.KillPod(ctx, p.Pod, p.Grace, m.setPodStatus); err != nil {
				klog.ErrorS(err, "Node shutdown: failed to stop pod", "pod", klog.KObj(p.Pod), "gracePeriod", p.Grace)
				return
			}
			klog.V(2).InfoS("Node shutdown: pod stopped", "pod", klog.KObj(p.Pod))
		}()
	}
	done := make(chan struct{})
	m.kills.Add(1)
	go func() {
		defer m.kills.Done()
		wg.Wait()
		close(done)
	}()
	// A group without grace gets its kills started and no wait (a fake clock never fires a
	// zero timer, a real one at once).
	var expired <-chan time.Time
	if g.GracePeriod > 0 {
		timer := m.clock.NewTimer(g.GracePeriod)
		defer timer.Stop()
		expired = timer.C()
	} else {
		c := make(chan time.Time)
		close(c)
		expired = c
	}
	select {
	case <-done:
		klog.InfoS("Node shutdown: pod group stopped", "priority", g.Priority, "took", m.clock.Since(start))
	case <-expired:
		klog.InfoS("Node shutdown: pod group's grace period is up, moving on with pods still stopping", "priority", g.Priority, "gracePeriod", g.GracePeriod)
	case <-ctx.Done():
	}
}

// setPodStatus is the status a pod stopped for shutdown ends with.
func (m *Manager) setPodStatus(status *v1.PodStatus) {
	if status.Phase != v1.PodSucceeded {
		status.Phase = v1.PodFailed
	}
	status.Reason = PodStatusReason
	status.Message = PodStatusMessage
	podutil.SetCondition(status, v1.PodCondition{
		Type:               v1.DisruptionTarget,
		Status:             v1.ConditionTrue,
		Reason:             DisruptionReason,
		Message:            PodStatusMessage,
		LastTransitionTime: metav1.NewTime(m.clock.Now()),
	})
}

func (m *Manager) statePath() string { return filepath.Join(m.rootDir, StateFileName) }

func (m *Manager) recordState(st State) {
	m.setGauges(st)
	if m.rootDir == "" {
		return
	}
	if err := writeState(m.statePath(), st); err != nil {
		klog.ErrorS(err, "Failed to record graceful shutdown state", "path", m.statePath())
	}
}

func (m *Manager) setGauges(st State) {
	if !st.StartTime.IsZero() {
		m.startGauge.Set(float64(st.StartTime.UnixNano()) / 1e9)
	}
	if !st.EndTime.IsZero() {
		m.endGauge.Set(float64(st.EndTime.UnixNano()) / 1e9)
	}
}

// ReadState reads the state file under rootDir.
func ReadState(rootDir string) (State, error) {
	var st State
	b, err := os.ReadFile(filepath.Join(rootDir, StateFileName))
	if err != nil {
		return st, fmt.Errorf("reading graceful shutdown state: %w", err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("decoding graceful shutdown state: %w", err)
	}
	return st, nil
}

// writeState replaces the file atomically: a power cut mid-write must not leave half a file.
func writeState(path string, st State) error {
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encoding graceful shutdown state: %w", err)
	}
	if err := atomicfile.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("writing graceful shutdown state: %w", err)
	}
	return nil
}
