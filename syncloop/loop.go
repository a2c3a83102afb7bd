package syncloop

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	goruntime "runtime"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/allocation"
	"github.com/nodelet/nodelet/cgroups"
	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/pleg"
	"github.com/nodelet/nodelet/podconfig"
	"github.com/nodelet/nodelet/podruntime"
	"github.com/nodelet/nodelet/podstatus"
	"github.com/nodelet/nodelet/prober"
)

// Runtime runs pods.
type Runtime interface {
	SyncPod(ctx context.Context, pod *v1.Pod, st *pleg.PodStatus) (podruntime.Result, error)
	KillPod(ctx context.Context, pod *v1.Pod, st *pleg.PodStatus, graceOverride *int64) error
	RemovePod(ctx context.Context, uid types.UID, st *pleg.PodStatus, logDir string) error
	GCBackoff()
}

// Cache is the PLEG's pod status cache.
type Cache interface {
	Get(uid types.UID) (*pleg.PodStatus, error)
	GetNewerThan(ctx context.Context, uid types.UID, t time.Time) (*pleg.PodStatus, error)
}

// PLEG reports runtime changes and what runs.
type PLEG interface {
	Watch() <-chan *pleg.Event
	Pods() []*pleg.PodStatus
	// Relist lists the runtime now; the loop asks for it right after a sync changed
	// something, so a started pod is seen running without waiting for the period.
	Relist(ctx context.Context)
	// RequestReinspect makes the next relist inspect the pod although no
	// container changed state (a resize changes resources only).
	RequestReinspect(uid types.UID)
	// Listed says a relist listed the runtime successfully at least once: until
	// then Pods is empty for want of a listing, and nothing may be cleaned up
	// on the strength of a pod missing from it.
	Listed() bool
}

// StatusManager keeps pod statuses and reports them.
type StatusManager interface {
	SetPodStatus(pod *v1.Pod, status v1.PodStatus)
	GetPodStatus(uid types.UID) (v1.PodStatus, bool)
	RemoveOrphanedStatuses(keep map[types.UID]bool)
	// ForgetPodStatus drops a pod's status at once: its UID starts a new life.
	ForgetPodStatus(uid types.UID)
}

// Volumes tears pod volumes down.
type Volumes interface {
	TearDownPod(ctx context.Context, podUID types.UID) error
}

// PodObjects is told which configMaps and secrets each pod references
// (podobjects.Manager), so its reads during the pod's syncs are cheap and fresh.
type PodObjects interface {
	RegisterPod(pod *v1.Pod)
	UnregisterPod(uid types.UID)
}

// PodCgroups lists and removes pod cgroups, so housekeeping can drop those of
// pods that no longer run.
type PodCgroups interface {
	ListPodCgroups() (map[types.UID]cgroups.CgroupName, error)
	RemoveCgroup(ctx context.Context, name cgroups.CgroupName) error
}

// Probes runs container probes (prober.Manager). Result changes arrive on
// their own channels and wake the pod's worker: readiness and startup changes
// update the status, liveness and startup failures make the sync kill the container.
type Probes interface {
	AddPod(ctx context.Context, pod *v1.Pod)
	RemovePod(uid types.UID)
	StopLivenessAndStartup(uid types.UID)
	UpdatePodStatus(pod *v1.Pod, status v1.PodStatus)
	podstatus.ContainerProbes
	LivenessUpdates() <-chan prober.Update
	ReadinessUpdates() <-chan prober.Update
	StartupUpdates() <-chan prober.Update
}

// Sources deliver the desired pods.
type Sources interface {
	Updates() <-chan podconfig.Update
	SourcesReady() bool
}

// Config tunes the loop; zero values take the upstream defaults.
type Config struct {
	SyncFrequency      time.Duration // 1m: resync of a healthy pod
	HousekeepingPeriod time.Duration // 2s
	ResyncTick         time.Duration // 1s: how often due workers are woken
	RootDir            string
	PodLogsDir         string
	RuntimeName        string // prefixes container IDs in status
}

// DynamicResources ends a pod's use of its ResourceClaims (dra.Manager).
type DynamicResources interface {
	UnprepareResources(ctx context.Context, pod *v1.Pod) error
}

// Deps are the loop's collaborators.
type Deps struct {
	Runtime    Runtime
	Cache      Cache
	PLEG       PLEG
	Status     StatusManager
	Volumes    Volumes
	Sources    Sources
	Node       func() podruntime.NodeFacts
	NodeObject func(ctx context.Context, fresh bool) (*v1.Node, error) // see admitNode
	Recorder   record.EventRecorder
	Clock      clock.WithTicker
	Registerer prometheus.Registerer // optional
	// PodCgroups, when set, lets housekeeping remove cgroups of pods that stopped.
	PodCgroups PodCgroups
	// Probes, when set, runs startup, liveness and readiness probes.
	Probes Probes
	// Admitters are extra admission checks run before the node's own (node
	// pressure), AdmittersAfter ones run after them (node shutdown), as
	// upstream orders its admit handlers; the first rejection wins. A pod the
	// runtime already runs skips both (see admit).
	Admitters      []func(pod *v1.Pod) *Rejection
	AdmittersAfter []func(pod *v1.Pod) *Rejection
	// Sysctls are the sysctls pods may set (the safe ones and the config's
	// allowedUnsafeSysctls); nil: the sysctls safe on every kernel.
	Sysctls *SysctlAllowlist
	// AppArmorEnabled says the host can enforce AppArmor profiles (checked
	// once at start, as upstream); pods asking for one are refused otherwise.
	AppArmorEnabled bool
	// Objects, when set, registers a pod's referenced objects on each sync (as
	// upstream's SyncPod does) and unregisters them once its volumes are torn down.
	Objects PodObjects
	// Allocations keeps the admitted pods' allocated resources and their
	// in-place resizes; nil keeps them in memory (not across restarts).
	Allocations Allocations
	// Actuated, when set, says what the runtime was told of container
	// resources, for PodResizeInProgress and status.containerStatuses[].resources.
	Actuated ActuatedResources
	// EventsInUse, when set, says whether the evented PLEG follows the
	// runtime's event stream now (pleg.Evented.InUse): then a sync or kill
	// asks for no relist, the events bring its changes as upstream's; nil
	// or false (the generic PLEG, or the evented one fallen back to
	// relisting) relists soon after each sync that changed something.
	EventsInUse func() bool
	// Resources, when set, allocates a pod's CPUs and devices at admission
	// (the topology manager over the CPU and device managers).
	Resources ResourceAllocator
	// DynamicResources, when set, unprepares a terminated pod's
	// ResourceClaims (the DRA manager).
	DynamicResources DynamicResources
	// TracerProvider, when set, traces each pod operation (span "syncPod",
	// "syncTerminatingPod" or "syncTerminatedPod", as upstream); the
	// runtime's calls made under it are its children. Nil traces nothing.
	TracerProvider trace.TracerProvider
}

// ResourceAllocator gives an admitted pod's containers their exclusive CPUs
// and devices; active are the other pods that hold theirs, and once
// sourcesReady (the loop synced its sources' first pods) the others' devices
// are freed.
type ResourceAllocator interface {
	Allocate(ctx context.Context, pod *v1.Pod, active []*v1.Pod, sourcesReady bool) error
}

// Loop is the sync loop.
type Loop struct {
	cfg  Config
	deps Deps

	mu      sync.Mutex
	pods    map[types.UID]*v1.Pod // desired pods, by UID
	workers map[types.UID]*worker

	started   time.Time
	synced    chan struct{}
	syncOnce  sync.Once
	lastIter  time.Time
	iterMu    sync.Mutex
	metrics   *metrics
	tracer    trace.Tracer
	workersWG sync.WaitGroup
	relistNow chan struct{}
	// resizeRetry asks for a retry of the pending resizes (see requestResizeRetry).
	resizeRetry chan struct{}
}

// New returns a loop; call Run.
func New(cfg Config, deps Deps) *Loop {
	if cfg.SyncFrequency == 0 {
		cfg.SyncFrequency = time.Minute
	}
	if deps.Sysctls == nil {
		// The fixed list cannot fail to build.
		deps.Sysctls, _ = NewSysctlAllowlist(SafeSysctls(""))
	}
	if cfg.HousekeepingPeriod == 0 {
		cfg.HousekeepingPeriod = 2 * time.Second
	}
	if cfg.ResyncTick == 0 {
		cfg.ResyncTick = time.Second
	}
	if cfg.PodLogsDir == "" {
		cfg.PodLogsDir = "/var/log/pods"
	}
	if deps.NodeObject == nil {
		deps.NodeObject = func(context.Context, bool) (*v1.Node, error) { return &v1.Node{}, nil }
	}
	if deps.Allocations == nil {
		deps.Allocations = allocation.NewManager(allocation.NewMemoryState(), cgroups.ResourceOptions{}, allocation.StaticManagers{}, deps.Recorder, deps.Clock)
	}
	tp := deps.TracerProvider
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	return &Loop{
		cfg: cfg, deps: deps,
		tracer:      tp.Tracer(InstrumentationScope),
		pods:        map[types.UID]*v1.Pod{},
		workers:     map[types.UID]*worker{},
		synced:      make(chan struct{}),
		metrics:     newMetrics(deps.Registerer, deps.Allocations.ResizesInProgress),
		relistNow:   make(chan struct{}, 1),
		resizeRetry: make(chan struct{}, 1),
	}
}

// Synced is closed once every pod source delivered its first snapshot, the loop handled
// it (admitted its pods) and the first housekeeping ran: the node then runs what it should.
func (l *Loop) Synced() <-chan struct{} { return l.synced }

func (l *Loop) isSynced() bool {
	select {
	case <-l.synced:
		return true
	default:
		return false
	}
}

// Healthy fails when the loop has not iterated for a long time (it is stuck).
func (l *Loop) Healthy() error {
	l.iterMu.Lock()
	last := l.lastIter
	l.iterMu.Unlock()
	if last.IsZero() {
		return nil
	}
	threshold := 2 * l.cfg.SyncFrequency
	if threshold < 5*time.Minute {
		threshold = 5 * time.Minute
	}
	if since := l.deps.Clock.Since(last); since > threshold {
		return fmt.Errorf("sync loop last iterated %s ago; threshold is %s", since.Round(time.Second), threshold)
	}
	return nil
}

// Run runs the loop until ctx is done.
func (l *Loop) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	l.started = l.deps.Clock.Now()
	// Not periodic.Every: one select serves two tickers, a timer and the update, PLEG and probe channels.
	resync := l.deps.Clock.NewTicker(l.cfg.ResyncTick)
	defer resync.Stop()
	housekeeping := l.deps.Clock.NewTicker(l.cfg.HousekeepingPeriod)
	defer housekeeping.Stop()
	updates := l.deps.Sources.Updates()
	events := l.deps.PLEG.Watch()
	var liveness, readiness, startup <-chan prober.Update
	if l.deps.Probes != nil {
		liveness, readiness, startup = l.deps.Probes.LivenessUpdates(), l.deps.Probes.ReadinessUpdates(), l.deps.Probes.StartupUpdates()
	}
	// Pending resizes are retried after a while in case room freed up
	// unnoticed (upstream's periodic retry: soon at first, then every few minutes).
	resizeTimer := l.deps.Clock.NewTimer(allocation.InitialRetryDelay)
	defer resizeTimer.Stop()
	logger.Info("Starting sync loop")
	// The runtime's pods are known before the first pod is admitted, so admission can
	// tell a pod an earlier nodelet started from a new one.
	l.deps.PLEG.Relist(ctx)
	l.workersWG.Add(1)
	go func() {
		defer l.workersWG.Done()
		l.fastRelists(ctx)
	}()
	for {
		l.iterMu.Lock()
		l.lastIter = l.deps.Clock.Now()
		l.iterMu.Unlock()
		select {
		case <-ctx.Done():
			logger.Info("Sync loop stopped; pods keep running")
			l.workersWG.Wait()
			return
		case u, ok := <-updates:
			if !ok {
				updates = nil
				continue
			}
			l.handleUpdate(ctx, u)
		case e, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if e.Type == pleg.ContainerRemoved {
				continue
			}
			l.wakePod(e.PodUID)
		case u := <-liveness:
			if u.Result == prober.Failure {
				l.wakePod(u.PodUID)
			}
		case u := <-readiness:
			l.wakePod(u.PodUID)
		case u := <-startup:
			l.wakePod(u.PodUID)
		case <-resync.C():
			l.resync()
		case <-l.resizeRetry:
			l.retryResizes(ctx)
		case <-resizeTimer.C():
			l.retryResizes(ctx)
			next := allocation.RetryDelay
			if !l.deps.Sources.SourcesReady() {
				next = allocation.InitialRetryDelay
			}
			resizeTimer.Reset(next)
		case <-housekeeping.C():
			sourcesReady := l.deps.Sources.SourcesReady()
			if !sourcesReady {
				continue
			}
			// Synced means the pods the sources had when they became ready are admitted:
			// until the first housekeeping, updates still buffered come first.
			if !l.isSynced() && len(updates) > 0 {
				continue
			}
			start := l.deps.Clock.Now()
			l.housekeeping(ctx, sourcesReady)
			if d := l.deps.Clock.Since(start); d > time.Second {
				logger.Info("Housekeeping took longer than expected", "duration", d)
			}
			l.syncOnce.Do(func() {
				logger.Info("All pod sources synced and first housekeeping done")
				close(l.synced)
			})
		}
	}
}

// wakePod asks the pod's worker for a pass now.
func (l *Loop) wakePod(uid types.UID) {
	l.mu.Lock()
	w := l.workers[uid]
	l.mu.Unlock()
	if w != nil {
		l.evaluate(w, event{woken: true})
	}
}

// resync passes every worker whose requeue time came through step.
func (l *Loop) resync() {
	now := l.deps.Clock.Now()
	l.mu.Lock()
	var due []*worker
	for _, w := range l.workers {
		if !w.wakeAt.IsZero() && !now.Before(w.wakeAt) {
			due = append(due, w)
		}
	}
	l.mu.Unlock()
	for _, w := range due {
		l.evaluate(w, event{})
	}
}

func (l *Loop) handleUpdate(ctx context.Context, u podconfig.Update) {
	pods := append([]*v1.Pod(nil), u.Pods...)
	// Admit in creation order, so pods that ran before a restart are admitted first.
	sort.SliceStable(pods, func(i, j int) bool {
		return pods[i].CreationTimestamp.Before(&pods[j].CreationTimestamp)
	})
	var added []*v1.Pod
	for _, pod := range pods {
		l.mu.Lock()
		w := l.workers[pod.UID]
		old := l.pods[pod.UID]
		if u.Op == podconfig.OpRemove {
			delete(l.pods, pod.UID)
		} else {
			l.pods[pod.UID] = pod
		}
		restart := false
		if w != nil {
			next := update{pod: pod, removed: u.Op == podconfig.OpRemove}
			// Back in its source after it left: a restart, once the old life ended.
			next.restart = !next.removed && w.u.removed
			restart = next.restart && !w.u.restart
			w.u = next.merged(w.u)
		}
		l.mu.Unlock()
		if restart {
			// The old life's status (terminal soon, if not already) must neither end
			// the new life nor reach its mirror pod.
			klog.FromContext(ctx).V(2).Info("Pod is back in its source while its old life ends; it restarts after that", "pod", klog.KObj(pod), "podUID", pod.UID)
			l.deps.Status.ForgetPodStatus(pod.UID)
		}
		if w != nil {
			if u.Op != podconfig.OpRemove {
				// Decided before the pass, so that it syncs the new allocation.
				l.noteResize(ctx, old, pod)
			}
			l.evaluate(w, event{woken: true})
			continue
		}
		if u.Op == podconfig.OpRemove {
			continue
		}
		if l.addPod(ctx, pod) {
			added = append(added, pod)
		}
	}
	l.afterUpdate(ctx, u.Op, pods, added)
}

// afterUpdate does the resize work of a whole update, as upstream's
// HandlePodAdditions/Removes: pods admitted with a resize pending (allocation
// and spec differ after a restart) queue it once every pod of the update is
// admitted; a removal frees room for pending resizes.
func (l *Loop) afterUpdate(ctx context.Context, op podconfig.Op, pods, added []*v1.Pod) {
	if op == podconfig.OpRemove {
		for _, p := range pods {
			l.deps.Allocations.RemovePod(p.UID)
		}
		l.retryResizes(ctx)
		return
	}
	pending := false
	for _, p := range added {
		l.deps.Allocations.BackfillConditions(p)
		if _, differs := l.deps.Allocations.UpdatePodFromAllocation(p); differs {
			l.deps.Allocations.PushPendingResize(p.UID)
			pending = true
		}
	}
	if pending {
		l.retryResizes(ctx)
	}
}

// addPod admits a new pod, checkpoints its allocation and gives it a worker.
// It reports whether the pod was admitted.
func (l *Loop) addPod(ctx context.Context, pod *v1.Pod) bool {
	if prev, ok := l.deps.Status.GetPodStatus(pod.UID); ok && oldLifeStatus(pod, prev) {
		klog.FromContext(ctx).Info("Pod starts again under a UID this node ran before; forgetting its old status",
			"pod", klog.KObj(pod), "podUID", pod.UID, "oldPhase", prev.Phase)
		l.deps.Status.ForgetPodStatus(pod.UID)
	}
	rejected, admitted := false, false
	if !podutil.IsTerminal(pod.Status.Phase) && pod.DeletionTimestamp == nil {
		// A pod admitted before (nodelet restarted) is admitted at its allocation.
		allocated, _ := l.deps.Allocations.UpdatePodFromAllocation(pod)
		if rej := l.admit(ctx, allocated); rej != nil {
			klog.FromContext(ctx).Info("Pod rejected at admission", "pod", klog.KObj(pod), "reason", rej.Reason, "message", rej.Message)
			l.metrics.admissionRejected(rej.Reason)
			l.deps.Recorder.Eventf(pod, v1.EventTypeWarning, rej.Reason, "%s", rej.Message)
			st := *pod.Status.DeepCopy()
			st.Phase = v1.PodFailed
			st.Reason = rej.Reason
			st.Message = "Pod was rejected: " + rej.Message
			l.deps.Status.SetPodStatus(pod, st)
			rejected = true
		} else {
			admitted = true
			if err := l.deps.Allocations.SetAllocated(allocated); err != nil {
				klog.FromContext(ctx).Error(err, "Failed to checkpoint the pod's allocated resources", "pod", klog.KObj(pod))
			}
		}
	}
	l.evaluate(newWorker(ctx, update{pod: pod}, l.started), event{create: true, woken: true, rejected: rejected})
	return admitted
}

// admit decides whether pod may run here (DecideAdmission between the extra
// admitters), first stopping the pods a critical pod preempts. It runs on the
// loop's goroutine and blocks while they stop, as upstream's admission does.
func (l *Loop) admit(ctx context.Context, pod *v1.Pod) *Rejection {
	// A pod the runtime already runs was admitted by an earlier nodelet: after a
	// restart, node pressure or a shutdown in progress must not kill it through
	// admission (upstream re-admits and may, kubernetes#83612); under pressure the
	// eviction manager reclaims node resources first and then ranks pods.
	rt, _ := l.deps.Cache.Get(pod.UID)
	fresh := rt == nil || !anyRunning(rt)
	if fresh {
		for _, a := range l.deps.Admitters {
			if rej := a(pod); rej != nil {
				return rej
			}
		}
	}
	admitted := l.admittedPods(pod.UID)
	if rej := l.allocateResources(ctx, pod, admitted, fresh); rej != nil {
		return rej
	}
	d := DecideAdmission(pod, admitted, l.admitNode(ctx, false))
	if d.RecheckNode {
		d = DecideAdmission(pod, admitted, l.admitNode(ctx, true))
	}
	if d.Rejection != nil {
		return d.Rejection
	}
	l.preempt(ctx, pod, d)
	if fresh {
		for _, a := range l.deps.AdmittersAfter {
			if rej := a(pod); rej != nil {
				return rej
			}
		}
	}
	return nil
}

// allocateResources allocates the pod's CPUs and devices, as upstream's
// resource allocation admit handler (the topology manager's) does before the
// scheduler's filters; a pod the runtime already runs is never rejected for
// it (its CPUs and devices come from the checkpoints), the failure is only
// logged.
func (l *Loop) allocateResources(ctx context.Context, pod *v1.Pod, admitted []*v1.Pod, fresh bool) *Rejection {
	if l.deps.Resources == nil {
		return nil
	}
	err := l.deps.Resources.Allocate(ctx, pod, admitted, l.isSynced())
	if err == nil {
		return nil
	}
	if !fresh {
		klog.FromContext(ctx).Error(err, "Allocating resources to a pod already running; keeping it", "pod", klog.KObj(pod))
		return nil
	}
	return AllocationRejection(err)
}

// admittedPods are the pods admission counts as using the node: those of its
// sources running or still terminating (upstream's active pods), but exclude.
func (l *Loop) admittedPods(exclude types.UID) []*v1.Pod {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*v1.Pod
	for uid, w := range l.workers {
		p := l.pods[uid]
		if p == nil || uid == exclude {
			continue
		}
		// A pod in a terminal phase (in the API, or as this node last set it) uses nothing
		// unless it is still being stopped, as upstream's filterOutInactivePods. After a
		// restart its worker may still be syncing or terminating it: then it counts only
		// while the runtime runs something of it (upstream's known-terminated pods).
		if l.admittedPodTerminal(p) && (w.rec.State == stateSync || !l.runtimeRuns(uid)) {
			continue
		}
		if w.rec.State == stateSync || w.rec.State == stateTerminating {
			// Admitted pods count at their allocated resources, not their spec's.
			if l.deps.Allocations.HasAllocation(uid) {
				p, _ = l.deps.Allocations.UpdatePodFromAllocation(p)
			}
			out = append(out, p)
		}
	}
	// Map order must not decide ties in admission (which pods a critical pod preempts).
	sort.Slice(out, func(i, j int) bool { return out[i].UID < out[j].UID })
	return out
}

// admittedPodTerminal: the pod's phase is terminal in the API or in the status this node
// set (upstream's isAdmittedPodTerminal).
func (l *Loop) admittedPodTerminal(p *v1.Pod) bool {
	if podutil.IsTerminal(p.Status.Phase) {
		return true
	}
	st, ok := l.deps.Status.GetPodStatus(p.UID)
	return ok && podutil.IsTerminal(st.Phase)
}

// runtimeRuns: the runtime cache shows a running container or a ready sandbox of the pod.
func (l *Loop) runtimeRuns(uid types.UID) bool {
	st, _ := l.deps.Cache.Get(uid)
	return st != nil && anyRunning(st)
}

// admitNode is the node as admission judges it: its own facts, with the Node
// object's name, labels, taints, features and the extended resources others
// advertise on it. Deps.NodeObject gives the Node: the last one seen, or with
// fresh one read from the API server now (node.Controller.AdmissionNode); when
// a fresh read fails, the last one seen stands.
func (l *Loop) admitNode(ctx context.Context, fresh bool) AdmitNode {
	n, err := l.deps.NodeObject(ctx, fresh)
	if err != nil && fresh {
		klog.FromContext(ctx).Error(err, "Reading the Node again for admission; judging by the last one seen")
		n, err = l.deps.NodeObject(ctx, false)
	}
	if err != nil || n == nil {
		n = &v1.Node{}
	}
	alloc := l.deps.Node().Allocatable
	if alloc == nil {
		alloc = v1.ResourceList{}
	}
	for name, q := range n.Status.Allocatable {
		if _, own := alloc[name]; !own {
			alloc[name] = q
		}
	}
	sgp := n.Status.Features != nil && n.Status.Features.SupplementalGroupsPolicy != nil && *n.Status.Features.SupplementalGroupsPolicy
	return AdmitNode{
		Name: n.Name, Allocatable: alloc, Labels: n.Labels, Taints: n.Spec.Taints, SupplementalGroupsPolicy: sgp,
		OS: goruntime.GOOS, Sysctls: l.deps.Sysctls, AppArmorEnabled: l.deps.AppArmorEnabled,
	}
}

// preempt stops the pods d.Preempt names, one after the other, with their own
// grace period, through KillPod (as an eviction): each ends Failed with reason
// Preempting and a DisruptionTarget condition. A pod that does not stop in time
// is logged and left to its worker, and pod is admitted all the same, as upstream.
func (l *Loop) preempt(ctx context.Context, pod *v1.Pod, d Admission) {
	logger := klog.FromContext(ctx)
	for _, v := range d.Preempt {
		l.deps.Recorder.Eventf(v, v1.EventTypeWarning, ReasonPreempting, "%s", messagePreempting)
		logger.Info("Preempting pod to free up resources", "pod", klog.KObj(v), "podUID", v.UID,
			"insufficientResources", shortfallsString(d.Shortfalls), "requestingPod", klog.KObj(pod))
		now := metav1.NewTime(l.deps.Clock.Now())
		err := l.KillPod(ctx, v, time.Duration(effectiveGrace(v, nil))*time.Second, func(s *v1.PodStatus) {
			s.Phase, s.Reason, s.Message = v1.PodFailed, ReasonPreempting, messagePreempting
			podutil.SetCondition(s, v1.PodCondition{Type: v1.DisruptionTarget, Status: v1.ConditionTrue,
				Reason: v1.PodReasonTerminationByKubelet, Message: messagePreemptedCondition, LastTransitionTime: now})
		})
		if err != nil {
			logger.Error(err, "Failed to preempt pod", "pod", klog.KObj(v), "podUID", v.UID)
			continue
		}
		l.metrics.preemptions.WithLabelValues(string(d.Shortfalls[0].Resource)).Inc()
		logger.Info("Pod preempted", "pod", klog.KObj(v), "podUID", v.UID)
	}
}

// AllSourcesReady reports whether every pod source delivered its first snapshot.
func (l *Loop) AllSourcesReady() bool { return l.deps.Sources.SourcesReady() }

// PodDeleted reports whether a pod is gone for good from this node: no source
// wants it and no worker is still stopping it. Container GC removes such pods'
// leftovers.
func (l *Loop) PodDeleted(uid string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, wanted := l.pods[types.UID(uid)]; wanted {
		return false
	}
	w := l.workers[types.UID(uid)]
	return w == nil || (w.rec.State == stateFinished && w.rec.Reclaimed)
}

// Pods returns every pod the node knows from its sources, running, terminating or
// finished (what the kubelet API's /pods lists, as upstream's pod manager).
func (l *Loop) Pods() []*v1.Pod {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]*v1.Pod, 0, len(l.pods))
	for _, p := range l.pods {
		out = append(out, p)
	}
	return out
}

// ActivePods returns the pods this node is running (admitted and not terminating).
func (l *Loop) ActivePods() []*v1.Pod {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*v1.Pod
	for uid, w := range l.workers {
		if p := l.pods[uid]; p != nil && w.rec.State == stateSync {
			out = append(out, p)
		}
	}
	return out
}

// KillPod stops a pod for a node-level reason (shutdown, eviction) with the given
// grace period, lets status adjust its final status, and returns once the pod's
// containers are stopped, ctx is done, or max(1.5 × grace, 10s) passed (as
// upstream bounds it: an eviction must not wait for ever on a stuck pod). The pod
// stays known (it is not deleted).
func (l *Loop) KillPod(ctx context.Context, pod *v1.Pod, grace time.Duration, status func(*v1.PodStatus)) error {
	secs := int64(grace.Round(time.Second) / time.Second)
	l.mu.Lock()
	w := l.workers[pod.UID]
	if w != nil {
		current := l.pods[pod.UID]
		if current == nil {
			current = w.u.pod
		}
		w.u = update{pod: current, grace: &secs, statusFn: status}.merged(w.u)
	}
	l.mu.Unlock()
	if w == nil {
		return nil
	}
	if err := w.base.Err(); err != nil {
		return fmt.Errorf("killing pod %s/%s: the sync loop has stopped: %w", pod.Namespace, pod.Name, err)
	}
	// Cancels a sync in flight at once, whatever the loop goroutine is doing.
	l.evaluate(w, event{woken: true})
	bound := killTimeout(secs)
	timer := l.deps.Clock.NewTimer(bound)
	defer timer.Stop()
	select {
	case <-w.stopped:
		return nil
	case <-timer.C():
		err := fmt.Errorf("timeout waiting to kill pod %s/%s: not stopped within %s of a kill with grace period %ds", pod.Namespace, pod.Name, bound, secs)
		klog.FromContext(ctx).Error(err, "Pod did not stop in time", "pod", klog.KObj(pod), "podUID", pod.UID)
		l.deps.Recorder.Eventf(pod, v1.EventTypeWarning, "ExceededGracePeriod", "Container runtime did not kill the pod within specified grace period.")
		return err
	case <-ctx.Done():
		return fmt.Errorf("waiting for pod %s/%s to stop: %w", pod.Namespace, pod.Name, ctx.Err())
	}
}

// CanDeletePod tells the status manager when a deleted pod's resources are
// reclaimed, so its API object may go.
func (l *Loop) CanDeletePod(pod *v1.Pod) bool {
	l.mu.Lock()
	w := l.workers[pod.UID]
	reclaimed := w != nil && w.rec.Reclaimed
	l.mu.Unlock()
	if w == nil {
		for _, p := range l.deps.PLEG.Pods() {
			if p.UID == pod.UID {
				return false
			}
		}
		return true
	}
	return reclaimed
}

// housekeeping passes every worker through step (finished workers of pods nobody
// wants go), kills pods the runtime runs that nobody wants (deleted while
// nodelet was down), forgets orphaned statuses, and removes orphaned pod dirs
// and cgroups. sourcesReady is what the sources said at this tick.
func (l *Loop) housekeeping(ctx context.Context, sourcesReady bool) {
	l.mu.Lock()
	workers := make([]*worker, 0, len(l.workers))
	for _, w := range l.workers {
		workers = append(workers, w)
	}
	l.mu.Unlock()
	for _, w := range workers {
		l.evaluate(w, event{})
	}
	l.restartWantedPods(ctx)
	for _, p := range l.deps.PLEG.Pods() {
		l.mu.Lock()
		_, known := l.workers[p.UID]
		l.mu.Unlock()
		if known || !hasAnything(p) {
			continue
		}
		// Only a UID without a worker is an orphan; step decides on what the cache says now.
		grace := orphanGrace(p)
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID}}
		if _, ok := l.evaluate(newWorker(ctx, update{pod: pod, removed: true, grace: &grace}, l.started), event{create: true}); ok {
			klog.FromContext(ctx).Info("Killing pod that is no longer wanted on this node", "pod", klog.KRef(p.Namespace, p.Name), "podUID", p.UID)
		}
	}
	l.mu.Lock()
	keep := map[types.UID]bool{}
	for uid := range l.pods {
		keep[uid] = true
	}
	for uid := range l.workers {
		keep[uid] = true
	}
	l.mu.Unlock()
	l.deps.Status.RemoveOrphanedStatuses(keep)
	l.deps.Allocations.RemoveOrphanedPods(keep)
	l.cleanupOrphanedPodDirs(ctx, keep, sourcesReady)
	l.cleanupPodCgroups(ctx)
	l.deps.Runtime.GCBackoff()
}

// restartWantedPods gives a worker to every pod a source holds that has none:
// its old worker was dropped after its UID came back to the source while the
// old life ended (a static pod's manifest put back). Upstream's housekeeping
// likewise restarts desired pods the pod workers do not know.
func (l *Loop) restartWantedPods(ctx context.Context) {
	l.mu.Lock()
	var pods []*v1.Pod
	for uid, p := range l.pods {
		if l.workers[uid] == nil {
			pods = append(pods, p)
		}
	}
	l.mu.Unlock()
	sort.SliceStable(pods, func(i, j int) bool { return pods[i].CreationTimestamp.Before(&pods[j].CreationTimestamp) })
	for _, p := range pods {
		klog.FromContext(ctx).Info("Restarting pod: back in its source after its old life ended", "pod", klog.KObj(p), "podUID", p.UID)
		l.addPod(ctx, p)
	}
}

// oldLifeStatus: the status manager's status for pod is from an earlier life of
// its UID on this node (terminal there), while the pod object itself is neither
// terminal nor being deleted. Only a pod back in its source meets this: a wanted
// pod keeps its worker, and so never comes through addPod twice.
func oldLifeStatus(pod *v1.Pod, prev v1.PodStatus) bool {
	return podutil.IsTerminal(prev.Phase) && !podutil.IsTerminal(pod.Status.Phase) && pod.DeletionTimestamp == nil
}

func hasAnything(p *pleg.PodStatus) bool {
	return len(p.Sandboxes) > 0 || len(p.Containers) > 0
}

// orphanGrace is the grace period recorded on the pod's containers, as the pod
// object itself is gone.
func orphanGrace(p *pleg.PodStatus) int64 {
	for _, c := range p.Containers {
		if v, ok := podruntime.RecordedGrace(c); ok {
			return v
		}
	}
	return 30
}

// cleanupPodCgroups removes the cgroup of every pod with nothing running any more
// (stopped, finished or gone). A cgroup still busy is left for the next round.
func (l *Loop) cleanupPodCgroups(ctx context.Context) {
	// Before a successful listing every pod looks stopped.
	if l.deps.PodCgroups == nil || !l.deps.PLEG.Listed() {
		return
	}
	list, err := l.deps.PodCgroups.ListPodCgroups()
	if err != nil {
		klog.FromContext(ctx).V(4).Info("Listing pod cgroups", "err", err)
		return
	}
	running := map[types.UID]bool{}
	for _, p := range l.deps.PLEG.Pods() {
		if anyRunning(p) {
			running[p.UID] = true
		}
	}
	for uid, name := range list {
		l.mu.Lock()
		w := l.workers[uid]
		active := w != nil && w.rec.State == stateSync
		l.mu.Unlock()
		if running[uid] || active {
			continue
		}
		if err := l.deps.PodCgroups.RemoveCgroup(ctx, name); err != nil {
			klog.FromContext(ctx).V(4).Info("Pod cgroup not removed yet", "podUID", uid, "err", err)
		}
	}
}

// cleanupOrphanedPodDirs tears down the volumes and removes the directory of
// every pod nobody wants and the runtime does not run (mayCleanOrphan decides).
func (l *Loop) cleanupOrphanedPodDirs(ctx context.Context, keep map[types.UID]bool, sourcesReady bool) {
	if l.cfg.RootDir == "" {
		return
	}
	// Listed before Pods: once true, Pods is a successful listing.
	listed := l.deps.PLEG.Listed()
	if ok, why := mayCleanOrphan(orphanFacts{sourcesReady: sourcesReady, listed: listed}); !ok {
		klog.FromContext(ctx).V(2).Info("Skipping cleanup of orphaned pod directories", "reason", why)
		return
	}
	entries, err := os.ReadDir(filepath.Join(l.cfg.RootDir, "pods"))
	if err != nil {
		return
	}
	inRuntime := map[types.UID]bool{}
	for _, p := range l.deps.PLEG.Pods() {
		inRuntime[p.UID] = true
	}
	for _, e := range entries {
		uid := types.UID(e.Name())
		if !e.IsDir() {
			continue
		}
		f := orphanFacts{sourcesReady: sourcesReady, listed: listed, wanted: keep[uid], inListing: inRuntime[uid]}
		if ok, _ := mayCleanOrphan(f); !ok {
			continue
		}
		if err := l.deps.Volumes.TearDownPod(ctx, uid); err != nil {
			klog.FromContext(ctx).Error(err, "Tearing down volumes of orphaned pod directory", "podUID", uid)
			continue
		}
		removeOrphanedPodDir(ctx, filepath.Join(l.cfg.RootDir, "pods", string(uid)), uid)
	}
}

// requestRelist asks for a relist soon; requests coalesce. While runtime
// events are followed it asks nothing: they bring the change.
func (l *Loop) requestRelist() {
	if l.deps.EventsInUse != nil && l.deps.EventsInUse() {
		return
	}
	select {
	case l.relistNow <- struct{}{}:
	default:
	}
}

// fastRelists runs the relists workers ask for, at most one every 50ms, so a burst
// of pod starts costs a few relists rather than one per pod.
func (l *Loop) fastRelists(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.relistNow:
		}
		// Let the runtime's own state settle (a started container shows as running).
		select {
		case <-ctx.Done():
			return
		case <-l.deps.Clock.After(50 * time.Millisecond):
		}
		l.deps.PLEG.Relist(ctx)
	}
}

// jitter spreads d by ±factor/2 so workers do not resync in lockstep.
func jitter(d time.Duration, factor float64) time.Duration {
	return d + time.Duration((rand.Float64()-0.5)*factor*float64(d))
}

func anyRunning(st *pleg.PodStatus) bool {
	for _, c := range st.Containers {
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING || c.State == runtimeapi.ContainerState_CONTAINER_CREATED {
			return true
		}
	}
	for _, s := range st.Sandboxes {
		if s.State == runtimeapi.PodSandboxState_SANDBOX_READY {
			return true
		}
	}
	return false
}
