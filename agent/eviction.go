package agent

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/eviction"
	"github.com/nodelet/nodelet/node"
	"github.com/nodelet/nodelet/stats"
	"github.com/nodelet/nodelet/syncloop"
)

// snapshotter is the stats cache as the eviction wiring uses it.
type snapshotter interface {
	NewerThan(ctx context.Context, t time.Time) (*stats.Snapshot, error)
}

// evictionStats feeds the eviction manager from the stats provider.
type evictionStats struct {
	stats       snapshotter
	allocatable func() v1.ResourceList
	pods        func() []*v1.Pod
}

func (e evictionStats) Stats(ctx context.Context, notBefore time.Time) (eviction.Stats, error) {
	snap, err := e.stats.NewerThan(ctx, notBefore)
	if err != nil {
		return eviction.Stats{}, err
	}
	var alloc uint64
	if q, ok := e.allocatable()[v1.ResourceMemory]; ok && q.Value() > 0 {
		alloc = uint64(q.Value())
	}
	return eviction.StatsFromSummary(eviction.SummaryInput{
		Summary: snap.Summary, DedicatedImageFs: snap.DedicatedImageFs, SplitContainerFs: snap.SplitContainerFs,
		AllocatableMemory: alloc, Pods: e.pods(),
	}), nil
}

// nodeReclaimer is image GC and container GC, run to the end under disk pressure.
type nodeReclaimer struct{ gcs *garbageCollectors }

func (r nodeReclaimer) DeleteUnusedImages(ctx context.Context) error {
	return r.gcs.images.DeleteUnusedImages(ctx)
}

func (r nodeReclaimer) DeleteAllUnusedContainers(ctx context.Context) error {
	return r.gcs.containers.DeleteAllUnusedContainers(ctx)
}

// podEvicter stops an evicted pod through the sync loop and gives it the
// eviction status (phase Failed, reason Evicted, DisruptionTarget condition).
type podEvicter struct{ loop *syncloop.Loop }

func (p podEvicter) EvictPod(ctx context.Context, pod *v1.Pod, grace int64, st v1.PodStatus) error {
	return p.loop.KillPod(ctx, pod, time.Duration(grace)*time.Second, func(s *v1.PodStatus) {
		s.Phase, s.Reason, s.Message = st.Phase, st.Reason, st.Message
		for _, c := range st.Conditions {
			s.Conditions = slices.DeleteFunc(s.Conditions, func(o v1.PodCondition) bool { return o.Type == c.Type })
			s.Conditions = append(s.Conditions, c)
		}
	})
}

// newEvictionManager builds the eviction manager; nil when it has nothing to do (no
// thresholds and localStorageCapacityIsolation off). Its conditions go to changed.
func newEvictionManager(kc *kubeletconfigv1beta1.KubeletConfiguration, isolation bool, nodeName string, st snapshotter, nodeCtl *node.Controller,
	loop *syncloop.Loop, gcs *garbageCollectors, recorder record.EventRecorder, clk clock.WithTicker, reg prometheus.Registerer,
	changed func([]v1.NodeConditionType)) (*eviction.Manager, error) {
	cfg, err := evictionConfig(kc, isolation, nodeName)
	if err != nil || cfg == nil {
		return nil, err
	}
	return eviction.NewManager(*cfg, clk, evictionStats{stats: st, allocatable: nodeCtl.Allocatable, pods: loop.ActivePods},
		nodeReclaimer{gcs: gcs}, podEvicter{loop: loop}, loop.ActivePods, recorder,
		eviction.WithRegisterer(reg),
		eviction.WithConditionsChanged(changed))
}

// evictionStartWait bounds how long the eviction manager waits for the pod sources to sync:
// a node whose API server cannot be reached must still be protected from pressure.
const evictionStartWait = time.Minute

// runAfterSynced runs run once synced is closed (the pods the sources had at start are
// admitted) or timeout fires, unless ctx ends first. The eviction manager starts so: on a
// restart under pressure, observing it before the pods from before the restart are
// re-admitted would reject (fail) every one of them at admission, instead of reclaiming
// first and evicting one pod per cycle by rank.
func runAfterSynced(ctx context.Context, synced <-chan struct{}, timeout <-chan time.Time, run func(context.Context)) {
	select {
	case <-synced:
	case <-timeout:
	case <-ctx.Done():
		return
	}
	run(ctx)
}

// evictionConfig is the eviction manager's configuration from kc and
// localStorageCapacityIsolation (resolved); nil when there is nothing to enforce.
func evictionConfig(kc *kubeletconfigv1beta1.KubeletConfiguration, isolation bool, nodeName string) (*eviction.Config, error) {
	ths, err := eviction.ParseThresholds(kc.EvictionHard, kc.EvictionSoft, kc.EvictionSoftGracePeriod, kc.EvictionMinimumReclaim)
	if err != nil {
		return nil, fmt.Errorf("reading the eviction thresholds: %w", err)
	}
	if slices.Contains(kc.EnforceNodeAllocatable, "pods") {
		ths = eviction.WithAllocatableThresholds(ths)
	}
	if len(ths) == 0 && !isolation {
		return nil, nil
	}
	return &eviction.Config{
		Thresholds:                    ths,
		PressureTransitionPeriod:      kc.EvictionPressureTransitionPeriod.Duration,
		MaxPodGracePeriodSeconds:      int64(kc.EvictionMaxPodGracePeriod),
		NodeRef:                       &v1.ObjectReference{Kind: "Node", Name: nodeName, UID: types.UID(nodeName)},
		LocalStorageCapacityIsolation: isolation,
	}, nil
}

// pressureState is the node pressure conditions as the eviction manager last
// reported them. Node status and admission read it; it exists before them and
// before the eviction manager, which needs the node controller and the sync loop.
type pressureState struct {
	mu         sync.Mutex
	conditions []v1.NodeConditionType
}

func (p *pressureState) set(c []v1.NodeConditionType) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conditions = c
}

func (p *pressureState) get() []v1.NodeConditionType {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.conditions
}

func (p *pressureState) pressure() node.Pressure {
	c := p.get()
	return node.Pressure{
		Memory: slices.Contains(c, v1.NodeMemoryPressure),
		Disk:   slices.Contains(c, v1.NodeDiskPressure),
		PID:    slices.Contains(c, v1.NodePIDPressure),
	}
}

func (p *pressureState) admit(pod *v1.Pod) *syncloop.Rejection {
	if r := eviction.Admit(pod, p.get()); !r.Admit {
		return &syncloop.Rejection{Reason: r.Reason, Message: r.Message}
	}
	return nil
}
