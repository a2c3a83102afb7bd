//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/mountutil"
	"github.com/nodelet/nodelet/test/csidriver/calls"
	"github.com/nodelet/nodelet/test/e2e/framework"
)

// CSI volumes (issue 18) with the test driver test/csidriver, the external provisioner and
// attacher and the rig's attach-detach controller (framework.StartCSIDriver). The StorageClass
// binds WaitForFirstConsumer, so pods of its claims go through the rig's scheduler: they have
// no spec.nodeName. Test names stay short: they name the node agent's root dir, and the
// driver's registration socket in it must fit a unix socket path.

// scheduledPod creates pod without spec.nodeName, for the scheduler, tolerating the
// not-ready taint a node agent may register with (the rig runs no node lifecycle controller
// to take it off).
func scheduledPod(ctx context.Context, t *testing.T, f *framework.Framework, pod *v1.Pod) *v1.Pod {
	t.Helper()
	pod.Spec.Tolerations = append(pod.Spec.Tolerations, v1.Toleration{Key: v1.TaintNodeNotReady, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoSchedule})
	p, err := f.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
	return p
}

// csiClaim creates a claim of the test driver's StorageClass.
func csiClaim(ctx context.Context, t *testing.T, f *framework.Framework, ns, name string) {
	t.Helper()
	if _, err := f.Client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, framework.CSIClaim(ns, name, "5Mi"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating PersistentVolumeClaim %s: %v", name, err)
	}
}

// boundPV waits for the claim to be bound and returns its PersistentVolume.
func boundPV(ctx context.Context, t *testing.T, f *framework.Framework, ns, claim string) *v1.PersistentVolume {
	t.Helper()
	waitClaimBound(ctx, t, ns, claim, f)
	pvc, err := f.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv, err := f.Client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != framework.CSIDriverName {
		t.Fatalf("PersistentVolume %s is not of driver %s: %+v", pv.Name, framework.CSIDriverName, pv.Spec.PersistentVolumeSource)
	}
	return pv
}

// attachmentOf is the VolumeAttachment of pv on the rig's node, or nil.
func attachmentOf(ctx context.Context, t *testing.T, f *framework.Framework, pv string) *storagev1.VolumeAttachment {
	t.Helper()
	vas, err := f.Client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, va := range vas.Items {
		if va.Spec.NodeName == f.Env.NodeName && ptr.Deref(va.Spec.Source.PersistentVolumeName, "") == pv {
			return &vas.Items[i]
		}
	}
	return nil
}

// waitDetached waits until pv has no VolumeAttachment on the rig's node: the attach-detach
// controller detaches once the node reports the volume out of use.
func waitDetached(ctx context.Context, t *testing.T, f *framework.Framework, pv string) {
	t.Helper()
	err := framework.WaitFor(ctx, 3*time.Minute, "the VolumeAttachment of "+pv+" to be gone", func(ctx context.Context) (bool, error) {
		return attachmentOf(ctx, t, f, pv) == nil, nil
	})
	if err != nil {
		t.Error(err)
	}
}

// mountIDOf is the mount id (mountinfo's first field) of the mount at path, or "".
func mountIDOf(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	id := ""
	for _, line := range strings.Split(string(b), "\n") {
		if fs := strings.Fields(line); len(fs) > 4 && fs[4] == path {
			id = fs[0] // the last one is the top of the stack
		}
	}
	return id
}

func inodeOf(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// countCalls is calls.Count over the driver's calls so far.
func countCalls(d *framework.CSIDriver, method, volumeID string) int {
	return calls.Count(d.Calls(), method, volumeID)
}

const csiToken = "written-by-the-first-pod"

// csiWriter is a test's node agent and CSI driver with a claim "data" of the driver's class
// and a pod "writer" that wrote csiToken to it and runs on.
type csiWriter struct {
	f     *framework.Framework
	ns    string
	n     *framework.Nodelet
	d     *framework.CSIDriver
	pod   *v1.Pod // Ready
	pv    *v1.PersistentVolume
	bound time.Duration // from the pod's creation to the claim's binding
	ready time.Duration // from the pod's creation to Ready
}

func startCSIWriter(ctx context.Context, t *testing.T) *csiWriter {
	t.Helper()
	w := &csiWriter{f: framework.New(t)}
	w.ns = w.f.NewNamespace()
	w.n = startNode(t, w.f, framework.NodeletOptions{})
	w.d = w.f.StartCSIDriver(w.n)
	csiClaim(ctx, t, w.f, w.ns, "data")
	start := time.Now()
	p := scheduledPod(ctx, t, w.f, claimPod(w.f, w.ns, "writer", pvcVolume("data"), v1.RestartPolicyAlways,
		"echo "+csiToken+" > /data/token && sync && trap 'exit 0' TERM && while true; do sleep 1; done"))
	w.pv = boundPV(ctx, t, w.f, w.ns, "data")
	w.bound = time.Since(start)
	w.pod = w.f.WaitForPodReady(ctx, w.ns, p.Name, 3*time.Minute)
	w.ready = time.Since(start)
	return w
}

// TestCSIVolume: a claim of the test driver's class is provisioned when its first pod is
// scheduled; the volume is attached (a VolumeAttachment, attached, with the driver's
// attachment metadata, which NodeStageVolume requires), staged once and published once; the
// pod writes a file. Deleting the pod unpublishes and unstages the volume and detaches it (the
// VolumeAttachment goes); a new pod reads the file back. Deleting the claim deletes the volume.
// The time from the pod's creation to Ready (provisioning, attach, stage, publish) is logged.
func TestCSIVolume(t *testing.T) {
	ctx := context.Background()
	cw := startCSIWriter(ctx, t)
	f, ns, d, w, pv := cw.f, cw.ns, cw.d, cw.pod, cw.pv
	t.Logf("CSI volume: claim bound %v after the pod's creation, pod Ready after %v", cw.bound.Round(time.Millisecond), cw.ready.Round(time.Millisecond))
	handle := pv.Spec.CSI.VolumeHandle

	va := attachmentOf(ctx, t, f, pv.Name)
	switch {
	case va == nil:
		t.Errorf("no VolumeAttachment of %s on %s while its pod runs", pv.Name, f.Env.NodeName)
	case !va.Status.Attached || va.Status.AttachmentMetadata["attached"] != "yes" || va.Spec.Attacher != framework.CSIDriverName:
		t.Errorf("VolumeAttachment %s: attacher %q attached %v metadata %v", va.Name, va.Spec.Attacher, va.Status.Attached, va.Status.AttachmentMetadata)
	}
	// The attacher may publish more than once (it is idempotent); the node agent stages and
	// publishes once.
	if got := countCalls(d, "ControllerPublishVolume", handle); got < 1 {
		t.Errorf("no successful ControllerPublishVolume of %s while the pod runs", handle)
	}
	for _, m := range []string{"NodeStageVolume", "NodePublishVolume"} {
		if got := countCalls(d, m, handle); got != 1 {
			t.Errorf("%d successful %s calls on %s while the pod runs, want 1", got, m, handle)
		}
	}
	var podInfo map[string]string
	for _, c := range d.Calls() {
		if c.Method == "NodePublishVolume" && c.VolumeID == handle && c.Error == "" {
			podInfo = c.VolumeContext
		}
	}
	if podInfo["csi.storage.k8s.io/pod.name"] != w.Name || podInfo["csi.storage.k8s.io/pod.namespace"] != ns || podInfo["csi.storage.k8s.io/pod.uid"] != string(w.UID) {
		t.Errorf("NodePublishVolume's volume_context %v lacks the pod's info (podInfoOnMount)", podInfo)
	}
	if b, err := os.ReadFile(filepath.Join(d.DataDir, "volumes", handle, "token")); err != nil || strings.TrimSpace(string(b)) != csiToken {
		t.Errorf("the pod's write is not in the driver's volume: %q, %v", b, err)
	}

	f.DeletePod(ctx, ns, w.Name, ptr.To[int64](0))
	f.WaitForPodGone(ctx, ns, w.Name, time.Minute)
	d.WaitForCalls(ctx, "NodeUnpublishVolume", handle, 1, time.Minute)
	d.WaitForCalls(ctx, "NodeUnstageVolume", handle, 1, time.Minute)
	waitDetached(ctx, t, f, pv.Name)
	if got := countCalls(d, "ControllerUnpublishVolume", handle); got < 1 {
		t.Errorf("no ControllerUnpublishVolume of %s after its pod was deleted", handle)
	}

	r := scheduledPod(ctx, t, f, claimPod(f, ns, "reader", pvcVolume("data"), v1.RestartPolicyNever, `test "$(cat /data/token)" = `+csiToken))
	got := f.WaitForPod(ctx, ns, r.Name, 3*time.Minute, "to finish", func(p *v1.Pod) bool {
		return p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed
	})
	if got.Status.Phase != v1.PodSucceeded {
		t.Fatalf("the second pod did not read the token back: %s", framework.DescribePod(got))
	}
	f.DeletePod(ctx, ns, r.Name, ptr.To[int64](0))
	f.WaitForPodGone(ctx, ns, r.Name, time.Minute)
	d.WaitForCalls(ctx, "NodeUnstageVolume", handle, 2, time.Minute)
	// The provisioner deletes no volume that is still attached.
	waitDetached(ctx, t, f, pv.Name)

	if err := f.Client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "data", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	d.WaitForCalls(ctx, "DeleteVolume", handle, 1, 3*time.Minute)
}

// TestCSIInline: a CSI ephemeral inline volume is published (no stage, no attach) with
// csi.storage.k8s.io/ephemeral=true, the pod's info and the volume's attributes, is writable
// by the pod, and is unpublished when the pod is deleted.
func TestCSIInline(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	n := startNode(t, f, framework.NodeletOptions{})
	d := f.StartCSIDriver(n)

	vol := v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{
		Driver: framework.CSIDriverName, VolumeAttributes: map[string]string{"size": "small"},
	}}}
	start := time.Now()
	p := f.CreatePod(ctx, claimPod(f, ns, "inline", vol, v1.RestartPolicyAlways,
		"echo inline > /data/f && test \"$(cat /data/f)\" = inline && trap 'exit 0' TERM && while true; do sleep 1; done"))
	f.WaitForPodReady(ctx, ns, p.Name, 2*time.Minute)
	t.Logf("CSI inline volume: pod Ready after %v", time.Since(start).Round(time.Millisecond))

	var pub *calls.Call
	cs := d.Calls()
	for i := range cs {
		if cs[i].Method == "NodePublishVolume" && cs[i].Error == "" {
			pub = &cs[i]
		}
	}
	if pub == nil {
		t.Fatalf("no successful NodePublishVolume; calls: %+v", cs)
	}
	vc := pub.VolumeContext
	if vc["csi.storage.k8s.io/ephemeral"] != "true" || vc["size"] != "small" || vc["csi.storage.k8s.io/pod.name"] != p.Name || vc["csi.storage.k8s.io/pod.uid"] != string(p.UID) {
		t.Errorf("NodePublishVolume's volume_context %v: want ephemeral=true, the volume's attributes and the pod's info", vc)
	}
	for _, m := range []string{"NodeStageVolume", "ControllerPublishVolume"} {
		if got := countCalls(d, m, ""); got != 0 {
			t.Errorf("%d %s calls for an inline ephemeral volume, want 0", got, m)
		}
	}
	if b, err := os.ReadFile(filepath.Join(d.DataDir, "ephemeral", pub.VolumeID, "f")); err != nil || strings.TrimSpace(string(b)) != "inline" {
		t.Errorf("the pod's write is not in the driver's ephemeral volume: %q, %v", b, err)
	}

	f.DeletePod(ctx, ns, p.Name, ptr.To[int64](0))
	f.WaitForPodGone(ctx, ns, p.Name, time.Minute)
	d.WaitForCalls(ctx, "NodeUnpublishVolume", pub.VolumeID, 1, time.Minute)
	if _, err := os.Stat(pub.TargetPath); !os.IsNotExist(err) {
		t.Errorf("the publish target %s is still there after NodeUnpublishVolume: %v", pub.TargetPath, err)
	}
}

// TestCSIRestart: the node agent restarted while a pod of a CSI volume runs keeps the volume
// as it is: the same single mount at the staging path and at the publish target (same mount
// ids, same file inode), the container not restarted. The upstream kubelet v1.37 calls
// NodeStageVolume and NodePublishVolume again after its restart (its reconstructed volumes are
// "uncertain" until set up again), which the driver answers idempotently; the test counts
// those calls and requires them to succeed, not to be absent.
func TestCSIRestart(t *testing.T) {
	ctx := context.Background()
	cw := startCSIWriter(ctx, t)
	f, ns, n, d, before := cw.f, cw.ns, cw.n, cw.d, cw.pod
	handle := cw.pv.Spec.CSI.VolumeHandle
	var target, staging string
	for _, c := range d.Calls() {
		if c.Method == "NodePublishVolume" && c.VolumeID == handle && c.Error == "" {
			target, staging = c.TargetPath, c.StagingPath
		}
	}
	if target == "" || staging == "" {
		t.Fatalf("no successful NodePublishVolume of %s with both paths", handle)
	}
	targetID, stagingID, ino := mountIDOf(t, target), mountIDOf(t, staging), inodeOf(t, filepath.Join(target, "token"))
	stages, publishes := countCalls(d, "NodeStageVolume", handle), countCalls(d, "NodePublishVolume", handle)

	n.Restart()
	f.WaitForNodeReady(ctx, 2*time.Minute)
	// Time for the restarted agent to sync the pod and set its volumes up again.
	time.Sleep(15 * time.Second)
	after := f.WaitForPodReady(ctx, ns, before.Name, time.Minute)
	if a, b := after.Status.ContainerStatuses[0], before.Status.ContainerStatuses[0]; a.ContainerID != b.ContainerID || a.RestartCount != b.RestartCount {
		t.Errorf("container changed across the restart: %s/%d → %s/%d", b.ContainerID, b.RestartCount, a.ContainerID, a.RestartCount)
	}
	for _, m := range []struct{ path, id string }{{target, targetID}, {staging, stagingID}} {
		if got := mountIDOf(t, m.path); got != m.id {
			t.Errorf("%s is mount %q after the restart, was %q", m.path, got, m.id)
		}
		if mps, err := mountutil.PointsUnder(m.path); err != nil || len(mps) != 1 {
			t.Errorf("mounts at %s after the restart: %v (%v), want exactly one", m.path, mps, err)
		}
	}
	if got := inodeOf(t, filepath.Join(target, "token")); got != ino {
		t.Errorf("the file's inode changed across the restart: %d → %d", ino, got)
	}
	for _, c := range d.Calls() {
		if strings.HasPrefix(c.Method, "Node") && c.VolumeID == handle && c.Error != "" {
			t.Errorf("%s of %s failed: %s", c.Method, handle, c.Error)
		}
	}
	t.Logf("NodeStageVolume/NodePublishVolume calls: %d/%d before the restart, %d/%d after", stages, publishes,
		countCalls(d, "NodeStageVolume", handle), countCalls(d, "NodePublishVolume", handle))
}

// TestCSIUnregistered: a pod of a CSI driver that has not registered with the node agent
// waits in ContainerCreating with a FailedMount event naming the driver.
func TestCSIUnregistered(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	startNode(t, f, framework.NodeletOptions{})
	const driver = "unregistered.csi.nodelet.test"
	_, err := f.Client.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: driver},
		Spec: storagev1.CSIDriverSpec{
			AttachRequired:       ptr.To(false),
			VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecycleEphemeral},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating CSIDriver %s: %v", driver, err)
	}
	t.Cleanup(func() {
		_ = f.Client.StorageV1().CSIDrivers().Delete(context.Background(), driver, metav1.DeleteOptions{})
	})

	vol := v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: driver}}}
	p := f.CreatePod(ctx, claimPod(f, ns, "waiter", vol, v1.RestartPolicyAlways, "sleep 3600"))
	msg := waitForPodEvent(t, f, ns, p.Name, "FailedMount", driver)
	t.Logf("FailedMount: %s", msg)
	// Upstream's wording: the SetUp error as it is, with the volume's name.
	if want := `MountVolume.SetUp failed for volume "scratch" : `; !strings.HasPrefix(msg, want) ||
		!strings.HasSuffix(msg, "driver name "+driver+" not found in the list of registered CSI drivers") {
		t.Errorf("FailedMount %q: want %q... ending in that the driver is not in the list of registered CSI drivers", msg, want)
	}
	f.WaitForPod(ctx, ns, p.Name, 30*time.Second, "to be Pending in ContainerCreating", func(p *v1.Pod) bool {
		cs := p.Status.ContainerStatuses
		return p.Status.Phase == v1.PodPending && len(cs) == 1 && cs[0].State.Waiting != nil && cs[0].State.Waiting.Reason == "ContainerCreating"
	})
}
