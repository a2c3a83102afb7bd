package csi

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"

	"k8s.io/apimachinery/pkg/types"
)

// Names and directories as the upstream kubelet spells them, so that CSI
// drivers deployed for it (their hostPath mounts of the kubelet root) and its
// volume reconstruction find the same things on a nodelet node.
const (
	// PluginName is the in-tree plugin name of CSI volumes: unique volume
	// names (node.status.volumesInUse) start with it.
	PluginName = "kubernetes.io/csi"
	// PodPluginDir is the plugin directory under a pod's volumes directory.
	PodPluginDir = "kubernetes.io~csi"
	// VolDataFile is written next to each mount: what teardown and
	// reconstruction after a restart need (driver, volume handle, ...).
	VolDataFile = "vol_data.json"
)

// PluginsDir is where plugins keep their own sockets and state.
func PluginsDir(rootDir string) string { return filepath.Join(rootDir, "plugins") }

// StagingDir is the directory of a volume's global (staging) mount: its
// globalmount subdirectory is NodeStageVolume's staging_target_path, and
// vol_data.json sits beside it. Keyed by the volume handle, not the PV name,
// so two PVs of one volume are staged once (kubernetes#105899).
func StagingDir(rootDir, driver, volumeHandle string) string {
	sum := sha256.Sum256([]byte(volumeHandle))
	return filepath.Join(PluginsDir(rootDir), PluginName, driver, hex.EncodeToString(sum[:]))
}

// StagingPath is NodeStageVolume's staging_target_path.
func StagingPath(rootDir, driver, volumeHandle string) string {
	return filepath.Join(StagingDir(rootDir, driver, volumeHandle), "globalmount")
}

// PodVolumeDir is a pod's directory of one CSI volume, named by the PV name
// (or the pod's volume name for an inline volume); its mount subdirectory is
// NodePublishVolume's target_path, and vol_data.json sits beside it.
func PodVolumeDir(rootDir string, podUID types.UID, specName string) string {
	return filepath.Join(rootDir, "pods", string(podUID), "volumes", PodPluginDir, specName)
}

// PublishPath is NodePublishVolume's target_path.
func PublishPath(rootDir string, podUID types.UID, specName string) string {
	return filepath.Join(PodVolumeDir(rootDir, podUID, specName), "mount")
}

// UniqueVolumeName names a CSI volume in node.status.volumesInUse and
// volumesAttached: kubernetes.io/csi/<driver>^<volumeHandle>.
func UniqueVolumeName(driver, volumeHandle string) string {
	return PluginName + "/" + driver + "^" + volumeHandle
}

// AttachmentName is the name of the VolumeAttachment the attach/detach
// controller creates for a volume on a node: csi-<sha256(handle+driver+node)>.
func AttachmentName(volumeHandle, driver, nodeName string) string {
	sum := sha256.Sum256([]byte(volumeHandle + driver + nodeName))
	return "csi-" + hex.EncodeToString(sum[:])
}

// InlineVolumeHandle is the handle given to an inline (ephemeral) CSI
// volume: csi-<sha256(podUID+volumeName)>.
func InlineVolumeHandle(podUID types.UID, volumeName string) string {
	sum := sha256.Sum256([]byte(string(podUID) + volumeName))
	return "csi-" + hex.EncodeToString(sum[:])
}

// Block volumes (volumeMode: Block) live under VolumeDevicesDir, as upstream lays them out:
//
//	volumeDevices/staging/<specName>           NodeStageVolume's staging_target_path (a directory)
//	volumeDevices/publish/<specName>/<podUID>  NodePublishVolume's target_path (a file the driver puts the device on)
//	volumeDevices/<specName>/data/vol_data.json
//	volumeDevices/<specName>/dev/<podUID>      the publish path bind-mounted (a loop device on it keeps the device open)
//	pods/<podUID>/volumeDevices/kubernetes.io~csi/<specName>  a link to the publish path, given to the runtime
//
// specName is the PV name.

// VolumeDevicesDir is the CSI plugin's directory of block volumes.
func VolumeDevicesDir(rootDir string) string {
	return filepath.Join(PluginsDir(rootDir), PluginName, "volumeDevices")
}

// BlockStagingPath is a block volume's staging_target_path.
func BlockStagingPath(rootDir, specName string) string {
	return filepath.Join(VolumeDevicesDir(rootDir), "staging", specName)
}

// BlockPublishDir holds a block volume's publish paths, one per pod.
func BlockPublishDir(rootDir, specName string) string {
	return filepath.Join(VolumeDevicesDir(rootDir), "publish", specName)
}

// BlockPublishPath is a block volume's target_path for one pod.
func BlockPublishPath(rootDir, specName string, podUID types.UID) string {
	return filepath.Join(BlockPublishDir(rootDir, specName), string(podUID))
}

// BlockVolumeDir holds a block volume's data and global map directories.
func BlockVolumeDir(rootDir, specName string) string {
	return filepath.Join(VolumeDevicesDir(rootDir), specName)
}

// BlockDataDir holds a block volume's vol_data.json.
func BlockDataDir(rootDir, specName string) string {
	return filepath.Join(BlockVolumeDir(rootDir, specName), "data")
}

// BlockGlobalMapPath is the directory where each pod's publish path is
// bind-mounted, as a file named by the pod's UID.
func BlockGlobalMapPath(rootDir, specName string) string {
	return filepath.Join(BlockVolumeDir(rootDir, specName), "dev")
}

// PodDeviceDir is a pod's directory of CSI block volume links, each named by
// the volume's specName.
func PodDeviceDir(rootDir string, podUID types.UID) string {
	return filepath.Join(rootDir, "pods", string(podUID), "volumeDevices", PodPluginDir)
}
