package volumes

import (
	"context"
	"encoding/json"
	"fmt"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/csi"
)

// Event reasons of node expansion, as upstream's kubelet events.
const (
	eventFileSystemResizeSuccess = "FileSystemResizeSuccessful"
	eventFileSystemResizeFailed  = "FileSystemResizeFailed"
	eventVolumeResizeFailed      = "VolumeResizeFailed"
)

// ClaimStatusWriter patches a claim's status subresource with a strategic
// merge patch (nodes may patch persistentvolumeclaims/status of their pods'
// claims: capacity, conditions, allocatedResources and their statuses).
type ClaimStatusWriter interface {
	PatchClaimStatus(ctx context.Context, namespace, name string, patch []byte) (*v1.PersistentVolumeClaim, error)
}

// WithClaimExpansion lets the manager finish the resize of a mounted CSI
// PersistentVolume on the node (NodeExpandVolume), writing the claim's
// status through w and the FileSystemResizeSuccessful / VolumeResizeFailed
// events through recorder. Without it a resized claim stays pending.
func WithClaimExpansion(w ClaimStatusWriter, recorder record.EventRecorder) Option {
	return func(m *Manager) {
		m.claimStatus = w
		m.recorder = recorder
	}
}

// ClaimStatusWriterFromClientset patches claim statuses through cs.
func ClaimStatusWriterFromClientset(cs kubernetes.Interface) ClaimStatusWriter {
	return clientsetGetter{cs: cs}
}

func (g clientsetGetter) PatchClaimStatus(ctx context.Context, ns, name string, patch []byte) (*v1.PersistentVolumeClaim, error) {
	return g.cs.CoreV1().PersistentVolumeClaims(ns).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
}

// expandAction is what decideExpand says to do for a mounted volume.
type expandAction int

const (
	// expandNothing: the volume is at the size the node knows.
	expandNothing expandAction = iota
	// expandWait: the PV grew but the resizer has not handed the claim to
	// the node (no NodeResizePending): later syncs look again.
	expandWait
	// expandSettle: nothing to call; the node takes the new size as done
	// (the claim's status already has it, or a block volume).
	expandSettle
	// expandReadOnly: a read-only volume is not expanded; a
	// FileSystemResizeFailed warning says so, once.
	expandReadOnly
	// expandUnsupported: the driver has no EXPAND_VOLUME node capability:
	// nothing to call, the claim's resize is marked finished.
	expandUnsupported
	// expandCall: call NodeExpandVolume.
	expandCall
)

// expandFacts is what decideExpand judges: the claim and its bound PV as
// read on this sync, the size the node knows the volume at (nil: first
// sight; the claim's status capacity is taken, as upstream's actual state
// of the world is initialized), whether the pod mounts it read-only,
// whether the driver has EXPAND_VOLUME (asked only once the PV grew), and
// whether the last NodeExpandVolume of this volume failed with a final error.
type expandFacts struct {
	pvc         *v1.PersistentVolumeClaim
	pv          *v1.PersistentVolume
	known       *resource.Quantity
	readOnly    bool
	nodeExpand  bool
	failedFinal bool
	capsKnown   bool // nodeExpand is meaningful (NodeGetCapabilities answered)
}

// expandDecision is decideExpand's answer. newSize is the PV's capacity
// (NodeExpandVolume's required_bytes); known is the size the node knows the
// volume at afterwards when no call is needed (and the initial size on first
// sight). markInProgress and updateClaim: the claim's status is still the
// node's to move (not already updated, e.g. by another node of an RWX
// volume); infeasibleOnFailure: a final failure marks NodeResizeInfeasible.
type expandDecision struct {
	action              expandAction
	newSize             resource.Quantity
	known               resource.Quantity
	markInProgress      bool
	updateClaim         bool
	infeasibleOnFailure bool
	reason              string // for the log
}

// decideExpand decides node expansion as upstream's kubelet: only when the
// PV's capacity is above the size the node knows the volume at; then, with
// RecoverVolumeExpansionFailure (GA), only when the claim's
// allocatedResourceStatuses[storage] says NodeResizePending or
// NodeResizeInProgress, or the claim's status capacity already has the new
// size and the volume is ReadWriteMany (expanded on every node; then the
// claim is not written); a read-only volume is refused with a warning. When
// the user changed the claim's request since and the last expansion failed
// finally, a new failure marks the claim NodeResizeInfeasible so the resizer
// reconciles. Block volumes are settled without a call (not expanded here).
// needsCaps reports that nodeExpand is needed but not known yet.
func decideExpand(f *expandFacts) (d expandDecision, needsCaps bool) {
	statusCap := f.pvc.Status.Capacity[v1.ResourceStorage]
	d.newSize = f.pv.Spec.Capacity[v1.ResourceStorage]
	d.known = statusCap
	if f.known != nil {
		d.known = *f.known
	}
	if d.newSize.Cmp(d.known) <= 0 {
		d.action, d.reason = expandNothing, "volume at its size"
		return d, false
	}
	resizeStatus := f.pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage]
	alreadyUpdated := statusCap.Cmp(d.newSize) >= 0 && resizeStatus == ""
	switch {
	case f.pv.Spec.VolumeMode != nil && *f.pv.Spec.VolumeMode == v1.PersistentVolumeBlock:
		d.action, d.known, d.reason = expandSettle, d.newSize, "block volumes are not expanded by this node agent"
		return d, false
	case f.readOnly:
		d.action, d.known, d.reason = expandReadOnly, d.newSize, "requested read-only file system"
		return d, false
	case alreadyUpdated && hasAccessMode(f.pvc.Spec.AccessModes, v1.ReadWriteMany):
		// Expanded on another node: this node expands too, the claim stays.
	case alreadyUpdated:
		d.action, d.known, d.reason = expandSettle, d.newSize, "claim status already has the size"
		return d, false
	case resizeStatus == v1.PersistentVolumeClaimNodeResizePending, resizeStatus == v1.PersistentVolumeClaimNodeResizeInProgress:
	default:
		d.action, d.reason = expandWait, fmt.Sprintf("waiting for the resizer (resize status %q)", resizeStatus)
		return d, false
	}
	if !f.capsKnown {
		return d, true
	}
	d.markInProgress, d.updateClaim = !alreadyUpdated, !alreadyUpdated
	if !f.nodeExpand {
		d.action, d.known, d.reason = expandUnsupported, d.newSize, "driver has no EXPAND_VOLUME node capability"
		d.markInProgress = false
		return d, false
	}
	specSize := f.pvc.Spec.Resources.Requests[v1.ResourceStorage]
	d.infeasibleOnFailure = f.failedFinal && specSize.Cmp(d.newSize) != 0
	d.action, d.reason = expandCall, "node expansion pending"
	return d, false
}

func hasAccessMode(modes []v1.PersistentVolumeAccessMode, m v1.PersistentVolumeAccessMode) bool {
	for _, x := range modes {
		if x == m {
			return true
		}
	}
	return false
}

// expandFailure classifies a failed NodeExpandVolume as upstream: final
// (the driver is done: the claim gets a NodeResizeError condition),
// infeasible (InvalidArgument, OutOfRange, NotFound: NodeResizeInfeasible)
// and inUse (FailedPrecondition: the driver cannot expand it online; not
// retried while mounted, no error for the pod).
func expandFailure(err error) (final, infeasible, inUse bool) {
	final = isFinalCSIError(err)
	switch status.Code(err) {
	case codes.InvalidArgument, codes.OutOfRange, codes.NotFound:
		infeasible = final
	case codes.FailedPrecondition:
		inUse = final
	}
	return final, infeasible, inUse
}

// Resize conditions of a claim: the node's expansion replaces them.
var claimResizeConditions = map[v1.PersistentVolumeClaimConditionType]bool{
	v1.PersistentVolumeClaimResizing:                true,
	v1.PersistentVolumeClaimFileSystemResizePending: true,
	v1.PersistentVolumeClaimControllerResizeError:   true,
	v1.PersistentVolumeClaimNodeResizeError:         true,
}

// claimResizeInProgress is the claim with allocatedResourceStatuses[storage]
// NodeResizeInProgress, as upstream marks it before NodeExpandVolume.
func claimResizeInProgress(pvc *v1.PersistentVolumeClaim) *v1.PersistentVolumeClaim {
	out := pvc.DeepCopy()
	if out.Status.AllocatedResourceStatuses == nil {
		out.Status.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{}
	}
	out.Status.AllocatedResourceStatuses[v1.ResourceStorage] = v1.PersistentVolumeClaimNodeResizeInProgress
	return out
}

// claimResizeFinished is the claim after a node expansion to size: its
// status capacity is size, the storage resize status is gone and so are the
// resize conditions (Resizing, FileSystemResizePending, the resize errors).
func claimResizeFinished(pvc *v1.PersistentVolumeClaim, size resource.Quantity) *v1.PersistentVolumeClaim {
	out := pvc.DeepCopy()
	if out.Status.Capacity == nil {
		out.Status.Capacity = v1.ResourceList{}
	}
	out.Status.Capacity[v1.ResourceStorage] = size
	delete(out.Status.AllocatedResourceStatuses, v1.ResourceStorage)
	if len(out.Status.AllocatedResourceStatuses) == 0 {
		out.Status.AllocatedResourceStatuses = nil
	}
	var kept []v1.PersistentVolumeClaimCondition
	for _, c := range out.Status.Conditions {
		if !claimResizeConditions[c.Type] {
			kept = append(kept, c)
		}
	}
	out.Status.Conditions = kept
	return out
}

// claimResizeFailed is the claim after a final NodeExpandVolume failure: a
// NodeResizeError condition "failed to expand pvc with <err>" (replacing an
// earlier one), and allocatedResourceStatuses[storage] NodeResizeInfeasible
// when infeasible.
func claimResizeFailed(pvc *v1.PersistentVolumeClaim, resizeErr error, infeasible bool, now metav1.Time) *v1.PersistentVolumeClaim {
	out := pvc.DeepCopy()
	if infeasible {
		if out.Status.AllocatedResourceStatuses == nil {
			out.Status.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{}
		}
		out.Status.AllocatedResourceStatuses[v1.ResourceStorage] = v1.PersistentVolumeClaimNodeResizeInfeasible
	}
	var conds []v1.PersistentVolumeClaimCondition
	for _, c := range out.Status.Conditions {
		if c.Type != v1.PersistentVolumeClaimNodeResizeError {
			conds = append(conds, c)
		}
	}
	out.Status.Conditions = append(conds, v1.PersistentVolumeClaimCondition{
		Type:               v1.PersistentVolumeClaimNodeResizeError,
		Status:             v1.ConditionTrue,
		LastTransitionTime: now,
		Message:            fmt.Sprintf("failed to expand pvc with %v", resizeErr),
	})
	return out
}

// claimStatusPatch is the strategic merge patch from old to updated.
func claimStatusPatch(old, updated *v1.PersistentVolumeClaim) ([]byte, error) {
	oldJSON, err := json.Marshal(old)
	if err != nil {
		return nil, err
	}
	newJSON, err := json.Marshal(updated)
	if err != nil {
		return nil, err
	}
	return strategicpatch.CreateTwoWayMergePatch(oldJSON, newJSON, v1.PersistentVolumeClaim{})
}

// expandState is, per volume (unique name), the size the node knows it at
// and whether its last NodeExpandVolume failed with a final error.
type expandState struct {
	known       resource.Quantity
	failedFinal bool
}

func (s *csiState) expansion(key string) (expandState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.expand[key]
	return e, ok
}

func (s *csiState) setExpansion(key string, e expandState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expand[key] = e
}

// expandCSI finishes the resize of a mounted CSI PersistentVolume on this
// node when its claim asks for it (decideExpand): NodeExpandVolume on the
// publish path (online; with the staging path when the driver stages), then
// the claim's status and events as upstream. It never fails the pod's
// volume: errors are events and logs, and later syncs retry.
func (m *Manager) expandCSI(ctx context.Context, pod *v1.Pod, pvc *v1.PersistentVolumeClaim, pv *v1.PersistentVolume, readOnly bool) {
	if m.claimStatus == nil || pvc == nil || pv == nil || pv.Spec.CSI == nil {
		return
	}
	src := pv.Spec.CSI
	key := csi.UniqueVolumeName(src.Driver, src.VolumeHandle)
	unlock := m.csi.lock(key)
	defer unlock()
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(pod), "podUID", pod.UID, "pvc", klog.KObj(pvc), "pv", pv.Name)

	f := &expandFacts{pvc: pvc, pv: pv, readOnly: readOnly}
	if e, ok := m.csi.expansion(key); ok {
		f.known, f.failedFinal = &e.known, e.failedFinal
	}
	d, needsCaps := decideExpand(f)
	var client csipb.NodeClient
	var caps csiCaps
	if needsCaps {
		var err error
		client, err = m.csiDrivers.NodeClient(ctx, src.Driver)
		if err == nil {
			caps, err = m.nodeCaps(ctx, client)
		}
		if err != nil {
			m.expandFailed(pod, pv, fmt.Errorf("Expander.NodeExpand failed to check if node supports expansion : %v", err))
			return
		}
		f.nodeExpand, f.capsKnown = caps.expand, true
		d, _ = decideExpand(f)
	}
	if d.action != expandCall {
		m.csi.setExpansion(key, expandState{known: d.known})
	}
	switch d.action {
	case expandNothing:
		return
	case expandWait, expandSettle:
		logger.V(3).Info("NodeExpandVolume not called", "reason", d.reason, "newSize", d.newSize.String())
		return
	case expandReadOnly:
		msg := fmt.Sprintf("MountVolume.NodeExpandVolume failed for volume %q requested read-only file system", pv.Name)
		logger.Info(msg)
		m.event(pod, v1.EventTypeWarning, eventFileSystemResizeFailed, msg)
		m.event(pvc, v1.EventTypeWarning, eventFileSystemResizeFailed, msg)
		return
	case expandUnsupported:
		// Nothing for the node to do: the resize is over.
		logger.V(2).Info("NodeExpandVolume not supported by the driver; marking the claim's resize finished", "driver", src.Driver, "newSize", d.newSize.String())
		if d.updateClaim {
			if err := m.patchClaim(ctx, pvc, claimResizeFinished(pvc, d.newSize)); err != nil {
				m.csi.setExpansion(key, expandState{}) // retried on a later sync
				m.expandFailed(pod, pv, fmt.Errorf("mountVolume.NodeExpandVolume update pvc status failed: %w", err))
			}
		}
		return
	}

	cur := pvc
	if d.markInProgress {
		if err := m.patchClaim(ctx, pvc, claimResizeInProgress(pvc)); err != nil {
			m.expandFailed(pod, pv, fmt.Errorf("MountVolume.NodeExpandVolume failed to mark node expansion in progress: %w", err))
			return
		}
		cur = claimResizeInProgress(pvc)
	}
	err := m.nodeExpand(ctx, pod, client, caps, pv, d.newSize)
	if err != nil {
		final, infeasible, inUse := expandFailure(err)
		if final {
			m.csi.setExpansion(key, expandState{known: d.known, failedFinal: true})
			if perr := m.patchClaim(ctx, cur, claimResizeFailed(cur, err, infeasible || d.infeasibleOnFailure, metav1.Now())); perr != nil {
				logger.Error(perr, "MountVolume.NodeExpandVolume failed to mark node expansion as failed")
			}
		}
		if inUse {
			// The driver cannot expand it while in use: not retried while mounted.
			m.csi.setExpansion(key, expandState{known: d.newSize, failedFinal: true})
			logger.Error(err, "MountVolume.NodeExpandVolume failed: the driver cannot expand the volume online")
			return
		}
		m.expandFailed(pod, pv, fmt.Errorf("Expander.NodeExpand failed to expand the volume : %w", err))
		return
	}
	msg := fmt.Sprintf("MountVolume.NodeExpandVolume succeeded for volume %q %s", pv.Name, pod.Spec.NodeName)
	m.event(pod, v1.EventTypeNormal, eventFileSystemResizeSuccess, msg)
	m.event(pvc, v1.EventTypeNormal, eventFileSystemResizeSuccess, msg)
	logger.Info(msg, "newSize", d.newSize.String())
	if d.updateClaim {
		if err := m.patchClaim(ctx, cur, claimResizeFinished(cur, d.newSize)); err != nil {
			// Called again on a later sync (idempotent for the driver), as upstream.
			m.csi.setExpansion(key, expandState{known: d.known})
			m.expandFailed(pod, pv, fmt.Errorf("mountVolume.NodeExpandVolume update pvc status failed: %w", err))
			return
		}
	}
	m.csi.setExpansion(key, expandState{known: d.newSize})
}

// nodeExpand calls NodeExpandVolume as upstream's CSI plugin: volume_path
// the pod's publish path, staging_target_path when the driver stages,
// required_bytes the PV's capacity, the mount capability from the PV (its
// fsType, mount options and first access mode) and nodeExpandSecretRef's
// data.
func (m *Manager) nodeExpand(ctx context.Context, pod *v1.Pod, client csipb.NodeClient, caps csiCaps, pv *v1.PersistentVolume, size resource.Quantity) error {
	src := pv.Spec.CSI
	var secrets map[string]string
	if ref := src.NodeExpandSecretRef; ref != nil {
		var err error
		secrets, err = m.csiSecret(ctx, ref)
		if err != nil {
			return fmt.Errorf("expander.NodeExpand failed to get NodeExpandSecretRef %s/%s: %v", ref.Namespace, ref.Name, err)
		}
	}
	cv := &csiVolume{fsType: src.FSType, mountOptions: pv.Spec.MountOptions, accessMode: v1.ReadWriteOnce}
	if len(pv.Spec.AccessModes) > 0 {
		cv.accessMode = pv.Spec.AccessModes[0]
	}
	req := &csipb.NodeExpandVolumeRequest{
		VolumeId:         src.VolumeHandle,
		VolumePath:       csi.PublishPath(m.rootDir, pod.UID, pv.Name),
		CapacityRange:    &csipb.CapacityRange{RequiredBytes: size.Value()},
		VolumeCapability: csiCapability(cv, csiCaps{singleNodeMultiWriter: caps.singleNodeMultiWriter}),
		Secrets:          secrets,
	}
	if caps.stage {
		req.StagingTargetPath = csi.StagingPath(m.rootDir, src.Driver, src.VolumeHandle)
	}
	cctx, cancel := context.WithTimeout(ctx, csiTimeout)
	defer cancel()
	_, err := client.NodeExpandVolume(cctx, req)
	return err
}

func (m *Manager) nodeCaps(ctx context.Context, client csipb.NodeClient) (csiCaps, error) {
	cctx, cancel := context.WithTimeout(ctx, csiTimeout)
	defer cancel()
	resp, err := client.NodeGetCapabilities(cctx, &csipb.NodeGetCapabilitiesRequest{})
	if err != nil {
		return csiCaps{}, err
	}
	return csiCapsOf(resp), nil
}

func (m *Manager) patchClaim(ctx context.Context, old, updated *v1.PersistentVolumeClaim) error {
	patch, err := claimStatusPatch(old, updated)
	if err != nil {
		return fmt.Errorf("creating the status patch of claim %s: %w", klog.KObj(old), err)
	}
	if string(patch) == "{}" {
		return nil
	}
	if _, err := m.claimStatus.PatchClaimStatus(ctx, old.Namespace, old.Name, patch); err != nil {
		return fmt.Errorf("patching the status of claim %s: %w", klog.KObj(old), err)
	}
	return nil
}

// expandFailed reports a failed online expansion as upstream: a
// VolumeResizeFailed warning on the pod.
func (m *Manager) expandFailed(pod *v1.Pod, pv *v1.PersistentVolume, err error) {
	msg := fmt.Sprintf("NodeExpandVolume.NodeExpandVolume failed for volume %q : %v", pv.Name, err)
	klog.ErrorS(err, "NodeExpandVolume failed", "pod", klog.KObj(pod), "podUID", pod.UID, "pv", pv.Name)
	m.event(pod, v1.EventTypeWarning, eventVolumeResizeFailed, msg)
}

func (m *Manager) event(obj runtime.Object, eventType, reason, msg string) {
	if m.recorder != nil {
		m.recorder.Event(obj, eventType, reason, msg)
	}
}
