// Package csi is nodelet's side of the Container Storage Interface: the
// kubelet's directory layout and names for CSI volumes, the plugin
// registration socket directory, and the registry of node plugins that
// registered there.
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

// RegistryDir is where node plugins put their registration sockets.
func RegistryDir(rootDir string) string { return filepath.Join(rootDir, "plugins_registry") }

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
