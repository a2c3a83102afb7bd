package volumes

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/csi"
	"github.com/nodelet/nodelet/internal/loopdev"
	"github.com/nodelet/nodelet/internal/mountutil"
)

// Block volumes (claims of volumeMode Block, used in volumeDevices) are
// mapped as upstream maps them: the device (a local volume's device, or the
// file a CSI driver put the device on at the publish path) is bind-mounted
// at <globalMapPath>/<podUID>, a loop device is attached to that file (so
// the device stays open: a device removed under a running container cannot
// silently become another one with the same name), and the pod's link
// pods/<podUID>/volumeDevices/<plugin>/<specName> points at the device. The
// link is what the runtime is given (it resolves it).

// localGlobalMapPath is where a local block volume is bind-mounted per pod:
// <root>/plugins/kubernetes.io~local-volume/volumeDevices/<pvName>.
func localGlobalMapPath(rootDir, pvName string) string {
	return filepath.Join(rootDir, "plugins", pluginLocalVolume, "volumeDevices", pvName)
}

// podDeviceDir is a pod's directory of block volume links of one plugin.
func podDeviceDir(rootDir string, podUID types.UID, plugin string) string {
	return filepath.Join(rootDir, "pods", string(podUID), "volumeDevices", plugin)
}

// mapBlock maps devicePath for the pod: the bind mount at
// globalMapPath/<podUID>, the loop device on it and the link
// linkDir/<name> to devicePath. Each step already done is kept, so it is
// safe to repeat (also after a restart).
func mapBlock(ctx context.Context, devicePath, globalMapPath, linkDir, name string, podUID types.UID) error {
	src, err := os.OpenFile(devicePath, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening block device %s: %w", devicePath, err)
	}
	defer src.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(src.Fd()), &st); err != nil {
		return fmt.Errorf("stat of %s: %w", devicePath, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return fmt.Errorf("%s is not a block device", devicePath)
	}
	mapFile := filepath.Join(globalMapPath, string(podUID))
	reused, err := bindMount(src, mapFile)
	if err != nil {
		return fmt.Errorf("blkUtil.MapDevice failed. devicePath: %s, globalMapPath:%s, podUID: %s, bindMount: true: %w", devicePath, globalMapPath, podUID, err)
	}
	if err := ensureLink(linkDir, name, devicePath); err != nil {
		return fmt.Errorf("blkUtil.MapDevice failed. devicePath: %s, podVolumeMapPath:%s, volumeMapName: %s, bindMount: false: %w", devicePath, linkDir, name, err)
	}
	link := filepath.Join(linkDir, name)
	loop, err := loopdev.EnsureAttached(mapFile)
	if err != nil {
		return fmt.Errorf("blkUtil.AttachFileDevice failed. globalMapPath:%s, podUID: %s: %w", globalMapPath, podUID, err)
	}
	if !reused {
		klog.FromContext(ctx).V(2).Info("Mapped block volume", "podUID", podUID, "device", devicePath, "link", link, "loopDevice", loop)
	}
	return nil
}

// ensureLink makes linkDir/name a symlink to target.
func ensureLink(linkDir, name, target string) error {
	if err := os.MkdirAll(linkDir, 0o750); err != nil {
		return fmt.Errorf("creating %s: %w", linkDir, err)
	}
	link := filepath.Join(linkDir, name)
	if cur, err := os.Readlink(link); err == nil && cur == target {
		return nil
	}
	if err := os.Remove(link); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("replacing %s: %w", link, err)
	}
	return os.Symlink(target, link)
}

// unmapBlock undoes mapBlock: the loop device goes, then the link and the
// bind mount (never removing anything behind a mount that stays).
func unmapBlock(globalMapPath, linkDir, name string, podUID types.UID) error {
	mapFile := filepath.Join(globalMapPath, string(podUID))
	if err := loopdev.DetachAll(mapFile); err != nil {
		return fmt.Errorf("blkUtil.DetachFileDevice failed. globalUnmapPath:%s, podUID: %s: %w", globalMapPath, podUID, err)
	}
	if err := os.Remove(filepath.Join(linkDir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing the block volume link: %w", err)
	}
	if _, err := os.Lstat(mapFile); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := mountutil.Unmount(mapFile); err != nil {
		return fmt.Errorf("unmounting %s: %w", mapFile, err)
	}
	if err := mountutil.RemoveAllUnmounted(mapFile); err != nil {
		return err
	}
	return nil
}

// setUpLocalBlock maps a local volume of volumeMode Block: its path must be
// a block device.
func (m *Manager) setUpLocalBlock(ctx context.Context, pod *v1.Pod, pm pvMount) (HostVolume, error) {
	if err := validateVolumeName(pm.pvName); err != nil {
		return HostVolume{}, err
	}
	fi, err := os.Stat(pm.path)
	if err != nil {
		return HostVolume{}, fmt.Errorf("local volume path: %w", err)
	}
	if fi.Mode()&os.ModeDevice == 0 || fi.Mode()&os.ModeCharDevice != 0 {
		return HostVolume{}, fmt.Errorf("local volume %s is not a block device, but PersistentVolume %s has volumeMode Block", pm.path, pm.pvName)
	}
	linkDir := podDeviceDir(m.rootDir, pod.UID, pluginLocalVolume)
	if err := mapBlock(ctx, pm.path, localGlobalMapPath(m.rootDir, pm.pvName), linkDir, pm.pvName, pod.UID); err != nil {
		return HostVolume{}, err
	}
	return HostVolume{Path: filepath.Join(linkDir, pm.pvName), ReadOnly: pm.readOnly, Device: true}, nil
}

// blockMapped reports whether the pod's block volume is mapped: its link is
// there and its global map file is mounted.
func blockMapped(globalMapPath, link string, podUID types.UID) (bool, error) {
	if _, err := os.Readlink(link); err != nil {
		return false, nil
	}
	return mountutil.IsMountPoint(filepath.Join(globalMapPath, string(podUID)))
}

// csiBlockCapability is the block volume capability of NodeStageVolume and
// NodePublishVolume (no fsType, no mount flags, as upstream).
func csiBlockCapability(c *csiVolume, caps csiCaps) *csipb.VolumeCapability {
	return &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csiAccessMode(c.accessMode, caps.singleNodeMultiWriter)},
	}
}

// mapCSIBlock stages (when the driver has STAGE_UNSTAGE_VOLUME and this
// process did not stage it yet: NodeStageVolume is idempotent), publishes
// at the pod's block publish path and maps the result for the pod.
// vol_data.json (beside the volume's global map path) and the pod's link
// are written first, so a teardown finds the volume and its driver
// whatever the calls left.
func (m *Manager) mapCSIBlock(ctx context.Context, pod *v1.Pod, client csipb.NodeClient, cv *csiVolume, caps csiCaps, publishContext map[string]string) error {
	dataDir := csi.BlockDataDir(m.rootDir, cv.specName)
	if err := os.MkdirAll(dataDir, 0o750); err != nil {
		return fmt.Errorf("%sfailed to create data dir %s:  %v", csiLogPrefix, dataDir, err)
	}
	data := volData{
		volDataSpecVolID:    cv.specName,
		volDataHandle:       cv.handle,
		volDataDriver:       cv.driver,
		volDataNodeName:     m.nodeName,
		volDataAttachmentID: csi.AttachmentName(cv.handle, cv.driver, m.nodeName),
	}
	if err := writeVolData(dataDir, data); err != nil {
		return fmt.Errorf("%sfailed to save volume info data: %v", csiLogPrefix, err)
	}
	// The pod's link goes first, dangling until the publish: whatever the
	// calls below leave, the pod's teardown finds the volume by it, and
	// unpublishes and unstages it.
	publishPath := csi.BlockPublishPath(m.rootDir, cv.specName, pod.UID)
	if err := ensureLink(csi.PodDeviceDir(m.rootDir, pod.UID), cv.specName, publishPath); err != nil {
		return fmt.Errorf("creating the pod's link of block volume %s: %w", cv.specName, err)
	}
	var stagingPath string
	if caps.stage {
		stagingPath = csi.BlockStagingPath(m.rootDir, cv.specName)
		if !m.csi.isStaged(cv.uniqueName()) {
			if err := m.stageCSIBlock(ctx, client, cv, caps, publishContext, stagingPath); err != nil {
				return &SetUpError{Spec: cv.specName, Op: "MapVolume.SetUpDevice", Err: err}
			}
		}
	}
	if err := os.MkdirAll(filepath.Dir(publishPath), 0o750); err != nil {
		return &SetUpError{Spec: cv.specName, Op: "MapVolume.MapPodDevice", Err: fmt.Errorf("%sblockMapper.publishVolumeForBlock failed to create dir %s:  %v", csiLogPrefix, filepath.Dir(publishPath), err)}
	}
	var secrets map[string]string
	if cv.publishSecret != nil {
		var err error
		if secrets, err = m.csiSecret(ctx, cv.publishSecret); err != nil {
			return &SetUpError{Spec: cv.specName, Op: "MapVolume.MapPodDevice", Err: fmt.Errorf("%sblockMapper.publishVolumeForBlock failed to get NodePublishSecretRef %s/%s: %v",
				csiLogPrefix, cv.publishSecret.Namespace, cv.publishSecret.Name, err)}
		}
	}
	if _, err := client.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{
		VolumeId:          cv.handle,
		PublishContext:    publishContext,
		StagingTargetPath: stagingPath,
		TargetPath:        publishPath,
		VolumeCapability:  csiBlockCapability(cv, caps),
		Readonly:          cv.readOnly,
		Secrets:           secrets,
		VolumeContext:     cv.volumeContext,
	}); err != nil {
		return &SetUpError{Spec: cv.specName, Op: "MapVolume.MapPodDevice", Err: fmt.Errorf("%sblockMapper.publishVolumeForBlock failed: %v", csiLogPrefix, err)}
	}
	if err := mapBlock(ctx, publishPath, csi.BlockGlobalMapPath(m.rootDir, cv.specName), csi.PodDeviceDir(m.rootDir, pod.UID), cv.specName, pod.UID); err != nil {
		return &SetUpError{Spec: cv.specName, Op: "MapVolume.MapPodDevice", Err: err}
	}
	return nil
}

func (m *Manager) stageCSIBlock(ctx context.Context, client csipb.NodeClient, cv *csiVolume, caps csiCaps, publishContext map[string]string, stagingPath string) error {
	var secrets map[string]string
	if cv.stageSecret != nil {
		var err error
		if secrets, err = m.csiSecret(ctx, cv.stageSecret); err != nil {
			return fmt.Errorf("failed to get NodeStageSecretRef %s/%s: %v", cv.stageSecret.Namespace, cv.stageSecret.Name, err)
		}
	}
	if err := os.MkdirAll(stagingPath, 0o750); err != nil {
		return fmt.Errorf("%sblockMapper.stageVolumeForBlock failed to create dir %s: %v", csiLogPrefix, stagingPath, err)
	}
	if _, err := client.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
		VolumeId:          cv.handle,
		PublishContext:    publishContext,
		StagingTargetPath: stagingPath,
		VolumeCapability:  csiBlockCapability(cv, caps),
		Secrets:           secrets,
		VolumeContext:     cv.stageContext,
	}); err != nil {
		return err
	}
	m.csi.setStaged(cv.uniqueName(), true)
	klog.FromContext(ctx).V(2).Info("Staged CSI block volume", "driver", cv.driver, "volumeHandle", cv.handle, "path", stagingPath)
	return nil
}

// tearDownBlock unmaps every block volume of the pod: local ones, then CSI
// ones (unpublished, and unstaged when no other pod maps them), and
// removes the pod's volumeDevices directory when nothing is left there.
func (m *Manager) tearDownBlock(ctx context.Context, podUID types.UID) error {
	var errs []error
	localDir := podDeviceDir(m.rootDir, podUID, pluginLocalVolume)
	for _, name := range dirNames(localDir) {
		gmp := localGlobalMapPath(m.rootDir, name)
		if err := unmapBlock(gmp, localDir, name, podUID); err != nil {
			errs = append(errs, fmt.Errorf("UnmapVolume.UnmapBlockVolume failed for volume %q: %w", name, err))
			continue
		}
		removeIfEmpty(gmp)
	}
	csiDir := csi.PodDeviceDir(m.rootDir, podUID)
	for _, name := range dirNames(csiDir) {
		if err := m.tearDownCSIBlock(ctx, podUID, name); err != nil {
			errs = append(errs, fmt.Errorf("UnmapVolume.UnmapDevice failed for volume %q: %w", name, err))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	dir := filepath.Join(m.rootDir, "pods", string(podUID), "volumeDevices")
	if _, err := os.Lstat(dir); err == nil {
		if err := mountutil.RemoveAllUnmounted(dir); err != nil {
			return err
		}
	}
	return nil
}

func (m *Manager) tearDownCSIBlock(ctx context.Context, podUID types.UID, specName string) error {
	if err := validateVolumeName(specName); err != nil {
		return err
	}
	gmp := csi.BlockGlobalMapPath(m.rootDir, specName)
	linkDir := csi.PodDeviceDir(m.rootDir, podUID)
	data, err := readVolData(csi.BlockDataDir(m.rootDir, specName))
	if err != nil {
		return fmt.Errorf("%s of block volume %s cannot be read, so its driver is unknown: %w", csi.VolDataFile, specName, err)
	}
	driver, handle := data[volDataDriver], data[volDataHandle]
	unlock := m.csi.lock(csi.UniqueVolumeName(driver, handle))
	defer unlock()
	if err := unmapBlock(gmp, linkDir, specName, podUID); err != nil {
		return err
	}
	client, err := m.csiNodeClient(ctx, driver, "blockMapper.UnmapPodDevice")
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, csiTimeout)
	defer cancel()
	// Called even when the publish path is gone: an earlier NodePublishVolume
	// may have timed out and still be running in the driver.
	publishPath := csi.BlockPublishPath(m.rootDir, specName, podUID)
	if _, err := client.NodeUnpublishVolume(cctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: handle, TargetPath: publishPath}); err != nil {
		return fmt.Errorf("%sblockMapper.unpublishVolumeForBlock failed: %v", csiLogPrefix, err)
	}
	if _, err := os.Lstat(publishPath); err == nil {
		if err := mountutil.RemoveAllUnmounted(publishPath); err != nil {
			return err
		}
	}
	klog.FromContext(ctx).V(2).Info("Unpublished CSI block volume", "podUID", podUID, "volume", specName, "driver", driver, "volumeHandle", handle)
	if len(dirNames(gmp)) > 0 {
		return nil // another pod maps it
	}
	resp, err := client.NodeGetCapabilities(cctx, &csipb.NodeGetCapabilitiesRequest{})
	if err != nil {
		return fmt.Errorf("%sblockMapper.unstageVolumeForBlock failed to check STAGE_UNSTAGE_VOLUME capability: %v", csiLogPrefix, err)
	}
	stagingPath := csi.BlockStagingPath(m.rootDir, specName)
	if _, err := os.Lstat(stagingPath); err == nil && csiCapsOf(resp).stage {
		if _, err := client.NodeUnstageVolume(cctx, &csipb.NodeUnstageVolumeRequest{VolumeId: handle, StagingTargetPath: stagingPath}); err != nil {
			return fmt.Errorf("%sblockMapper.unstageVolumeForBlock failed: %v", csiLogPrefix, err)
		}
		klog.FromContext(ctx).V(2).Info("Unstaged CSI block volume", "driver", driver, "volumeHandle", handle)
	}
	m.csi.setStaged(csi.UniqueVolumeName(driver, handle), false)
	// What is left is nodelet's: the staging and publish directories and the
	// volume's data and global map directories.
	var errs []error
	for _, p := range []string{stagingPath, csi.BlockPublishDir(m.rootDir, specName), csi.BlockVolumeDir(m.rootDir, specName)} {
		if _, err := os.Lstat(p); err == nil {
			errs = append(errs, mountutil.RemoveAllUnmounted(p))
		}
	}
	return errors.Join(errs...)
}

// blockCSIVolumes reads the vol_data.json of every mapped CSI block volume.
func blockCSIVolumes(rootDir string) ([]volData, error) {
	return readVolDataGlob(filepath.Join(csi.VolumeDevicesDir(rootDir), "*", "data", csi.VolDataFile))
}

// dirNames lists the names in dir; none when it cannot be read.
func dirNames(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// removeIfEmpty removes dir when it is empty (and leaves it otherwise).
func removeIfEmpty(dir string) {
	if len(dirNames(dir)) == 0 {
		_ = os.Remove(dir)
	}
}
