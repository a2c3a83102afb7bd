package volumes

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/csi"
	"github.com/nodelet/nodelet/internal/loopdev"
	"github.com/nodelet/nodelet/internal/mountutil"
)

// testBlockDevice attaches a loop device to a fresh 1 MiB file; detached on cleanup.
func testBlockDevice(t *testing.T) string {
	t.Helper()
	requireRoot(t)
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skipf("no loop devices: %v", err)
	}
	img := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(img, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	dev, err := loopdev.Attach(img)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = loopdev.Detach(dev) })
	return dev
}

func blockClaimPod(readOnly bool) *v1.Pod {
	pod := testPod(claimVolume("data", "c1", readOnly))
	pod.Spec.Containers[0].VolumeDevices = []v1.VolumeDevice{{Name: "data", DevicePath: "/dev/xvda"}}
	return pod
}

// TestLocalBlockClaim: a local volume of volumeMode Block is mapped as
// upstream maps it: the device bind-mounted at the plugin's global map path
// per pod, a loop device holding it open, and the pod's volumeDevices link
// to the device given to the runtime; a repeat set-up (also by a restarted
// manager) changes nothing; teardown undoes all of it and the device stays.
func TestLocalBlockClaim(t *testing.T) {
	dev := testBlockDevice(t)
	claims := &fakeClaims{}
	m, root := newClaimManager(t, claims)
	pv := localPV("pv1", "c1", dev, "node1")
	pv.Spec.VolumeMode = ptr.To(v1.PersistentVolumeBlock)
	claims.put(boundPVC("c1", "pv1"), pv)
	pod := blockClaimPod(true)
	tearDownOnCleanup(t, m, pod.UID)
	ctx := context.Background()

	got, err := m.SetUpPod(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(root, "pods", string(pod.UID), "volumeDevices", pluginLocalVolume, "pv1")
	if hv := got["data"]; hv.Path != link || !hv.Device || !hv.ReadOnly {
		t.Fatalf("block claim set up as %+v; want device %s read-only", hv, link)
	}
	if target, err := os.Readlink(link); err != nil || target != dev {
		t.Fatalf("link %s -> %q, %v; want %s", link, target, err, dev)
	}
	mapFile := filepath.Join(root, "plugins", pluginLocalVolume, "volumeDevices", "pv1", string(pod.UID))
	if mounted, _ := mountutil.IsMountPoint(mapFile); !mounted {
		t.Fatalf("%s is not mounted", mapFile)
	}
	locks, err := loopdev.Find(mapFile)
	if err != nil || len(locks) != 1 {
		t.Fatalf("loop devices on %s: %v, %v; want one", mapFile, locks, err)
	}

	restarted := NewManager(root, &fakeKube{}, m.clock, WithClaims(claims, func() map[string]string { return thisNode }))
	for _, mgr := range []*Manager{m, restarted} {
		if got, err := mgr.SetUpPod(ctx, pod); err != nil || got["data"].Path != link {
			t.Fatalf("repeat set-up: %+v, %v", got["data"], err)
		}
	}
	if again, _ := loopdev.Find(mapFile); len(again) != 1 {
		t.Errorf("loop devices after repeat set-ups: %v; want the one", again)
	}
	if n, _ := mountutil.PointsUnder(mapFile); len(n) != 1 {
		t.Errorf("%d mounts at %s after repeat set-ups, want 1", len(n), mapFile)
	}

	if err := m.TearDownPod(ctx, pod.UID); err != nil {
		t.Fatal(err)
	}
	if left, _ := loopdev.Find(mapFile); len(left) != 0 {
		t.Errorf("loop devices left on %s: %v", mapFile, left)
	}
	if _, err := os.Lstat(filepath.Dir(mapFile)); !os.IsNotExist(err) {
		t.Errorf("global map path left: %v", err)
	}
	if m.PodVolumesExist(pod.UID) {
		t.Error("volumeDevices left after teardown")
	}
	if fi, err := os.Stat(dev); err != nil || fi.Mode()&os.ModeDevice == 0 {
		t.Errorf("the device itself is gone: %v", err)
	}
}

// TestLocalBlockClaimNotADevice: a local volume of volumeMode Block whose
// path is a directory is refused by name, and nothing is mapped.
func TestLocalBlockClaimNotADevice(t *testing.T) {
	claims := &fakeClaims{}
	m, root := newClaimManager(t, claims)
	pv := localPV("pv1", "c1", t.TempDir(), "node1")
	pv.Spec.VolumeMode = ptr.To(v1.PersistentVolumeBlock)
	claims.put(boundPVC("c1", "pv1"), pv)
	pod := blockClaimPod(false)
	tearDownOnCleanup(t, m, pod.UID)
	got, err := m.SetUpPod(context.Background(), pod)
	if _, ok := got["data"]; ok || err == nil {
		t.Fatalf("set up %+v, %v; want an error", got, err)
	}
	want := `MapVolume.MapPodDevice failed for volume "pv1" : local volume ` + pv.Spec.Local.Path + ` is not a block device, but PersistentVolume pv1 has volumeMode Block`
	if err.Error() != want {
		t.Errorf("err = %v\nwant %s", err, want)
	}
	if _, err := os.Lstat(filepath.Join(root, "pods", string(pod.UID), "volumeDevices")); !os.IsNotExist(err) {
		t.Errorf("volumeDevices made for a refused volume: %v", err)
	}
}

// TestCSIBlockClaim: a CSI PV of volumeMode Block is staged at
// volumeDevices/staging/<pv> and published at volumeDevices/publish/<pv>/<pod>
// with a block capability, vol_data.json kept at volumeDevices/<pv>/data,
// mapped for the pod (link, bind mount, loop device) and given to the
// runtime as a device; a second pod publishes again without staging; the
// last pod's teardown unpublishes, unstages and removes every directory.
func TestCSIBlockClaim(t *testing.T) {
	dev := testBlockDevice(t)
	r := newCSIRig(t, csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)
	r.node.blockDev = dev
	pv := csiPV("pv1", "c1", "h1")
	pv.Spec.VolumeMode = ptr.To(v1.PersistentVolumeBlock)
	r.claims.put(boundPVC("c1", "pv1"), pv)
	r.objs.putVA(attachedVA("h1", map[string]string{"attached": "yes"}))
	ctx := context.Background()
	pod1, pod2 := blockClaimPod(false), blockClaimPod(false)
	pod2.UID = "uid-2"
	tearDownOnCleanup(t, r.m, pod1.UID)
	tearDownOnCleanup(t, r.m, pod2.UID)

	got, err := r.m.SetUpPod(ctx, pod1)
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(csi.PodDeviceDir(r.root, pod1.UID), "pv1")
	publishPath := csi.BlockPublishPath(r.root, "pv1", pod1.UID)
	if hv := got["data"]; hv.Path != link || !hv.Device || hv.ReadOnly {
		t.Fatalf("set up as %+v; want device %s", hv, link)
	}
	if target, err := os.Readlink(link); err != nil || target != publishPath {
		t.Fatalf("link -> %q, %v; want %s", target, err, publishPath)
	}
	if len(r.node.stages) != 1 || r.node.stages[0].StagingTargetPath != csi.BlockStagingPath(r.root, "pv1") || r.node.stages[0].VolumeCapability.GetBlock() == nil {
		t.Fatalf("stages %v; want one block stage at the block staging path", r.node.stages)
	}
	pub := r.node.lastPublish()
	if pub.TargetPath != publishPath || pub.StagingTargetPath != csi.BlockStagingPath(r.root, "pv1") || pub.VolumeCapability.GetBlock() == nil || pub.PublishContext["attached"] != "yes" {
		t.Fatalf("publish %v", pub)
	}
	data := readJSON(t, filepath.Join(csi.BlockDataDir(r.root, "pv1"), csi.VolDataFile))
	if data[volDataDriver] != testDriver || data[volDataHandle] != "h1" || data[volDataSpecVolID] != "pv1" {
		t.Errorf("vol_data.json %v", data)
	}
	mapFile := filepath.Join(csi.BlockGlobalMapPath(r.root, "pv1"), string(pod1.UID))
	if locks, _ := loopdev.Find(mapFile); len(locks) != 1 {
		t.Errorf("loop devices on %s: %v; want one", mapFile, locks)
	}
	if inUse := r.m.VolumesInUse(); len(inUse) != 1 || inUse[0] != "kubernetes.io/csi/"+testDriver+"^h1" {
		t.Errorf("volumes in use %v", inUse)
	}
	// A repeat set-up calls nothing.
	calls := len(r.node.callList())
	if _, err := r.m.SetUpPod(ctx, pod1); err != nil {
		t.Fatal(err)
	}
	if n := len(r.node.callList()); n != calls {
		t.Errorf("a repeat set-up made %d calls", n-calls)
	}
	if _, err := r.m.SetUpPod(ctx, pod2); err != nil {
		t.Fatal(err)
	}
	if r.node.count("NodeStageVolume") != 1 || r.node.count("NodePublishVolume") != 2 {
		t.Errorf("calls %v; want one stage, two publishes", r.node.callList())
	}

	if err := r.m.TearDownPod(ctx, pod1.UID); err != nil {
		t.Fatal(err)
	}
	if r.node.count("NodeUnpublishVolume") != 1 || r.node.count("NodeUnstageVolume") != 0 {
		t.Errorf("calls %v; want one unpublish, no unstage while pod2 maps it", r.node.callList())
	}
	if locks, _ := loopdev.Find(mapFile); len(locks) != 0 {
		t.Errorf("loop devices left on %s: %v", mapFile, locks)
	}
	if err := r.m.TearDownPod(ctx, pod2.UID); err != nil {
		t.Fatal(err)
	}
	if r.node.count("NodeUnpublishVolume") != 2 || r.node.count("NodeUnstageVolume") != 1 {
		t.Errorf("calls %v; want two unpublishes, one unstage", r.node.callList())
	}
	for _, p := range []string{csi.BlockVolumeDir(r.root, "pv1"), csi.BlockStagingPath(r.root, "pv1"), csi.BlockPublishDir(r.root, "pv1"), filepath.Dir(link)} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s left after the last teardown: %v", p, err)
		}
	}
	if inUse := r.m.VolumesInUse(); len(inUse) != 0 {
		t.Errorf("volumes in use after teardown %v", inUse)
	}
}

// TestCSIBlockFailedPublishTornDown: a block volume staged whose publish
// failed leaves the pod's (dangling) link, by which the pod's teardown
// still unpublishes and unstages it and removes its directories, so the
// volume is not reported in use forever.
func TestCSIBlockFailedPublishTornDown(t *testing.T) {
	requireRoot(t)
	r := newCSIRig(t, csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)
	r.node.publishErr = status.Error(codes.InvalidArgument, "no such device")
	pv := csiPV("pv1", "c1", "h1")
	pv.Spec.VolumeMode = ptr.To(v1.PersistentVolumeBlock)
	r.claims.put(boundPVC("c1", "pv1"), pv)
	r.objs.putVA(attachedVA("h1", map[string]string{"attached": "yes"}))
	ctx := context.Background()
	pod := blockClaimPod(false)
	tearDownOnCleanup(t, r.m, pod.UID)

	got, err := r.m.SetUpPod(ctx, pod)
	if _, ok := got["data"]; ok || err == nil || !strings.Contains(err.Error(), `MapVolume.MapPodDevice failed for volume "pv1" : kubernetes.io/csi: blockMapper.publishVolumeForBlock failed: `) {
		t.Fatalf("set up %+v, %v; want the publish's failure", got, err)
	}
	if inUse := r.m.VolumesInUse(); len(inUse) != 1 {
		t.Errorf("volumes in use while set up fails: %v; want the volume", inUse)
	}
	if err := r.m.TearDownPod(ctx, pod.UID); err != nil {
		t.Fatal(err)
	}
	if r.node.count("NodeUnpublishVolume") != 1 || r.node.count("NodeUnstageVolume") != 1 {
		t.Errorf("calls %v; want one unpublish and one unstage", r.node.callList())
	}
	for _, p := range []string{csi.BlockVolumeDir(r.root, "pv1"), csi.BlockStagingPath(r.root, "pv1"), csi.BlockPublishDir(r.root, "pv1"), csi.PodDeviceDir(r.root, pod.UID)} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s left after teardown: %v", p, err)
		}
	}
	if inUse := r.m.VolumesInUse(); len(inUse) != 0 {
		t.Errorf("volumes in use after teardown: %v", inUse)
	}
}
