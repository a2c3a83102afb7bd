package userns

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/atomicfile"
	"github.com/nodelet/nodelet/internal/periodic"
)

// Handlers returns the runtime's handlers from its last CRI Status, and false
// before any Status answered.
type Handlers func() ([]*runtimeapi.RuntimeHandler, bool)

// Options configure a Manager.
type Options struct {
	// PodsDir is <root>/pods.
	PodsDir string
	// First and Length are the kubelet's mapping (KubeletMappings).
	First, Length uint32
	// IDsPerPod is userNamespaces.idsPerPod.
	IDsPerPod uint32
	// MaxPods is maxPods: the mapping must hold a range for each.
	MaxPods int
	// Handlers says which runtime handlers support user namespaces.
	Handlers Handlers
	// Intn picks where the search for a free range starts; rand.IntN if nil.
	Intn func(n int) int
	// Clock dates a corrupt file set aside; the real clock if nil.
	Clock clock.PassiveClock
}

// Manager keeps the pods' user namespace ranges: in memory (Allocator) and in
// each pod's directory, read back by Open after a restart.
type Manager struct {
	podsDir  string
	handlers Handlers
	intn     func(n int) int

	mu    sync.Mutex
	alloc *Allocator
	// unknown are the pods whose file was corrupt at start, with where it was
	// set aside: their ranges may be in use, so no new range is given out
	// until they are gone.
	unknown map[types.UID]string
}

// Open checks the mapping and records the ranges of the pods already on disk.
// A file that is not JSON (truncated, garbage) is logged naming it and set
// aside, and the start goes on: the pod keeps running, but its range is
// unknown, and giving that range to another pod could map two pods onto the
// same host IDs, so no new range is given out while that pod is on the node
// (GetOrCreateUserNamespaceMappings says why). A file that cannot be read,
// JSON that is not a valid mapping, or two files claiming the same range
// stop it, as upstream's start.
func Open(ctx context.Context, opts Options) (*Manager, error) {
	alloc, err := NewAllocator(opts.First, opts.Length, opts.IDsPerPod, opts.MaxPods)
	if err != nil {
		return nil, fmt.Errorf("kubelet mappings: %w", err)
	}
	m := &Manager{podsDir: opts.PodsDir, handlers: opts.Handlers, intn: opts.Intn, alloc: alloc, unknown: map[types.UID]string{}}
	clk := opts.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	if m.intn == nil {
		m.intn = rand.IntN
	}
	entries, err := os.ReadDir(opts.PodsDir)
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("read pods from disk: %w", err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		uid := types.UID(e.Name())
		data, err := m.readFile(uid)
		if err != nil {
			return nil, fmt.Errorf("record pod mappings for existing pod %q: %w", uid, err)
		}
		if data == nil {
			continue
		}
		if _, _, perr := parseMappings(data); errors.Is(perr, errUnreadableMappings) {
			aside, aerr := atomicfile.SetAside(m.path(uid), clk.Now())
			m.unknown[uid] = aside
			klog.FromContext(ctx).Error(perr, "Ignoring a corrupt user namespace mappings file: the pod keeps running, no new user namespace range is given out while it is on the node",
				"path", m.path(uid), "podUID", uid, "setAsideAs", aside, "setAsideErr", aerr)
			continue
		}
		if err := m.record(uid, data); err != nil {
			return nil, fmt.Errorf("record pod mappings for existing pod %q (%s): %w", uid, m.path(uid), err)
		}
	}
	klog.FromContext(ctx).V(2).Info("User namespace ranges", "firstID", opts.First, "length", opts.Length, "idsPerPod", opts.IDsPerPod, "pods", len(alloc.Pods()))
	return m, nil
}

func (m *Manager) path(uid types.UID) string {
	return filepath.Join(m.podsDir, string(uid), MappingsFile)
}

// readFile returns the pod's file, nil if it has none. A symlink is refused:
// the pod directory is nodelet's, and a link there is not something it wrote.
func (m *Manager) readFile(uid types.UID) ([]byte, error) {
	f, err := os.OpenFile(m.path(uid), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", m.path(uid), err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", m.path(uid), err)
	}
	return data, nil
}

func (m *Manager) record(uid types.UID, data []byte) error {
	hostID, length, err := parseMappings(data)
	if err != nil {
		return err
	}
	return m.alloc.Record(uid, hostID, length)
}

// GetOrCreateUserNamespaceMappings returns the user namespace of pod's
// sandbox and containers: the node's for hostUsers unset or true; for
// hostUsers: false the pod's range (the one on disk, or a new one written
// there first), refused when runtimeHandler does not support user namespaces.
func (m *Manager) GetOrCreateUserNamespaceMappings(pod *v1.Pod, runtimeHandler string) (*runtimeapi.UserNamespace, error) {
	if pod.Spec.HostUsers == nil || *pod.Spec.HostUsers {
		return &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE}, nil
	}
	var handlers []*runtimeapi.RuntimeHandler
	set := false
	if m.handlers != nil {
		handlers, set = m.handlers()
	}
	if err := CheckHandler(handlers, set, runtimeHandler); err != nil {
		return nil, err
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	data, err := m.readFile(pod.UID)
	if err != nil {
		return nil, fmt.Errorf("user namespace: %w", err)
	}
	var hostID uint32
	length := m.alloc.IDsPerPod()
	if data != nil {
		if err := m.record(pod.UID, data); err != nil {
			return nil, fmt.Errorf("user namespace: %s: %w", m.path(pod.UID), err)
		}
		hostID, _ = m.alloc.Allocated(pod.UID)
	} else {
		if err := m.unknownRangesLocked(); err != nil {
			return nil, fmt.Errorf("create user namespace: %w", err)
		}
		_, had := m.alloc.Allocated(pod.UID)
		hostID, err = m.alloc.Allocate(pod.UID, m.intn(len(m.alloc.used)))
		if err != nil {
			return nil, fmt.Errorf("create user namespace: %w", err)
		}
		if err := m.writeFile(pod.UID, hostID, length); err != nil {
			if !had {
				m.alloc.Release(pod.UID)
			}
			return nil, fmt.Errorf("create user namespace: %w", err)
		}
	}
	mapping := func() []*runtimeapi.IDMapping {
		return []*runtimeapi.IDMapping{{HostId: hostID, ContainerId: 0, Length: length}}
	}
	return &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: mapping(), Gids: mapping()}, nil
}

// unknownRangesLocked refuses a new range while a pod whose file was corrupt
// is on the node, naming one such pod and its file.
func (m *Manager) unknownRangesLocked() error {
	for uid, aside := range m.unknown {
		return fmt.Errorf("the user namespace range of pod %s is unknown (its mappings file was corrupt at start, set aside as %q): no new range is given out until that pod is gone from the node (%d such pods)", uid, aside, len(m.unknown))
	}
	return nil
}

func (m *Manager) writeFile(uid types.UID, hostID, length uint32) error {
	if err := os.MkdirAll(filepath.Join(m.podsDir, string(uid)), 0o750); err != nil {
		return fmt.Errorf("creating pod directory: %w", err)
	}
	return atomicfile.WriteFile(m.path(uid), encodeMappings(hostID, length), 0o600)
}

// CheckHandler refuses a user namespace when the runtime handler does not
// support one, in upstream's words.
func CheckHandler(handlers []*runtimeapi.RuntimeHandler, set bool, runtimeHandler string) error {
	ok, err := handlerSupportsUserNamespaces(handlers, set, runtimeHandler)
	if err == nil && ok {
		return nil
	}
	msg := "can't set `spec.hostUsers: false`, runtime does not support user namespaces"
	if runtimeHandler != "" {
		msg = fmt.Sprintf("can't set `spec.hostUsers: false`, RuntimeClass handler %q does not support user namespaces", runtimeHandler)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", msg, err)
	}
	return errors.New(msg)
}

func handlerSupportsUserNamespaces(handlers []*runtimeapi.RuntimeHandler, set bool, name string) (bool, error) {
	if !set {
		return false, errors.New("runtime handlers are not set")
	}
	for _, h := range handlers {
		if h.GetName() == name {
			return h.GetFeatures().GetUserNamespaces(), nil
		}
	}
	return false, fmt.Errorf("the handler %q is not known", name)
}

// Release frees the pod's range and removes its file (the pod is gone for
// good: its directory goes next).
func (m *Manager) Release(ctx context.Context, uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.releaseLocked(ctx, uid)
}

func (m *Manager) releaseLocked(ctx context.Context, uid types.UID) {
	delete(m.unknown, uid)
	had := m.alloc.Release(uid)
	if err := os.Remove(m.path(uid)); err != nil && !os.IsNotExist(err) {
		klog.FromContext(ctx).Error(err, "Removing the user namespace file of a removed pod", "podUID", uid)
	}
	if had {
		klog.FromContext(ctx).V(4).Info("Released pod user namespace", "podUID", uid)
	}
}

// CleanupOrphans frees the range of every pod whose directory is gone (an
// orphaned directory the sync loop removed), as upstream's cleanup of
// orphaned allocations.
func (m *Manager) CleanupOrphans(ctx context.Context) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, uid := range m.alloc.Pods() {
		if _, err := os.Lstat(filepath.Join(m.podsDir, string(uid))); os.IsNotExist(err) {
			m.releaseLocked(ctx, uid)
		}
	}
	for uid := range m.unknown {
		if _, err := os.Lstat(filepath.Join(m.podsDir, string(uid))); os.IsNotExist(err) {
			delete(m.unknown, uid)
			klog.FromContext(ctx).Info("Pod with an unknown user namespace range is gone; new ranges are given out again", "podUID", uid)
		}
	}
}

// Run calls CleanupOrphans every period until ctx ends.
func (m *Manager) Run(ctx context.Context, clk clock.WithTicker, period time.Duration) {
	periodic.Every(ctx, clk, period, m.CleanupOrphans)
}
