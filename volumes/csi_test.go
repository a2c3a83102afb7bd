package volumes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/csi"
	"github.com/nodelet/nodelet/internal/mountutil"
)

const testDriver = "test.csi.k8s.io"

// fakeNode is a csi.NodeClient that records its calls and mounts a tmpfs
// where a real driver would mount the volume (so mount points are real).
type fakeNode struct {
	csipb.NodeClient // unimplemented calls panic

	mu         sync.Mutex
	caps       []csipb.NodeServiceCapability_RPC_Type
	calls      []string
	stages     []*csipb.NodeStageVolumeRequest
	publishes  []*csipb.NodePublishVolumeRequest
	publishErr error
	expands    []*csipb.NodeExpandVolumeRequest // csi_expand_test.go
	expandErr  error
	// blockDev: the device a block volume's publish bind-mounts (as a real
	// block driver puts its device on the target path file).
	blockDev string
}

func (f *fakeNode) record(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
}

func (f *fakeNode) callList() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeNode) count(call string) int {
	n := 0
	for _, c := range f.callList() {
		if c == call {
			n++
		}
	}
	return n
}

func (f *fakeNode) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest, ...grpc.CallOption) (*csipb.NodeGetCapabilitiesResponse, error) {
	f.record("NodeGetCapabilities")
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &csipb.NodeGetCapabilitiesResponse{}
	for _, c := range f.caps {
		resp.Capabilities = append(resp.Capabilities, &csipb.NodeServiceCapability{
			Type: &csipb.NodeServiceCapability_Rpc{Rpc: &csipb.NodeServiceCapability_RPC{Type: c}}})
	}
	return resp, nil
}

func (f *fakeNode) NodeStageVolume(_ context.Context, req *csipb.NodeStageVolumeRequest, _ ...grpc.CallOption) (*csipb.NodeStageVolumeResponse, error) {
	f.record("NodeStageVolume")
	f.mu.Lock()
	f.stages = append(f.stages, req)
	f.mu.Unlock()
	if req.GetVolumeCapability().GetBlock() != nil {
		return &csipb.NodeStageVolumeResponse{}, nil // attached: nothing to mount
	}
	if err := unix.Mount("tmpfs", req.StagingTargetPath, "tmpfs", 0, ""); err != nil {
		return nil, status.Errorf(codes.Internal, "mount: %v", err)
	}
	return &csipb.NodeStageVolumeResponse{}, nil
}

func (f *fakeNode) NodeUnstageVolume(_ context.Context, req *csipb.NodeUnstageVolumeRequest, _ ...grpc.CallOption) (*csipb.NodeUnstageVolumeResponse, error) {
	f.record("NodeUnstageVolume")
	if err := mountutil.Unmount(req.StagingTargetPath); err != nil {
		return nil, status.Errorf(codes.Internal, "unmount: %v", err)
	}
	return &csipb.NodeUnstageVolumeResponse{}, nil
}

// publishBlock bind-mounts blockDev onto a file at the target path.
func (f *fakeNode) publishBlock(req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	if ok, _ := mountutil.IsMountPoint(req.TargetPath); ok {
		return &csipb.NodePublishVolumeResponse{}, nil
	}
	if err := os.WriteFile(req.TargetPath, nil, 0o640); err != nil {
		return nil, status.Errorf(codes.Internal, "create: %v", err)
	}
	if err := unix.Mount(f.blockDev, req.TargetPath, "", unix.MS_BIND, ""); err != nil {
		return nil, status.Errorf(codes.Internal, "mount: %v", err)
	}
	return &csipb.NodePublishVolumeResponse{}, nil
}

func (f *fakeNode) NodePublishVolume(_ context.Context, req *csipb.NodePublishVolumeRequest, _ ...grpc.CallOption) (*csipb.NodePublishVolumeResponse, error) {
	f.record("NodePublishVolume")
	f.mu.Lock()
	f.publishes = append(f.publishes, req)
	err := f.publishErr
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if req.GetVolumeCapability().GetBlock() != nil {
		return f.publishBlock(req)
	}
	if err := os.MkdirAll(req.TargetPath, 0o750); err != nil {
		return nil, status.Errorf(codes.Internal, "mkdir: %v", err)
	}
	if ok, _ := mountutil.IsMountPoint(req.TargetPath); ok {
		return &csipb.NodePublishVolumeResponse{}, nil // published: idempotent, as the spec asks
	}
	if err := unix.Mount("tmpfs", req.TargetPath, "tmpfs", 0, ""); err != nil {
		return nil, status.Errorf(codes.Internal, "mount: %v", err)
	}
	return &csipb.NodePublishVolumeResponse{}, nil
}

func (f *fakeNode) NodeUnpublishVolume(_ context.Context, req *csipb.NodeUnpublishVolumeRequest, _ ...grpc.CallOption) (*csipb.NodeUnpublishVolumeResponse, error) {
	f.record("NodeUnpublishVolume")
	if _, err := os.Lstat(req.TargetPath); os.IsNotExist(err) {
		return &csipb.NodeUnpublishVolumeResponse{}, nil // idempotent, as the spec asks
	}
	if err := mountutil.Unmount(req.TargetPath); err != nil {
		return nil, status.Errorf(codes.Internal, "unmount: %v", err)
	}
	if err := os.Remove(req.TargetPath); err != nil && !os.IsNotExist(err) {
		return nil, status.Errorf(codes.Internal, "remove: %v", err)
	}
	return &csipb.NodeUnpublishVolumeResponse{}, nil
}

func (f *fakeNode) lastPublish() *csipb.NodePublishVolumeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.publishes) == 0 {
		return nil
	}
	return f.publishes[len(f.publishes)-1]
}

// fakeDrivers is the plugin registry: registered drivers by name.
type fakeDrivers struct {
	mu      sync.Mutex
	drivers map[string]*fakeNode
}

func (d *fakeDrivers) NodeClient(_ context.Context, name string) (csipb.NodeClient, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if n, ok := d.drivers[name]; ok {
		return n, nil
	}
	return nil, fmt.Errorf("driver name %s not found in the list of registered CSI drivers", name)
}

func (d *fakeDrivers) set(name string, n *fakeNode) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if n == nil {
		delete(d.drivers, name)
		return
	}
	d.drivers[name] = n
}

// fakeCSIObjects holds CSIDrivers and VolumeAttachments.
type fakeCSIObjects struct {
	mu      sync.Mutex
	drivers map[string]*storagev1.CSIDriver
	vas     map[string]*storagev1.VolumeAttachment
}

func (o *fakeCSIObjects) GetCSIDriver(_ context.Context, name string) (*storagev1.CSIDriver, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if d, ok := o.drivers[name]; ok {
		return d.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(storagev1.Resource("csidrivers"), name)
}

func (o *fakeCSIObjects) GetVolumeAttachment(_ context.Context, name string) (*storagev1.VolumeAttachment, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if va, ok := o.vas[name]; ok {
		return va.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(storagev1.Resource("volumeattachments"), name)
}

func (o *fakeCSIObjects) putDriver(d *storagev1.CSIDriver) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.drivers[d.Name] = d
}

func (o *fakeCSIObjects) putVA(va *storagev1.VolumeAttachment) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.vas[va.Name] = va
}

func csiDriverObject(attach bool, policy storagev1.FSGroupPolicy, modes ...storagev1.VolumeLifecycleMode) *storagev1.CSIDriver {
	if len(modes) == 0 {
		modes = []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}
	}
	return &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: testDriver},
		Spec: storagev1.CSIDriverSpec{
			AttachRequired:       ptr.To(attach),
			PodInfoOnMount:       ptr.To(false),
			FSGroupPolicy:        ptr.To(policy),
			VolumeLifecycleModes: modes,
		},
	}
}

func csiPV(name, claim, handle string) *v1.PersistentVolume {
	return &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PersistentVolumeSpec{
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			ClaimRef:    &v1.ObjectReference{Namespace: "ns1", Name: claim, UID: types.UID("claim-" + claim)},
			PersistentVolumeSource: v1.PersistentVolumeSource{
				CSI: &v1.CSIPersistentVolumeSource{Driver: testDriver, VolumeHandle: handle, FSType: "ext4",
					VolumeAttributes: map[string]string{"attr": "1"}},
			},
		},
	}
}

func attachedVA(handle string, metadata map[string]string) *storagev1.VolumeAttachment {
	return &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: csi.AttachmentName(handle, testDriver, "node1")},
		Status:     storagev1.VolumeAttachmentStatus{Attached: true, AttachmentMetadata: metadata},
	}
}

type csiRig struct {
	m       *Manager
	root    string
	kube    *fakeKube
	claims  *fakeClaims
	objs    *fakeCSIObjects
	drivers *fakeDrivers
	node    *fakeNode
}

// newCSIRig is a manager with claims and CSI, the test driver registered
// with the given capabilities; mounts left behind are unmounted at the end.
func newCSIRig(t *testing.T, caps ...csipb.NodeServiceCapability_RPC_Type) *csiRig {
	t.Helper()
	r := &csiRig{
		kube:    &fakeKube{},
		claims:  &fakeClaims{},
		objs:    &fakeCSIObjects{drivers: map[string]*storagev1.CSIDriver{}, vas: map[string]*storagev1.VolumeAttachment{}},
		drivers: &fakeDrivers{drivers: map[string]*fakeNode{}},
		node:    &fakeNode{caps: caps},
	}
	r.drivers.set(testDriver, r.node)
	r.m, r.root, _ = newTestManager(t, r.kube, WithClaims(r.claims, func() map[string]string { return thisNode }),
		WithCSI(r.drivers, r.objs, "node1"))
	root := r.root
	t.Cleanup(func() {
		if _, err := mountutil.UnmountAllUnder(root); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return r
}

// restarted is a new manager on the same root: nothing in memory.
func (r *csiRig) restarted(t *testing.T) *Manager {
	return NewManager(r.root, r.kube, r.m.clock, WithClaims(r.claims, func() map[string]string { return thisNode }),
		WithCSI(r.drivers, r.objs, "node1"))
}

func isMounted(t *testing.T, p string) bool {
	t.Helper()
	ok, err := mountutil.IsMountPoint(p)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

func readJSON(t *testing.T, p string) map[string]string {
	t.Helper()
	var out map[string]string
	if err := json.Unmarshal([]byte(mustRead(t, p)), &out); err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	return out
}

func TestDecideCSI(t *testing.T) {
	pod := testPod()
	pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr.To(int64(1234)), FSGroupChangePolicy: ptr.To(v1.FSGroupChangeOnRootMismatch)}
	gid := ptr.To(int64(1234))
	rwx := func(pv *v1.PersistentVolume) *v1.PersistentVolume {
		pv.Spec.AccessModes = []v1.PersistentVolumeAccessMode{v1.ReadWriteMany, v1.ReadWriteOnce}
		return pv
	}
	noFSType := func(pv *v1.PersistentVolume) *v1.PersistentVolume {
		pv.Spec.CSI.FSType = ""
		return pv
	}
	onlyRWX := func(pv *v1.PersistentVolume) *v1.PersistentVolume {
		pv.Spec.AccessModes = []v1.PersistentVolumeAccessMode{v1.ReadWriteMany}
		return pv
	}
	withSecrets := func(pv *v1.PersistentVolume) *v1.PersistentVolume {
		pv.Spec.MountOptions = []string{"noatime"}
		pv.Spec.CSI.NodeStageSecretRef = &v1.SecretReference{Namespace: "sec", Name: "stage"}
		pv.Spec.CSI.NodePublishSecretRef = &v1.SecretReference{Namespace: "sec", Name: "pub"}
		return pv
	}
	podInfo := func(d *storagev1.CSIDriver) *storagev1.CSIDriver {
		d.Spec.PodInfoOnMount = ptr.To(true)
		return d
	}
	inline := &v1.CSIVolumeSource{Driver: testDriver, FSType: ptr.To("xfs"), VolumeAttributes: map[string]string{"a": "b"},
		NodePublishSecretRef: &v1.LocalObjectReference{Name: "pub"}}
	pvInfo := map[string]string{"attr": "1",
		csiPodNameKey: "web", csiPodNamespaceKey: "ns1", csiPodUIDKey: "uid-1", csiServiceAccountKey: "sa1", csiEphemeralKey: "false"}
	for _, tc := range []struct {
		name          string
		pv            *v1.PersistentVolume
		claimReadOnly bool
		inline        *v1.CSIVolumeSource
		driver        *storagev1.CSIDriver
		driverErr     error
		check         func(t *testing.T, c *csiVolume)
		err           string
	}{
		{name: "PV without CSIDriver: attach required, fsGroup for RWO with fsType",
			pv: withSecrets(csiPV("pv1", "c1", "h1")),
			check: func(t *testing.T, c *csiVolume) {
				want := &csiVolume{driver: testDriver, handle: "h1", specName: "pv1", mode: storagev1.VolumeLifecyclePersistent,
					fsType: "ext4", mountOptions: []string{"noatime"}, accessMode: v1.ReadWriteOnce,
					volumeContext: map[string]string{"attr": "1"}, stageContext: map[string]string{"attr": "1"},
					stageSecret: &v1.SecretReference{Namespace: "sec", Name: "stage"}, publishSecret: &v1.SecretReference{Namespace: "sec", Name: "pub"},
					attachRequired: true, fsGroup: gid, mountGroup: gid, fsGroupChangePolicy: v1.FSGroupChangeOnRootMismatch}
				if !reflect.DeepEqual(c, want) {
					t.Errorf("got %+v\nwant %+v", c, want)
				}
			}},
		{name: "block PV: mapped, never an fsGroup change",
			pv: func() *v1.PersistentVolume {
				pv := csiPV("pv1", "c1", "h1")
				pv.Spec.VolumeMode = ptr.To(v1.PersistentVolumeBlock)
				return pv
			}(), driver: csiDriverObject(true, storagev1.FileFSGroupPolicy),
			check: func(t *testing.T, c *csiVolume) {
				if !c.block || c.fsGroup != nil {
					t.Errorf("block %v fsGroup %v", c.block, c.fsGroup)
				}
				capability := csiBlockCapability(c, csiCaps{})
				if capability.GetBlock() == nil || capability.GetMount() != nil || capability.GetAccessMode().GetMode() != csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER {
					t.Errorf("capability %v; want block, SINGLE_NODE_WRITER", capability)
				}
			}},
		{name: "filesystem PV is not block", pv: csiPV("pv1", "c1", "h1"),
			check: func(t *testing.T, c *csiVolume) {
				if c.block {
					t.Error("block")
				}
			}},
		{name: "attachRequired false, podInfoOnMount: pod keys in the publish context only",
			pv: csiPV("pv1", "c1", "h1"), driver: podInfo(csiDriverObject(false, storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy)),
			check: func(t *testing.T, c *csiVolume) {
				if c.attachRequired {
					t.Error("attach required")
				}
				if !reflect.DeepEqual(c.volumeContext, pvInfo) {
					t.Errorf("volume context %v", c.volumeContext)
				}
				if !reflect.DeepEqual(c.stageContext, map[string]string{"attr": "1"}) {
					t.Errorf("stage context %v", c.stageContext)
				}
			}},
		{name: "attachRequired unset is required", pv: csiPV("pv1", "c1", "h1"),
			driver: func() *storagev1.CSIDriver {
				d := csiDriverObject(false, storagev1.FileFSGroupPolicy)
				d.Spec.AttachRequired = nil
				return d
			}(),
			check: func(t *testing.T, c *csiVolume) {
				if !c.attachRequired {
					t.Error("attach not required")
				}
			}},
		{name: "claim readOnly: no fsGroup", pv: csiPV("pv1", "c1", "h1"), claimReadOnly: true,
			check: func(t *testing.T, c *csiVolume) {
				if !c.readOnly || c.fsGroup != nil || c.mountGroup == nil {
					t.Errorf("readOnly %v fsGroup %v mountGroup %v", c.readOnly, c.fsGroup, c.mountGroup)
				}
			}},
		{name: "PV csi.readOnly", pv: func() *v1.PersistentVolume { pv := csiPV("pv1", "c1", "h1"); pv.Spec.CSI.ReadOnly = true; return pv }(),
			check: func(t *testing.T, c *csiVolume) {
				if !c.readOnly || c.fsGroup != nil {
					t.Errorf("readOnly %v fsGroup %v", c.readOnly, c.fsGroup)
				}
			}},
		{name: "first access mode given to the driver; RWO among them allows fsGroup", pv: rwx(csiPV("pv1", "c1", "h1")),
			check: func(t *testing.T, c *csiVolume) {
				if c.accessMode != v1.ReadWriteMany || c.fsGroup == nil {
					t.Errorf("access mode %s fsGroup %v", c.accessMode, c.fsGroup)
				}
			}},
		{name: "ReadWriteOnceWithFSType: no fsType, no fsGroup", pv: noFSType(csiPV("pv1", "c1", "h1")),
			check: func(t *testing.T, c *csiVolume) {
				if c.fsGroup != nil {
					t.Error("fsGroup applied without fsType")
				}
			}},
		{name: "ReadWriteOnceWithFSType: no RWO, no fsGroup", pv: onlyRWX(csiPV("pv1", "c1", "h1")),
			check: func(t *testing.T, c *csiVolume) {
				if c.fsGroup != nil {
					t.Error("fsGroup applied to a RWX volume")
				}
			}},
		{name: "File: fsGroup always", pv: onlyRWX(noFSType(csiPV("pv1", "c1", "h1"))), driver: csiDriverObject(true, storagev1.FileFSGroupPolicy),
			check: func(t *testing.T, c *csiVolume) {
				if c.fsGroup == nil || *c.fsGroup != 1234 {
					t.Errorf("fsGroup %v", c.fsGroup)
				}
			}},
		{name: "None: never", pv: csiPV("pv1", "c1", "h1"), driver: csiDriverObject(true, storagev1.NoneFSGroupPolicy),
			check: func(t *testing.T, c *csiVolume) {
				if c.fsGroup != nil || c.mountGroup == nil {
					t.Errorf("fsGroup %v mountGroup %v", c.fsGroup, c.mountGroup)
				}
			}},
		{name: "CSIDriver without fsGroupPolicy", pv: csiPV("pv1", "c1", "h1"),
			driver: func() *storagev1.CSIDriver { d := csiDriverObject(true, ""); d.Spec.FSGroupPolicy = nil; return d }(),
			err:    `MountVolume.SetUp failed for volume "pv1" : kubernetes.io/csi: mounter.SetupAt failed to check fsGroup policy: kubernetes.io/csi: expected valid fsGroupPolicy, received nil value or empty string`},
		{name: "PV of an ephemeral-only driver", pv: csiPV("pv1", "c1", "h1"),
			driver: csiDriverObject(false, storagev1.FileFSGroupPolicy, storagev1.VolumeLifecycleEphemeral),
			err:    `MountVolume.SetUp failed for volume "pv1" : kubernetes.io/csi: mounter.SetupAt failed to check volume lifecycle mode: volume mode "Persistent" not supported by driver test.csi.k8s.io (only supports ["Ephemeral"])`},
		{name: "CSIDriver unreadable", pv: csiPV("pv1", "c1", "h1"), driverErr: errors.New("boom"),
			err: `MountVolume.SetUp failed for volume "pv1" : kubernetes.io/csi: mounter.SetupAt failed to check volume lifecycle mode: boom`},
		{name: "inline without CSIDriver", inline: inline,
			err: `MountVolume.SetUp failed for volume "data" : kubernetes.io/csi: mounter.SetupAt failed to check volume lifecycle mode: volume mode "Ephemeral" not supported by driver test.csi.k8s.io (no CSIDriver object)`},
		{name: "inline of a persistent-only driver", inline: inline, driver: csiDriverObject(false, storagev1.FileFSGroupPolicy),
			err: `MountVolume.SetUp failed for volume "data" : kubernetes.io/csi: mounter.SetupAt failed to check volume lifecycle mode: volume mode "Ephemeral" not supported by driver test.csi.k8s.io (only supports ["Persistent"])`},
		{name: "inline ephemeral", inline: inline,
			driver: podInfo(csiDriverObject(true, storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy, storagev1.VolumeLifecycleEphemeral)),
			check: func(t *testing.T, c *csiVolume) {
				want := &csiVolume{driver: testDriver, handle: csi.InlineVolumeHandle("uid-1", "data"), specName: "data",
					mode: storagev1.VolumeLifecycleEphemeral, fsType: "xfs", accessMode: v1.ReadWriteOnce,
					volumeContext: map[string]string{"a": "b", csiPodNameKey: "web", csiPodNamespaceKey: "ns1", csiPodUIDKey: "uid-1",
						csiServiceAccountKey: "sa1", csiEphemeralKey: "true"},
					publishSecret: &v1.SecretReference{Namespace: "ns1", Name: "pub"},
					fsGroup:       gid, mountGroup: gid, fsGroupChangePolicy: v1.FSGroupChangeOnRootMismatch}
				if !reflect.DeepEqual(c, want) {
					t.Errorf("got %+v\nwant %+v", c, want)
				}
				if inline.VolumeAttributes[csiPodNameKey] != "" {
					t.Error("the pod's volume attributes were changed")
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := decideCSI(&csiFacts{pod: pod, volume: "data", pv: tc.pv, claimReadOnly: tc.claimReadOnly, inline: tc.inline,
				driver: tc.driver, driverErr: tc.driverErr, nodeName: "node1"})
			if tc.err != "" {
				var se *SetUpError
				if !errors.As(err, &se) || err.Error() != tc.err {
					t.Fatalf("err =\n%v\nwant\n%s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

func TestCSIAccessModeAndAttachment(t *testing.T) {
	for _, tc := range []struct {
		mode v1.PersistentVolumeAccessMode
		snmw bool
		want csipb.VolumeCapability_AccessMode_Mode
	}{
		{v1.ReadWriteOnce, false, csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		{v1.ReadWriteOnce, true, csipb.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER},
		{v1.ReadWriteOncePod, false, csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		{v1.ReadWriteOncePod, true, csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER},
		{v1.ReadOnlyMany, false, csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY},
		{v1.ReadWriteMany, true, csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
	} {
		if got := csiAccessMode(tc.mode, tc.snmw); got != tc.want {
			t.Errorf("%s (SINGLE_NODE_MULTI_WRITER %v) = %s; want %s", tc.mode, tc.snmw, got, tc.want)
		}
	}

	now := metav1.Now()
	for _, tc := range []struct {
		va     *storagev1.VolumeAttachment
		getErr error
		want   string
	}{
		{getErr: errors.New("not found"), want: "volume h1 has GET error for volume attachment va1: not found"},
		{va: &storagev1.VolumeAttachment{}, want: "volume h1 is not attached for volume attachment va1"},
		{va: &storagev1.VolumeAttachment{Status: storagev1.VolumeAttachmentStatus{AttachError: &storagev1.VolumeError{Message: "disk busy"}}}, want: "disk busy"},
		{va: &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}, Status: storagev1.VolumeAttachmentStatus{Attached: true}},
			want: "volume attachment is being deleted"},
		{va: &storagev1.VolumeAttachment{Status: storagev1.VolumeAttachmentStatus{Attached: true, AttachmentMetadata: map[string]string{"dev": "/dev/x"}}}},
	} {
		pc, err := verifyAttachment(tc.va, tc.getErr, "h1", "va1")
		switch {
		case tc.want == "" && (err != nil || pc["dev"] != "/dev/x"):
			t.Errorf("attached: %v, %v", pc, err)
		case tc.want != "" && (err == nil || err.Error() != tc.want):
			t.Errorf("err = %v; want %s", err, tc.want)
		}
	}
}

// TestCSIStageOnceForTwoPods: two pods of one volume: staged once, published
// per pod with the staging path and the attachment's publish context;
// vol_data.json as upstream's; the first teardown only unpublishes, the
// last also unstages and removes the staging directory.
func TestCSIStageOnceForTwoPods(t *testing.T) {
	requireRoot(t)
	r := newCSIRig(t, csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)
	ctx := context.Background()
	pv := csiPV("pv1", "c1", "h1")
	pv.Spec.CSI.NodeStageSecretRef = &v1.SecretReference{Namespace: "sec", Name: "stage"}
	r.claims.put(boundPVC("c1", "pv1"), pv)
	r.kube.secrets = map[string]*v1.Secret{"sec/stage": {Data: map[string][]byte{"key": []byte("s3cr3t")}}}
	r.objs.putVA(attachedVA("h1", map[string]string{"devicePath": "/dev/sdx"}))

	podA := claimPod(claimVolume("data", "c1", false))
	podB := claimPod(claimVolume("data", "c1", false))
	podB.UID, podB.Name = "uid-2", "web2"
	for _, p := range []*v1.Pod{podA, podB} {
		got, err := r.m.SetUpPod(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		want := csi.PublishPath(r.root, p.UID, "pv1")
		if got["data"] != (HostVolume{Path: want}) {
			t.Errorf("%s: %+v; want %s", p.Name, got["data"], want)
		}
		if !isMounted(t, want) {
			t.Errorf("%s not mounted", want)
		}
	}
	if n := r.node.count("NodeStageVolume"); n != 1 {
		t.Errorf("NodeStageVolume called %d times; want 1", n)
	}
	if n := r.node.count("NodePublishVolume"); n != 2 {
		t.Errorf("NodePublishVolume called %d times; want 2", n)
	}
	stagingPath := csi.StagingPath(r.root, testDriver, "h1")
	st := r.node.stages[0]
	if st.StagingTargetPath != stagingPath || st.VolumeId != "h1" || st.Secrets["key"] != "s3cr3t" ||
		st.PublishContext["devicePath"] != "/dev/sdx" || st.VolumeContext["attr"] != "1" ||
		st.VolumeCapability.GetMount().GetFsType() != "ext4" ||
		st.VolumeCapability.GetAccessMode().GetMode() != csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER {
		t.Errorf("NodeStageVolume request: %v", st)
	}
	pub := r.node.lastPublish()
	if pub.StagingTargetPath != stagingPath || pub.TargetPath != csi.PublishPath(r.root, "uid-2", "pv1") ||
		pub.PublishContext["devicePath"] != "/dev/sdx" || pub.Readonly || len(pub.Secrets) != 0 {
		t.Errorf("NodePublishVolume request: %v", pub)
	}
	if got := readJSON(t, filepath.Join(csi.StagingDir(r.root, testDriver, "h1"), csi.VolDataFile)); !reflect.DeepEqual(got,
		map[string]string{"volumeHandle": "h1", "driverName": testDriver}) {
		t.Errorf("staging vol_data.json = %v", got)
	}
	wantData := map[string]string{"specVolID": "pv1", "volumeHandle": "h1", "driverName": testDriver, "nodeName": "node1",
		"attachmentID": csi.AttachmentName("h1", testDriver, "node1"), "volumeLifecycleMode": "Persistent"}
	if got := readJSON(t, filepath.Join(csi.PodVolumeDir(r.root, "uid-1", "pv1"), csi.VolDataFile)); !reflect.DeepEqual(got, wantData) {
		t.Errorf("pod vol_data.json = %v", got)
	}
	if got := r.m.VolumesInUse(); !reflect.DeepEqual(got, []v1.UniqueVolumeName{"kubernetes.io/csi/test.csi.k8s.io^h1"}) {
		t.Errorf("VolumesInUse = %v", got)
	}

	// A repeat sync calls no driver.
	before := len(r.node.callList())
	if _, err := r.m.SetUpPod(ctx, podA); err != nil {
		t.Fatal(err)
	}
	if after := r.node.callList(); len(after) != before {
		t.Errorf("repeat set-up called the driver: %v", after[before:])
	}

	if err := r.m.TearDownPod(ctx, podA.UID); err != nil {
		t.Fatal(err)
	}
	if n := r.node.count("NodeUnstageVolume"); n != 0 {
		t.Errorf("unstaged while pod B has the volume published")
	}
	if _, err := os.Stat(csi.PodVolumeDir(r.root, "uid-1", "pv1")); !os.IsNotExist(err) {
		t.Errorf("pod A's volume dir stays: %v", err)
	}
	if !isMounted(t, stagingPath) {
		t.Error("staging path unmounted while pod B uses it")
	}
	if err := r.m.TearDownPod(ctx, podB.UID); err != nil {
		t.Fatal(err)
	}
	if n := r.node.count("NodeUnstageVolume"); n != 1 {
		t.Errorf("NodeUnstageVolume called %d times; want 1", n)
	}
	if _, err := os.Stat(csi.StagingDir(r.root, testDriver, "h1")); !os.IsNotExist(err) {
		t.Errorf("staging dir stays: %v", err)
	}
	if got := r.m.VolumesInUse(); len(got) != 0 {
		t.Errorf("VolumesInUse after teardown = %v", got)
	}
}

// TestCSIRestartReuse: after a restart, a published volume is reused
// without calling the driver (no remount), listed in VolumesInUse from disk
// before any sync, and torn down (unpublished and unstaged) from disk.
func TestCSIRestartReuse(t *testing.T) {
	requireRoot(t)
	r := newCSIRig(t, csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)
	ctx := context.Background()
	r.claims.put(boundPVC("c1", "pv1"), csiPV("pv1", "c1", "h1"))
	r.objs.putVA(attachedVA("h1", nil))
	pod := claimPod(claimVolume("data", "c1", false))
	if _, err := r.m.SetUpPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	calls := len(r.node.callList())

	m2 := r.restarted(t)
	if got := m2.VolumesInUse(); !reflect.DeepEqual(got, []v1.UniqueVolumeName{"kubernetes.io/csi/test.csi.k8s.io^h1"}) {
		t.Errorf("VolumesInUse after restart = %v", got)
	}
	got, err := m2.SetUpPod(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	if got["data"].Path != csi.PublishPath(r.root, pod.UID, "pv1") {
		t.Errorf("reused volume: %+v", got["data"])
	}
	if after := r.node.callList(); len(after) != calls {
		t.Errorf("the restarted manager called the driver: %v", after[calls:])
	}
	if err := m2.TearDownPod(ctx, pod.UID); err != nil {
		t.Fatal(err)
	}
	if r.node.count("NodeUnpublishVolume") != 1 || r.node.count("NodeUnstageVolume") != 1 {
		t.Errorf("teardown after restart: %v", r.node.callList())
	}
	if m2.PodVolumesExist(pod.UID) {
		t.Error("volumes left after teardown")
	}
}

// A CSIInUse made before the manager (as the agent does, for the node
// status) lists what the manager sets up.
func TestCSIInUseSharedWithTheNodeStatus(t *testing.T) {
	r := newCSIRig(t)
	ctx := context.Background()
	r.claims.put(boundPVC("c1", "pv1"), csiPV("pv1", "c1", "h1"))
	pod := claimPod(claimVolume("data", "c1", false))
	inUse := NewCSIInUse(r.root)
	m := NewManager(r.root, r.kube, r.m.clock, WithClaims(r.claims, func() map[string]string { return thisNode }),
		WithCSI(r.drivers, r.objs, "node1"), WithCSIInUse(inUse))
	if len(inUse.List()) != 0 {
		t.Fatalf("in use before any pod: %v", inUse.List())
	}
	if _, err := m.SetUpPod(ctx, pod); err == nil {
		t.Fatal("set up without a VolumeAttachment")
	}
	if got := inUse.List(); !reflect.DeepEqual(got, []v1.UniqueVolumeName{"kubernetes.io/csi/test.csi.k8s.io^h1"}) {
		t.Errorf("List while waiting for the attach = %v", got)
	}
	if err := m.TearDownPod(ctx, pod.UID); err != nil {
		t.Fatal(err)
	}
	if got := inUse.List(); len(got) != 0 {
		t.Errorf("List after teardown = %v", got)
	}
}

// TestCSIUnattachedWait: an attachable volume waits for its
// VolumeAttachment, listed as unattached with the reason, and is in use
// meanwhile; once attached it is published.
func TestCSIUnattachedWait(t *testing.T) {
	r := newCSIRig(t)
	ctx := context.Background()
	r.claims.put(boundPVC("c1", "pv1"), csiPV("pv1", "c1", "h1"))
	pod := claimPod(claimVolume("data", "c1", false), v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}})
	tearDownOnCleanup(t, r.m, pod.UID)
	vaName := csi.AttachmentName("h1", testDriver, "node1")
	for _, tc := range []struct {
		va   *storagev1.VolumeAttachment
		want string
	}{
		{nil, fmt.Sprintf(`volumeattachments.storage.k8s.io %q not found`, vaName)},
		{&storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: vaName}}, "volume h1 is not attached for volume attachment " + vaName},
		{&storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: vaName},
			Status: storagev1.VolumeAttachmentStatus{AttachError: &storagev1.VolumeError{Message: "rpc error: code = Internal desc = no disk"}}},
			"rpc error: code = Internal desc = no disk"},
	} {
		if tc.va != nil {
			r.objs.putVA(tc.va)
		}
		got, err := r.m.SetUpPod(ctx, pod)
		var uv *UnprocessedVolumesError
		if !errors.As(err, &uv) {
			t.Fatalf("err = %v; want an UnprocessedVolumesError", err)
		}
		prefix := `unmounted volumes=[data], unattached volumes=[data], failed to process volumes=[]: MountVolume.WaitForAttach failed for volume "pv1" : `
		if !strings.HasPrefix(err.Error(), prefix) || !strings.HasSuffix(err.Error(), tc.want) {
			t.Errorf("err =\n%v\nwant\n%s...%s", err, prefix, tc.want)
		}
		if _, ok := got["data"]; ok {
			t.Error("an unattached volume was set up")
		}
		if _, ok := got["scratch"]; !ok {
			t.Error("the emptyDir was not set up beside it")
		}
		if len(r.node.callList()) != 0 {
			t.Errorf("driver called before the attach: %v", r.node.callList())
		}
		if got := r.m.VolumesInUse(); !reflect.DeepEqual(got, []v1.UniqueVolumeName{"kubernetes.io/csi/test.csi.k8s.io^h1"}) {
			t.Errorf("VolumesInUse while waiting = %v", got)
		}
	}

	// Not attachable (CSIDriver attachRequired: false): not in use.
	r.objs.putDriver(csiDriverObject(false, storagev1.FileFSGroupPolicy))
	nonAttach := r.restarted(t)
	requireRoot(t)
	if _, err := nonAttach.SetUpPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if got := nonAttach.VolumesInUse(); len(got) != 0 {
		t.Errorf("VolumesInUse of a non-attachable volume = %v", got)
	}
	if err := nonAttach.TearDownPod(ctx, pod.UID); err != nil {
		t.Fatal(err)
	}

	r.objs.putDriver(csiDriverObject(true, storagev1.FileFSGroupPolicy))
	r.objs.putVA(attachedVA("h1", nil))
	got, err := r.m.SetUpPod(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	if got["data"].Path != csi.PublishPath(r.root, pod.UID, "pv1") {
		t.Errorf("attached volume: %+v", got["data"])
	}
}

// TestCSIUnregisteredDriver: a driver not registered fails the set-up with
// upstream's message (the pod waits) and the teardown (the volume and its
// directory stay), until it registers.
func TestCSIUnregisteredDriver(t *testing.T) {
	r := newCSIRig(t)
	ctx := context.Background()
	r.objs.putDriver(csiDriverObject(false, storagev1.FileFSGroupPolicy, storagev1.VolumeLifecyclePersistent, storagev1.VolumeLifecycleEphemeral))
	r.claims.put(boundPVC("c1", "pv1"), csiPV("pv1", "c1", "h1"))
	pod := claimPod(claimVolume("data", "c1", false), v1.Volume{Name: "inl", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: testDriver}}})
	r.drivers.set(testDriver, nil)
	got, err := r.m.SetUpPod(ctx, pod)
	for _, want := range []string{
		`MountVolume.MountDevice failed for volume "pv1" : kubernetes.io/csi: attacher.MountDevice failed to create newCsiDriverClient: driver name test.csi.k8s.io not found in the list of registered CSI drivers`,
		`MountVolume.SetUp failed for volume "inl" : kubernetes.io/csi: mounter.SetUpAt failed to get CSI client: driver name test.csi.k8s.io not found in the list of registered CSI drivers`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v; want %s", err, want)
		}
	}
	if len(got) != 0 || OnlyKeptContent(err) {
		t.Errorf("set up without the driver: %v", got)
	}

	requireRoot(t)
	r.drivers.set(testDriver, r.node)
	if _, err := r.m.SetUpPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	r.drivers.set(testDriver, nil)
	err = r.m.TearDownPod(ctx, pod.UID)
	if err == nil || !strings.Contains(err.Error(), "Unmounter.TearDownAt failed to get CSI client: driver name test.csi.k8s.io not found") {
		t.Errorf("teardown without the driver: %v", err)
	}
	for _, name := range []string{"pv1", "inl"} {
		if p := csi.PublishPath(r.root, pod.UID, name); !isMounted(t, p) {
			t.Errorf("%s unmounted without the driver", p)
		}
	}
	r.drivers.set(testDriver, r.node)
	if err := r.m.TearDownPod(ctx, pod.UID); err != nil {
		t.Fatal(err)
	}
	if r.node.count("NodeUnpublishVolume") != 2 || r.m.PodVolumesExist(pod.UID) {
		t.Errorf("teardown once registered: %v", r.node.callList())
	}
}

// TestCSIFSGroup: nodelet applies the fsGroup per fsGroupPolicy; a driver
// with VOLUME_MOUNT_GROUP gets it as volume_mount_group instead.
func TestCSIFSGroup(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		name        string
		policy      storagev1.FSGroupPolicy
		mountGroup  bool
		wantApplied bool
	}{
		{"File", storagev1.FileFSGroupPolicy, false, true},
		{"None", storagev1.NoneFSGroupPolicy, false, false},
		{"ReadWriteOnceWithFSType", storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy, false, true},
		{"VOLUME_MOUNT_GROUP", storagev1.FileFSGroupPolicy, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var caps []csipb.NodeServiceCapability_RPC_Type
			if tc.mountGroup {
				caps = append(caps, csipb.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP)
			}
			r := newCSIRig(t, caps...)
			r.objs.putDriver(csiDriverObject(false, tc.policy))
			r.claims.put(boundPVC("c1", "pv1"), csiPV("pv1", "c1", "h1"))
			pod := claimPod(claimVolume("data", "c1", false))
			pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr.To(int64(4321))}
			tearDownOnCleanup(t, r.m, pod.UID)
			got, err := r.m.SetUpPod(context.Background(), pod)
			if err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(got["data"].Path)
			if err != nil {
				t.Fatal(err)
			}
			if applied := groupOf(fi) == 4321; applied != tc.wantApplied {
				t.Errorf("fsGroup applied = %v; want %v", applied, tc.wantApplied)
			}
			wantGroup := ""
			if tc.mountGroup {
				wantGroup = "4321"
			}
			if g := r.node.lastPublish().GetVolumeCapability().GetMount().GetVolumeMountGroup(); g != wantGroup {
				t.Errorf("volume_mount_group = %q; want %q", g, wantGroup)
			}
		})
	}
}

// TestCSIInlineEphemeral: an inline volume is published (never staged)
// with the pod's information and its secret from the pod's namespace, and
// unpublished on teardown; a driver without the Ephemeral mode refuses it.
func TestCSIInlineEphemeral(t *testing.T) {
	r := newCSIRig(t, csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)
	ctx := context.Background()
	vol := v1.Volume{Name: "inl", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: testDriver, ReadOnly: ptr.To(true),
		VolumeAttributes: map[string]string{"size": "1Gi"}, NodePublishSecretRef: &v1.LocalObjectReference{Name: "pub"}}}}
	pod := claimPod(vol)
	r.objs.putDriver(csiDriverObject(false, storagev1.FileFSGroupPolicy))
	_, err := r.m.SetUpPod(ctx, pod)
	want := `MountVolume.SetUp failed for volume "inl" : kubernetes.io/csi: mounter.SetupAt failed to check volume lifecycle mode: volume mode "Ephemeral" not supported by driver test.csi.k8s.io (only supports ["Persistent"])`
	if err == nil || err.Error() != want {
		t.Errorf("err =\n%v\nwant\n%s", err, want)
	}

	requireRoot(t)
	d := csiDriverObject(true, storagev1.FileFSGroupPolicy, storagev1.VolumeLifecycleEphemeral)
	d.Spec.PodInfoOnMount = ptr.To(true)
	r.objs.putDriver(d)
	r.kube.secrets = map[string]*v1.Secret{"ns1/pub": {Data: map[string][]byte{"k": []byte("v")}}}
	got, err := r.m.SetUpPod(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	if hv := got["inl"]; hv.Path != csi.PublishPath(r.root, pod.UID, "inl") || !hv.ReadOnly {
		t.Errorf("inline volume: %+v", hv)
	}
	pub := r.node.lastPublish()
	wantCtx := map[string]string{"size": "1Gi", csiPodNameKey: "web", csiPodNamespaceKey: "ns1", csiPodUIDKey: "uid-1",
		csiServiceAccountKey: "sa1", csiEphemeralKey: "true"}
	if !reflect.DeepEqual(pub.VolumeContext, wantCtx) || pub.Secrets["k"] != "v" || !pub.Readonly ||
		pub.StagingTargetPath != "" || pub.VolumeId != csi.InlineVolumeHandle(pod.UID, "inl") {
		t.Errorf("NodePublishVolume request: %v", pub)
	}
	if r.node.count("NodeStageVolume") != 0 {
		t.Error("an inline volume was staged")
	}
	if got := r.m.VolumesInUse(); len(got) != 0 {
		t.Errorf("VolumesInUse of an inline volume = %v", got)
	}
	if err := r.m.TearDownPod(ctx, pod.UID); err != nil {
		t.Fatal(err)
	}
	if r.node.count("NodeUnpublishVolume") != 1 || r.node.count("NodeUnstageVolume") != 0 {
		t.Errorf("teardown: %v", r.node.callList())
	}
}

// TestCSIPublishFailure: a final error removes the volume directory, one
// that may still be in progress keeps it (with vol_data.json) for teardown.
func TestCSIPublishFailure(t *testing.T) {
	r := newCSIRig(t)
	ctx := context.Background()
	r.objs.putDriver(csiDriverObject(false, storagev1.FileFSGroupPolicy))
	r.claims.put(boundPVC("c1", "pv1"), csiPV("pv1", "c1", "h1"))
	pod := claimPod(claimVolume("data", "c1", false))
	dir := csi.PodVolumeDir(r.root, pod.UID, "pv1")

	r.node.publishErr = status.Error(codes.InvalidArgument, "bad volume")
	_, err := r.m.SetUpPod(ctx, pod)
	if err == nil || !strings.Contains(err.Error(), `MountVolume.SetUp failed for volume "pv1" : rpc error: code = InvalidArgument desc = bad volume`) {
		t.Errorf("err = %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("volume dir after a final error: %v", err)
	}

	r.node.publishErr = status.Error(codes.DeadlineExceeded, "slow")
	if _, err := r.m.SetUpPod(ctx, pod); err == nil {
		t.Fatal("no error")
	}
	if _, err := os.Stat(filepath.Join(dir, csi.VolDataFile)); err != nil {
		t.Errorf("vol_data.json after a timeout: %v", err)
	}
	if err := r.m.TearDownPod(ctx, pod.UID); err != nil {
		t.Fatal(err)
	}
	if r.node.count("NodeUnpublishVolume") != 1 {
		t.Errorf("the uncertain publish was not unpublished: %v", r.node.callList())
	}
}

func TestCSIObjectsFromClientset(t *testing.T) {
	cs := fake.NewClientset(csiDriverObject(true, storagev1.FileFSGroupPolicy), attachedVA("h1", nil))
	g := CSIObjectsFromClientset(cs)
	ctx := context.Background()
	if d, err := g.GetCSIDriver(ctx, testDriver); err != nil || !*d.Spec.AttachRequired {
		t.Errorf("CSIDriver: %v, %v", d, err)
	}
	if va, err := g.GetVolumeAttachment(ctx, csi.AttachmentName("h1", testDriver, "node1")); err != nil || !va.Status.Attached {
		t.Errorf("VolumeAttachment: %v, %v", va, err)
	}
	if _, err := g.GetCSIDriver(ctx, "nope"); !apierrors.IsNotFound(err) {
		t.Errorf("missing CSIDriver: %v", err)
	}
}

// TestCSITokenRequestsAndRepublish: a CSIDriver's tokenRequests give the
// pod's service account tokens in volume_context (upstream's JSON), and
// requiresRepublish publishes again on every sync.
func TestCSITokenRequestsAndRepublish(t *testing.T) {
	requireRoot(t)
	r := newCSIRig(t)
	ctx := context.Background()
	d := csiDriverObject(false, storagev1.FileFSGroupPolicy)
	d.Spec.TokenRequests = []storagev1.TokenRequest{{Audience: "vault", ExpirationSeconds: ptr.To(int64(3600))}}
	d.Spec.RequiresRepublish = ptr.To(true)
	r.objs.putDriver(d)
	r.claims.put(boundPVC("c1", "pv1"), csiPV("pv1", "c1", "h1"))
	pod := claimPod(claimVolume("data", "c1", false))
	tearDownOnCleanup(t, r.m, pod.UID)
	for range 2 {
		if _, err := r.m.SetUpPod(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	if n := r.node.count("NodePublishVolume"); n != 2 {
		t.Errorf("NodePublishVolume called %d times with requiresRepublish; want 2", n)
	}
	var tokens map[string]struct {
		Token               string `json:"token"`
		ExpirationTimestamp string `json:"expirationTimestamp"`
	}
	if err := json.Unmarshal([]byte(r.node.lastPublish().VolumeContext[csiTokensKey]), &tokens); err != nil {
		t.Fatalf("%s: %v", csiTokensKey, err)
	}
	if tok := tokens["vault"]; tok.Token != "token-1" || tok.ExpirationTimestamp == "" {
		t.Errorf("tokens = %+v; want the cached token-1 with its expiry", tokens)
	}
	if r.kube.count("token:") != 1 {
		t.Errorf("token requests: %d; want 1 (cached)", r.kube.count("token:"))
	}
}

// vol_data.json is read from disk: a driver name that is not one path
// component is refused, so teardown never builds a staging path outside the
// plugins directory from it.
func TestParseVolDataRefusesHostileDriver(t *testing.T) {
	for _, tc := range []struct {
		json string
		ok   bool
	}{
		{`{"driverName":"csi.example.com","volumeHandle":"h"}`, true},
		{`{"driverName":"../../../etc","volumeHandle":"h"}`, false},
		{`{"driverName":"..","volumeHandle":"h"}`, false},
		{`{"driverName":"a/b","volumeHandle":"h"}`, false},
		{`{"driverName":"","volumeHandle":"h"}`, false},
		{`{"driverName":"d"}`, false},
	} {
		_, err := parseVolData([]byte(tc.json))
		if (err == nil) != tc.ok {
			t.Errorf("parseVolData(%s) error = %v, want ok=%v", tc.json, err, tc.ok)
		}
	}
}
