package volumes

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/mountutil"
)

// fakeClaims is a hand-written ClaimGetter.
type fakeClaims struct {
	mu   sync.Mutex
	pvcs map[string]*v1.PersistentVolumeClaim // ns/name
	pvs  map[string]*v1.PersistentVolume
}

func (f *fakeClaims) GetPersistentVolumeClaim(_ context.Context, ns, name string) (*v1.PersistentVolumeClaim, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.pvcs[ns+"/"+name]; ok {
		return c.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(v1.Resource("persistentvolumeclaims"), name)
}

func (f *fakeClaims) GetPersistentVolume(_ context.Context, name string) (*v1.PersistentVolume, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if pv, ok := f.pvs[name]; ok {
		return pv.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(v1.Resource("persistentvolumes"), name)
}

func (f *fakeClaims) put(objs ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pvcs == nil {
		f.pvcs, f.pvs = map[string]*v1.PersistentVolumeClaim{}, map[string]*v1.PersistentVolume{}
	}
	for _, o := range objs {
		switch o := o.(type) {
		case *v1.PersistentVolumeClaim:
			f.pvcs[o.Namespace+"/"+o.Name] = o
		case *v1.PersistentVolume:
			f.pvs[o.Name] = o
		}
	}
}

func (f *fakeClaims) delete(ns, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.pvcs, ns+"/"+name)
}

func boundPVC(name, pvName string) *v1.PersistentVolumeClaim {
	return &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: name, UID: types.UID("claim-" + name)},
		Spec:       v1.PersistentVolumeClaimSpec{VolumeName: pvName},
		Status:     v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound},
	}
}

func hostPathPV(name, claim, path string, typ v1.HostPathType) *v1.PersistentVolume {
	return &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PersistentVolumeSpec{
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			ClaimRef:    &v1.ObjectReference{Namespace: "ns1", Name: claim, UID: types.UID("claim-" + claim)},
			PersistentVolumeSource: v1.PersistentVolumeSource{
				HostPath: &v1.HostPathVolumeSource{Path: path, Type: ptr.To(typ)},
			},
		},
	}
}

func localPV(name, claim, path, node string) *v1.PersistentVolume {
	return &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PersistentVolumeSpec{
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			ClaimRef:    &v1.ObjectReference{Namespace: "ns1", Name: claim, UID: types.UID("claim-" + claim)},
			PersistentVolumeSource: v1.PersistentVolumeSource{
				Local: &v1.LocalVolumeSource{Path: path},
			},
			NodeAffinity: &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
				MatchExpressions: []v1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: v1.NodeSelectorOpIn, Values: []string{node}}},
			}}}},
		},
	}
}

func claimVolume(name, claim string, readOnly bool) v1.Volume {
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: readOnly}}}
}

func ephemeralVolume(name string) v1.Volume {
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{
		VolumeClaimTemplate: &v1.PersistentVolumeClaimTemplate{},
	}}}
}

// claimPod is testPod with its container mounting every volume.
func claimPod(vols ...v1.Volume) *v1.Pod {
	pod := testPod(vols...)
	for _, v := range vols {
		pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, v1.VolumeMount{Name: v.Name, MountPath: "/" + v.Name})
	}
	return pod
}

var thisNode = map[string]string{"kubernetes.io/hostname": "node1"}

// TestDecideClaim: the claim → volume decision, with upstream's checks and
// messages, for every outcome.
func TestDecideClaim(t *testing.T) {
	pod := claimPod(claimVolume("data", "c1", false))
	owned := func(pvc *v1.PersistentVolumeClaim) *v1.PersistentVolumeClaim {
		pvc.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID, Controller: ptr.To(true)}}
		return pvc
	}
	with := func(pv *v1.PersistentVolume, f func(*v1.PersistentVolume)) *v1.PersistentVolume { f(pv); return pv }
	withPVC := func(pvc *v1.PersistentVolumeClaim, f func(*v1.PersistentVolumeClaim)) *v1.PersistentVolumeClaim {
		f(pvc)
		return pvc
	}
	cases := []struct {
		name      string
		claim     claimRef
		dev       bool
		pvc       *v1.PersistentVolumeClaim
		pvcErr    error
		pv        *v1.PersistentVolume
		want      pvMount
		claimErr  string // a ClaimError with this message
		setUpErr  string // a SetUpError with this message
		noPVCRead bool
		csi       bool
	}{
		{name: "bound hostPath", claim: claimRef{name: "c1"}, pvc: boundPVC("c1", "pv1"), pv: hostPathPV("pv1", "c1", "/srv/a", v1.HostPathDirectoryOrCreate),
			want: pvMount{pvName: "pv1", kind: pvHostPath, hostPath: &v1.HostPathVolumeSource{Path: "/srv/a", Type: ptr.To(v1.HostPathDirectoryOrCreate)}}},
		{name: "bound local on this node", claim: claimRef{name: "c1"}, pvc: boundPVC("c1", "pv1"), pv: localPV("pv1", "c1", "/mnt/disks/a", "node1"),
			want: pvMount{pvName: "pv1", kind: pvLocal, path: "/mnt/disks/a"}},
		{name: "claim readOnly", claim: claimRef{name: "c1", readOnly: true}, pvc: boundPVC("c1", "pv1"), pv: localPV("pv1", "c1", "/mnt/disks/a", "node1"),
			want: pvMount{pvName: "pv1", kind: pvLocal, path: "/mnt/disks/a", readOnly: true}},
		{name: "volume only ReadOnlyMany is still writable, as upstream", claim: claimRef{name: "c1"}, pvc: boundPVC("c1", "pv1"),
			pv:   with(localPV("pv1", "c1", "/mnt/disks/a", "node1"), func(pv *v1.PersistentVolume) { pv.Spec.AccessModes = []v1.PersistentVolumeAccessMode{v1.ReadOnlyMany} }),
			want: pvMount{pvName: "pv1", kind: pvLocal, path: "/mnt/disks/a"}},
		{name: "ReadOnlyMany and ReadWriteOnce stays writable", claim: claimRef{name: "c1"}, pvc: boundPVC("c1", "pv1"),
			pv: with(hostPathPV("pv1", "c1", "/srv/a", v1.HostPathUnset), func(pv *v1.PersistentVolume) {
				pv.Spec.AccessModes = []v1.PersistentVolumeAccessMode{v1.ReadOnlyMany, v1.ReadWriteOnce}
			}),
			want: pvMount{pvName: "pv1", kind: pvHostPath, hostPath: &v1.HostPathVolumeSource{Path: "/srv/a", Type: ptr.To(v1.HostPathUnset)}}},
		{name: "missing claim", claim: claimRef{name: "c1"}, pvcErr: apierrors.NewNotFound(v1.Resource("persistentvolumeclaims"), "c1"),
			claimErr: `error processing PVC ns1/c1: failed to fetch PVC from API server: persistentvolumeclaims "c1" not found`},
		{name: "unbound claim", claim: claimRef{name: "c1"}, pvc: withPVC(boundPVC("c1", ""), func(c *v1.PersistentVolumeClaim) { c.Status.Phase = v1.ClaimPending }),
			claimErr: `error processing PVC ns1/c1: PVC is not bound`},
		{name: "claim being deleted", claim: claimRef{name: "c1"}, pvc: withPVC(boundPVC("c1", "pv1"), func(c *v1.PersistentVolumeClaim) { c.DeletionTimestamp = &metav1.Time{} }),
			claimErr: `error processing PVC ns1/c1: PVC is being deleted`},
		{name: "bound without volume name", claim: claimRef{name: "c1"}, pvc: boundPVC("c1", ""),
			claimErr: `error processing PVC ns1/c1: PVC has empty pvc.Spec.VolumeName`},
		{name: "missing volume", claim: claimRef{name: "c1"}, pvc: boundPVC("c1", "pv1"),
			claimErr: `error processing PVC ns1/c1: failed to fetch PV pv1 from API server: persistentvolumes "pv1" not found`},
		{name: "volume not bound", claim: claimRef{name: "c1"}, pvc: boundPVC("c1", "pv1"),
			pv:       with(localPV("pv1", "c1", "/a", "node1"), func(pv *v1.PersistentVolume) { pv.Spec.ClaimRef = nil }),
			claimErr: `error processing PVC ns1/c1: found PV object pv1 but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim`},
		{name: "volume bound to another claim", claim: claimRef{name: "c1"}, pvc: boundPVC("c1", "pv1"), pv: localPV("pv1", "c2", "/a", "node1"),
			claimErr: `error processing PVC ns1/c1: found PV object pv1 but its pv.Spec.ClaimRef.UID claim-c2 does not point to claim.UID claim-c1`},
		{name: "local volume of another node", claim: claimRef{name: "c1"}, pvc: boundPVC("c1", "pv1"), pv: localPV("pv1", "c1", "/a", "node2"),
			setUpErr: `MountVolume.NodeAffinity check failed for volume "pv1" : no matching NodeSelectorTerms`},
		{name: "local path with ..", claim: claimRef{name: "c1"}, pvc: boundPVC("c1", "pv1"), pv: localPV("pv1", "c1", "/mnt/../etc", "node1"),
			setUpErr: `MountVolume.SetUp failed for volume "pv1" : invalid path: /mnt/../etc must not contain '..'`},
		{name: "csi volume waits, named", claim: claimRef{name: "c1"}, pvc: boundPVC("c1", "pv1"),
			pv: with(localPV("pv1", "c1", "/a", "node1"), func(pv *v1.PersistentVolume) {
				pv.Spec.Local, pv.Spec.CSI = nil, &v1.CSIPersistentVolumeSource{Driver: "hostpath.csi.k8s.io", VolumeHandle: "h"}
			}),
			claimErr: `error processing PVC ns1/c1: PersistentVolume pv1 is of type csi (driver "hostpath.csi.k8s.io"), which this node agent cannot mount (it mounts hostPath and local volumes)`},
		{name: "nfs volume waits, named", claim: claimRef{name: "c1"}, pvc: boundPVC("c1", "pv1"),
			pv: with(localPV("pv1", "c1", "/a", "node1"), func(pv *v1.PersistentVolume) {
				pv.Spec.Local, pv.Spec.NFS = nil, &v1.NFSVolumeSource{Server: "s", Path: "/x"}
			}),
			claimErr: `error processing PVC ns1/c1: PersistentVolume pv1 is of type nfs, which this node agent cannot mount (it mounts hostPath and local volumes)`},
		{name: "block volume in volumeMounts", claim: claimRef{name: "c1"}, pvc: boundPVC("c1", "pv1"),
			pv:       with(localPV("pv1", "c1", "/a", "node1"), func(pv *v1.PersistentVolume) { pv.Spec.VolumeMode = ptr.To(v1.PersistentVolumeBlock) }),
			claimErr: `volume data has volumeMode Block, but is specified in volumeMounts`},
		{name: "block local volume in volumeDevices is mapped", claim: claimRef{name: "c1"}, dev: true, pvc: boundPVC("c1", "pv1"),
			pv:   with(localPV("pv1", "c1", "/dev/sdb", "node1"), func(pv *v1.PersistentVolume) { pv.Spec.VolumeMode = ptr.To(v1.PersistentVolumeBlock) }),
			want: pvMount{pvName: "pv1", kind: pvLocal, path: "/dev/sdb", block: true}},
		{name: "block local volume read-only", claim: claimRef{name: "c1", readOnly: true}, dev: true, pvc: boundPVC("c1", "pv1"),
			pv:   with(localPV("pv1", "c1", "/dev/sdb", "node1"), func(pv *v1.PersistentVolume) { pv.Spec.VolumeMode = ptr.To(v1.PersistentVolumeBlock) }),
			want: pvMount{pvName: "pv1", kind: pvLocal, path: "/dev/sdb", block: true, readOnly: true}},
		{name: "block local volume of another node", claim: claimRef{name: "c1"}, dev: true, pvc: boundPVC("c1", "pv1"),
			pv:       with(localPV("pv1", "c1", "/dev/sdb", "node2"), func(pv *v1.PersistentVolume) { pv.Spec.VolumeMode = ptr.To(v1.PersistentVolumeBlock) }),
			setUpErr: `MountVolume.NodeAffinity check failed for volume "pv1" : no matching NodeSelectorTerms`},
		{name: "block csi volume in volumeDevices is mapped", claim: claimRef{name: "c1"}, dev: true, csi: true, pvc: boundPVC("c1", "pv1"),
			pv: with(localPV("pv1", "c1", "/a", "node1"), func(pv *v1.PersistentVolume) {
				pv.Spec.VolumeMode = ptr.To(v1.PersistentVolumeBlock)
				pv.Spec.Local, pv.Spec.CSI = nil, &v1.CSIPersistentVolumeSource{Driver: "hostpath.csi.k8s.io", VolumeHandle: "h"}
			}),
			want: pvMount{pvName: "pv1", kind: pvCSI, block: true}},
		{name: "block hostPath volume is refused, named", claim: claimRef{name: "c1"}, dev: true, pvc: boundPVC("c1", "pv1"),
			pv:       with(hostPathPV("pv1", "c1", "/dev/sdb", v1.HostPathUnset), func(pv *v1.PersistentVolume) { pv.Spec.VolumeMode = ptr.To(v1.PersistentVolumeBlock) }),
			claimErr: `error processing PVC ns1/c1: PersistentVolume pv1 of type hostPath has volumeMode Block, which this node agent cannot map (it maps local and CSI volumes)`},
		{name: "filesystem volume in volumeDevices", claim: claimRef{name: "c1"}, dev: true, pvc: boundPVC("c1", "pv1"), pv: localPV("pv1", "c1", "/a", "node1"),
			claimErr: `volume data has volumeMode Filesystem, but is specified in volumeDevices`},
		{name: "ephemeral owned by the pod", claim: claimRef{name: "web-data", ephemeral: true}, pvc: owned(boundPVC("web-data", "pv1")),
			pv:   localPV("pv1", "web-data", "/a", "node1"),
			want: pvMount{pvName: "pv1", kind: pvLocal, path: "/a"}},
		{name: "ephemeral not owned by the pod", claim: claimRef{name: "web-data", ephemeral: true}, pvc: boundPVC("web-data", "pv1"), pv: localPV("pv1", "web-data", "/a", "node1"),
			claimErr: `PVC ns1/web-data was not created for pod ns1/web (pod is not owner)`},
		{name: "ephemeral unbound is reported before ownership", claim: claimRef{name: "web-data", ephemeral: true},
			pvc:      withPVC(boundPVC("web-data", ""), func(c *v1.PersistentVolumeClaim) { c.Status.Phase = v1.ClaimPending }),
			claimErr: `error processing PVC ns1/web-data: PVC is not bound`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := &claimFacts{pod: pod, volume: "data", claim: tc.claim, usedAsDir: !tc.dev, usedAsDev: tc.dev, csi: tc.csi,
				pvc: tc.pvc, pvcErr: tc.pvcErr, pv: tc.pv, nodeLabels: thisNode}
			if tc.pv == nil && tc.pvc != nil {
				f.pvErr = apierrors.NewNotFound(v1.Resource("persistentvolumes"), tc.pvc.Spec.VolumeName)
			}
			got, err := decideClaim(f)
			var ce *ClaimError
			var se *SetUpError
			switch {
			case tc.claimErr != "":
				if !errors.As(err, &ce) || err.Error() != tc.claimErr || ce.Volume != "data" {
					t.Fatalf("err = %v (%T); want ClaimError %q", err, err, tc.claimErr)
				}
			case tc.setUpErr != "":
				if !errors.As(err, &se) || err.Error() != tc.setUpErr || se.Volume != "data" {
					t.Fatalf("err = %v (%T); want SetUpError %q", err, err, tc.setUpErr)
				}
			default:
				if err != nil {
					t.Fatal(err)
				}
				if got.pvName != tc.want.pvName || got.kind != tc.want.kind || got.path != tc.want.path || got.readOnly != tc.want.readOnly || got.block != tc.want.block ||
					(tc.want.hostPath != nil && (got.hostPath == nil || *got.hostPath.Type != *tc.want.hostPath.Type || got.hostPath.Path != tc.want.hostPath.Path)) {
					t.Errorf("decided %+v, want %+v", got, tc.want)
				}
			}
		})
	}
}

func newClaimManager(t *testing.T, claims *fakeClaims) (*Manager, string) {
	t.Helper()
	m, root, _ := newTestManager(t, &fakeKube{}, WithClaims(claims, func() map[string]string { return thisNode }))
	return m, root
}

// TestHostPathClaim: a claim bound to a hostPath volume gives the runtime
// the volume's path, after the hostPath type check (the one of hostPath
// volumes); no fsGroup change; readOnly from the claim volume.
func TestHostPathClaim(t *testing.T) {
	claims := &fakeClaims{}
	m, _ := newClaimManager(t, claims)
	dir := filepath.Join(t.TempDir(), "data")
	claims.put(boundPVC("c1", "pv1"), hostPathPV("pv1", "c1", dir, v1.HostPathDirectoryOrCreate))
	pod := claimPod(claimVolume("data", "c1", true))
	pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr.To(int64(4321))}
	tearDownOnCleanup(t, m, pod.UID)
	got, err := m.SetUpPod(context.Background(), pod)
	if err != nil {
		t.Fatal(err)
	}
	if hv := got["data"]; hv.Path != dir || !hv.ReadOnly {
		t.Errorf("hostPath claim set up as %+v; want %s read-only", hv, dir)
	}
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() {
		t.Fatalf("DirectoryOrCreate did not create %s: %v", dir, err)
	}
	if g := groupOf(fi); g == 4321 {
		t.Error("fsGroup applied to a hostPath volume")
	}

	// A type check that fails names the volume as upstream does.
	claims.put(boundPVC("c2", "pv2"), hostPathPV("pv2", "c2", filepath.Join(t.TempDir(), "nofile"), v1.HostPathFile))
	pod2 := claimPod(claimVolume("data", "c2", false))
	pod2.UID = "uid-2"
	_, err = m.SetUpPod(context.Background(), pod2)
	if err == nil || !strings.Contains(err.Error(), `MountVolume.SetUp failed for volume "pv2" : hostPath type check failed:`) {
		t.Errorf("err = %v; want the hostPath type check failure naming pv2", err)
	}
}

// TestLocalClaim: a local volume is bind-mounted at
// <pod>/volumes/kubernetes.io~local-volume/<pv>, fsGroup applied on the
// first mount, kept on a repeat set-up and while its claim cannot be read;
// teardown unmounts it and the data stays.
func TestLocalClaim(t *testing.T) {
	requireRoot(t)
	claims := &fakeClaims{}
	m, root := newClaimManager(t, claims)
	disk := t.TempDir()
	if err := os.WriteFile(filepath.Join(disk, "old"), []byte("kept"), 0o600); err != nil {
		t.Fatal(err)
	}
	claims.put(boundPVC("c1", "pv1"), localPV("pv1", "c1", disk, "node1"))
	pod := claimPod(claimVolume("data", "c1", false), claimVolume("unused", "missing", false))
	pod.Spec.Containers[0].VolumeMounts = pod.Spec.Containers[0].VolumeMounts[:1]
	pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr.To(int64(4321))}
	tearDownOnCleanup(t, m, pod.UID)
	ctx := context.Background()
	got, err := m.SetUpPod(ctx, pod)
	if err != nil {
		t.Fatalf("set up (an unused missing claim must not matter): %v", err)
	}
	target := volPath(root, pod.UID, pluginLocalVolume, "pv1")
	if hv := got["data"]; hv.Path != target || hv.ReadOnly {
		t.Fatalf("local claim set up as %+v; want %s writable", hv, target)
	}
	if mounted, _ := mountutil.IsMountPoint(target); !mounted {
		t.Fatal("local volume not bind-mounted")
	}
	if b, err := os.ReadFile(filepath.Join(target, "old")); err != nil || string(b) != "kept" {
		t.Fatalf("mount does not show the volume's data: %q, %v", b, err)
	}
	fi, _ := os.Stat(filepath.Join(disk, "old"))
	if groupOf(fi) != 4321 || fi.Mode().Perm()&0o060 != 0o060 {
		t.Errorf("fsGroup not applied: gid %d mode %v", groupOf(fi), fi.Mode())
	}
	if _, ok := got["unused"]; ok {
		t.Error("a claim no container uses was set up")
	}

	// A repeat set-up keeps the mount and changes nothing; a claim that
	// cannot be read any more keeps the earlier volume.
	if err := os.Chown(filepath.Join(disk, "old"), -1, 0); err != nil {
		t.Fatal(err)
	}
	// A new manager (a restart of nodelet) finds the mount and reuses it.
	restarted := NewManager(root, &fakeKube{}, m.clock, WithClaims(claims, func() map[string]string { return thisNode }))
	for _, mgr := range []*Manager{m, restarted} {
		got, err = mgr.SetUpPod(ctx, pod)
		if err != nil || got["data"].Path != target {
			t.Fatalf("repeat set-up: %+v, %v", got["data"], err)
		}
	}
	fi, _ = os.Stat(filepath.Join(disk, "old"))
	if groupOf(fi) != 0 {
		t.Error("fsGroup applied again on a repeat set-up")
	}
	claims.delete("ns1", "c1")
	got, err = m.SetUpPod(ctx, pod)
	if err != nil || got["data"].Path != target {
		t.Fatalf("repeat set-up with the claim gone: %+v, %v; want the kept mount", got["data"], err)
	}
	n, _ := mountutil.PointsUnder(target)
	if len(n) != 1 {
		t.Errorf("%d mounts at %s after a repeat set-up, want 1", len(n), target)
	}

	if err := m.TearDownPod(ctx, pod.UID); err != nil {
		t.Fatal(err)
	}
	if mounted, _ := mountutil.IsMountPoint(target); mounted {
		t.Error("still mounted after teardown")
	}
	if b, err := os.ReadFile(filepath.Join(disk, "old")); err != nil || string(b) != "kept" {
		t.Fatalf("teardown touched the volume's data: %q, %v", b, err)
	}
	if m.PodVolumesExist(pod.UID) {
		t.Error("pod volume directory left after teardown")
	}
}

// TestLocalClaimFSGroupChangePolicy: OnRootMismatch leaves a volume whose
// root already has the group and mode alone, Always walks it; a read-only
// claim and a volume another pod has mounted get no change.
func TestLocalClaimFSGroupChangePolicy(t *testing.T) {
	requireRoot(t)
	const gid = 4321
	prepare := func(t *testing.T, rootReady bool) string {
		disk := t.TempDir()
		inner := filepath.Join(disk, "f")
		if err := os.WriteFile(inner, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if rootReady {
			if err := os.Chown(disk, -1, gid); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(disk, 0o770|os.ModeSetgid); err != nil {
				t.Fatal(err)
			}
		}
		return disk
	}
	innerGID := func(disk string) int64 {
		fi, err := os.Stat(filepath.Join(disk, "f"))
		if err != nil {
			t.Fatal(err)
		}
		return groupOf(fi)
	}
	cases := []struct {
		name      string
		policy    *v1.PodFSGroupChangePolicy
		rootReady bool
		readOnly  bool
		otherPod  bool
		wantInner int64
	}{
		{name: "OnRootMismatch, root matches: skipped", policy: ptr.To(v1.FSGroupChangeOnRootMismatch), rootReady: true, wantInner: 0},
		{name: "OnRootMismatch, root differs: changed", policy: ptr.To(v1.FSGroupChangeOnRootMismatch), wantInner: gid},
		{name: "Always, root matches: changed", policy: ptr.To(v1.FSGroupChangeAlways), rootReady: true, wantInner: gid},
		{name: "unset is Always", rootReady: true, wantInner: gid},
		{name: "read-only claim: no change", readOnly: true, wantInner: 0},
		{name: "mounted by another pod: no change", otherPod: true, wantInner: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			claims := &fakeClaims{}
			m, _ := newClaimManager(t, claims)
			disk := prepare(t, tc.rootReady)
			claims.put(boundPVC("c1", "pv1"), localPV("pv1", "c1", disk, "node1"))
			ctx := context.Background()
			if tc.otherPod {
				other := claimPod(claimVolume("data", "c1", false))
				other.UID = "uid-other"
				tearDownOnCleanup(t, m, other.UID)
				if _, err := m.SetUpPod(ctx, other); err != nil {
					t.Fatal(err)
				}
			}
			pod := claimPod(claimVolume("data", "c1", tc.readOnly))
			pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr.To(int64(gid)), FSGroupChangePolicy: tc.policy}
			tearDownOnCleanup(t, m, pod.UID)
			got, err := m.SetUpPod(ctx, pod)
			if err != nil {
				t.Fatal(err)
			}
			if got["data"].ReadOnly != tc.readOnly {
				t.Errorf("ReadOnly = %v, want %v", got["data"].ReadOnly, tc.readOnly)
			}
			if g := innerGID(disk); g != tc.wantInner {
				t.Errorf("group of a file inside = %d, want %d", g, tc.wantInner)
			}
		})
	}
}

// TestClaimWaits: a missing claim fails with upstream's "failed to process"
// wording, and the pod's volume is set up once the claim and volume exist; a
// local volume of another node and one whose path is gone fail the mount.
func TestClaimWaits(t *testing.T) {
	claims := &fakeClaims{}
	m, _ := newClaimManager(t, claims)
	ctx := context.Background()
	pod := claimPod(claimVolume("data", "c1", false), v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}})
	tearDownOnCleanup(t, m, pod.UID)
	got, err := m.SetUpPod(ctx, pod)
	var uv *UnprocessedVolumesError
	if !errors.As(err, &uv) {
		t.Fatalf("err = %v; want an UnprocessedVolumesError", err)
	}
	want := `unmounted volumes=[data], unattached volumes=[], failed to process volumes=[data]: error processing PVC ns1/c1: failed to fetch PVC from API server: persistentvolumeclaims "c1" not found`
	if err.Error() != want {
		t.Errorf("err =\n%s\nwant\n%s", err, want)
	}
	if _, ok := got["scratch"]; !ok {
		t.Error("the emptyDir was not set up beside the waiting claim")
	}
	if OnlyKeptContent(err) {
		t.Error("a waiting claim counted as kept content")
	}

	dir := filepath.Join(t.TempDir(), "d")
	claims.put(boundPVC("c1", "pv1"), hostPathPV("pv1", "c1", dir, v1.HostPathDirectoryOrCreate))
	got, err = m.SetUpPod(ctx, pod)
	if err != nil || got["data"].Path != dir {
		t.Fatalf("after the claim was bound: %+v, %v", got["data"], err)
	}

	for _, tc := range []struct {
		pv   *v1.PersistentVolume
		want string
	}{
		{localPV("pv2", "c2", t.TempDir(), "node2"), `MountVolume.NodeAffinity check failed for volume "pv2" : no matching NodeSelectorTerms`},
		{localPV("pv2", "c2", filepath.Join(t.TempDir(), "gone"), "node1"), `MountVolume.SetUp failed for volume "pv2" : local volume path: stat `},
	} {
		claims.put(boundPVC("c2", "pv2"), tc.pv)
		p := claimPod(claimVolume("data", "c2", false))
		p.UID = "uid-c2"
		_, err := m.SetUpPod(ctx, p)
		var se *SetUpError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("err = %v; want a SetUpError with %q", err, tc.want)
		}
		if err := m.TearDownPod(ctx, p.UID); err != nil {
			t.Fatal(err)
		}
	}

	// Standalone (no API server): the claim waits, named.
	sa, _, _ := newTestManager(t, nil)
	_, err = sa.SetUpPod(ctx, claimPod(ephemeralVolume("data")))
	if err == nil || !strings.Contains(err.Error(), `error processing PVC ns1/web-data: failed to fetch PVC from API server: no API server connection`) {
		t.Errorf("standalone err = %v", err)
	}
}

func TestClaimGetterFromClientset(t *testing.T) {
	cs := fake.NewClientset(boundPVC("c1", "pv1"), localPV("pv1", "c1", "/a", "node1"))
	g := ClaimGetterFromClientset(cs)
	ctx := context.Background()
	if pvc, err := g.GetPersistentVolumeClaim(ctx, "ns1", "c1"); err != nil || pvc.Spec.VolumeName != "pv1" {
		t.Errorf("claim: %v, %v", pvc, err)
	}
	if pv, err := g.GetPersistentVolume(ctx, "pv1"); err != nil || pv.Spec.Local == nil {
		t.Errorf("volume: %v, %v", pv, err)
	}
	if _, err := g.GetPersistentVolumeClaim(ctx, "ns1", "nope"); !apierrors.IsNotFound(err) {
		t.Errorf("missing claim: %v", err)
	}
}
