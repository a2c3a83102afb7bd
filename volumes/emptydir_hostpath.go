package volumes

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/internal/mountutil"
	"github.com/nodelet/nodelet/internal/podutil"
)

func (m *Manager) setUpEmptyDir(pod *v1.Pod, vol *v1.Volume, st *podState) (HostVolume, error) {
	ed := vol.EmptyDir
	dir := filepath.Join(m.podVolumesDir(pod.UID), pluginEmptyDir, vol.Name)
	switch {
	case ed.Medium == v1.StorageMediumDefault:
	case ed.Medium == v1.StorageMediumMemory:
		if m.noTmpfs {
			return HostVolume{}, fmt.Errorf("emptyDir medium Memory needs tmpfs, which is disabled on this node")
		}
	case strings.HasPrefix(string(ed.Medium), string(v1.StorageMediumHugePages)):
		return HostVolume{}, fmt.Errorf("emptyDir medium %q is not supported by this node agent", ed.Medium)
	default:
		return HostVolume{}, fmt.Errorf("unknown emptyDir medium %q", ed.Medium)
	}
	if st.prepared[vol.Name] {
		return HostVolume{Path: dir}, nil
	}
	memory := ed.Medium == v1.StorageMediumMemory
	meta := m.emptyDirMetaDir(pod.UID, vol.Name)
	ready, dirExists, mounted, err := emptyDirFacts(meta, dir, memory)
	if err != nil {
		return HostVolume{}, err
	}
	setUp, dropMarker := emptyDirSetUpNeeded(ready, dirExists, mounted, memory)
	if dropMarker {
		klog.InfoS("EmptyDir ready marker found without its volume directory; setting the volume up again", "pod", klog.KObj(pod), "volume", vol.Name, "marker", meta)
		if err := mountutil.RemoveAllUnmounted(meta); err != nil {
			return HostVolume{}, fmt.Errorf("removing stale emptyDir ready marker: %w", err)
		}
	}
	if setUp {
		var limit *int64
		if ed.SizeLimit != nil {
			v := ed.SizeLimit.Value()
			limit = &v
		}
		if err := m.prepareDir(pod, dir, memory, limit); err != nil {
			return HostVolume{}, err
		}
		if g := fsGroupOf(pod); g != nil {
			// A failure leaves no marker: the next sync walks again.
			if err := m.fsGroupWalk.apply(dir, *g, false); err != nil {
				return HostVolume{}, err
			}
		}
		if err := setReady(meta); err != nil {
			// As upstream: only a later restart pays for it, with one more walk.
			klog.ErrorS(err, "Failed to write the emptyDir ready marker", "pod", klog.KObj(pod), "volume", vol.Name)
		}
	}
	st.prepared[vol.Name] = true
	return HostVolume{Path: dir}, nil
}

// readyFileName is upstream's marker of a volume set up, in the volume's
// metadata directory.
const readyFileName = "ready"

// emptyDirMetaDir is where upstream's emptyDir plugin keeps a volume's ready
// marker, so either agent finds the other's:
// <root>/pods/<uid>/plugins/kubernetes.io~empty-dir/<volume>.
func (m *Manager) emptyDirMetaDir(uid types.UID, name string) string {
	return filepath.Join(m.rootDir, "pods", string(uid), "plugins", pluginEmptyDir, name)
}

// emptyDirSetUpNeeded is upstream's decision for an emptyDir: set up (and
// walk for the fsGroup) unless the ready marker is there and so is the
// volume, its directory or, for medium Memory, its tmpfs. Once set up the
// volume is never walked again, not even after a restart: the pod owns its
// content by then. A marker whose directory is gone is dropped first.
func emptyDirSetUpNeeded(ready, dirExists, mounted, memory bool) (setUp, dropMarker bool) {
	switch {
	case !ready:
		return true, false
	case memory:
		return !mounted, false
	case dirExists:
		return false, false
	}
	return true, true
}

// emptyDirFacts gathers what emptyDirSetUpNeeded decides on. The marker
// counts only as a regular file, as upstream's.
func emptyDirFacts(meta, dir string, memory bool) (ready, dirExists, mounted bool, err error) {
	if fi, err := os.Lstat(filepath.Join(meta, readyFileName)); err == nil && fi.Mode().IsRegular() {
		ready = true
	}
	fi, err := os.Lstat(dir)
	if err != nil && !os.IsNotExist(err) {
		return false, false, false, fmt.Errorf("checking emptyDir %s: %w", dir, err)
	}
	dirExists = err == nil && fi.IsDir()
	if memory && dirExists {
		if mounted, err = mountutil.IsMountPoint(dir); err != nil {
			return false, false, false, fmt.Errorf("checking emptyDir %s: %w", dir, err)
		}
	}
	return ready, dirExists, mounted, nil
}

// setReady writes the ready marker in meta.
func setReady(meta string) error {
	if err := os.MkdirAll(meta, 0o750); err != nil {
		return fmt.Errorf("creating %s: %w", meta, err)
	}
	f, err := os.OpenFile(filepath.Join(meta, readyFileName), os.O_WRONLY|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("creating ready marker in %s: %w", meta, err)
	}
	return f.Close()
}

// memoryVolumeSize is the tmpfs size for a memory-backed volume, as
// upstream computes it: node allocatable memory, lowered to the pod's
// memory limit, lowered to the volume's sizeLimit. 0 when nothing is known
// (the kernel default then applies).
func (m *Manager) memoryVolumeSize(pod *v1.Pod, sizeLimit *int64) int64 {
	var size int64
	if q, ok := m.allocatable()[v1.ResourceMemory]; ok {
		size = q.Value()
	}
	lower := func(v int64) {
		if v > 0 && (size == 0 || v <= size) {
			size = v
		}
	}
	lower(podMemoryLimit(pod))
	if sizeLimit != nil {
		lower(*sizeLimit)
	}
	return size
}

// podMemoryLimit is the pod's effective memory limit, 0 when it has none
// (some app container has no memory limit and the pod sets none).
func podMemoryLimit(pod *v1.Pod) int64 {
	if pod.Spec.Resources != nil {
		if q, ok := pod.Spec.Resources.Limits[v1.ResourceMemory]; ok && !q.IsZero() {
			return q.Value()
		}
	}
	var sum int64
	for _, c := range pod.Spec.Containers {
		q, ok := c.Resources.Limits[v1.ResourceMemory]
		if !ok || q.IsZero() {
			return 0
		}
		sum += q.Value()
	}
	// Sidecars (restartable init containers) run beside the app containers;
	// a plain init container runs alone and only raises the maximum.
	var maxInit int64
	for _, c := range pod.Spec.InitContainers {
		q, ok := c.Resources.Limits[v1.ResourceMemory]
		if podutil.IsRestartableInitContainer(&c) {
			if !ok || q.IsZero() {
				return 0
			}
			sum += q.Value()
			continue
		}
		if !ok || q.IsZero() {
			return 0
		}
		maxInit = max(maxInit, q.Value())
	}
	return max(sum, maxInit)
}

// checkHostPath applies the hostPath type check; DirectoryOrCreate and
// FileOrCreate create what is missing (FileOrCreate does not create parent
// directories, as documented upstream).
func checkHostPath(hp *v1.HostPathVolumeSource) error {
	path := hp.Path
	if path == "" {
		return fmt.Errorf("hostPath path is empty")
	}
	t := v1.HostPathUnset
	if hp.Type != nil {
		t = *hp.Type
	}
	fail := func(what string) error {
		return fmt.Errorf("hostPath type check failed: %s is not %s", path, what)
	}
	switch t {
	case v1.HostPathUnset:
		return nil
	case v1.HostPathDirectoryOrCreate:
		if _, err := os.Stat(path); os.IsNotExist(err) {
			if err := os.MkdirAll(path, 0o755); err != nil {
				return fmt.Errorf("hostPath %s: creating directory: %w", path, err)
			}
		}
		return statIs(path, os.ModeDir, fail("a directory"))
	case v1.HostPathDirectory:
		return statIs(path, os.ModeDir, fail("a directory"))
	case v1.HostPathFileOrCreate:
		if _, err := os.Stat(path); os.IsNotExist(err) {
			f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o644)
			if err != nil && !os.IsExist(err) {
				return fmt.Errorf("hostPath %s: creating file: %w", path, err)
			}
			if f != nil {
				_ = f.Close()
			}
		}
		return statIs(path, 0, fail("a file"))
	case v1.HostPathFile:
		return statIs(path, 0, fail("a file"))
	case v1.HostPathSocket:
		return statIs(path, os.ModeSocket, fail("a socket file"))
	case v1.HostPathCharDev:
		return statIs(path, os.ModeDevice|os.ModeCharDevice, fail("a character device"))
	case v1.HostPathBlockDev:
		return statIs(path, os.ModeDevice, fail("a block device"))
	}
	return fmt.Errorf("hostPath %s: unknown type %q", path, t)
}

// statIs checks that path (following symlinks) has exactly the given file
// type bits; 0 means a regular file.
func statIs(path string, typ os.FileMode, mismatch error) error {
	fi, err := os.Stat(path)
	if os.IsNotExist(err) {
		return fmt.Errorf("%w (it does not exist)", mismatch)
	}
	if err != nil {
		return fmt.Errorf("hostPath %s: %w", path, err)
	}
	if fi.Mode().Type() != typ {
		return mismatch
	}
	return nil
}
