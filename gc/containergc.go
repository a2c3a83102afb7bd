package gc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/cri"
	"github.com/nodelet/nodelet/internal/mountutil"
	"github.com/nodelet/nodelet/internal/periodic"
	"github.com/nodelet/nodelet/logrotate"
)

// DefaultContainerGCPeriod is upstream's ContainerGCPeriod.
const DefaultContainerGCPeriod = time.Minute

// RuntimeService is the part of the CRI runtime service container GC uses.
type RuntimeService interface {
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
	ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error)
	ContainerStatus(ctx context.Context, containerID string, verbose bool) (*runtimeapi.ContainerStatusResponse, error)
	RemoveContainer(ctx context.Context, containerID string) error
	StopPodSandbox(ctx context.Context, podSandboxID string) error
	RemovePodSandbox(ctx context.Context, podSandboxID string) error
}

// PodState answers whether a pod's remains may be removed.
type PodState interface {
	// AllSourcesReady reports whether every pod source has synced, so a pod
	// missing from them is really deleted.
	AllSourcesReady() bool
	// PodDeleted reports whether the pod with this UID is gone from the node's config.
	PodDeleted(uid string) bool
}

// ContainerGC removes dead containers, dead sandboxes without containers and
// the log directories of deleted pods. Only objects carrying the pod UID
// label nodelet (and the kubelet) set are touched.
type ContainerGC struct {
	policy     ContainerPolicy
	runtime    RuntimeService
	pods       PodState
	podLogsDir string // "" : leave log directories alone
	clock      clock.WithTicker
}

// NewContainerGC returns a container GC runner.
func NewContainerGC(policy ContainerPolicy, rt RuntimeService, pods PodState, podLogsDir string, clk clock.WithTicker) *ContainerGC {
	return &ContainerGC{policy: policy, runtime: rt, pods: pods, podLogsDir: podLogsDir, clock: clk}
}

// GarbageCollect runs one round with the configured policy.
func (g *ContainerGC) GarbageCollect(ctx context.Context) error {
	return g.collect(ctx, g.policy)
}

// DeleteAllUnusedContainers removes every dead container and sandbox now,
// regardless of age and per-container history (eviction's node-level
// reclaim). This is harsher than upstream, which keeps the history of
// running pods: under disk pressure the space matters more than `logs --previous`.
func (g *ContainerGC) DeleteAllUnusedContainers(ctx context.Context) error {
	return g.collect(ctx, ContainerPolicy{MinAge: 0, MaxPerPodContainer: 0, MaxContainers: 0})
}

func (g *ContainerGC) collect(ctx context.Context, policy ContainerPolicy) error {
	now := g.clock.Now()
	ctrs, err := g.runtime.ListContainers(ctx, nil)
	if err != nil {
		return fmt.Errorf("listing containers for container GC: %w", err)
	}
	sbs, err := g.runtime.ListPodSandbox(ctx, nil)
	if err != nil {
		return fmt.Errorf("listing sandboxes for container GC: %w", err)
	}
	var deleted map[string]bool
	ready := g.pods.AllSourcesReady()
	isDeleted := func(uid string) bool {
		if !ready {
			return false
		}
		if deleted == nil {
			deleted = map[string]bool{}
		}
		if d, ok := deleted[uid]; ok {
			return d
		}
		deleted[uid] = g.pods.PodDeleted(uid)
		return deleted[uid]
	}

	var records []ContainerRecord
	for _, c := range ctrs {
		uid := c.GetLabels()[cri.LabelPodUID]
		if uid == "" {
			continue // not ours
		}
		records = append(records, ContainerRecord{
			ID: c.GetId(), SandboxID: c.GetPodSandboxId(), PodUID: uid,
			Name: c.GetLabels()[cri.LabelContainerName], CreatedAt: time.Unix(0, c.GetCreatedAt()),
			Running: c.GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING,
		})
		isDeleted(uid)
	}
	var errs []error
	removed := map[string]bool{}
	for _, c := range SelectContainersToRemove(records, policy, deleted, now) {
		klog.V(2).InfoS("Removing dead container", "containerID", c.ID, "podUID", c.PodUID, "container", c.Name)
		if err := g.removeContainerLogs(ctx, c.ID); err != nil {
			// As upstream, the container stays until its logs are gone: once it
			// is removed nothing says where they were.
			errs = append(errs, err)
			continue
		}
		if err := g.runtime.RemoveContainer(ctx, c.ID); err != nil {
			errs = append(errs, fmt.Errorf("removing container %s: %w", c.ID, err))
			continue
		}
		removed[c.ID] = true
	}
	var remaining []ContainerRecord
	for _, c := range ctrs {
		if !removed[c.GetId()] {
			// Every container, ours or not, keeps its sandbox alive.
			remaining = append(remaining, ContainerRecord{ID: c.GetId(), SandboxID: c.GetPodSandboxId()})
		}
	}

	var sandboxes []SandboxRecord
	for _, s := range sbs {
		uid := s.GetLabels()[cri.LabelPodUID]
		if uid == "" {
			continue
		}
		sandboxes = append(sandboxes, SandboxRecord{
			ID: s.GetId(), PodUID: uid, CreatedAt: time.Unix(0, s.GetCreatedAt()),
			Ready: s.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY,
		})
		isDeleted(uid)
	}
	for _, s := range SelectSandboxesToRemove(sandboxes, remaining, deleted) {
		klog.V(2).InfoS("Removing dead sandbox", "sandboxID", s.ID, "podUID", s.PodUID)
		// Stopped first, as upstream does: a sandbox whose RunPodSandbox a runtime
		// crash cut off is not ready but may keep its network set up, and
		// containerd refuses to remove it until StopPodSandbox tears that down.
		if err := g.runtime.StopPodSandbox(ctx, s.ID); err != nil && !cri.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("stopping sandbox %s before removing it: %w", s.ID, err))
			continue
		}
		if err := g.runtime.RemovePodSandbox(ctx, s.ID); err != nil {
			errs = append(errs, fmt.Errorf("removing sandbox %s: %w", s.ID, err))
			continue
		}
	}
	if ready && g.podLogsDir != "" {
		errs = append(errs, g.removeLogDirs(isDeleted))
	}
	return errors.Join(errs...)
}

// removeContainerLogs removes a dead container's log file and its rotated
// files, as upstream does before removing the container.
func (g *ContainerGC) removeContainerLogs(ctx context.Context, id string) error {
	if g.podLogsDir == "" {
		return nil
	}
	resp, err := g.runtime.ContainerStatus(ctx, id, false)
	if err != nil {
		return fmt.Errorf("reading the log path of container %s: %w", id, err)
	}
	p := resp.GetStatus().GetLogPath()
	if p == "" {
		return nil
	}
	err = logrotate.RemoveLogs(g.podLogsDir, p)
	if errors.Is(err, logrotate.ErrNotBelowPodLogsDir) {
		// Not nodelet's to delete (another podLogsDir, another agent's container).
		klog.V(2).InfoS("Leaving the log of a removed container outside podLogsDir", "containerID", id, "path", p)
		return nil
	}
	if err != nil {
		return fmt.Errorf("removing the logs of container %s: %w", id, err)
	}
	return nil
}

// removeLogDirs removes <podLogsDir>/<ns>_<name>_<uid> of deleted pods.
func (g *ContainerGC) removeLogDirs(isDeleted func(string) bool) error {
	entries, err := os.ReadDir(g.podLogsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading pod logs dir: %w", err)
	}
	var errs []error
	for _, e := range entries {
		i := strings.LastIndex(e.Name(), "_")
		if !e.IsDir() || i < 0 || i == len(e.Name())-1 {
			continue
		}
		if !isDeleted(e.Name()[i+1:]) {
			continue
		}
		dir := filepath.Join(g.podLogsDir, e.Name())
		klog.V(2).InfoS("Removing log directory of deleted pod", "path", dir)
		// Never through a mount point: the data behind it is not the pod's logs.
		kept, err := mountutil.RemoveAll(dir)
		if err != nil {
			errs = append(errs, fmt.Errorf("removing pod log dir %s: %w", dir, err))
		}
		if len(kept) > 0 {
			klog.InfoS("Kept mount points in the log directory of a deleted pod", "path", dir, "mounted", kept)
		}
	}
	return errors.Join(errs...)
}

// Run collects every period (≤ 0: 1m) until ctx ends.
func (g *ContainerGC) Run(ctx context.Context, period time.Duration) {
	if period <= 0 {
		period = DefaultContainerGCPeriod
	}
	periodic.Every(ctx, g.clock, period, func(ctx context.Context) {
		if err := g.GarbageCollect(ctx); err != nil && ctx.Err() == nil {
			klog.ErrorS(err, "Container garbage collection failed")
		}
	})
}
