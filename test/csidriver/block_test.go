package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/nodelet/nodelet/internal/loopdev"
	"github.com/nodelet/nodelet/internal/mountutil"
)

var blockCap = &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}}

func TestBlockVolumeFile(t *testing.T) {
	d, cc, _ := serve(t)
	resp, err := cc.CreateVolume(context.Background(), &csi.CreateVolumeRequest{Name: "blk", VolumeCapabilities: []*csi.VolumeCapability{blockCap},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 3 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(d.blockImage(resp.Volume.VolumeId))
	if err != nil || fi.Size() != 3<<20 {
		t.Fatalf("backing file %v, %v; want 3 MiB", fi, err)
	}
	if _, err := os.Stat(filepath.Join(d.volumesDir(), resp.Volume.VolumeId)); !os.IsNotExist(err) {
		t.Errorf("a block volume got a directory: %v", err)
	}
	if _, err := cc.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: resp.Volume.VolumeId}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d.blockImage(resp.Volume.VolumeId)); !os.IsNotExist(err) {
		t.Errorf("backing file left after DeleteVolume: %v", err)
	}
}

// A block volume staged is a loop device on its file; published, that
// device is bind-mounted on the target file (for each pod), and
// what is written through the target lands in the file; unpublish and
// unstage undo it and detach the loop device.
func TestBlockVolumeNodeLifecycle(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (loop devices, mounts)")
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skipf("no loop devices: %v", err)
	}
	d, cc, nc := serve(t)
	ctx := context.Background()
	resp, err := cc.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "blk", VolumeCapabilities: []*csi.VolumeCapability{blockCap}})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.Volume.VolumeId
	img := d.blockImage(id)
	_, err = cc.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "node-a", VolumeCapability: mountCap})
	wantCode(t, "ControllerPublishVolume of a block volume with a mount capability", err, codes.InvalidArgument)
	pub, err := cc.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "node-a", VolumeCapability: blockCap})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	staging, target, roTarget := filepath.Join(dir, "staging"), filepath.Join(dir, "pod1"), filepath.Join(dir, "pod2")
	if err := os.Mkdir(staging, 0o750); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = mountutil.UnmountAllUnder(dir)
		_ = loopdev.DetachAll(img)
	})
	_, err = nc.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: blockCap})
	wantCode(t, "NodePublishVolume before NodeStageVolume", err, codes.FailedPrecondition)
	for i := 0; i < 2; i++ { // idempotent
		if _, err := nc.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, PublishContext: pub.PublishContext, StagingTargetPath: staging, VolumeCapability: blockCap}); err != nil {
			t.Fatal(err)
		}
	}
	devs, err := loopdev.Find(img)
	if err != nil || len(devs) != 1 {
		t.Fatalf("loop devices of %s: %v, %v; want one", img, devs, err)
	}
	for i := 0; i < 2; i++ {
		if _, err := nc.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: blockCap}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := nc.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: roTarget, VolumeCapability: blockCap, Readonly: true}); err != nil {
		t.Fatal(err)
	}
	if n, _ := mountutil.PointsUnder(target); len(n) != 1 {
		t.Errorf("%d mounts at %s, want 1", len(n), target)
	}
	fi, err := os.Stat(target)
	if err != nil || fi.Mode()&os.ModeDevice == 0 {
		t.Fatalf("target %v, %v: not a device", fi, err)
	}
	f, err := os.OpenFile(target, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("through the target"), 512); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if n, _ := mountutil.PointsUnder(roTarget); len(n) != 1 {
		t.Errorf("%d mounts at %s, want 1", len(n), roTarget)
	}
	for _, p := range []string{target, roTarget} {
		if _, err := nc.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: p}); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("target %s left after NodeUnpublishVolume: %v", p, err)
		}
	}
	if _, err := nc.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}
	if devs, _ := loopdev.Find(img); len(devs) != 0 {
		t.Errorf("loop devices left after NodeUnstageVolume: %v", devs)
	}
	data, err := os.ReadFile(img)
	if err != nil || !bytes.Equal(data[512:512+18], []byte("through the target")) {
		t.Errorf("the volume's file does not hold what was written (%v)", err)
	}
}
