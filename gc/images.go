package gc

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

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/atomicfile"
	"github.com/nodelet/nodelet/internal/periodic"
)

// Upstream defaults and event reasons.
const (
	DefaultImageGCPeriod     = 5 * time.Minute
	DefaultHighThresholdPct  = 85
	DefaultLowThresholdPct   = 80
	DefaultImageMinimumGCAge = 2 * time.Minute

	ReasonFreeDiskSpaceFailed = "FreeDiskSpaceFailed"
	ReasonImageGCFailed       = "ImageGCFailed"
	ReasonInvalidDiskCapacity = "InvalidDiskCapacity"

	stateFileName = "image_gc_state.json"
)

// ImageService is the part of the CRI image service image GC uses.
type ImageService interface {
	ListImages(ctx context.Context, filter *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error)
	RemoveImage(ctx context.Context, image *runtimeapi.ImageSpec) error
	ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error)
}

// ContainerLister lists every container the runtime knows, exited included.
type ContainerLister interface {
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
}

// FsStatter returns a filesystem's capacity and available bytes.
type FsStatter func(path string) (capacity, available int64, err error)

// StatFs is the default FsStatter (statfs(2)).
func StatFs(path string) (int64, int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	return int64(st.Blocks) * st.Bsize, int64(st.Bavail) * st.Bsize, nil
}

// EventRecorder is the subset of client-go's record.EventRecorder used here.
type EventRecorder interface {
	Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any)
}

// ImagePolicy configures image GC (KubeletConfiguration fields).
type ImagePolicy struct {
	HighThresholdPercent int
	LowThresholdPercent  int
	MinAge               time.Duration
	MaxAge               time.Duration // 0: off
	// SandboxImage is never removed, whatever the runtime says of pinning.
	SandboxImage string
}

// Option configures an ImageManager.
type Option func(*ImageManager)

// WithRegisterer registers kubelet_image_garbage_collected_total and the GC
// duration histogram on reg.
func WithRegisterer(reg prometheus.Registerer) Option { return func(m *ImageManager) { m.reg = reg } }

// WithRecorder records events on nodeRef.
func WithRecorder(r EventRecorder, nodeRef *v1.ObjectReference) Option {
	return func(m *ImageManager) { m.recorder, m.nodeRef = r, nodeRef }
}

// WithFsStatter replaces statfs(2) for the image filesystem.
func WithFsStatter(f FsStatter) Option { return func(m *ImageManager) { m.statFs = f } }

type imageState struct {
	FirstDetected time.Time `json:"firstDetected"`
	LastUsed      time.Time `json:"lastUsed,omitzero"`
}

type stateFile struct {
	Images map[string]imageState `json:"images"`
}

// ImageManager tracks images and removes unused ones. Its record of first
// detection and last use is persisted under stateDir so a restart neither
// forgets which images were recently used nor makes old images look new.
type ImageManager struct {
	policy     ImagePolicy
	images     ImageService
	containers ContainerLister
	clock      clock.WithTicker
	stateDir   string
	statFs     FsStatter
	recorder   EventRecorder
	nodeRef    *v1.ObjectReference
	reg        prometheus.Registerer

	collected *prometheus.CounterVec
	duration  prometheus.Histogram

	mu      sync.Mutex // serialises GC; guards records and state
	state   map[string]imageState
	records []ImageRecord
}

// NewImageManager validates policy, loads the state file and returns a manager.
func NewImageManager(policy ImagePolicy, images ImageService, containers ContainerLister, stateDir string, clk clock.WithTicker, opts ...Option) (*ImageManager, error) {
	if err := ValidateThresholds(policy.HighThresholdPercent, policy.LowThresholdPercent); err != nil {
		return nil, fmt.Errorf("validating image GC policy: %w", err)
	}
	if policy.MinAge < 0 {
		return nil, fmt.Errorf("validating image GC policy: imageMinimumGCAge %s is negative", policy.MinAge)
	}
	if policy.MaxAge != 0 && policy.MaxAge <= policy.MinAge {
		return nil, fmt.Errorf("validating image GC policy: imageMaximumGCAge %s must be greater than imageMinimumGCAge %s", policy.MaxAge, policy.MinAge)
	}
	m := &ImageManager{
		policy: policy, images: images, containers: containers, clock: clk, stateDir: stateDir,
		statFs: StatFs, state: map[string]imageState{},
	}
	for _, o := range opts {
		o(m)
	}
	if m.reg != nil {
		m.collected = prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubelet",
			Name:      "image_garbage_collected_total",
			Help:      "Total number of images garbage collected by the kubelet, whether through disk usage or image age.",
		}, []string{"reason"})
		m.duration = prometheus.NewHistogram(prometheus.HistogramOpts{
			Subsystem: "nodelet",
			Name:      "image_gc_duration_seconds",
			Help:      "Duration in seconds of one image garbage collection.",
			Buckets:   prometheus.ExponentialBuckets(0.01, 2.5, 12),
		})
		for _, c := range []prometheus.Collector{m.collected, m.duration} {
			if err := m.reg.Register(c); err != nil {
				return nil, fmt.Errorf("registering image GC metrics: %w", err)
			}
		}
	}
	if err := m.loadState(); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *ImageManager) statePath() string { return filepath.Join(m.stateDir, stateFileName) }

func (m *ImageManager) loadState() error {
	b, err := os.ReadFile(m.statePath())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading image GC state: %w", err)
	}
	var sf stateFile
	if err := json.Unmarshal(b, &sf); err != nil {
		// A corrupt file only costs history: start afresh rather than refuse to run.
		klog.ErrorS(err, "Image GC state file is corrupt, starting without history", "path", m.statePath())
		return nil
	}
	if sf.Images != nil {
		m.state = sf.Images
	}
	return nil
}

func (m *ImageManager) saveState() error {
	b, err := json.Marshal(stateFile{Images: m.state})
	if err != nil {
		return fmt.Errorf("encoding image GC state: %w", err)
	}
	if err := os.MkdirAll(m.stateDir, 0o700); err != nil {
		return fmt.Errorf("creating image GC state dir: %w", err)
	}
	if err := atomicfile.WriteFile(m.statePath(), b, 0o600); err != nil {
		return fmt.Errorf("writing image GC state: %w", err)
	}
	return nil
}

// DetectImages refreshes the image records: an image used by any container
// (exited ones too, until container GC removes them) is in use now.
func (m *ImageManager) DetectImages(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.detectLocked(ctx)
}

func (m *ImageManager) detectLocked(ctx context.Context) error {
	now := m.clock.Now()
	imgs, err := m.images.ListImages(ctx, nil)
	if err != nil {
		return fmt.Errorf("listing images for image GC: %w", err)
	}
	ctrs, err := m.containers.ListContainers(ctx, nil)
	if err != nil {
		return fmt.Errorf("listing containers for image GC: %w", err)
	}
	used := map[string]bool{}
	for _, c := range ctrs {
		for _, ref := range []string{c.GetImageRef(), c.GetImageId(), c.GetImage().GetImage()} {
			if ref != "" {
				used[ref] = true
			}
		}
	}
	state := map[string]imageState{}
	m.records = m.records[:0]
	for _, img := range imgs {
		id := img.GetId()
		names := append([]string{id}, img.GetRepoTags()...)
		names = append(names, img.GetRepoDigests()...)
		inUse := slices.ContainsFunc(names, func(n string) bool { return used[n] })
		pinned := img.GetPinned() || (m.policy.SandboxImage != "" && slices.Contains(names, m.policy.SandboxImage))
		st, ok := m.state[id]
		if !ok {
			st.FirstDetected = now
		}
		if inUse {
			st.LastUsed = now
		}
		state[id] = st
		m.records = append(m.records, ImageRecord{
			ID: id, Size: int64(img.GetSize()), FirstDetected: st.FirstDetected, LastUsed: st.LastUsed, Pinned: pinned, InUse: inUse,
		})
	}
	m.state = state
	if err := m.saveState(); err != nil {
		// Losing persistence is not a reason to stop collecting.
		klog.ErrorS(err, "Image GC: could not persist image usage")
	}
	return nil
}

// Records returns a copy of the current image records (after DetectImages).
func (m *ImageManager) Records() []ImageRecord {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.records)
}

// GarbageCollect removes images unused for longer than MaxAge, then, when
// the image filesystem is above the high threshold, least recently used
// images until it is at the low threshold. It returns the bytes freed; when
// not enough is eligible it records FreeDiskSpaceFailed and returns an error.
func (m *ImageManager) GarbageCollect(ctx context.Context) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	start := m.clock.Now()
	defer func() {
		if m.duration != nil {
			m.duration.Observe(m.clock.Since(start).Seconds())
		}
	}()
	if err := m.detectLocked(ctx); err != nil {
		return 0, err
	}
	now := m.clock.Now()
	var freed int64
	var errs []error
	if old := SelectImagesUnusedFor(m.records, now, m.policy.MaxAge); len(old) > 0 {
		f, err := m.removeLocked(ctx, old, "age")
		freed += f
		errs = append(errs, err)
	}

	fsInfo, err := m.images.ImageFsInfo(ctx)
	if err != nil {
		return freed, errors.Join(append(errs, fmt.Errorf("getting image filesystem info: %w", err))...)
	}
	fss := fsInfo.GetImageFilesystems()
	if len(fss) == 0 || fss[0].GetFsId().GetMountpoint() == "" {
		return freed, errors.Join(append(errs, errors.New("the runtime reported no image filesystem"))...)
	}
	capacity, available, err := m.statFs(fss[0].GetFsId().GetMountpoint())
	if err != nil {
		return freed, errors.Join(append(errs, fmt.Errorf("measuring the image filesystem: %w", err))...)
	}
	if capacity <= 0 {
		m.event(v1.EventTypeWarning, ReasonInvalidDiskCapacity, "invalid capacity %d on image filesystem", capacity)
		return freed, errors.Join(append(errs, fmt.Errorf("invalid capacity %d on image filesystem", capacity))...)
	}
	want := BytesToFree(capacity, available, m.policy.HighThresholdPercent, m.policy.LowThresholdPercent)
	if want > 0 {
		klog.InfoS("Image filesystem above the high threshold, freeing space", "capacity", capacity, "available", available,
			"highThresholdPercent", m.policy.HighThresholdPercent, "bytesToFree", want)
		victims, _ := SelectImagesToFree(m.records, now, m.policy.MinAge, want)
		f, err := m.removeLocked(ctx, victims, "space")
		freed += f
		errs = append(errs, err)
		if f < want {
			msg := fmt.Sprintf("Failed to garbage collect required amount of images. Attempted to free %d bytes, but only found %d bytes eligible to free.", want, f)
			m.event(v1.EventTypeWarning, ReasonFreeDiskSpaceFailed, "%s", msg)
			errs = append(errs, errors.New(msg))
		}
	}
	return freed, errors.Join(errs...)
}

// DeleteUnusedImages removes every image GC may remove, whatever the usage
// (eviction's node-level reclaim).
func (m *ImageManager) DeleteUnusedImages(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.detectLocked(ctx); err != nil {
		return err
	}
	victims, _ := SelectImagesToFree(m.records, m.clock.Now(), m.policy.MinAge, 1<<62)
	_, err := m.removeLocked(ctx, victims, "space")
	return err
}

func (m *ImageManager) removeLocked(ctx context.Context, victims []ImageRecord, reason string) (int64, error) {
	var freed int64
	var errs []error
	for _, v := range victims {
		klog.InfoS("Removing image to free space", "imageID", v.ID, "size", v.Size, "reason", reason, "lastUsed", v.LastUsed)
		if err := m.images.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: v.ID}); err != nil {
			errs = append(errs, fmt.Errorf("removing image %s: %w", v.ID, err))
			continue
		}
		freed += v.Size
		delete(m.state, v.ID)
		m.records = slices.DeleteFunc(m.records, func(r ImageRecord) bool { return r.ID == v.ID })
		if m.collected != nil {
			m.collected.WithLabelValues(reason).Inc()
		}
	}
	if len(victims) > 0 {
		if err := m.saveState(); err != nil {
			klog.ErrorS(err, "Image GC: could not persist image usage")
		}
	}
	return freed, errors.Join(errs...)
}

func (m *ImageManager) event(eventtype, reason, format string, args ...any) {
	if m.recorder != nil && m.nodeRef != nil {
		m.recorder.Eventf(m.nodeRef, eventtype, reason, format, args...)
	}
}

// Run detects the images at once, then collects every period (≤ 0: 5m) until ctx ends.
// As upstream, a failure is only raised as an ImageGCFailed event when it repeats.
func (m *ImageManager) Run(ctx context.Context, period time.Duration) {
	if period <= 0 {
		period = DefaultImageGCPeriod
	}
	// As upstream's image GC manager at start: an image's age (imageMinimumGCAge) counts
	// from here, not from the first collection, so that a reclaim soon after the start (the
	// eviction manager's) finds the images it may remove.
	if err := m.DetectImages(ctx); err != nil && ctx.Err() == nil {
		klog.ErrorS(err, "Image garbage collection: detecting images at start")
	}
	prevFailed := false
	periodic.Every(ctx, m.clock, period, func(ctx context.Context) {
		if _, err := m.GarbageCollect(ctx); err != nil {
			if ctx.Err() != nil {
				return // stopping: Every returns too
			}
			klog.ErrorS(err, "Image garbage collection failed")
			if prevFailed {
				m.event(v1.EventTypeWarning, ReasonImageGCFailed, "%s", err.Error())
			}
			prevFailed = true
			return
		}
		prevFailed = false
	})
}
