package volumes

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/csi"
	"github.com/nodelet/nodelet/internal/mountutil"
)

// tearDownCSI unpublishes each CSI volume of the pod, from its
// vol_data.json (so it works after a restart), removes its directory, and
// unstages the volume when no other pod has it published. A volume whose
// driver is not registered (or whose calls fail) stays, with its
// directory, and is an error: the teardown is retried.
func (m *Manager) tearDownCSI(ctx context.Context, podUID types.UID) error {
	base := filepath.Join(m.podVolumesDir(podUID), csi.PodPluginDir)
	entries, err := os.ReadDir(base)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("listing CSI volumes: %w", err)
	}
	var errs []error
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if err := m.tearDownCSIVolume(ctx, podUID, e.Name()); err != nil {
			errs = append(errs, fmt.Errorf("UnmountVolume.TearDown failed for volume %q: %w", e.Name(), err))
		}
	}
	return errors.Join(errs...)
}

func (m *Manager) tearDownCSIVolume(ctx context.Context, podUID types.UID, specName string) error {
	dir := csi.PodVolumeDir(m.rootDir, podUID, specName)
	publishPath := filepath.Join(dir, "mount")
	data, err := readVolData(dir)
	if err != nil {
		mounted, mErr := mountutil.IsMountPoint(publishPath)
		if mErr != nil {
			return mErr
		}
		if !mounted {
			// Nothing published (a set-up that failed before writing it):
			// the volumes directory's removal takes what is left.
			return nil
		}
		return fmt.Errorf("%s is mounted but its %s cannot be read, so its driver is unknown: %w", publishPath, csi.VolDataFile, err)
	}
	driver, handle := data[volDataDriver], data[volDataHandle]
	unlock := m.csi.lock(csi.UniqueVolumeName(driver, handle))
	defer unlock()
	client, err := m.csiNodeClient(ctx, driver, "Unmounter.TearDownAt")
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, csiTimeout)
	defer cancel()
	if _, err := client.NodeUnpublishVolume(cctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: handle, TargetPath: publishPath}); err != nil {
		return fmt.Errorf("%sUnmounter.TearDownAt failed: %v", csiLogPrefix, err)
	}
	// The driver removes the target path; nodelet what it made, never
	// across a mount the driver left.
	if err := mountutil.RemoveAllUnmounted(dir); err != nil {
		return fmt.Errorf("%sUnmounter.TearDownAt failed to clean mount dir: %v", csiLogPrefix, err)
	}
	klog.FromContext(ctx).V(2).Info("Unpublished CSI volume", "podUID", podUID, "volume", specName, "driver", driver, "volumeHandle", handle)
	if mode := data[volDataMode]; mode != "" && mode != string(storagev1.VolumeLifecyclePersistent) {
		return nil
	}
	if err := m.unstageUnused(cctx, client, driver, handle); err != nil {
		return fmt.Errorf("UnmountDevice failed for volume %q: %w", specName, err)
	}
	return nil
}

// csiNodeClient is the driver's node client for a teardown; the error says
// which step (upstream's name for it) could not get it.
func (m *Manager) csiNodeClient(ctx context.Context, driver, step string) (csipb.NodeClient, error) {
	if m.csiDrivers == nil {
		return nil, fmt.Errorf("%s%s failed to get CSI client: driver name %s not found in the list of registered CSI drivers", csiLogPrefix, step, driver)
	}
	client, err := m.csiDrivers.NodeClient(ctx, driver)
	if err != nil {
		return nil, fmt.Errorf("%s%s failed to get CSI client: %v", csiLogPrefix, step, err)
	}
	return client, nil
}

// unstageUnused unstages the volume and removes its staging directory when
// it is staged and no pod has it published any more. The caller holds the
// volume's lock, so no set-up of another pod is half done.
func (m *Manager) unstageUnused(ctx context.Context, client csipb.NodeClient, driver, handle string) error {
	stagingDir := csi.StagingDir(m.rootDir, driver, handle)
	key := csi.UniqueVolumeName(driver, handle)
	if _, err := os.Lstat(stagingDir); errors.Is(err, fs.ErrNotExist) {
		m.csi.setStaged(key, false)
		return nil
	}
	published, err := publishedCSIVolumes(m.rootDir)
	if err != nil {
		return err
	}
	for _, d := range published {
		if d[volDataDriver] == driver && d[volDataHandle] == handle {
			return nil
		}
	}
	resp, err := client.NodeGetCapabilities(ctx, &csipb.NodeGetCapabilitiesRequest{})
	if err != nil {
		return fmt.Errorf("%sattacher.UnmountDevice failed to check whether STAGE_UNSTAGE_VOLUME set: %v", csiLogPrefix, err)
	}
	stagingPath := csi.StagingPath(m.rootDir, driver, handle)
	if csiCapsOf(resp).stage {
		if _, err := client.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: handle, StagingTargetPath: stagingPath}); err != nil {
			return fmt.Errorf("%sattacher.UnmountDevice failed: %v", csiLogPrefix, err)
		}
	}
	m.csi.setStaged(key, false)
	if err := mountutil.RemoveAllUnmounted(stagingDir); err != nil {
		return fmt.Errorf("%sfailed to clean up global mount %s: %v", csiLogPrefix, stagingDir, err)
	}
	klog.FromContext(ctx).V(2).Info("Unstaged CSI volume", "driver", driver, "volumeHandle", handle)
	return nil
}

// publishedCSIVolumes reads the vol_data.json of every pod's CSI volume:
// <root>/pods/*/volumes/kubernetes.io~csi/*/vol_data.json. Unreadable ones
// are skipped (and logged): they name no volume.
func publishedCSIVolumes(rootDir string) ([]volData, error) {
	return readVolDataGlob(filepath.Join(rootDir, "pods", "*", "volumes", csi.PodPluginDir, "*", csi.VolDataFile))
}

// stagedCSIVolumes reads the vol_data.json beside every staging path.
func stagedCSIVolumes(rootDir string) ([]volData, error) {
	return readVolDataGlob(filepath.Join(csi.PluginsDir(rootDir), csi.PluginName, "*", "*", csi.VolDataFile))
}

func readVolDataGlob(pattern string) ([]volData, error) {
	files, err := filepath.Glob(pattern)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", pattern, err)
	}
	var out []volData
	for _, f := range files {
		d, err := readVolData(filepath.Dir(f))
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				klog.ErrorS(err, "Skipping an unreadable CSI volume data file", "path", f)
			}
			continue
		}
		out = append(out, d)
	}
	return out, nil
}

// CSIInUse is the memory of which attachable CSI volumes pods use. It is
// made before the Manager (and given to it with WithCSIInUse) so that the
// node status, whose controller the Manager needs first, can list them.
type CSIInUse struct {
	rootDir string
	st      *csiState
}

// NewCSIInUse returns an empty memory for a manager rooted at rootDir.
func NewCSIInUse(rootDir string) *CSIInUse {
	return &CSIInUse{rootDir: rootDir, st: newCSIState()}
}

// WithCSIInUse makes the manager keep its CSI memory in u (of the same root dir).
func WithCSIInUse(u *CSIInUse) Option {
	return func(m *Manager) { m.csi = u.st }
}

// VolumesInUse is the in-use list of the manager's memory (CSIInUse.List).
func (m *Manager) VolumesInUse() []v1.UniqueVolumeName {
	return (&CSIInUse{rootDir: m.rootDir, st: m.csi}).List()
}

// List names (sorted) the attachable CSI volumes of the pods being
// set up or mounted, for node.status.volumesInUse: the attach/detach
// controller does not detach a volume listed there. From memory (pods set
// up by this process, attachable per their CSIDriver) and from disk (the
// volumes published or staged, also before a restart), a volume on disk
// counting unless this process found it not attachable.
func (c *CSIInUse) List() []v1.UniqueVolumeName {
	names := map[string]bool{}
	c.st.mu.Lock()
	for _, vols := range c.st.inUse {
		for _, u := range vols {
			names[u] = true
		}
	}
	attachable := make(map[string]bool, len(c.st.attachable))
	for u, a := range c.st.attachable {
		attachable[u] = a
	}
	c.st.mu.Unlock()

	published, err := publishedCSIVolumes(c.rootDir)
	if err != nil {
		klog.ErrorS(err, "Listing published CSI volumes")
	}
	staged, err := stagedCSIVolumes(c.rootDir)
	if err != nil {
		klog.ErrorS(err, "Listing staged CSI volumes")
	}
	mapped, err := blockCSIVolumes(c.rootDir)
	if err != nil {
		klog.ErrorS(err, "Listing mapped CSI block volumes")
	}
	for _, d := range append(append(published, staged...), mapped...) {
		if mode := d[volDataMode]; mode != "" && mode != string(storagev1.VolumeLifecyclePersistent) {
			continue // inline volumes are never attached
		}
		u := csi.UniqueVolumeName(d[volDataDriver], d[volDataHandle])
		if a, known := attachable[u]; known && !a {
			continue
		}
		names[u] = true
	}
	out := make([]v1.UniqueVolumeName, 0, len(names))
	for u := range names {
		out = append(out, v1.UniqueVolumeName(u))
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
