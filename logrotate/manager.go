package logrotate

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"golang.org/x/sys/unix"

	"github.com/nodelet/nodelet/internal/ctxio"
	"github.com/nodelet/nodelet/internal/mountutil"
	"github.com/nodelet/nodelet/internal/periodic"
	"github.com/nodelet/nodelet/internal/safepath"
)

// Runtime is the part of the CRI runtime service rotation needs.
type Runtime interface {
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
	ContainerStatus(ctx context.Context, containerID string, verbose bool) (*runtimeapi.ContainerStatusResponse, error)
	ReopenContainerLog(ctx context.Context, containerID string) error
}

// Config is the node's rotation settings.
type Config struct {
	// PodLogsDir is podLogsDir: container log paths outside it are not touched.
	PodLogsDir string
	Policy     Policy
	// Workers is containerLogMaxWorkers: how many containers are handled at once.
	Workers int
	// Interval is containerLogMonitorInterval.
	Interval time.Duration
}

// Manager rotates the logs of the running containers.
type Manager struct {
	cfg   Config
	rt    Runtime
	clock clock.WithTicker
}

// New returns a Manager; Run starts it.
func New(cfg Config, rt Runtime, clk clock.WithTicker) *Manager {
	cfg.Workers = max(cfg.Workers, 1)
	return &Manager{cfg: cfg, rt: rt, clock: clk}
}

// Run checks every container log now and then every Interval until ctx ends;
// it returns once the pass in progress has stopped.
func (m *Manager) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	logger.Info("Initializing container log rotate workers", "workers", m.cfg.Workers, "monitorPeriod", m.cfg.Interval,
		"maxSize", m.cfg.Policy.MaxSize, "maxFiles", m.cfg.Policy.MaxFiles)
	periodic.NowAndEvery(ctx, m.clock, m.cfg.Interval, func(ctx context.Context) {
		if err := m.RotateAll(ctx); err != nil && ctx.Err() == nil {
			logger.Error(err, "Failed to rotate container logs")
		}
	})
}

// RotateAll is one monitor pass: the log of every running container is
// checked, by up to Workers at once; it returns when all are done. An error
// of one container is logged and does not stop the others.
func (m *Manager) RotateAll(ctx context.Context) error {
	ctrs, err := m.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
	})
	if err != nil {
		return fmt.Errorf("listing the running containers: %w", err)
	}
	ids := make(chan string)
	var wg sync.WaitGroup
	for range min(m.cfg.Workers, len(ctrs)) {
		wg.Go(func() {
			for id := range ids {
				if err := m.Rotate(ctx, id); err != nil && ctx.Err() == nil {
					klog.FromContext(ctx).Error(err, "Failed to rotate log for container", "containerID", id)
				}
			}
		})
	}
	defer wg.Wait()
	defer close(ids)
	for _, c := range ctrs {
		// Only running containers write: a stopped one keeps its last log whole.
		if c.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		select {
		case ids <- c.GetId():
		case <-ctx.Done():
			return nil
		}
	}
	return nil
}

// Rotate checks the log of one container and rotates it when it is due.
func (m *Manager) Rotate(ctx context.Context, id string) error {
	resp, err := m.rt.ContainerStatus(ctx, id, false)
	if err != nil {
		return fmt.Errorf("reading the status of container %s: %w", id, err)
	}
	logPath := resp.GetStatus().GetLogPath()
	if logPath == "" {
		return nil // the runtime keeps no log file for it
	}
	sub, live, err := locate(m.cfg.PodLogsDir, logPath)
	if err != nil {
		return err
	}
	dir, err := safepath.Open(m.cfg.PodLogsDir, sub)
	if err != nil {
		return fmt.Errorf("opening the log directory of container %s: %w", id, err)
	}
	defer dir.Close()

	size, err := regularSize(dir, live)
	if errors.Is(err, unix.ENOENT) {
		// Lost (removed by hand, or a rotation cut short): the runtime writes
		// nowhere until it reopens, which makes a new, empty file.
		if err := m.rt.ReopenContainerLog(ctx, id); err != nil {
			return fmt.Errorf("reopening the missing log %s of container %s: %w", logPath, id, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("checking the log of container %s: %w", id, err)
	}
	var rotated []string
	if size >= m.cfg.Policy.MaxSize {
		if rotated, err = rotatedNames(dir, live); err != nil {
			return fmt.Errorf("listing the rotated logs of container %s: %w", id, err)
		}
	}
	plan := Decide(Logs{Live: live, Size: size, Rotated: rotated}, m.cfg.Policy, m.clock.Now())
	if plan.RotateTo == "" {
		return nil
	}
	if err := m.apply(ctx, id, dir, live, plan); err != nil {
		return fmt.Errorf("rotating the log %s (%d bytes) of container %s: %w", logPath, size, id, err)
	}
	klog.FromContext(ctx).V(2).Info("Rotated container log", "containerID", id, "path", logPath, "size", size, "rotatedTo", plan.RotateTo,
		"removed", plan.Remove, "compressed", plan.Compress)
	return nil
}

// ErrNotBelowPodLogsDir is a log path from the runtime outside podLogsDir.
var ErrNotBelowPodLogsDir = errors.New("not below podLogsDir")

// locate splits a log path from the runtime into its directory below
// podLogsDir and its file name, refusing paths that are not below it.
func locate(podLogsDir, logPath string) (sub, name string, err error) {
	rel, err := filepath.Rel(podLogsDir, filepath.Clean(logPath))
	if err == nil && filepath.IsAbs(logPath) && rel != "." {
		err = safepath.CheckRelative(rel)
	} else if err == nil {
		err = safepath.ErrEscape
	}
	if err != nil {
		return "", "", fmt.Errorf("log path %q is %w %s: %w", logPath, ErrNotBelowPodLogsDir, podLogsDir, err)
	}
	return filepath.Dir(rel), filepath.Base(rel), nil
}

// apply carries out plan in upstream's order; the first failure stops it, and
// the next round decides again from what is then on disk.
func (m *Manager) apply(ctx context.Context, id string, dir *os.File, live string, plan Plan) error {
	for _, name := range plan.Remove {
		if err := remove(dir, name); err != nil {
			return err
		}
	}
	for _, name := range plan.Compress {
		if err := compress(ctx, dir, name); err != nil {
			return fmt.Errorf("compressing %s: %w", name, err)
		}
	}
	if err := renameNoReplace(dir, live, plan.RotateTo); err != nil {
		return fmt.Errorf("renaming %s to %s: %w", live, plan.RotateTo, err)
	}
	if err := m.rt.ReopenContainerLog(ctx, id); err != nil {
		// Put it back so the next round can try again; the runtime still
		// writes to the renamed file meanwhile, so nothing is lost.
		if rerr := renameNoReplace(dir, plan.RotateTo, live); rerr != nil {
			klog.FromContext(ctx).Error(rerr, "Failed to rename rotated log back", "containerID", id, "rotatedLog", plan.RotateTo, "log", live)
		}
		return fmt.Errorf("reopening the log: %w", err)
	}
	return nil
}

// regularSize is the size of dir/name, which must be a regular file (not
// followed if a link).
func regularSize(dir *os.File, name string) (int64, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return 0, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0, fmt.Errorf("%s/%s is not a regular file (mode %#o)", dir.Name(), name, st.Mode)
	}
	return st.Size, nil
}

// rotatedNames lists the regular files of dir named "<live>.*".
func rotatedNames(dir *os.File, live string) ([]string, error) {
	fd, err := unix.Openat(int(dir.Fd()), ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", dir.Name(), err)
	}
	d := os.NewFile(uintptr(fd), dir.Name())
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", dir.Name(), err)
	}
	var out []string
	for _, n := range names {
		if !strings.HasPrefix(n, live+".") {
			continue
		}
		// Anything but a regular file is not the runtime's and stays.
		if _, err := regularSize(dir, n); err == nil {
			out = append(out, n)
		}
	}
	return out, nil
}

// remove deletes dir/name, never through a mount point.
func remove(dir *os.File, name string) error {
	kept, err := mountutil.RemoveAt(dir, name)
	if err != nil {
		return err
	}
	if kept {
		return fmt.Errorf("not removing %s/%s: it is a mount point", dir.Name(), name)
	}
	return nil
}

// renameNoReplace renames within dir, failing rather than replacing an existing file.
func renameNoReplace(dir *os.File, from, to string) error {
	fd := int(dir.Fd())
	err := unix.Renameat2(fd, from, fd, to, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		// A filesystem without RENAME_NOREPLACE: check, then rename.
		var st unix.Stat_t
		if serr := unix.Fstatat(fd, to, &st, unix.AT_SYMLINK_NOFOLLOW); serr == nil {
			return unix.EEXIST
		}
		err = unix.Renameat(fd, from, fd, to)
	}
	return err
}

// compress gzips dir/name into dir/name.gz through dir/name.tmp (so that a
// cut-short compression leaves a ".tmp" the next rotation removes, never a
// truncated ".gz"), then removes dir/name.
func compress(ctx context.Context, dir *os.File, name string) (err error) {
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening: %w", err)
	}
	src := os.NewFile(uintptr(fd), name)
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("not a regular file (%s)", st.Mode())
	}
	tmp := name + tmpSuffix
	tfd, err := unix.Openat(int(dir.Fd()), tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("creating %s: %w", tmp, err)
	}
	dst := os.NewFile(uintptr(tfd), tmp)
	defer func() {
		if err != nil {
			_ = dst.Close()
			_ = remove(dir, tmp)
		}
	}()
	// The mode of the log it replaces, whatever the umask.
	if err := dst.Chmod(st.Mode().Perm()); err != nil {
		return err
	}
	zw := gzip.NewWriter(dst)
	if _, err := io.Copy(zw, ctxio.Reader{Ctx: ctx, R: src}); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	// The original goes next: the copy must be on disk first.
	if err := dst.Sync(); err != nil {
		return err
	}
	if err := dst.Close(); err != nil {
		return err
	}
	if err := unix.Renameat(int(dir.Fd()), tmp, int(dir.Fd()), name+compressSuffix); err != nil {
		return fmt.Errorf("renaming %s: %w", tmp, err)
	}
	return remove(dir, name)
}
