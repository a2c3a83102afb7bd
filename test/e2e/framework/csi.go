package framework

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/mountutil"
	"github.com/nodelet/nodelet/test/csidriver/calls"
)

// CSIDriverName is the test CSI driver's name (test/csidriver).
const CSIDriverName = "csi.nodelet.test"

// CSIStorageClass is the StorageClass StartCSIDriver creates for the test driver.
const CSIStorageClass = "csi-nodelet-test"

// CSIClaim is a ReadWriteOnce claim of size of the test driver's StorageClass.
func CSIClaim(ns, name, size string) *v1.PersistentVolumeClaim {
	return &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.PersistentVolumeClaimSpec{
			AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			StorageClassName: ptr.To(CSIStorageClass),
			Resources:        v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse(size)}},
		},
	}
}

// maxUnixSocketPath is the longest path a unix socket can be bound or dialled at
// (sockaddr_un's 108 bytes with the terminating NUL).
const maxUnixSocketPath = 107

// CSIDriver is the test CSI driver of one test with the external provisioner and attacher
// against it: processes, their logs and the driver's calls file.
type CSIDriver struct {
	Dir       string // logs, calls file and the driver's data (volumes are directories there)
	Endpoint  string // the CSI socket
	CallsFile string // one JSON line per CSI call (package test/csidriver/calls)
	DataDir   string

	f     *Framework
	procs []*hostProc
}

// StartCSIDriver builds the test CSI driver (test/csidriver), starts it for node agent n
// (registering through n's plugins_registry, node id = the rig's node name), starts
// csi-provisioner and csi-attacher (built by test/rig/build-bins.sh into RIG_BIN_DIR) against
// its socket with the rig's admin kubeconfig, and creates the CSIDriver object (attachRequired,
// podInfoOnMount, Persistent and Ephemeral) and the StorageClass CSIStorageClass
// (allowVolumeExpansion; WaitForFirstConsumer: the rig's scheduler selects the node, so pods of its claims must not
// set spec.nodeName), and waits until the node agent has registered the driver (the node's
// CSINode lists it). At cleanup it stops the processes (joined), deletes both objects and
// removes the driver's PersistentVolumes and VolumeAttachments that are left, finalizers and all
// (the attacher and provisioner that would have released them are gone).
func (f *Framework) StartCSIDriver(n *Nodelet) *CSIDriver {
	f.T.Helper()
	regSock := filepath.Join(n.RootDir, "plugins_registry", CSIDriverName+"-reg.sock")
	if len(regSock) > maxUnixSocketPath {
		f.T.Fatalf("the registration socket %s is %d bytes, over the %d a unix socket path may have: shorten the test's name (it names the node agent's root dir)", regSock, len(regSock), maxUnixSocketPath)
	}
	provisioner, attacher := f.RigBin("csi-provisioner"), f.RigBin("csi-attacher")
	// Short, outside the root dir: the socket path must stay under maxUnixSocketPath.
	dir, err := os.MkdirTemp("", "csi-")
	if err != nil {
		f.T.Fatalf("creating the CSI driver's dir: %v", err)
	}
	d := &CSIDriver{
		Dir: dir, Endpoint: filepath.Join(dir, "csi.sock"), CallsFile: filepath.Join(dir, "calls.jsonl"),
		DataDir: filepath.Join(dir, "data"), f: f,
	}
	f.T.Cleanup(d.cleanup)
	bin := filepath.Join(dir, "csidriver")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/nodelet/nodelet/test/csidriver").CombinedOutput(); err != nil {
		f.T.Fatalf("building the test CSI driver: %v\n%s", err, out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f.createCSIObjects(ctx)

	d.start("csidriver", bin, "--endpoint="+d.Endpoint, "--node-id="+f.Env.NodeName, "--data-dir="+d.DataDir,
		"--kubelet-root="+n.RootDir, "--calls-file="+d.CallsFile, "--v=2")
	err = WaitFor(ctx, 30*time.Second, "the CSI socket "+d.Endpoint, func(context.Context) (bool, error) {
		if err := d.checkProcs(); err != nil {
			return false, &StopError{Err: err}
		}
		_, err := os.Stat(d.Endpoint)
		return err == nil, nil
	})
	if err != nil {
		f.T.Fatal(err)
	}
	// The node agent registers the driver when its socket appears in plugins_registry and
	// records it, with NodeGetInfo's node id, in the node's CSINode (which the attacher reads).
	err = f.waitFor(ctx, 30*time.Second, "the node's CSINode to list driver "+CSIDriverName, func(ctx context.Context) (bool, error) {
		if err := d.checkProcs(); err != nil {
			return false, &StopError{Err: err}
		}
		cn, err := f.Client.StorageV1().CSINodes().Get(ctx, f.Env.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, drv := range cn.Spec.Drivers {
			if drv.Name == CSIDriverName {
				return drv.NodeID == f.Env.NodeName, nil
			}
		}
		return false, nil
	})
	if err != nil {
		f.T.Fatalf("%v; driver log %s", err, filepath.Join(d.Dir, "csidriver.log"))
	}
	common := []string{"--csi-address=" + d.Endpoint, "--kubeconfig=" + f.Env.Kubeconfig, "--leader-election=false", "--timeout=30s", "--v=4"}
	d.start("csi-provisioner", provisioner, append(common, "--extra-create-metadata")...)
	d.start("csi-attacher", attacher, common...)
	return d
}

// createCSIObjects creates (replacing leftovers of an earlier test) the CSIDriver object and the
// StorageClass.
func (f *Framework) createCSIObjects(ctx context.Context) {
	f.T.Helper()
	f.deleteCSIObjects(ctx)
	_, err := f.Client.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: CSIDriverName},
		Spec: storagev1.CSIDriverSpec{
			AttachRequired:       ptr.To(true),
			PodInfoOnMount:       ptr.To(true),
			VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent, storagev1.VolumeLifecycleEphemeral},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		f.T.Fatalf("creating CSIDriver %s: %v", CSIDriverName, err)
	}
	_, err = f.Client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: CSIStorageClass},
		Provisioner:       CSIDriverName,
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
		// Claims may grow (TestCSIExpand); the test plays the external resizer.
		AllowVolumeExpansion: ptr.To(true),
	}, metav1.CreateOptions{})
	if err != nil {
		f.T.Fatalf("creating StorageClass %s: %v", CSIStorageClass, err)
	}
}

// deleteCSIObjects deletes the CSIDriver object and StorageClass and waits until both are gone.
func (f *Framework) deleteCSIObjects(ctx context.Context) {
	f.T.Helper()
	err := WaitFor(ctx, 30*time.Second, "CSIDriver "+CSIDriverName+" and StorageClass "+CSIStorageClass+" to be gone", func(ctx context.Context) (bool, error) {
		err1 := f.Client.StorageV1().CSIDrivers().Delete(ctx, CSIDriverName, metav1.DeleteOptions{})
		err2 := f.Client.StorageV1().StorageClasses().Delete(ctx, CSIStorageClass, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err1) && apierrors.IsNotFound(err2) {
			return true, nil
		}
		return false, errors.Join(ignoreNotFound(err1), ignoreNotFound(err2))
	})
	if err != nil {
		f.T.Errorf("%v", err)
	}
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// start runs one process of the driver's set, logging to Dir/<name>.log.
func (d *CSIDriver) start(name, bin string, args ...string) {
	d.f.T.Helper()
	p, err := startHostProc(name, filepath.Join(d.Dir, name+".log"), exec.Command(bin, args...))
	if err != nil {
		d.f.T.Fatal(err)
	}
	d.procs = append(d.procs, p)
}

// checkProcs is an error naming the first process that has exited.
func (d *CSIDriver) checkProcs() error {
	for _, p := range d.procs {
		if err := p.exited(); err != nil {
			return err
		}
	}
	return nil
}

// Calls reads the driver's calls file.
func (d *CSIDriver) Calls() []calls.Call {
	d.f.T.Helper()
	cs, err := calls.ReadFile(d.CallsFile)
	if err != nil {
		d.f.T.Fatal(err)
	}
	return cs
}

// WaitForCalls waits until the driver has served at least want successful calls of method on
// volumeID ("" = any volume).
func (d *CSIDriver) WaitForCalls(ctx context.Context, method, volumeID string, want int, timeout time.Duration) {
	d.f.T.Helper()
	got := 0
	err := d.f.waitFor(ctx, timeout, fmt.Sprintf("%d %s calls on volume %q", want, method, volumeID), func(context.Context) (bool, error) {
		if err := d.checkProcs(); err != nil {
			return false, &StopError{Err: err}
		}
		cs, err := calls.ReadFile(d.CallsFile)
		if err != nil {
			return false, err
		}
		got = calls.Count(cs, method, volumeID)
		return got >= want, nil
	})
	if err != nil {
		d.f.T.Fatalf("%v (got %d)", err, got)
	}
}

func (d *CSIDriver) cleanup() {
	t := d.f.T
	for _, p := range d.procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range d.procs {
		if p.wait(15 * time.Second) {
			t.Logf("%s did not exit within 15s of SIGTERM; killed it", p.name)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := d.f.Client.StorageV1()
	if vas, err := c.VolumeAttachments().List(ctx, metav1.ListOptions{}); err == nil {
		for _, va := range vas.Items {
			if va.Spec.Attacher == CSIDriverName {
				d.forceDelete(ctx, "VolumeAttachment", va.Name, func(patch []byte) error {
					_, err := c.VolumeAttachments().Patch(ctx, va.Name, types.MergePatchType, patch, metav1.PatchOptions{})
					return err
				}, func() error { return c.VolumeAttachments().Delete(ctx, va.Name, metav1.DeleteOptions{}) })
			}
		}
	}
	if pvs, err := d.f.Client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{}); err == nil {
		for _, pv := range pvs.Items {
			if pv.Spec.CSI != nil && pv.Spec.CSI.Driver == CSIDriverName {
				d.forceDelete(ctx, "PersistentVolume", pv.Name, func(patch []byte) error {
					_, err := d.f.Client.CoreV1().PersistentVolumes().Patch(ctx, pv.Name, types.MergePatchType, patch, metav1.PatchOptions{})
					return err
				}, func() error {
					return d.f.Client.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{})
				})
			}
		}
	}
	d.f.deleteCSIObjects(ctx)
	if t.Failed() {
		for _, p := range d.procs {
			t.Logf("%s log: %s", p.name, p.log)
		}
		t.Logf("keeping %s for inspection", d.Dir)
		return
	}
	if _, err := mountutil.UnmountAndRemoveAll(d.Dir); err != nil {
		t.Logf("cleanup: %v", err)
	}
}

// forceDelete deletes an object whose finalizers nothing will remove any more.
func (d *CSIDriver) forceDelete(ctx context.Context, kind, name string, patch func([]byte) error, del func() error) {
	if err := del(); ignoreNotFound(err) != nil {
		d.f.T.Logf("cleanup: deleting %s %s: %v", kind, name, err)
	}
	if err := patch([]byte(`{"metadata":{"finalizers":null}}`)); ignoreNotFound(err) != nil {
		d.f.T.Logf("cleanup: removing the finalizers of %s %s: %v", kind, name, err)
	}
}
