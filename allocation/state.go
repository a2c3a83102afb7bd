package allocation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/atomicfile"
	"github.com/nodelet/nodelet/internal/checkpoint/checksum"
	"github.com/nodelet/nodelet/internal/periodic"
)

// The checkpoint files under the root dir, named as upstream's.
const (
	AllocatedStateFile = "allocated_pods_state"
	ActuatedStateFile  = "actuated_pods_state"
)

// PodResourceInfo is the resources of one pod's containers (by name), its
// pod-level resources, and its memory-backed emptyDir size limits. The field
// names are upstream's checkpoint keys (the struct has no JSON tags upstream).
type PodResourceInfo struct {
	ContainerResources   map[string]v1.ResourceRequirements
	PodLevelResources    *v1.ResourceRequirements
	EmptyDirVolumeLimits map[string]*resource.Quantity
}

// DeepCopy returns a copy sharing nothing with info.
func (info PodResourceInfo) DeepCopy() PodResourceInfo {
	out := PodResourceInfo{PodLevelResources: info.PodLevelResources.DeepCopy()}
	if info.ContainerResources != nil {
		out.ContainerResources = make(map[string]v1.ResourceRequirements, len(info.ContainerResources))
		for name, r := range info.ContainerResources {
			out.ContainerResources[name] = *r.DeepCopy()
		}
	}
	if info.EmptyDirVolumeLimits != nil {
		out.EmptyDirVolumeLimits = make(map[string]*resource.Quantity, len(info.EmptyDirVolumeLimits))
		for name, q := range info.EmptyDirVolumeLimits {
			if q != nil {
				c := q.DeepCopy()
				q = &c
			}
			out.EmptyDirVolumeLimits[name] = q
		}
	}
	return out
}

// checkpoint is the file's envelope, upstream's: Data is the JSON of
// checkpointData and Checksum upstream's checksum of the Data string.
type checkpoint struct {
	Data     string            `json:"data"`
	Checksum checksum.Checksum `json:"checksum"`
}

type checkpointData struct {
	Entries map[types.UID]PodResourceInfo `json:"entries,omitempty"`
}

func encode(pods map[types.UID]PodResourceInfo) ([]byte, checksum.Checksum, error) {
	data, err := json.Marshal(checkpointData{Entries: pods})
	if err != nil {
		return nil, 0, fmt.Errorf("serializing pod resources for checkpointing: %w", err)
	}
	cp := checkpoint{Data: string(data), Checksum: checksum.New(string(data))}
	blob, err := json.Marshal(cp)
	if err != nil {
		return nil, 0, fmt.Errorf("serializing the pod resources checkpoint: %w", err)
	}
	return blob, cp.Checksum, nil
}

func decode(blob []byte) (map[types.UID]PodResourceInfo, checksum.Checksum, error) {
	var cp checkpoint
	if err := json.Unmarshal(blob, &cp); err != nil {
		return nil, 0, err
	}
	if err := cp.Checksum.Verify(cp.Data); err != nil {
		return nil, 0, err
	}
	var data checkpointData
	if err := json.Unmarshal([]byte(cp.Data), &data); err != nil {
		return nil, 0, fmt.Errorf("failed to get pod resource information: %w", err)
	}
	return data.Entries, cp.Checksum, nil
}

// State is one checkpointed map of pod UID to PodResourceInfo. It is safe for
// concurrent use; what it hands out are copies.
type State struct {
	path string // "" keeps the state in memory only

	mu           sync.Mutex
	pods         map[types.UID]PodResourceInfo
	lastChecksum checksum.Checksum
	// behind says the file lacks a change whose write failed (ENOSPC...):
	// Flush writes it again, so a failed write is retried, not forgotten.
	behind bool
}

// NewMemoryState returns a State that is never written to disk (tests).
func NewMemoryState() *State { return &State{pods: map[types.UID]PodResourceInfo{}} }

// OpenState reads the checkpoint dir/name (none yet: an empty state). A file
// that does not decode (truncated, garbage, wrong checksum) is logged naming
// it, set aside as <name>.corrupt-<unix time> for forensics, and the state
// starts empty: the sync loop then admits the running pods again and
// allocates them their specs' resources, rather than nodelet refusing to
// start and leaving every pod of the node unmanaged. A file that cannot be
// read at all (permissions, I/O) is an error naming it.
func OpenState(ctx context.Context, dir, name string, clk clock.PassiveClock) (*State, error) {
	s := &State{path: filepath.Join(dir, name), pods: map[types.UID]PodResourceInfo{}}
	blob, err := os.ReadFile(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading pod resource checkpoint %s: %w", s.path, err)
	}
	pods, sum, err := decode(blob)
	if err != nil {
		logger := klog.FromContext(ctx)
		// A file that cannot be moved is still ignored: the next write replaces it.
		aside, aerr := atomicfile.SetAside(s.path, clk.Now())
		logger.Error(err, "Ignoring a corrupt pod resource checkpoint: starting with no allocations, the running pods are admitted again at their specs' resources",
			"path", s.path, "setAsideAs", aside, "setAsideErr", aerr)
		return s, nil
	}
	if pods != nil {
		s.pods = pods
	}
	s.lastChecksum = sum
	return s, nil
}

// Pod returns a copy of what the state holds for uid.
func (s *State) Pod(uid types.UID) (PodResourceInfo, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	info, ok := s.pods[uid]
	if !ok {
		return PodResourceInfo{}, false
	}
	return info.DeepCopy(), true
}

// Container returns a copy of the resources held for one container of uid.
func (s *State) Container(uid types.UID, name string) (v1.ResourceRequirements, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.pods[uid].ContainerResources[name]
	if !ok {
		return v1.ResourceRequirements{}, false
	}
	return *r.DeepCopy(), true
}

// SetPod replaces what the state holds for uid and checkpoints it.
func (s *State) SetPod(uid types.UID, info PodResourceInfo) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pods[uid] = info.DeepCopy()
	return s.storeLocked()
}

// SetContainer sets one container's resources of uid and checkpoints them.
func (s *State) SetContainer(uid types.UID, name string, r v1.ResourceRequirements) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	info := s.pods[uid]
	if info.ContainerResources == nil {
		info.ContainerResources = map[string]v1.ResourceRequirements{}
	}
	info.ContainerResources[name] = *r.DeepCopy()
	s.pods[uid] = info
	return s.storeLocked()
}

// RemovePod forgets uid. As upstream, the file is not rewritten for it: a
// stale entry is harmless and goes with the next write.
func (s *State) RemovePod(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pods, uid)
}

// RemoveOrphanedPods forgets every pod keep does not hold (file untouched, as RemovePod).
func (s *State) RemoveOrphanedPods(keep map[types.UID]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for uid := range s.pods {
		if !keep[uid] {
			delete(s.pods, uid)
		}
	}
}

// UIDs lists the pods the state holds, sorted.
func (s *State) UIDs() []types.UID {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]types.UID, 0, len(s.pods))
	for uid := range s.pods {
		out = append(out, uid)
	}
	slices.Sort(out)
	return out
}

// Flush writes the checkpoint again when an earlier write failed; nothing
// otherwise.
func (s *State) Flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.behind {
		return nil
	}
	return s.storeLocked()
}

// RunFlusher calls Flush every period until ctx ends, and once more then, so
// a checkpoint write that failed (a full disk) lands once it can.
func (s *State) RunFlusher(ctx context.Context, clk clock.WithTicker, period time.Duration) {
	logger := klog.FromContext(ctx)
	flush := func(context.Context) {
		if err := s.Flush(); err != nil {
			logger.Error(err, "Retrying a failed pod resource checkpoint write", "path", s.path)
		}
	}
	periodic.Every(ctx, clk, period, flush)
	flush(ctx)
}

// storeLocked writes the checkpoint unless its content did not change. A
// failed write leaves the state marked behind for Flush.
func (s *State) storeLocked() error {
	if s.path == "" {
		return nil
	}
	blob, sum, err := encode(s.pods)
	if err != nil {
		return err
	}
	if sum == s.lastChecksum && !s.behind {
		return nil
	}
	// 0600 as upstream's checkpoint store writes it; atomically, so a full
	// disk or a crash never leaves it truncated.
	if err := atomicfile.WriteFile(s.path, blob, 0o600); err != nil {
		s.behind = true
		return fmt.Errorf("saving pod resource checkpoint: %w", err)
	}
	s.lastChecksum = sum
	s.behind = false
	return nil
}
