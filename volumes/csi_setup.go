package volumes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/csi"
	"github.com/nodelet/nodelet/internal/atomicfile"
	"github.com/nodelet/nodelet/internal/mountutil"
)

// csiTimeout bounds each call to a node plugin, as upstream's csiTimeout.
const csiTimeout = 2 * time.Minute

// csiState is the manager's memory of CSI volumes, beside what is on disk.
type csiState struct {
	// locks serializes stage, publish and teardown per volume (unique name),
	// so two pods of one volume agree on who stages and who unstages.
	locksMu sync.Mutex
	locks   map[string]*refLock

	mu sync.Mutex
	// staged: volumes staged (or found staged) by this process.
	staged map[string]bool
	// inUse: per pod, the attachable volumes it sets up or has mounted.
	inUse map[types.UID]map[string]string
	// attachable: what the last decision said of each volume.
	attachable map[string]bool
	// expand: node expansion state per volume (csi_expand.go).
	expand map[string]expandState
}

type refLock struct {
	mu   sync.Mutex
	refs int
}

func newCSIState() *csiState {
	return &csiState{
		locks:      map[string]*refLock{},
		staged:     map[string]bool{},
		inUse:      map[types.UID]map[string]string{},
		attachable: map[string]bool{},
		expand:     map[string]expandState{},
	}
}

// lock takes the volume's lock; the returned function releases it.
func (s *csiState) lock(key string) func() {
	s.locksMu.Lock()
	l, ok := s.locks[key]
	if !ok {
		l = &refLock{}
		s.locks[key] = l
	}
	l.refs++
	s.locksMu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		s.locksMu.Lock()
		if l.refs--; l.refs == 0 {
			delete(s.locks, key)
		}
		s.locksMu.Unlock()
	}
}

func (s *csiState) isStaged(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.staged[key]
}

func (s *csiState) setStaged(key string, staged bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if staged {
		s.staged[key] = true
	} else {
		delete(s.staged, key)
	}
}

func (s *csiState) noteVolume(uid types.UID, volume string, c *csiVolume) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := c.uniqueName()
	s.attachable[u] = c.attachRequired
	if !c.attachRequired {
		return
	}
	if s.inUse[uid] == nil {
		s.inUse[uid] = map[string]string{}
	}
	s.inUse[uid][volume] = u
}

func (s *csiState) forgetPod(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.inUse, uid)
}

// setUpCSI mounts a CSI volume for the pod: a CSI PersistentVolume (pv set,
// with the claim volume's readOnly) or the pod's inline csi volume. It
// decides (decideCSI) from the driver's CSIDriver object, then, unless the
// publish path is already mounted (set up before, also by an earlier run of
// nodelet) and the driver needs no republish: waits for the
// VolumeAttachment when attach is required (AttachError: the pod waits),
// stages the volume once per node when the driver has STAGE_UNSTAGE_VOLUME,
// publishes it at the pod's publish path and applies the fsGroup.
func (m *Manager) setUpCSI(ctx context.Context, pod *v1.Pod, vol *v1.Volume, pv *v1.PersistentVolume, claimReadOnly bool, st *podState) (HostVolume, error) {
	f := &csiFacts{pod: pod, volume: vol.Name, pv: pv, claimReadOnly: claimReadOnly, inline: vol.CSI, nodeName: m.nodeName}
	var driverName string
	switch {
	case pv != nil && pv.Spec.CSI != nil:
		driverName = pv.Spec.CSI.Driver
	case vol.CSI != nil:
		driverName = vol.CSI.Driver
	}
	if m.csiObjects != nil && driverName != "" {
		d, err := m.csiObjects.GetCSIDriver(ctx, driverName)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			f.driverErr = err
		default:
			f.driver = d
		}
	}
	cv, err := decideCSI(f)
	if err != nil {
		return HostVolume{}, err
	}
	m.csi.noteVolume(pod.UID, vol.Name, cv)
	unlock := m.csi.lock(cv.uniqueName())
	defer unlock()

	fail := func(op string, err error) error {
		return &SetUpError{Volume: vol.Name, Spec: cv.specName, Op: op, Err: err}
	}
	publishPath := csi.PublishPath(m.rootDir, pod.UID, cv.specName)
	hv := HostVolume{Path: publishPath, ReadOnly: cv.readOnly}
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(pod), "podUID", pod.UID, "volume", vol.Name, "driver", cv.driver, "volumeHandle", cv.handle)
	if cv.block {
		hv = HostVolume{Path: filepath.Join(csi.PodDeviceDir(m.rootDir, pod.UID), cv.specName), ReadOnly: cv.readOnly, Device: true}
		mapped, err := blockMapped(csi.BlockGlobalMapPath(m.rootDir, cv.specName), hv.Path, pod.UID)
		if err != nil {
			return HostVolume{}, fail("MapVolume.MapPodDevice", err)
		}
		if mapped {
			return hv, nil
		}
	} else if !cv.requiresRepublish {
		mounted, err := mountutil.IsMountPoint(publishPath)
		if err != nil {
			return HostVolume{}, fail("MountVolume.SetUp", err)
		}
		if mounted && !st.csiFSGroupPending[vol.Name] {
			return hv, nil
		}
		if mounted {
			// Published before, but the fsGroup change failed: only that is retried.
			if err := m.applyCSIFSGroup(cv, publishPath); err != nil {
				return HostVolume{}, fail("MountVolume.SetUp", err)
			}
			delete(st.csiFSGroupPending, vol.Name)
			return hv, nil
		}
	}

	var publishContext map[string]string
	if cv.attachRequired {
		name := csi.AttachmentName(cv.handle, cv.driver, m.nodeName)
		var va *storagev1.VolumeAttachment
		var getErr error
		if m.csiObjects == nil {
			getErr = errors.New("no API server connection")
		} else {
			va, getErr = m.csiObjects.GetVolumeAttachment(ctx, name)
		}
		publishContext, err = verifyAttachment(va, getErr, cv.handle, name)
		if err != nil {
			return HostVolume{}, &AttachError{Volume: vol.Name, Err: fail("MountVolume.WaitForAttach", err)}
		}
	}

	client, err := m.csiDrivers.NodeClient(ctx, cv.driver)
	if err != nil {
		// Upstream mounts a PersistentVolume's device (MountDevice) first,
		// so that is where a missing driver shows.
		if cv.mode == storagev1.VolumeLifecyclePersistent {
			return HostVolume{}, fail("MountVolume.MountDevice", fmt.Errorf("%sattacher.MountDevice failed to create newCsiDriverClient: %v", csiLogPrefix, err))
		}
		return HostVolume{}, fail("MountVolume.SetUp", fmt.Errorf("%smounter.SetUpAt failed to get CSI client: %v", csiLogPrefix, err))
	}
	cctx, cancel := context.WithTimeout(ctx, csiTimeout)
	defer cancel()
	capsResp, err := client.NodeGetCapabilities(cctx, &csipb.NodeGetCapabilitiesRequest{})
	if err != nil {
		return HostVolume{}, fail("MountVolume.SetUp", fmt.Errorf("%smounter.SetUpAt failed to get node capabilities: %v", csiLogPrefix, err))
	}
	caps := csiCapsOf(capsResp)

	if cv.block {
		if err := m.mapCSIBlock(cctx, pod, client, cv, caps, publishContext); err != nil {
			var se *SetUpError
			if errors.As(err, &se) {
				se.Volume = vol.Name
			}
			return HostVolume{}, err
		}
		logger.V(2).Info("Mapped CSI block volume", "link", hv.Path, "readOnly", cv.readOnly)
		return hv, nil
	}
	var stagingPath string
	if cv.mode == storagev1.VolumeLifecyclePersistent && caps.stage {
		stagingPath, err = m.stageCSI(cctx, client, cv, caps, publishContext)
		if err != nil {
			return HostVolume{}, fail("MountVolume.MountDevice", err)
		}
	}
	if err := m.publishCSI(cctx, pod, client, cv, caps, publishContext, stagingPath, vol.Name, st); err != nil {
		return HostVolume{}, fail("MountVolume.SetUp", err)
	}
	logger.V(2).Info("Published CSI volume", "path", publishPath, "staged", stagingPath != "", "readOnly", cv.readOnly)
	return hv, nil
}

// stageCSI stages the volume at its staging path unless this process
// staged it or it is mounted there (staged before a restart). vol_data.json
// is written first so a teardown can unstage whatever the call left.
func (m *Manager) stageCSI(ctx context.Context, client csipb.NodeClient, cv *csiVolume, caps csiCaps, publishContext map[string]string) (string, error) {
	stagingPath := csi.StagingPath(m.rootDir, cv.driver, cv.handle)
	key := cv.uniqueName()
	if m.csi.isStaged(key) {
		return stagingPath, nil
	}
	mounted, err := mountutil.IsMountPoint(stagingPath)
	if err != nil {
		return "", err
	}
	if mounted {
		m.csi.setStaged(key, true)
		return stagingPath, nil
	}
	if err := os.MkdirAll(stagingPath, 0o750); err != nil {
		return "", fmt.Errorf("%sattacher.MountDevice failed to create dir %q: %v", csiLogPrefix, stagingPath, err)
	}
	dataDir := filepath.Dir(stagingPath)
	if err := writeVolData(dataDir, volData{volDataHandle: cv.handle, volDataDriver: cv.driver}); err != nil {
		return "", fmt.Errorf("%sfailed to save volume info data: %v", csiLogPrefix, err)
	}
	var secrets map[string]string
	if cv.stageSecret != nil {
		secrets, err = m.csiSecret(ctx, cv.stageSecret)
		if err != nil {
			return "", fmt.Errorf("fetching NodeStageSecretRef %s/%s failed: %v", cv.stageSecret.Namespace, cv.stageSecret.Name, err)
		}
	}
	_, err = client.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
		VolumeId:          cv.handle,
		PublishContext:    publishContext,
		StagingTargetPath: stagingPath,
		VolumeCapability:  csiCapability(cv, caps),
		Secrets:           secrets,
		VolumeContext:     cv.stageContext,
	})
	if err != nil {
		if isFinalCSIError(err) {
			// Nothing is staged: the directory goes (never across a mount).
			if rmErr := mountutil.RemoveAllUnmounted(dataDir); rmErr != nil {
				klog.FromContext(ctx).Error(rmErr, "Removing the staging directory after a failed NodeStageVolume", "path", dataDir)
			}
		}
		return "", err
	}
	m.csi.setStaged(key, true)
	klog.FromContext(ctx).V(2).Info("Staged CSI volume", "driver", cv.driver, "volumeHandle", cv.handle, "path", stagingPath)
	return stagingPath, nil
}

// publishCSI publishes the volume at the pod's publish path (the driver
// creates it; nodelet its parent and vol_data.json there, first, so a
// teardown can unpublish whatever the call left), then applies the fsGroup
// unless the driver took it as volume_mount_group.
func (m *Manager) publishCSI(ctx context.Context, pod *v1.Pod, client csipb.NodeClient, cv *csiVolume, caps csiCaps, publishContext map[string]string, stagingPath, volName string, st *podState) error {
	dir := csi.PodVolumeDir(m.rootDir, pod.UID, cv.specName)
	publishPath := csi.PublishPath(m.rootDir, pod.UID, cv.specName)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("%smounter.SetUpAt failed to create dir %q: %v", csiLogPrefix, dir, err)
	}
	var secrets map[string]string
	if cv.publishSecret != nil {
		var err error
		secrets, err = m.csiSecret(ctx, cv.publishSecret)
		if err != nil {
			return fmt.Errorf("fetching NodePublishSecretRef %s/%s failed: %v", cv.publishSecret.Namespace, cv.publishSecret.Name, err)
		}
	}
	volumeContext := cv.volumeContext
	if len(cv.tokenRequests) > 0 {
		tokens, err := m.csiTokens(ctx, pod, cv, st)
		if err != nil {
			return fmt.Errorf("%smounter.SetUpAt failed to get service accoount token attributes: %v", csiLogPrefix, err)
		}
		volumeContext = copyMap(volumeContext)
		if volumeContext == nil {
			volumeContext = map[string]string{}
		}
		volumeContext[csiTokensKey] = tokens
	}
	data := volData{
		volDataSpecVolID:    cv.specName,
		volDataHandle:       cv.handle,
		volDataDriver:       cv.driver,
		volDataNodeName:     m.nodeName,
		volDataMode:         string(cv.mode),
		volDataAttachmentID: csi.AttachmentName(cv.handle, cv.driver, m.nodeName),
	}
	if err := writeVolData(dir, data); err != nil {
		return fmt.Errorf("%smounter.SetUpAt failed to save volume info data: %v", csiLogPrefix, err)
	}
	_, err := client.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{
		VolumeId:          cv.handle,
		PublishContext:    publishContext,
		StagingTargetPath: stagingPath,
		TargetPath:        publishPath,
		VolumeCapability:  csiCapability(cv, caps),
		Readonly:          cv.readOnly,
		Secrets:           secrets,
		VolumeContext:     volumeContext,
	})
	if err != nil {
		if isFinalCSIError(err) {
			if rmErr := mountutil.RemoveAllUnmounted(dir); rmErr != nil {
				klog.FromContext(ctx).Error(rmErr, "Removing the publish directory after a failed NodePublishVolume", "path", dir)
			}
		}
		return err
	}
	if caps.mountGroup {
		return nil
	}
	if err := m.applyCSIFSGroup(cv, publishPath); err != nil {
		// Published: later syncs retry only the fsGroup change.
		st.csiFSGroupPending[volName] = true
		return err
	}
	delete(st.csiFSGroupPending, volName)
	return nil
}

// applyCSIFSGroup gives the published volume to the pod's fsGroup when
// decideCSI said nodelet applies it, honouring OnRootMismatch.
func (m *Manager) applyCSIFSGroup(cv *csiVolume, publishPath string) error {
	if cv.fsGroup == nil {
		return nil
	}
	if cv.fsGroupChangePolicy == v1.FSGroupChangeOnRootMismatch && !fsGroupChangeNeeded(publishPath, *cv.fsGroup, false) {
		return nil
	}
	if err := m.fsGroupWalk.apply(publishPath, *cv.fsGroup, false); err != nil {
		return fmt.Errorf("applyFSGroup failed for vol %s: %w", cv.handle, err)
	}
	return nil
}

// csiSecret reads a secret's data for a node call, as upstream: every key,
// its bytes as a string.
func (m *Manager) csiSecret(ctx context.Context, ref *v1.SecretReference) (map[string]string, error) {
	if m.kube == nil {
		return nil, errors.New("no API server connection")
	}
	s, err := m.kube.GetSecret(ctx, ref.Namespace, ref.Name)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(s.Data))
	for k, v := range s.Data {
		out[k] = string(v)
	}
	return out, nil
}

// csiTokens requests a token for the pod's service account per tokenRequest
// of the CSIDriver (cached as the projected ones), and returns upstream's
// csi.storage.k8s.io/serviceAccount.tokens value: a JSON object from
// audience to {token, expirationTimestamp}.
func (m *Manager) csiTokens(ctx context.Context, pod *v1.Pod, cv *csiVolume, st *podState) (string, error) {
	out := map[string]authenticationv1.TokenRequestStatus{}
	for _, tr := range cv.tokenRequests {
		// Cached per volume and audience.
		p := &v1.ServiceAccountTokenProjection{Audience: tr.Audience, ExpirationSeconds: tr.ExpirationSeconds, Path: tr.Audience}
		tok, err := m.podToken(ctx, pod, csi.PodPluginDir+"/"+cv.specName, p, st)
		if err != nil {
			return "", err
		}
		out[tr.Audience] = authenticationv1.TokenRequestStatus{Token: tok.token, ExpirationTimestamp: metav1.NewTime(tok.expiry)}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// isFinalCSIError is upstream's test of whether a failed call left nothing
// behind: a gRPC error other than a timeout, cancellation or "try again"
// (those may still be in progress in the driver). A non-gRPC error is not
// final: the call may not have been made.
func isFinalCSIError(err error) bool {
	s, ok := status.FromError(err)
	if !ok {
		return false
	}
	switch s.Code() {
	case codes.Canceled, codes.DeadlineExceeded, codes.Unavailable, codes.ResourceExhausted, codes.Aborted:
		return false
	}
	return true
}

func writeVolData(dir string, d volData) error {
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, csi.VolDataFile), b, 0o644)
}

func readVolData(dir string) (volData, error) {
	b, err := os.ReadFile(filepath.Join(dir, csi.VolDataFile))
	if err != nil {
		return nil, err
	}
	return parseVolData(b)
}
