//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/loopdev"
	"github.com/nodelet/nodelet/internal/mountutil"
	"github.com/nodelet/nodelet/test/e2e/framework"
)

// Block volumes (volumeMode: Block, issue 18): the claim's device appears in the container at
// its volumeDevices path; the pod writes a token to it with dd and reads it back, and the
// test finds the token in the device's backing file on the host.

const blockToken = "written-to-the-block-device"

// blockPod writes blockToken at the start of the device at /dev/xvda, reads it back, and
// runs on, Ready (its readiness probe) only once both worked.
func blockPod(f *framework.Framework, ns, name, claim string) *v1.Pod {
	n := strconv.Itoa(len(blockToken))
	p := f.BusyboxPod(ns, name, "sh", "-c",
		"printf "+blockToken+" | dd of=/dev/xvda conv=fsync && test \"$(dd if=/dev/xvda bs=1 count="+n+")\" = "+blockToken+
			" && touch /tmp/done && trap 'exit 0' TERM && while true; do sleep 1; done")
	p.Spec.RestartPolicy = v1.RestartPolicyNever
	p.Spec.Containers[0].ReadinessProbe = &v1.Probe{
		ProbeHandler:  v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"cat", "/tmp/done"}}},
		PeriodSeconds: 1, FailureThreshold: 1,
	}
	p.Spec.Volumes = []v1.Volume{pvcVolume(claim)}
	p.Spec.Containers[0].VolumeDevices = []v1.VolumeDevice{{Name: "data", DevicePath: "/dev/xvda"}}
	return p
}

// blockClaimSpec is a ReadWriteOnce claim of volumeMode Block.
func blockClaimSpec(class string) v1.PersistentVolumeClaimSpec {
	return v1.PersistentVolumeClaimSpec{
		AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
		StorageClassName: ptr.To(class),
		VolumeMode:       ptr.To(v1.PersistentVolumeBlock),
		Resources:        v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("4Mi")}},
	}
}

func createBlockClaim(ctx context.Context, t *testing.T, f *framework.Framework, ns, name, class string) {
	t.Helper()
	pvc := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: blockClaimSpec(class)}
	if _, err := f.Client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating PersistentVolumeClaim %s: %v", name, err)
	}
}

// fileStartsWith reports whether the file at path starts with want.
func fileStartsWith(t *testing.T, path, want string) bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Errorf("opening %s: %v", path, err)
		return false
	}
	defer f.Close()
	b := make([]byte, len(want))
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Errorf("reading %s: %v", path, err)
		return false
	}
	return bytes.Equal(b, []byte(want))
}

// waitNoLoop waits until no loop device is backed by path.
func waitNoLoop(ctx context.Context, t *testing.T, path string) {
	t.Helper()
	err := framework.WaitFor(ctx, 30*time.Second, "no loop device on "+path, func(context.Context) (bool, error) {
		devs, err := loopdev.Find(path)
		return len(devs) == 0, err
	})
	if err != nil {
		t.Error(err)
	}
}

// TestCSIBlock: a claim of volumeMode Block of the test driver's class is provisioned as a
// block volume (a file), attached, staged at volumeDevices/staging/<pv> (the driver attaches
// a loop device to the file) and published at volumeDevices/publish/<pv>/<pod> (the driver
// bind-mounts the device there); the pod's volumeDevices link points at the publish path and a
// loop device holds the publication open; the pod writes and reads the device at /dev/xvda.
// A restart of the node agent keeps the mapping and the container. Deleting the pod unpublishes and unstages the volume, detaches every loop device and
// removes the block volume's directories.
func TestCSIBlock(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	n := startNode(t, f, framework.NodeletOptions{})
	d := f.StartCSIDriver(n)
	createBlockClaim(ctx, t, f, ns, "data", framework.CSIStorageClass)
	start := time.Now()
	p := scheduledPod(ctx, t, f, blockPod(f, ns, "blk", "data"))
	pv := boundPV(ctx, t, f, ns, "data")
	p = f.WaitForPodReady(ctx, ns, p.Name, 3*time.Minute)
	t.Logf("CSI block volume: pod Ready after %v", time.Since(start).Round(time.Millisecond))
	handle := pv.Spec.CSI.VolumeHandle

	staging := filepath.Join(n.RootDir, "plugins/kubernetes.io/csi/volumeDevices/staging", pv.Name)
	publish := filepath.Join(n.RootDir, "plugins/kubernetes.io/csi/volumeDevices/publish", pv.Name, string(p.UID))
	var staged, published bool
	for _, c := range d.Calls() {
		if c.Error != "" || c.VolumeID != handle {
			continue
		}
		staged = staged || (c.Method == "NodeStageVolume" && c.StagingPath == staging)
		published = published || (c.Method == "NodePublishVolume" && c.TargetPath == publish && c.StagingPath == staging)
	}
	if !staged || !published {
		t.Errorf("no successful NodeStageVolume at %s (%v) or NodePublishVolume at %s (%v); calls %+v", staging, staged, publish, published, d.Calls())
	}
	link := filepath.Join(n.RootDir, "pods", string(p.UID), "volumeDevices/kubernetes.io~csi", pv.Name)
	if target, err := os.Readlink(link); err != nil || target != publish {
		t.Errorf("pod link %s -> %q (%v), want %s", link, target, err, publish)
	}
	mapFile := filepath.Join(n.RootDir, "plugins/kubernetes.io/csi/volumeDevices", pv.Name, "dev", string(p.UID))
	if devs, err := loopdev.Find(mapFile); err != nil || len(devs) != 1 {
		t.Errorf("loop devices holding %s: %v (%v), want one", mapFile, devs, err)
	}
	img := filepath.Join(d.DataDir, "volumes", handle+".img")
	if devs, err := loopdev.Find(img); err != nil || len(devs) != 1 {
		t.Errorf("the driver's loop devices on %s: %v (%v), want one", img, devs, err)
	}
	if !fileStartsWith(t, img, blockToken) {
		t.Errorf("the pod's write is not in the volume's file %s", img)
	}

	// A restarted node agent finds the volume mapped: the container runs on, nothing is
	// mapped twice. (The upstream kubelet stages and publishes again after a restart, which
	// the driver answers idempotently; those calls are allowed, not required.)
	n.Restart()
	f.WaitForNodeReady(ctx, 2*time.Minute)
	time.Sleep(10 * time.Second) // time for the restarted node agent to sync the pod
	after := f.WaitForPodReady(ctx, ns, p.Name, time.Minute)
	if a, b := after.Status.ContainerStatuses[0], p.Status.ContainerStatuses[0]; a.ContainerID != b.ContainerID || a.RestartCount != b.RestartCount {
		t.Errorf("container changed across the restart: %s/%d → %s/%d", b.ContainerID, b.RestartCount, a.ContainerID, a.RestartCount)
	}
	if devs, err := loopdev.Find(mapFile); err != nil || len(devs) != 1 {
		t.Errorf("after the restart, loop devices holding %s: %v (%v), want one", mapFile, devs, err)
	}
	if mps, _ := mountutil.PointsUnder(mapFile); len(mps) != 1 {
		t.Errorf("after the restart, %d mounts at %s, want 1", len(mps), mapFile)
	}

	f.DeletePod(ctx, ns, p.Name, ptr.To[int64](0))
	f.WaitForPodGone(ctx, ns, p.Name, time.Minute)
	d.WaitForCalls(ctx, "NodeUnpublishVolume", handle, 1, time.Minute)
	d.WaitForCalls(ctx, "NodeUnstageVolume", handle, 1, time.Minute)
	waitNoLoop(ctx, t, img)
	waitNoLoop(ctx, t, mapFile)
	for _, path := range []string{link, publish, staging, filepath.Dir(filepath.Dir(mapFile))} {
		if _, err := os.Lstat(path); !os.IsNotExist(err) {
			t.Errorf("%s left after the pod's teardown: %v", path, err)
		}
	}
	waitDetached(ctx, t, f, pv.Name)
	if err := f.Client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "data", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	d.WaitForCalls(ctx, "DeleteVolume", handle, 1, 3*time.Minute)
	if _, err := os.Stat(img); !os.IsNotExist(err) {
		t.Errorf("the volume's file %s left after DeleteVolume: %v", img, err)
	}
}

// TestLocalBlockPV: a local PersistentVolume of volumeMode Block whose path is a loop device
// the test made is mapped straight into the container at /dev/xvda (the pod writes and reads
// it; the token lands in the loop device's file); the pod's volumeDevices link points at the
// device, a loop device holds it; deleting the pod removes the link and that loop device, and
// leaves the test's device alone. A pod of the claim read-only reads the device and cannot
// write it.
func TestLocalBlockPV(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	n := startNode(t, f, framework.NodeletOptions{})
	img := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(img, make([]byte, 4<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	dev, err := loopdev.Attach(img)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = loopdev.Detach(dev) })

	pvName := ns + "-blk"
	pv := pvFor(ns, "blk", pvName, v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: dev}})
	pv.Spec.VolumeMode = ptr.To(v1.PersistentVolumeBlock)
	pv.Spec.NodeAffinity = onThisNode(ctx, t, f)
	createPV(ctx, t, f, pv)
	createBlockClaim(ctx, t, f, ns, "blk", "")
	waitClaimBound(ctx, t, ns, "blk", f)

	p := f.CreatePod(ctx, blockPod(f, ns, "blk", "blk"))
	p = f.WaitForPodReady(ctx, ns, p.Name, 2*time.Minute)
	link := filepath.Join(n.RootDir, "pods", string(p.UID), "volumeDevices/kubernetes.io~local-volume", pvName)
	if target, err := os.Readlink(link); err != nil || target != dev {
		t.Errorf("pod link %s -> %q (%v), want %s", link, target, err, dev)
	}
	mapFile := filepath.Join(n.RootDir, "plugins/kubernetes.io~local-volume/volumeDevices", pvName, string(p.UID))
	if mounted, err := mountutil.IsMountPoint(mapFile); err != nil || !mounted {
		t.Errorf("%s is not mounted (%v)", mapFile, err)
	}
	if devs, err := loopdev.Find(mapFile); err != nil || len(devs) != 1 {
		t.Errorf("loop devices holding %s: %v (%v), want one", mapFile, devs, err)
	}
	if !fileStartsWith(t, img, blockToken) {
		t.Errorf("the pod's write is not in the device's file")
	}

	f.DeletePod(ctx, ns, p.Name, ptr.To[int64](0))
	f.WaitForPodGone(ctx, ns, p.Name, time.Minute)
	waitNoLoop(ctx, t, mapFile)
	err = framework.WaitFor(ctx, 30*time.Second, link+" to be removed", func(context.Context) (bool, error) {
		_, err := os.Lstat(link)
		return os.IsNotExist(err), nil
	})
	if err != nil {
		t.Error(err)
	}
	if devs, _ := loopdev.Find(img); len(devs) != 1 || devs[0] != dev {
		t.Errorf("the test's own loop device changed: %v, want [%s]", devs, dev)
	}

	// A read-only claim volume is a read-only device ("r"): it reads the token, cannot write.
	n2 := strconv.Itoa(len(blockToken))
	ro := f.BusyboxPod(ns, "blk-ro", "sh", "-c",
		"test \"$(dd if=/dev/xvda bs=1 count="+n2+")\" = "+blockToken+" && ! echo x | dd of=/dev/xvda conv=fsync")
	ro.Spec.RestartPolicy = v1.RestartPolicyNever
	ro.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "blk", ReadOnly: true}}}}
	ro.Spec.Containers[0].VolumeDevices = []v1.VolumeDevice{{Name: "data", DevicePath: "/dev/xvda"}}
	ro = f.CreatePod(ctx, ro)
	got := f.WaitForPod(ctx, ns, ro.Name, 2*time.Minute, "to finish", func(p *v1.Pod) bool {
		return p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed
	})
	if got.Status.Phase != v1.PodSucceeded {
		t.Errorf("the read-only pod could write the device or not read it: %s", framework.DescribePod(got))
	}
	if !fileStartsWith(t, img, blockToken) {
		t.Errorf("the read-only pod changed the device")
	}
	// Torn down before the test ends: a pod left mapped keeps its loop device (and so the
	// test's device) attached after the node agent stops.
	f.DeletePod(ctx, ns, ro.Name, ptr.To[int64](0))
	f.WaitForPodGone(ctx, ns, ro.Name, time.Minute)
	waitNoLoop(ctx, t, filepath.Join(n.RootDir, "plugins/kubernetes.io~local-volume/volumeDevices", pvName, string(ro.UID)))
}
