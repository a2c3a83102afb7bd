// Package csi is nodelet's side of the Container Storage Interface: the
// kubelet's directory layout and names for CSI volumes, and the registry of
// CSI node plugins, the plugin watcher's (pluginmanager) CSIPlugin handler.
//
// paths.go holds upstream's names and paths: staging dirs by the sha256 of the
// volume handle, the publish dir, unique volume names and VolumeAttachment
// names, the block volume paths.
//
// Registry checks a plugin's GetInfo as upstream (a 1.x version; of two
// registrations the higher version wins), calls NodeGetInfo over a connection
// it keeps, then writes the Node's csi.volume.kubernetes.io/nodeid annotation
// and topology labels and its CSINode driver entry. The changes are pure
// functions (installOnNode, installOnCSINode, uninstallFromNode,
// uninstallFromCSINode), written one at a time with conflicts retried. A
// driver is deregistered when the watcher says its socket went. NodeClient
// gives volumes a registered driver's node client.
package csi
