package volumes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-helpers/storage/ephemeral"
	storagehelpers "k8s.io/component-helpers/storage/volume"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/internal/mountutil"
)

// pluginLocalVolume is where a local PersistentVolume is bind-mounted for a
// pod, as upstream's local volume plugin: <pod>/volumes/kubernetes.io~local-volume/<pvName>.
const pluginLocalVolume = "kubernetes.io~local-volume"

// ClaimGetter reads PersistentVolumeClaims and PersistentVolumes. Missing
// objects must be reported with an error for which apierrors.IsNotFound is true.
type ClaimGetter interface {
	GetPersistentVolumeClaim(ctx context.Context, namespace, name string) (*v1.PersistentVolumeClaim, error)
	GetPersistentVolume(ctx context.Context, name string) (*v1.PersistentVolume, error)
}

// WithClaims lets the manager mount persistentVolumeClaim and generic
// ephemeral volumes: claims and volumes are read through claims on every
// set-up (as upstream's volume manager Gets them on each pod sync), and a
// local PersistentVolume's node affinity is checked against nodeLabels.
func WithClaims(claims ClaimGetter, nodeLabels func() map[string]string) Option {
	return func(m *Manager) {
		m.claims = claims
		m.nodeLabels = nodeLabels
	}
}

// ClaimGetterFromClientset reads claims and volumes with a Get each.
func ClaimGetterFromClientset(cs kubernetes.Interface) ClaimGetter {
	return clientsetGetter{cs: cs}
}

func (g clientsetGetter) GetPersistentVolumeClaim(ctx context.Context, ns, name string) (*v1.PersistentVolumeClaim, error) {
	return g.cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
}

func (g clientsetGetter) GetPersistentVolume(ctx context.Context, name string) (*v1.PersistentVolume, error) {
	return g.cs.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
}

// ClaimError is a claim volume that could not be processed (upstream's
// "failed to process volumes"): its claim is missing, unbound or being
// deleted, its PersistentVolume is missing or not bound to it, a generic
// ephemeral volume's claim is not the pod's, or the PersistentVolume is of a
// type this node cannot mount. The pod waits; later syncs try again.
type ClaimError struct {
	Volume string
	Err    error
}

func (e *ClaimError) Error() string { return e.Err.Error() }
func (e *ClaimError) Unwrap() error { return e.Err }

// UnprocessedVolumesError is what SetUpPod reports when claim volumes could
// not be processed or attachable volumes are not attached yet, worded as
// upstream's FailedMount "Unable to attach or mount volumes: ..." message:
// the volumes the containers use that are not ready, the unattached ones and
// those that failed processing, then each failure.
type UnprocessedVolumesError struct {
	Unmounted  []string
	Unattached []string
	Failed     []string
	Errs       []*ClaimError
	AttachErrs []*AttachError
}

func (e *UnprocessedVolumesError) Error() string {
	var msgs []string
	for _, ce := range e.Errs {
		msgs = append(msgs, ce.Error())
	}
	for _, ae := range e.AttachErrs {
		msgs = append(msgs, ae.Error())
	}
	unattached := e.Unattached
	if unattached == nil {
		unattached = []string{}
	}
	return fmt.Sprintf("unmounted volumes=%v, unattached volumes=%v, failed to process volumes=%v: %s",
		e.Unmounted, unattached, e.Failed, strings.Join(msgs, "; "))
}

func (e *UnprocessedVolumesError) Unwrap() []error {
	var out []error
	for _, ce := range e.Errs {
		out = append(out, ce)
	}
	for _, ae := range e.AttachErrs {
		out = append(out, ae)
	}
	return out
}

// newUnprocessedVolumesError sorts as upstream's message does; the
// unmounted volumes are the ones the pod's containers use (volumeMounts and
// volumeDevices) that are missing from ready.
func newUnprocessedVolumesError(pod *v1.Pod, ready map[string]HostVolume, errs []*ClaimError, attachErrs []*AttachError) *UnprocessedVolumesError {
	e := &UnprocessedVolumesError{Unmounted: []string{}, Unattached: []string{}, Failed: []string{}, Errs: errs, AttachErrs: attachErrs}
	mounts, devices := usedVolumes(pod)
	for name := range mounts {
		if _, ok := ready[name]; !ok {
			e.Unmounted = append(e.Unmounted, name)
		}
	}
	for name := range devices {
		if _, ok := ready[name]; !ok && !mounts[name] {
			e.Unmounted = append(e.Unmounted, name)
		}
	}
	for _, ce := range errs {
		e.Failed = append(e.Failed, ce.Volume)
	}
	for _, ae := range attachErrs {
		e.Unattached = append(e.Unattached, ae.Volume)
	}
	sort.Strings(e.Unmounted)
	sort.Strings(e.Unattached)
	sort.Strings(e.Failed)
	return e
}

// usedVolumes names the volumes the pod's containers (init, app and
// ephemeral) mount and use as block devices.
func usedVolumes(pod *v1.Pod) (mounts, devices map[string]bool) {
	mounts, devices = map[string]bool{}, map[string]bool{}
	add := func(vms []v1.VolumeMount, vds []v1.VolumeDevice) {
		for _, vm := range vms {
			mounts[vm.Name] = true
		}
		for _, vd := range vds {
			devices[vd.Name] = true
		}
	}
	for _, c := range pod.Spec.InitContainers {
		add(c.VolumeMounts, c.VolumeDevices)
	}
	for _, c := range pod.Spec.Containers {
		add(c.VolumeMounts, c.VolumeDevices)
	}
	for _, c := range pod.Spec.EphemeralContainers {
		add(c.VolumeMounts, c.VolumeDevices)
	}
	return mounts, devices
}

// claimRef is the claim a pod volume uses.
type claimRef struct {
	name      string
	readOnly  bool
	ephemeral bool
}

// podClaim returns the claim behind a persistentVolumeClaim or generic
// ephemeral volume (the controller names it <pod>-<volume>).
func podClaim(pod *v1.Pod, vol *v1.Volume) (claimRef, bool) {
	switch {
	case vol.PersistentVolumeClaim != nil:
		return claimRef{name: vol.PersistentVolumeClaim.ClaimName, readOnly: vol.PersistentVolumeClaim.ReadOnly}, true
	case vol.Ephemeral != nil:
		return claimRef{name: ephemeral.VolumeClaimName(pod, vol), ephemeral: true}, true
	}
	return claimRef{}, false
}

// pvKind is the type of PersistentVolume nodelet mounts.
type pvKind int

const (
	pvHostPath pvKind = iota + 1
	pvLocal
	pvCSI
)

// pvMount is what a claim volume mounts: decided by decideClaim from the
// claim and its volume, done by setUpClaim.
type pvMount struct {
	pvName   string
	kind     pvKind
	hostPath *v1.HostPathVolumeSource // pvHostPath: checked as a hostPath volume
	path     string                   // pvLocal: the directory to bind-mount
	pv       *v1.PersistentVolume     // pvCSI: decided by decideCSI
	readOnly bool
	// block: volumeMode Block, mapped for volumeDevices (local: path is
	// the block device) instead of mounted.
	block bool
}

// claimFacts is what decideClaim judges: the pod's volume, how its
// containers use it, the claim and volume read from the API server (or the
// errors reading them), and this node's labels.
type claimFacts struct {
	pod        *v1.Pod
	volume     string
	claim      claimRef
	usedAsDir  bool // in some container's volumeMounts
	usedAsDev  bool // in some container's volumeDevices
	pvc        *v1.PersistentVolumeClaim
	pvcErr     error
	pv         *v1.PersistentVolume
	pvErr      error
	nodeLabels map[string]string
	// csi: CSI volumes can be mounted (WithCSI).
	csi bool
}

// checkClaim is the first half of the decision: is the claim there, bound
// and (for a generic ephemeral volume) the pod's? It returns the name of the
// PersistentVolume to read.
func checkClaim(f *claimFacts) (string, error) {
	fail := func(err error) error {
		return &ClaimError{Volume: f.volume, Err: fmt.Errorf("error processing PVC %s/%s: %w", f.pod.Namespace, f.claim.name, err)}
	}
	switch {
	case f.pvcErr != nil || f.pvc == nil:
		return "", fail(fmt.Errorf("failed to fetch PVC from API server: %v", f.pvcErr))
	case f.pvc.DeletionTimestamp != nil:
		return "", fail(errors.New("PVC is being deleted"))
	case f.pvc.Status.Phase != v1.ClaimBound:
		return "", fail(errors.New("PVC is not bound"))
	case f.pvc.Spec.VolumeName == "":
		return "", fail(errors.New("PVC has empty pvc.Spec.VolumeName"))
	}
	if f.claim.ephemeral {
		if err := ephemeral.VolumeIsForPod(f.pod, f.pvc); err != nil {
			return "", &ClaimError{Volume: f.volume, Err: err}
		}
	}
	return f.pvc.Spec.VolumeName, nil
}

// decideClaim decides what a claim volume mounts, with upstream's checks and
// messages: the claim (checkClaim), its PersistentVolume bound to that
// claim, the volume mode against how containers use it, the volume type
// (hostPath and local; anything else is named and waits), a local volume's
// path and node affinity. Read-only when the pod's volume says so.
func decideClaim(f *claimFacts) (pvMount, error) {
	pvName, err := checkClaim(f)
	if err != nil {
		return pvMount{}, err
	}
	fail := func(err error) error {
		return &ClaimError{Volume: f.volume, Err: fmt.Errorf("error processing PVC %s/%s: %w", f.pod.Namespace, f.claim.name, err)}
	}
	pv := f.pv
	switch {
	case f.pvErr != nil || pv == nil:
		return pvMount{}, fail(fmt.Errorf("failed to fetch PV %s from API server: %v", pvName, f.pvErr))
	case pv.Spec.ClaimRef == nil:
		return pvMount{}, fail(fmt.Errorf("found PV object %s but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim", pvName))
	case pv.Spec.ClaimRef.UID != f.pvc.UID:
		return pvMount{}, fail(fmt.Errorf("found PV object %s but its pv.Spec.ClaimRef.UID %s does not point to claim.UID %s", pvName, pv.Spec.ClaimRef.UID, f.pvc.UID))
	}
	mode := v1.PersistentVolumeFilesystem
	if pv.Spec.VolumeMode != nil {
		mode = *pv.Spec.VolumeMode
	}
	if f.usedAsDir && mode != v1.PersistentVolumeFilesystem {
		return pvMount{}, &ClaimError{Volume: f.volume, Err: fmt.Errorf("volume %s has volumeMode %s, but is specified in volumeMounts", f.volume, mode)}
	}
	if f.usedAsDev && mode != v1.PersistentVolumeBlock {
		return pvMount{}, &ClaimError{Volume: f.volume, Err: fmt.Errorf("volume %s has volumeMode %s, but is specified in volumeDevices", f.volume, mode)}
	}
	// Read-only comes from the pod's volume alone, as upstream: a PV granting
	// only ReadOnlyMany is still mounted writable (access modes are for the
	// binder and the attach, not the mount).
	out := pvMount{pvName: pvName, readOnly: f.claim.readOnly, block: mode == v1.PersistentVolumeBlock}
	switch src := &pv.Spec.PersistentVolumeSource; {
	case src.HostPath != nil && out.block:
		return pvMount{}, &ClaimError{Volume: f.volume, Err: fmt.Errorf("error processing PVC %s/%s: PersistentVolume %s of type hostPath has volumeMode Block, which this node agent cannot map (it maps local and CSI volumes)",
			f.pod.Namespace, f.claim.name, pvName)}
	case src.HostPath != nil:
		out.kind, out.hostPath = pvHostPath, src.HostPath
		return out, nil
	case src.Local != nil:
		out.kind, out.path = pvLocal, src.Local.Path
		// As upstream, the node affinity of a volume is checked before it is
		// mounted, and a path with ".." is refused.
		if err := storagehelpers.CheckNodeAffinity(pv, f.nodeLabels); err != nil {
			return pvMount{}, &SetUpError{Volume: f.volume, Spec: pvName, Op: "MountVolume.NodeAffinity check", Err: err}
		}
		if err := validateLocalPath(out.path); err != nil {
			return pvMount{}, &SetUpError{Volume: f.volume, Spec: pvName, Err: err}
		}
		return out, nil
	case src.CSI != nil && f.csi:
		out.kind, out.pv = pvCSI, pv
		return out, nil
	}
	mounts := "hostPath and local volumes"
	if f.csi {
		mounts = "hostPath, local and CSI volumes"
	}
	return pvMount{}, &ClaimError{Volume: f.volume, Err: fmt.Errorf("error processing PVC %s/%s: PersistentVolume %s is of type %s, which this node agent cannot mount (it mounts %s)",
		f.pod.Namespace, f.claim.name, pvName, pvType(&pv.Spec.PersistentVolumeSource), mounts)}
}

// validateLocalPath refuses what upstream's local plugin refuses: an empty
// path, a relative one, or one with a ".." component.
func validateLocalPath(p string) error {
	if p == "" {
		return errors.New("LocalVolume path is empty")
	}
	if !filepath.IsAbs(p) {
		return fmt.Errorf("invalid path: %s must be absolute", p)
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return fmt.Errorf("invalid path: %s must not contain '..'", p)
		}
	}
	return nil
}

// pvType names a PersistentVolume's type as its field is spelled (a CSI
// volume with its driver), for the message of a type nodelet cannot mount.
func pvType(src *v1.PersistentVolumeSource) string {
	switch {
	case src.CSI != nil:
		return fmt.Sprintf("csi (driver %q)", src.CSI.Driver)
	case src.NFS != nil:
		return "nfs"
	case src.ISCSI != nil:
		return "iscsi"
	case src.FC != nil:
		return "fc"
	case src.RBD != nil:
		return "rbd"
	case src.CephFS != nil:
		return "cephfs"
	case src.Glusterfs != nil:
		return "glusterfs"
	case src.FlexVolume != nil:
		return fmt.Sprintf("flexVolume (driver %q)", src.FlexVolume.Driver)
	case src.AWSElasticBlockStore != nil:
		return "awsElasticBlockStore"
	case src.GCEPersistentDisk != nil:
		return "gcePersistentDisk"
	case src.AzureDisk != nil:
		return "azureDisk"
	case src.AzureFile != nil:
		return "azureFile"
	case src.VsphereVolume != nil:
		return "vsphereVolume"
	}
	return "(unknown)"
}

// setUpClaim reads the claim and its volume, decides (decideClaim) and
// mounts: a hostPath volume is checked as hostPath volumes are and given to
// the runtime as is (no fsGroup, as upstream); a local volume is bind-mounted
// at <pod>/volumes/kubernetes.io~local-volume/<pvName> (setUpLocal).
func (m *Manager) setUpClaim(ctx context.Context, pod *v1.Pod, vol *v1.Volume, claim claimRef, st *podState) (HostVolume, error) {
	mounts, devices := usedVolumes(pod)
	f := &claimFacts{pod: pod, volume: vol.Name, claim: claim, usedAsDir: mounts[vol.Name], usedAsDev: devices[vol.Name], csi: m.csiDrivers != nil}
	if m.claims == nil {
		f.pvcErr = errors.New("no API server connection")
	} else {
		f.pvc, f.pvcErr = m.claims.GetPersistentVolumeClaim(ctx, pod.Namespace, claim.name)
	}
	if pvName, err := checkClaim(f); err == nil {
		f.pv, f.pvErr = m.claims.GetPersistentVolume(ctx, pvName)
	}
	if m.nodeLabels != nil {
		f.nodeLabels = m.nodeLabels()
	}
	pm, err := decideClaim(f)
	if err != nil {
		return HostVolume{}, err
	}
	switch pm.kind {
	case pvHostPath:
		if err := checkHostPath(pm.hostPath); err != nil {
			return HostVolume{}, &SetUpError{Volume: vol.Name, Spec: pm.pvName, Err: err}
		}
		return HostVolume{Path: pm.hostPath.Path, ReadOnly: pm.readOnly}, nil
	case pvLocal:
		setUp, op := m.setUpLocal, ""
		if pm.block {
			setUp, op = m.setUpLocalBlock, "MapVolume.MapPodDevice"
		}
		hv, err := setUp(ctx, pod, pm)
		if err != nil {
			return HostVolume{}, &SetUpError{Volume: vol.Name, Spec: pm.pvName, Op: op, Err: err}
		}
		return hv, nil
	case pvCSI:
		hv, err := m.setUpCSI(ctx, pod, vol, pm.pv, pm.readOnly, st)
		if err == nil {
			// A resized claim is grown on the node once mounted (never failing the pod).
			m.expandCSI(ctx, pod, f.pvc, pm.pv, pm.readOnly)
		}
		return hv, err
	}
	return HostVolume{}, fmt.Errorf("volume %s: no mount decided", vol.Name)
}

// setUpLocal bind-mounts a local volume's directory for the pod, as
// upstream's local plugin: once (a mount already there, also after a
// restart, is kept and nothing else is done), and on that first mount the
// pod's fsGroup is applied per fsGroupChangePolicy when the volume is
// writable and no other pod has it mounted; when another pod has it mounted
// with another group, the group stays and a warning is logged. nodelet never
// writes into the volume otherwise, and teardown only unmounts it.
func (m *Manager) setUpLocal(ctx context.Context, pod *v1.Pod, pm pvMount) (HostVolume, error) {
	if err := validateVolumeName(pm.pvName); err != nil {
		return HostVolume{}, err
	}
	fi, err := os.Stat(pm.path)
	if err != nil {
		return HostVolume{}, fmt.Errorf("local volume path: %w", err)
	}
	switch {
	case fi.IsDir():
	case fi.Mode()&os.ModeDevice != 0 && fi.Mode()&os.ModeCharDevice == 0:
		return HostVolume{}, fmt.Errorf("local volume %s is a block device: formatting and mounting it is not supported by this node agent yet", pm.path)
	default:
		return HostVolume{}, errors.New("only directory and block device are supported")
	}
	m.localMu.Lock()
	defer m.localMu.Unlock()
	src, err := os.Open(pm.path)
	if err != nil {
		return HostVolume{}, fmt.Errorf("opening local volume path: %w", err)
	}
	defer src.Close()
	target := filepath.Join(m.podVolumesDir(pod.UID), pluginLocalVolume, pm.pvName)
	others, err := m.otherLocalMounts(pod.UID, pm.pvName)
	if err != nil {
		return HostVolume{}, err
	}
	reused, err := bindMount(src, target)
	if err != nil {
		return HostVolume{}, err
	}
	hv := HostVolume{Path: target, ReadOnly: pm.readOnly}
	logger := klog.FromContext(ctx)
	if reused {
		return hv, nil
	}
	logger.V(2).Info("Mounted local volume", "pod", klog.KObj(pod), "podUID", pod.UID, "persistentVolume", pm.pvName, "path", pm.path, "readOnly", pm.readOnly)
	gid := fsGroupOf(pod)
	if gid == nil || pm.readOnly {
		return hv, nil
	}
	if others > 0 {
		if have := groupOf(fi); have != *gid {
			logger.Info("The requested fsGroup differs from the group of a volume another pod has mounted; the volume may not be shareable",
				"pod", klog.KObj(pod), "persistentVolume", pm.pvName, "fsGroup", *gid, "volumeGID", have)
		}
		return hv, nil
	}
	if fsGroupChangePolicyOf(pod) == v1.FSGroupChangeOnRootMismatch && !fsGroupChangeNeeded(target, *gid, false) {
		return hv, nil
	}
	if err := m.fsGroupWalk.apply(target, *gid, false); err != nil {
		// Unmounted, so the next sync mounts again and retries the change.
		return HostVolume{}, errors.Join(err, mountutil.Unmount(target))
	}
	return hv, nil
}

// otherLocalMounts counts the other pods' mounts of the local volume pvName.
func (m *Manager) otherLocalMounts(uid types.UID, pvName string) (int, error) {
	podsDir := filepath.Join(m.rootDir, "pods")
	mps, err := mountutil.PointsUnder(podsDir)
	if err != nil {
		return 0, fmt.Errorf("listing mounts of local volume %s: %w", pvName, err)
	}
	resolved, err := filepath.EvalSymlinks(podsDir)
	if err != nil {
		resolved = podsDir
	}
	n := 0
	for _, mp := range mps {
		rel, err := filepath.Rel(resolved, mp)
		if err != nil {
			continue
		}
		parts := strings.Split(rel, "/")
		if len(parts) == 4 && parts[0] != string(uid) && parts[1] == "volumes" && parts[2] == pluginLocalVolume && parts[3] == pvName {
			n++
		}
	}
	return n, nil
}

func groupOf(fi os.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int64(st.Gid)
	}
	return -1
}
