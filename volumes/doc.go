// Package volumes prepares a pod's volumes on the host, in the upstream
// kubelet's directory layout, so the runtime can bind-mount them:
// <rootDir>/pods/<podUID>/volumes/kubernetes.io~<plugin>/<volumeName>
// (docs/on-disk.md has the whole layout).
//
// # Local volumes
//
// emptyDir (and Memory), hostPath, configMap, secret, downwardAPI and
// projected (with the service account token through TokenRequest). SetUpPod
// runs on every pod sync and refreshes payload volumes with the atomic writer:
// the ..data link is swapped only when the content differs, and a failed
// refresh keeps the earlier content. Image volumes hold nothing on the host:
// podruntime pulls and mounts them through CRI.
//
// # Claims
//
// persistentVolumeClaim and generic ephemeral volumes (claim <pod>-<volume>,
// owned by the pod) whose claim is bound to a hostPath or local
// PersistentVolume. The claim and the volume are read with a Get on each
// set-up, as upstream, and judged by the pure decideClaim (missing, unbound or
// deleting claim, PV not bound to it, volumeMode, the local PV's node
// affinity; read-only only from the pod volume's readOnly), with upstream's
// messages. hostPath PVs pass the hostPath type check and go to the runtime as
// is (no fsGroup). local PVs are bind-mounted once per pod, with fsGroup
// applied on that mount per fsGroupChangePolicy (OnRootMismatch skips a root
// that already matches) unless read-only or mounted by another pod; teardown
// only unmounts. A claim that cannot be processed, or a PV of another type
// (named: NFS, iSCSI...), waits with upstream's "Unable to attach or mount
// volumes: ... failed to process volumes=[...]" FailedMount and is retried on
// later syncs; a claim no container uses is skipped; one set up before stays
// while its objects cannot be read.
//
// # CSI
//
// With WithCSI (node clients of the registered drivers, CSIDriver and
// VolumeAttachment getters, the node name), CSI PVs and inline csi volumes are
// judged by the pure decideCSI from the CSIDriver: attach required unless
// attachRequired: false; inline needs the Ephemeral lifecycle mode;
// podInfoOnMount keys; fsGroupPolicy with the pod's fsGroup, or
// volume_mount_group for VOLUME_MOUNT_GROUP drivers; tokenRequests;
// requiresRepublish. An attachable volume waits for its VolumeAttachment
// ("unattached volumes=[...]", never blocking the sync), is staged once per
// node (STAGE_UNSTAGE_VOLUME) and published per pod, each with upstream's
// vol_data.json; a mounted publish path is reused without driver calls, also
// after a restart. Teardown unpublishes from vol_data.json and unstages after
// the last pod, and fails (keeping the volume) while the driver is not
// registered.
//
// A mounted CSI PV whose claim was resized (PV capacity above the size the
// node knows, claim NodeResizePending or NodeResizeInProgress; the pure
// decideExpand) gets NodeExpandVolume once on a pod sync. With
// WithClaimExpansion the claim status is patched as upstream (capacity, resize
// status and conditions cleared; NodeResizeError or NodeResizeInfeasible on
// final failures) with FileSystemResizeSuccessful and VolumeResizeFailed
// events; a driver without EXPAND_VOLUME is marked finished without a call.
//
// # Block volumes
//
// Claims of volumeMode Block used in volumeDevices (local PVs on a block
// device, CSI PVs) are mapped as upstream (block.go): CSI block volumes are
// staged at plugins/kubernetes.io/csi/volumeDevices/staging/<pv> and published
// at .../volumeDevices/publish/<pv>/<podUID> with a block capability,
// vol_data.json in .../volumeDevices/<pv>/data; the device is bind-mounted at
// the plugin's global map path .../<podUID> with a loop device
// (internal/loopdev) holding it open, and the pod's link
// pods/<uid>/volumeDevices/<plugin>/<pv> goes to the runtime as a CRI device
// (mrw, or r when read-only). Teardown unmaps, unpublishes and unstages after
// the last pod.
//
// VolumesInUse (memory and disk) feeds node.status.volumesInUse;
// MountedVolumes tells stats what to measure.
package volumes
