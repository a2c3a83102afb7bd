package volumes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodelet/nodelet/csi"
)

// csiLogPrefix starts the CSI plugin's messages upstream ("kubernetes.io/csi: ..."),
// so FailedMount events read the same on a nodelet node.
const csiLogPrefix = csi.PluginName + ": "

// volume_context keys of podInfoOnMount and tokenRequests, as upstream sets them.
const (
	csiPodNameKey        = "csi.storage.k8s.io/pod.name"
	csiPodNamespaceKey   = "csi.storage.k8s.io/pod.namespace"
	csiPodUIDKey         = "csi.storage.k8s.io/pod.uid"
	csiServiceAccountKey = "csi.storage.k8s.io/serviceAccount.name"
	csiEphemeralKey      = "csi.storage.k8s.io/ephemeral"
	csiTokensKey         = "csi.storage.k8s.io/serviceAccount.tokens"
)

// CSIDrivers gives a node client per registered CSI driver (the plugin
// registry); a driver that is not registered is an error, whose text should
// be upstream's "driver name X not found in the list of registered CSI drivers".
type CSIDrivers interface {
	NodeClient(ctx context.Context, driver string) (csipb.NodeClient, error)
}

// CSIObjects reads storage.k8s.io/v1 objects. Missing objects must be
// reported with an error for which apierrors.IsNotFound is true.
type CSIObjects interface {
	GetCSIDriver(ctx context.Context, name string) (*storagev1.CSIDriver, error)
	GetVolumeAttachment(ctx context.Context, name string) (*storagev1.VolumeAttachment, error)
}

// WithCSI lets the manager mount CSI volumes: CSI PersistentVolumes (through
// persistentVolumeClaim and generic ephemeral volumes, which also need
// WithClaims) and inline csi volumes, through the node plugins in drivers;
// CSIDriver and VolumeAttachment objects are read through objects, and
// VolumeAttachments are the ones of nodeName.
func WithCSI(drivers CSIDrivers, objects CSIObjects, nodeName string) Option {
	return func(m *Manager) {
		m.csiDrivers = drivers
		m.csiObjects = objects
		m.nodeName = nodeName
	}
}

// CSIObjectsFromClientset reads CSIDrivers and VolumeAttachments with a Get each.
func CSIObjectsFromClientset(cs kubernetes.Interface) CSIObjects {
	return clientsetGetter{cs: cs}
}

func (g clientsetGetter) GetCSIDriver(ctx context.Context, name string) (*storagev1.CSIDriver, error) {
	return g.cs.StorageV1().CSIDrivers().Get(ctx, name, metav1.GetOptions{})
}

func (g clientsetGetter) GetVolumeAttachment(ctx context.Context, name string) (*storagev1.VolumeAttachment, error) {
	return g.cs.StorageV1().VolumeAttachments().Get(ctx, name, metav1.GetOptions{})
}

// AttachError is an attachable volume that is not attached to this node yet
// (its VolumeAttachment is missing, not attached, failed or being deleted):
// upstream's "unattached volumes". The pod waits; later syncs look again.
type AttachError struct {
	Volume string
	Err    error
}

func (e *AttachError) Error() string { return e.Err.Error() }
func (e *AttachError) Unwrap() error { return e.Err }

// csiFacts is what decideCSI judges: the pod's volume, either a CSI
// PersistentVolume (with the claim volume's readOnly) or an inline csi
// source, the driver's CSIDriver object (nil when there is none) or the
// error reading it, and the node.
type csiFacts struct {
	pod           *v1.Pod
	volume        string
	pv            *v1.PersistentVolume
	claimReadOnly bool
	inline        *v1.CSIVolumeSource
	driver        *storagev1.CSIDriver
	driverErr     error // other than NotFound
	nodeName      string
}

// csiVolume is what decideCSI decided: how to stage and publish the volume.
type csiVolume struct {
	driver         string
	handle         string
	specName       string // the PV name, or the pod's volume name for an inline volume
	mode           storagev1.VolumeLifecycleMode
	readOnly       bool
	fsType         string
	mountOptions   []string
	accessMode     v1.PersistentVolumeAccessMode
	volumeContext  map[string]string // NodePublishVolume's; with the pod's information when podInfoOnMount
	stageContext   map[string]string // NodeStageVolume's: the PV's volumeAttributes only
	stageSecret    *v1.SecretReference
	publishSecret  *v1.SecretReference
	attachRequired bool
	// fsGroup is applied by nodelet after the publish (fsGroupPolicy said so)
	// unless the driver has VOLUME_MOUNT_GROUP; mountGroup, the pod's
	// fsGroup, is then given to the driver as volume_mount_group instead.
	fsGroup             *int64
	fsGroupChangePolicy v1.PodFSGroupChangePolicy
	mountGroup          *int64
	// tokenRequests: audiences to request service account tokens for,
	// given in volume_context; requiresRepublish: publish on every sync.
	tokenRequests     []storagev1.TokenRequest
	requiresRepublish bool
	// block: a PV of volumeMode Block, mapped (volumeDevices paths, a
	// block capability, no fsGroup) instead of mounted.
	block bool
}

func (c *csiVolume) uniqueName() string { return csi.UniqueVolumeName(c.driver, c.handle) }

// decideCSI decides how a CSI volume is mounted, from its source and the
// driver's CSIDriver object, as upstream's CSI plugin: attach is required
// unless a CSIDriver says attachRequired: false; an inline volume needs a
// CSIDriver listing the Ephemeral lifecycle mode (a PV: Persistent, or no
// CSIDriver); the fsGroup per fsGroupPolicy; read-only from the pod's volume
// or the PV's csi.readOnly; pod information in volume_context when
// podInfoOnMount. Errors are *SetUpError.
func decideCSI(f *csiFacts) (*csiVolume, error) {
	out := &csiVolume{accessMode: v1.ReadWriteOnce}
	switch {
	case f.pv != nil && f.pv.Spec.CSI != nil:
		src := f.pv.Spec.CSI
		out.driver, out.handle, out.specName = src.Driver, src.VolumeHandle, f.pv.Name
		out.mode = storagev1.VolumeLifecyclePersistent
		out.readOnly = f.claimReadOnly || src.ReadOnly
		out.fsType = src.FSType
		out.mountOptions = f.pv.Spec.MountOptions
		if len(f.pv.Spec.AccessModes) > 0 {
			// As upstream: the first access mode is the one given to the driver.
			out.accessMode = f.pv.Spec.AccessModes[0]
		}
		out.stageContext = src.VolumeAttributes
		out.volumeContext = copyMap(src.VolumeAttributes)
		out.stageSecret, out.publishSecret = src.NodeStageSecretRef, src.NodePublishSecretRef
		out.block = f.pv.Spec.VolumeMode != nil && *f.pv.Spec.VolumeMode == v1.PersistentVolumeBlock
	case f.inline != nil:
		src := f.inline
		out.driver, out.specName = src.Driver, f.volume
		out.handle = csi.InlineVolumeHandle(f.pod.UID, f.volume)
		out.mode = storagev1.VolumeLifecycleEphemeral
		out.readOnly = isTrue(src.ReadOnly)
		if src.FSType != nil {
			out.fsType = *src.FSType
		}
		out.volumeContext = copyMap(src.VolumeAttributes)
		if src.NodePublishSecretRef != nil {
			out.publishSecret = &v1.SecretReference{Namespace: f.pod.Namespace, Name: src.NodePublishSecretRef.Name}
		}
	default:
		return nil, &SetUpError{Volume: f.volume, Err: errors.New(csiLogPrefix + "volume source not found in volume.Spec")}
	}
	fail := func(err error) error {
		return &SetUpError{Volume: f.volume, Spec: out.specName, Err: err}
	}
	if err := validateVolumeName(out.driver); err != nil {
		return nil, fail(fmt.Errorf("%sinvalid driver name: %w", csiLogPrefix, err))
	}
	if err := validateVolumeName(out.specName); err != nil {
		return nil, fail(err)
	}
	if out.handle == "" {
		return nil, fail(errors.New(csiLogPrefix + "volume handle is empty"))
	}
	if f.driverErr != nil {
		return nil, fail(fmt.Errorf("%smounter.SetupAt failed to check volume lifecycle mode: %v", csiLogPrefix, f.driverErr))
	}
	d := f.driver
	switch {
	case d == nil && out.mode == storagev1.VolumeLifecyclePersistent:
	case d == nil:
		return nil, fail(fmt.Errorf("%smounter.SetupAt failed to check volume lifecycle mode: volume mode %q not supported by driver %s (no CSIDriver object)",
			csiLogPrefix, out.mode, out.driver))
	case !containsMode(d.Spec.VolumeLifecycleModes, out.mode):
		return nil, fail(fmt.Errorf("%smounter.SetupAt failed to check volume lifecycle mode: volume mode %q not supported by driver %s (only supports %q)",
			csiLogPrefix, out.mode, out.driver, d.Spec.VolumeLifecycleModes))
	}
	policy := storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy
	if d != nil {
		if d.Spec.FSGroupPolicy == nil || *d.Spec.FSGroupPolicy == "" {
			return nil, fail(errors.New(csiLogPrefix + "mounter.SetupAt failed to check fsGroup policy: " + csiLogPrefix + "expected valid fsGroupPolicy, received nil value or empty string"))
		}
		policy = *d.Spec.FSGroupPolicy
	}
	// No CSIDriver (or attachRequired unset): attach required, as upstream.
	out.attachRequired = d == nil || d.Spec.AttachRequired == nil || *d.Spec.AttachRequired
	// Inline volumes are never attached.
	out.attachRequired = out.attachRequired && out.mode == storagev1.VolumeLifecyclePersistent
	if d != nil && isTrue(d.Spec.PodInfoOnMount) {
		if out.volumeContext == nil {
			out.volumeContext = map[string]string{}
		}
		out.volumeContext[csiPodNameKey] = f.pod.Name
		out.volumeContext[csiPodNamespaceKey] = f.pod.Namespace
		out.volumeContext[csiPodUIDKey] = string(f.pod.UID)
		out.volumeContext[csiServiceAccountKey] = f.pod.Spec.ServiceAccountName
		out.volumeContext[csiEphemeralKey] = strconv.FormatBool(out.mode == storagev1.VolumeLifecycleEphemeral)
	}
	if d != nil {
		out.tokenRequests = d.Spec.TokenRequests
		out.requiresRepublish = isTrue(d.Spec.RequiresRepublish)
	}
	out.mountGroup = fsGroupOf(f.pod)
	out.fsGroupChangePolicy = fsGroupChangePolicyOf(f.pod)
	if !out.block && csiAppliesFSGroup(out, policy, f.pv) {
		out.fsGroup = out.mountGroup
	}
	return out, nil
}

// csiAppliesFSGroup is upstream's rule for the kubelet changing a CSI
// volume's ownership: never for a read-only volume or policy None, always
// for File; for ReadWriteOnceWithFSType only with an fsType and, for a PV,
// a ReadWriteOnce access mode (inline volumes are mounted ReadWriteOnce).
func csiAppliesFSGroup(c *csiVolume, policy storagev1.FSGroupPolicy, pv *v1.PersistentVolume) bool {
	switch {
	case c.mountGroup == nil || c.readOnly || policy == storagev1.NoneFSGroupPolicy:
		return false
	case policy == storagev1.FileFSGroupPolicy:
		return true
	case c.fsType == "":
		return false
	case pv != nil:
		for _, m := range pv.Spec.AccessModes {
			if m == v1.ReadWriteOnce {
				return true
			}
		}
		return false
	}
	return true
}

func containsMode(modes []storagev1.VolumeLifecycleMode, m storagev1.VolumeLifecycleMode) bool {
	for _, x := range modes {
		if x == m {
			return true
		}
	}
	return false
}

func copyMap(in map[string]string) map[string]string {
	if in == nil {
		return nil
	}
	out := make(map[string]string, len(in))
	for k, v := range in {
		out[k] = v
	}
	return out
}

// csiCaps is what the node plugin's NodeGetCapabilities said.
type csiCaps struct {
	stage, mountGroup, singleNodeMultiWriter bool
	expand                                   bool // EXPAND_VOLUME: NodeExpandVolume
}

func csiCapsOf(resp *csipb.NodeGetCapabilitiesResponse) csiCaps {
	n := csi.NodeCapabilitiesOf(resp)
	return csiCaps{stage: n.StageUnstage, mountGroup: n.VolumeMountGroup, singleNodeMultiWriter: n.SingleNodeMultiWriter, expand: n.ExpandVolume}
}

// csiAccessMode maps a PV access mode to CSI's as upstream: a driver with
// SINGLE_NODE_MULTI_WRITER gets the single-node modes told apart, one
// without gets ReadWriteOncePod as SINGLE_NODE_WRITER.
func csiAccessMode(m v1.PersistentVolumeAccessMode, singleNodeMultiWriter bool) csipb.VolumeCapability_AccessMode_Mode {
	switch m {
	case v1.ReadWriteOnce:
		if singleNodeMultiWriter {
			return csipb.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER
		}
		return csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	case v1.ReadOnlyMany:
		return csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
	case v1.ReadWriteMany:
		return csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
	case v1.ReadWriteOncePod:
		if singleNodeMultiWriter {
			return csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER
		}
		return csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	}
	return csipb.VolumeCapability_AccessMode_UNKNOWN
}

// csiCapability is the mount volume capability given to NodeStageVolume and
// NodePublishVolume.
func csiCapability(c *csiVolume, caps csiCaps) *csipb.VolumeCapability {
	mnt := &csipb.VolumeCapability_MountVolume{FsType: c.fsType, MountFlags: c.mountOptions}
	if caps.mountGroup && c.mountGroup != nil {
		mnt.VolumeMountGroup = strconv.FormatInt(*c.mountGroup, 10)
	}
	return &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Mount{Mount: mnt},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csiAccessMode(c.accessMode, caps.singleNodeMultiWriter)},
	}
}

// verifyAttachment judges a VolumeAttachment as upstream's WaitForAttach:
// attached (its attachmentMetadata is the publish context), or an error
// saying why not (missing, being deleted, not attached yet, attachError).
func verifyAttachment(va *storagev1.VolumeAttachment, getErr error, handle, name string) (map[string]string, error) {
	switch {
	case getErr != nil:
		return nil, fmt.Errorf("volume %v has GET error for volume attachment %v: %v", handle, name, getErr)
	case va.DeletionTimestamp != nil:
		return nil, errors.New("volume attachment is being deleted")
	case va.Status.Attached:
		return va.Status.AttachmentMetadata, nil
	case va.Status.AttachError != nil:
		return nil, errors.New(va.Status.AttachError.Message)
	}
	return nil, fmt.Errorf("volume %v is not attached for volume attachment %v", handle, name)
}

// volData is vol_data.json, with upstream's keys: beside a pod's publish
// path (specVolID, volumeHandle, driverName, nodeName, attachmentID,
// volumeLifecycleMode) and beside a staging path (volumeHandle, driverName).
type volData map[string]string

const (
	volDataSpecVolID    = "specVolID"
	volDataHandle       = "volumeHandle"
	volDataDriver       = "driverName"
	volDataNodeName     = "nodeName"
	volDataAttachmentID = "attachmentID"
	volDataMode         = "volumeLifecycleMode"
)

func parseVolData(b []byte) (volData, error) {
	var d volData
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, err
	}
	if d[volDataDriver] == "" || d[volDataHandle] == "" {
		return nil, fmt.Errorf("%s lacks %s or %s", csi.VolDataFile, volDataDriver, volDataHandle)
	}
	// The driver names a directory under the plugins dir (the staging path),
	// so a file on disk naming "../x" must not lead teardown elsewhere; set-up
	// refuses such a name the same way.
	if err := validateVolumeName(d[volDataDriver]); err != nil {
		return nil, fmt.Errorf("%s: driver: %w", csi.VolDataFile, err)
	}
	return d, nil
}
