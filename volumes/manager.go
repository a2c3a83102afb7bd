package volumes

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/mountutil"
)

// Plugin directory names, as the upstream kubelet spells them.
const (
	pluginEmptyDir    = "kubernetes.io~empty-dir"
	pluginConfigMap   = "kubernetes.io~configmap"
	pluginSecret      = "kubernetes.io~secret"
	pluginProjected   = "kubernetes.io~projected"
	pluginDownwardAPI = "kubernetes.io~downward-api"
)

// HostVolume is a prepared volume: what the runtime should bind-mount.
type HostVolume struct {
	// Path is the host path to bind-mount (for hostPath: the hostPath itself).
	Path string
	// ReadOnly is forced for configMap, secret, downwardAPI and projected
	// volumes, whatever the volumeMount says.
	ReadOnly bool
	// SELinuxRelabel is always false for now.
	SELinuxRelabel bool
	// Image, for an image volume, is its source: nothing is prepared on the
	// host (Path is empty); the runtime mounts the image, read-only, once
	// podruntime pulled it and set ImageRef.
	Image    *v1.ImageVolumeSource
	ImageRef string
	// Device: a block volume (a claim of volumeMode Block) for the
	// containers' volumeDevices; Path is the pod's link to the device.
	Device bool
}

// KubeGetter is what the manager needs from the API server. Missing objects
// must be reported with an error for which apierrors.IsNotFound is true.
type KubeGetter interface {
	GetConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error)
	GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error)
	CreateToken(ctx context.Context, namespace, serviceAccountName string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error)
}

// SetUpError is the failure of one volume; its message has the upstream
// FailedMount wording.
type SetUpError struct {
	Volume string
	// Spec is the name the message gives the volume when it is not the pod's
	// volume name: a PersistentVolume's name, as upstream's messages say.
	Spec string
	// Op is the step that failed; "" is "MountVolume.SetUp".
	Op  string
	Err error
	// KeptContent: the volume already held content from an earlier set-up,
	// which stays (as upstream's failed remounts leave a mounted volume), so
	// the pod's containers can still use it.
	KeptContent bool
}

func (e *SetUpError) Error() string {
	op, name := e.Op, e.Spec
	if op == "" {
		op = "MountVolume.SetUp"
	}
	if name == "" {
		name = e.Volume
	}
	return fmt.Sprintf("%s failed for volume %q : %v", op, name, e.Err)
}

func (e *SetUpError) Unwrap() error { return e.Err }

// OnlyKeptContent reports whether err is made only of *SetUpError that kept
// their volume's earlier content: a refresh failed, but every volume is there,
// so the pod may go on (upstream's running pods keep a volume whose remount
// fails). False for nil.
func OnlyKeptContent(err error) bool {
	if err == nil {
		return false
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		var se *SetUpError
		if !errors.As(e, &se) || !se.KeptContent {
			return false
		}
	}
	return len(errs) > 0
}

// Option configures a Manager.
type Option func(*Manager)

// WithNodeAllocatable gives the node's allocatable resources, used for
// resourceFieldRef of unset limits and to size memory-backed volumes.
func WithNodeAllocatable(f func() v1.ResourceList) Option {
	return func(m *Manager) { m.nodeAllocatable = f }
}

// WithoutTmpfs keeps secret, projected and downwardAPI volumes on disk
// instead of on a tmpfs, and refuses emptyDir medium Memory. Only for
// unprivileged test setups: on a node secrets must not reach the disk.
func WithoutTmpfs() Option {
	return func(m *Manager) { m.noTmpfs = true }
}

// Manager sets up and tears down pod volumes. It keeps, per pod, only what
// it wrote (a payload digest per volume and the service-account tokens), so
// repeated SetUpPod calls rewrite nothing unless content changed.
type Manager struct {
	rootDir         string
	kube            KubeGetter
	clock           clock.Clock
	nodeAllocatable func() v1.ResourceList
	noTmpfs         bool
	claims          ClaimGetter
	nodeLabels      func() map[string]string
	csiDrivers      CSIDrivers
	csiObjects      CSIObjects
	nodeName        string
	csi             *csiState
	claimStatus     ClaimStatusWriter
	recorder        record.EventRecorder
	// localMu serializes local volume mounts, so two pods mounting one
	// volume at once agree on which mounted it first (and gets the fsGroup).
	localMu sync.Mutex
	// fsGroupWalk changes volumes' ownership; tests set its hook.
	fsGroupWalk fsGroupWalk

	mu   sync.Mutex
	pods map[types.UID]*podState
}

type podState struct {
	mu sync.Mutex
	// prepared: volume directory exists (and its tmpfs is mounted).
	prepared map[string]bool
	// written: digest of the payload last written per volume.
	written map[string][sha256.Size]byte
	tokens  map[string]*cachedToken
	// claims: what each claim volume resolved to when last set up, kept
	// while a later read of its claim or volume fails.
	claims map[string]HostVolume
	// csiFSGroupPending: CSI volumes published whose fsGroup change failed.
	csiFSGroupPending map[string]bool
}

// NewManager returns a manager rooted at rootDir (the kubelet root dir).
// kube is nil in standalone mode: configMap, secret and token volumes then
// fail (optional missing ones are empty).
func NewManager(rootDir string, kube KubeGetter, clk clock.Clock, opts ...Option) *Manager {
	m := &Manager{
		rootDir: rootDir,
		kube:    kube,
		clock:   clk,
		pods:    make(map[types.UID]*podState),
		csi:     newCSIState(),
	}
	for _, o := range opts {
		o(m)
	}
	return m
}

func (m *Manager) podVolumesDir(uid types.UID) string {
	return filepath.Join(m.rootDir, "pods", string(uid), "volumes")
}

func (m *Manager) state(uid types.UID) *podState {
	m.mu.Lock()
	defer m.mu.Unlock()
	st, ok := m.pods[uid]
	if !ok {
		st = &podState{
			prepared: map[string]bool{},
			written:  map[string][sha256.Size]byte{},
			tokens:   map[string]*cachedToken{},
			claims:   map[string]HostVolume{},

			csiFSGroupPending: map[string]bool{},
		}
		m.pods[uid] = st
	}
	return st
}

func (m *Manager) allocatable() v1.ResourceList {
	if m.nodeAllocatable == nil {
		return nil
	}
	return m.nodeAllocatable()
}

// SetUpPod prepares every volume in pod.Spec.Volumes and returns them by
// volume name. It is idempotent and meant to run on every sync of the pod:
// on repeat calls it refreshes content (changed configMap/secret data, the
// pod's labels and annotations in downwardAPI items, service-account tokens
// near expiry), rewriting only what changed; emptyDir and hostPath are
// prepared once. Volumes are set up independently: the map holds the ones
// that succeeded, plus those whose refresh failed but whose earlier content
// is on disk; the error joins a *SetUpError per failed volume. The pod must
// not start containers while a volume is missing from the map
// (OnlyKeptContent tells whether none is).
func (m *Manager) SetUpPod(ctx context.Context, pod *v1.Pod) (map[string]HostVolume, error) {
	if pod.UID == "" {
		return nil, fmt.Errorf("setting up volumes of pod %s/%s: pod has no UID", pod.Namespace, pod.Name)
	}
	st := m.state(pod.UID)
	st.mu.Lock()
	defer st.mu.Unlock()

	if len(pod.Spec.Volumes) > 0 {
		if err := os.MkdirAll(m.podVolumesDir(pod.UID), 0o750); err != nil {
			return nil, fmt.Errorf("creating volumes directory of pod %s: %w", klog.KObj(pod), err)
		}
	}
	out := make(map[string]HostVolume, len(pod.Spec.Volumes))
	var errs []error
	var claimErrs []*ClaimError
	var attachErrs []*AttachError
	mounts, devices := usedVolumes(pod)
	for i := range pod.Spec.Volumes {
		vol := &pod.Spec.Volumes[i]
		if _, isClaim := podClaim(pod, vol); isClaim && !mounts[vol.Name] && !devices[vol.Name] {
			// As upstream: a claim no container uses is not mounted, so its
			// state (unbound, missing) does not hold the pod back.
			continue
		}
		hv, err := m.setUpVolume(ctx, pod, vol, st)
		if err != nil {
			if kept, ok := st.claims[vol.Name]; ok {
				// Set up before: as upstream's mounted volumes, it stays while
				// its claim or volume cannot be read; the next sync reads again.
				klog.ErrorS(err, "Failed to process claim volume; keeping the earlier mount", "pod", klog.KObj(pod), "podUID", pod.UID, "volume", vol.Name)
				out[vol.Name] = kept
				continue
			}
			var ce *ClaimError
			if errors.As(err, &ce) {
				klog.ErrorS(err, "Error processing volume", "pod", klog.KObj(pod), "podUID", pod.UID, "volume", vol.Name)
				claimErrs = append(claimErrs, ce)
				continue
			}
			var ae *AttachError
			if errors.As(err, &ae) {
				klog.InfoS("Volume not attached yet", "pod", klog.KObj(pod), "podUID", pod.UID, "volume", vol.Name, "err", err)
				attachErrs = append(attachErrs, ae)
				continue
			}
			kept, ok := m.keptContent(pod.UID, vol)
			klog.ErrorS(err, "Failed to set up volume", "pod", klog.KObj(pod), "podUID", pod.UID, "volume", vol.Name, "keptContent", ok)
			var se *SetUpError
			if !errors.As(err, &se) {
				se = &SetUpError{Volume: vol.Name, Err: err}
			}
			se.KeptContent = ok
			errs = append(errs, se)
			if ok {
				out[vol.Name] = kept
			}
			continue
		}
		if _, isClaim := podClaim(pod, vol); isClaim {
			st.claims[vol.Name] = hv
		}
		out[vol.Name] = hv
	}
	if len(claimErrs) > 0 || len(attachErrs) > 0 {
		errs = append([]error{newUnprocessedVolumesError(pod, out, claimErrs, attachErrs)}, errs...)
	}
	return out, errors.Join(errs...)
}

func (m *Manager) setUpVolume(ctx context.Context, pod *v1.Pod, vol *v1.Volume, st *podState) (HostVolume, error) {
	if err := validateVolumeName(vol.Name); err != nil {
		return HostVolume{}, err
	}
	src := &vol.VolumeSource
	switch {
	case src.EmptyDir != nil:
		return m.setUpEmptyDir(pod, vol, st)
	case src.HostPath != nil:
		if err := checkHostPath(src.HostPath); err != nil {
			return HostVolume{}, err
		}
		return HostVolume{Path: src.HostPath.Path}, nil
	case src.ConfigMap != nil:
		payload, err := m.configMapPayload(ctx, pod.Namespace, src.ConfigMap.Name, src.ConfigMap.Items,
			modeOr(src.ConfigMap.DefaultMode, v1.ConfigMapVolumeSourceDefaultMode), isTrue(src.ConfigMap.Optional))
		if err != nil {
			return HostVolume{}, err
		}
		return m.writeVolume(pod, vol.Name, pluginConfigMap, false, payload, st)
	case src.Secret != nil:
		payload, err := m.secretPayload(ctx, pod.Namespace, src.Secret.SecretName, src.Secret.Items,
			modeOr(src.Secret.DefaultMode, v1.SecretVolumeSourceDefaultMode), isTrue(src.Secret.Optional))
		if err != nil {
			return HostVolume{}, err
		}
		return m.writeVolume(pod, vol.Name, pluginSecret, true, payload, st)
	case src.DownwardAPI != nil:
		payload, err := m.downwardAPIPayload(pod, src.DownwardAPI.Items,
			modeOr(src.DownwardAPI.DefaultMode, v1.DownwardAPIVolumeSourceDefaultMode))
		if err != nil {
			return HostVolume{}, err
		}
		return m.writeVolume(pod, vol.Name, pluginDownwardAPI, true, payload, st)
	case src.Projected != nil:
		payload, err := m.projectedPayload(ctx, pod, vol.Name, src.Projected, st)
		if err != nil {
			return HostVolume{}, err
		}
		return m.writeVolume(pod, vol.Name, pluginProjected, true, payload, st)
	case src.PersistentVolumeClaim != nil, src.Ephemeral != nil:
		claim, _ := podClaim(pod, vol)
		return m.setUpClaim(ctx, pod, vol, claim, st)
	case src.CSI != nil && m.csiDrivers != nil:
		return m.setUpCSI(ctx, pod, vol, nil, false, st)
	case src.Image != nil:
		// Pulled with the pod's credentials and mounted by the runtime (CRI
		// Mount.image), as upstream: the host holds nothing for it.
		img := *src.Image
		return HostVolume{Image: &img, ReadOnly: true}, nil
	}
	return HostVolume{}, fmt.Errorf("volume type %s is not supported by this node agent", volumeType(src))
}

// keptContent returns the volume as it is on disk when it is a payload
// volume (configMap, secret, downwardAPI, projected) that an earlier set-up
// filled, in this process or before a restart.
func (m *Manager) keptContent(uid types.UID, vol *v1.Volume) (HostVolume, bool) {
	plugin := payloadPluginDir(&vol.VolumeSource)
	if plugin == "" {
		return HostVolume{}, false
	}
	if validateVolumeName(vol.Name) != nil {
		return HostVolume{}, false
	}
	dir := filepath.Join(m.podVolumesDir(uid), plugin, vol.Name)
	if _, err := os.Lstat(filepath.Join(dir, dataDirName)); err != nil {
		return HostVolume{}, false
	}
	return HostVolume{Path: dir, ReadOnly: true}, true
}

// payloadPluginDir is the plugin directory of a volume nodelet fills with
// the atomic writer (configMap, secret, downwardAPI, projected); "" for others.
func payloadPluginDir(src *v1.VolumeSource) string {
	switch {
	case src.ConfigMap != nil:
		return pluginConfigMap
	case src.Secret != nil:
		return pluginSecret
	case src.DownwardAPI != nil:
		return pluginDownwardAPI
	case src.Projected != nil:
		return pluginProjected
	}
	return ""
}

// writeVolume makes the volume directory (on a tmpfs when memoryBacked,
// as upstream does for secret, projected and downwardAPI) hold payload,
// rewriting only when the payload differs from what was last written.
func (m *Manager) writeVolume(pod *v1.Pod, name, plugin string, memoryBacked bool, payload map[string]fileProjection, st *podState) (HostVolume, error) {
	dir := filepath.Join(m.podVolumesDir(pod.UID), plugin, name)
	if !st.prepared[name] {
		if err := m.prepareDir(pod, dir, memoryBacked && !m.noTmpfs, nil); err != nil {
			return HostVolume{}, err
		}
		st.prepared[name] = true
	}
	fsGroup := fsGroupOf(pod)
	var extra os.FileMode
	if fsGroup != nil {
		extra = roMask
	}
	digest := payloadDigest(payload, fsGroup)
	if d, ok := st.written[name]; ok && d == digest {
		if _, err := os.Lstat(filepath.Join(dir, dataDirName)); err == nil {
			return HostVolume{Path: dir, ReadOnly: true}, nil
		}
	}
	changed, err := writePayload(dir, payload, extra, m.clock.Now())
	if err != nil {
		return HostVolume{}, fmt.Errorf("writing volume content: %w", err)
	}
	if fsGroup != nil {
		if err := m.fsGroupWalk.apply(dir, *fsGroup, true); err != nil {
			return HostVolume{}, err
		}
	}
	st.written[name] = digest
	if changed {
		klog.V(2).InfoS("Wrote volume content", "pod", klog.KObj(pod), "podUID", pod.UID, "volume", name, "files", len(payload))
	}
	return HostVolume{Path: dir, ReadOnly: true}, nil
}

// prepareDir creates dir with mode 0777 (as upstream, so any container user
// can use it) and, for memory-backed volumes, mounts a tmpfs on it unless
// one is already there (e.g. after a restart of this process).
func (m *Manager) prepareDir(pod *v1.Pod, dir string, tmpfs bool, sizeLimit *int64) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o750); err != nil {
		return fmt.Errorf("creating %s: %w", filepath.Dir(dir), err)
	}
	if err := os.Mkdir(dir, 0o777); err != nil && !os.IsExist(err) {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	if !tmpfs {
		if err := os.Chmod(dir, 0o777); err != nil {
			return fmt.Errorf("setting mode of %s: %w", dir, err)
		}
		return nil
	}
	mounted, err := mountutil.IsMountPoint(dir)
	if err != nil {
		return err
	}
	if mounted {
		return nil
	}
	size := m.memoryVolumeSize(pod, sizeLimit)
	if err := mountTmpfs(dir, size); err != nil {
		return err
	}
	klog.V(2).InfoS("Mounted tmpfs for volume", "pod", klog.KObj(pod), "path", dir, "sizeBytes", size)
	return nil
}

// TearDownPod unmounts everything mounted below the pod's volume-subpaths
// and volumes directories and removes them. It is safe to repeat; it removes
// nothing while anything is still mounted there and never crosses a mount
// point (so a bind mount can never lead it into deleting files elsewhere).
func (m *Manager) TearDownPod(ctx context.Context, podUID types.UID) error {
	st := m.state(podUID)
	st.mu.Lock()
	defer st.mu.Unlock()
	defer func() {
		// A SetUpPod already waiting on st.mu must start from scratch.
		st.prepared = map[string]bool{}
		st.written = map[string][sha256.Size]byte{}
		st.tokens = map[string]*cachedToken{}
		st.claims = map[string]HostVolume{}
		st.csiFSGroupPending = map[string]bool{}
		m.csi.forgetPod(podUID)
		m.mu.Lock()
		if m.pods[podUID] == st {
			delete(m.pods, podUID)
		}
		m.mu.Unlock()
	}()

	// Sub path mounts first: they hold the volumes' contents.
	if err := m.tearDownSubPaths(ctx, podUID); err != nil {
		return fmt.Errorf("tearing down volumes of pod %s: %w", podUID, err)
	}
	// Block volumes next: their links, device locks and (CSI) publications.
	if err := m.tearDownBlock(ctx, podUID); err != nil {
		return fmt.Errorf("tearing down volumes of pod %s: %w", podUID, err)
	}
	// CSI volumes next: their drivers unpublish them (and unstage them when
	// no other pod has them); what a driver cannot take down stays.
	if err := m.tearDownCSI(ctx, podUID); err != nil {
		return fmt.Errorf("tearing down volumes of pod %s: %w", podUID, err)
	}
	dir := m.podVolumesDir(podUID)
	if _, err := os.Lstat(dir); os.IsNotExist(err) {
		return nil
	}
	n, err := mountutil.UnmountAndRemoveAll(dir)
	if err != nil {
		return fmt.Errorf("tearing down volumes of pod %s: %w", podUID, err)
	}
	klog.V(2).InfoS("Tore down pod volumes", "podUID", podUID, "unmounted", n)
	return nil
}

// PodVolumesExist reports whether any volume directory of the pod is still
// on disk. Errors other than "not there" count as existing, so callers
// err on the side of not deleting the pod.
func (m *Manager) PodVolumesExist(podUID types.UID) bool {
	if _, err := os.Lstat(filepath.Join(m.rootDir, "pods", string(podUID), "volumeDevices")); err == nil || !os.IsNotExist(err) {
		return true // block volume links, removed by the teardown once unmapped
	}
	dir := m.podVolumesDir(podUID)
	plugins, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return false
	}
	if err != nil {
		return true
	}
	for _, p := range plugins {
		if !p.IsDir() {
			return true
		}
		vols, err := os.ReadDir(filepath.Join(dir, p.Name()))
		if err != nil || len(vols) > 0 {
			return true
		}
	}
	return false
}

// PodsWithVolumes lists the pod UIDs under <rootDir>/pods that still have
// volumes on disk, for orphan clean-up after a restart.
func (m *Manager) PodsWithVolumes() ([]types.UID, error) {
	entries, err := os.ReadDir(filepath.Join(m.rootDir, "pods"))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing pod directories: %w", err)
	}
	var out []types.UID
	for _, e := range entries {
		if e.IsDir() && m.PodVolumesExist(types.UID(e.Name())) {
			out = append(out, types.UID(e.Name()))
		}
	}
	return out, nil
}

func validateVolumeName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("invalid volume name %q", name)
	}
	return nil
}

func payloadDigest(payload map[string]fileProjection, fsGroup *int64) [sha256.Size]byte {
	paths := make([]string, 0, len(payload))
	for p := range payload {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	h := sha256.New()
	if fsGroup != nil {
		fmt.Fprintf(h, "fsGroup=%d;", *fsGroup)
	}
	for _, p := range paths {
		f := payload[p]
		owner := int64(-1)
		if f.FsUser != nil {
			owner = *f.FsUser
		}
		fmt.Fprintf(h, "%d:%s:%o:%d:%d:", len(p), p, f.Mode, owner, len(f.Data))
		h.Write(f.Data)
	}
	var d [sha256.Size]byte
	copy(d[:], h.Sum(nil))
	return d
}

func modeOr(m *int32, def int32) int32 {
	if m != nil {
		return *m
	}
	return def
}

func isTrue(b *bool) bool { return b != nil && *b }

func volumeType(src *v1.VolumeSource) string {
	switch {
	case src.PersistentVolumeClaim != nil:
		return "persistentVolumeClaim"
	case src.CSI != nil:
		return "csi"
	case src.Ephemeral != nil:
		return "ephemeral"
	case src.NFS != nil:
		return "nfs"
	case src.ISCSI != nil:
		return "iscsi"
	case src.Image != nil:
		return "image"
	}
	return "(unknown)"
}
