package main

import (
	"errors"
	"os"
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nodelet/nodelet/internal/loopdev"
	"github.com/nodelet/nodelet/internal/mountutil"
)

// Block volumes: a file of the volume's size is the disk; staging attaches
// a loop device to it (the "attach" of a real disk), publishing
// bind-mounts the loop device node onto the target path (a file), and
// unpublishing and unstaging undo that, detaching the loop device.

// blockImage is a block volume's backing file.
func (d *driver) blockImage(id string) string {
	return filepath.Join(d.volumesDir(), id+".img")
}

// createBlockImage makes the volume's file, sparse, of capacity bytes.
func (d *driver) createBlockImage(id string, capacity int64) error {
	f, err := os.OpenFile(d.blockImage(id), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return status.Errorf(codes.Internal, "creating the volume's file: %v", err)
	}
	defer f.Close()
	if err := f.Truncate(capacity); err != nil {
		return status.Errorf(codes.Internal, "sizing the volume's file: %v", err)
	}
	return nil
}

// removeBlockImage removes the volume's file; one still attached is refused.
func (d *driver) removeBlockImage(id string) error {
	img := d.blockImage(id)
	devs, err := loopdev.Find(img)
	if err != nil {
		return status.Errorf(codes.Internal, "%v", err)
	}
	if len(devs) > 0 {
		return status.Errorf(codes.FailedPrecondition, "volume %s is still attached at %v", id, devs)
	}
	if err := os.Remove(img); err != nil && !errors.Is(err, os.ErrNotExist) {
		return status.Errorf(codes.Internal, "removing volume %s: %v", id, err)
	}
	return nil
}

// stageBlock attaches a loop device to the volume's file, once.
func (d *driver) stageBlock(v *volume) error {
	if _, err := loopdev.EnsureAttached(d.blockImage(v.ID)); err != nil {
		return status.Errorf(codes.Internal, "attaching volume %s: %v", v.ID, err)
	}
	return nil
}

// unstageBlock detaches the volume's loop devices.
func (d *driver) unstageBlock(v *volume) error {
	if err := loopdev.DetachAll(d.blockImage(v.ID)); err != nil {
		return status.Errorf(codes.Internal, "detaching volume %s: %v", v.ID, err)
	}
	return nil
}

// publishBlock bind-mounts the staged volume's loop device onto the target
// path, a file it creates; a target already mounted is left as it is.
// readonly is not enforced here: a read-only mount does not stop writes to a
// device node; the container's device permission ("r") does.
func (d *driver) publishBlock(req *csi.NodePublishVolumeRequest) error {
	v, ok := d.vols[req.GetVolumeId()]
	if !ok {
		return status.Errorf(codes.NotFound, "volume %s not found", req.GetVolumeId())
	}
	if err := checkAccessType(v, req.GetVolumeCapability()); err != nil {
		return err
	}
	devs, err := loopdev.Find(d.blockImage(v.ID))
	if err != nil {
		return status.Errorf(codes.Internal, "%v", err)
	}
	if len(devs) == 0 {
		return status.Errorf(codes.FailedPrecondition, "volume %s is not staged (no loop device)", v.ID)
	}
	target := req.GetTargetPath()
	if mounted, err := mountutil.IsMountPoint(target); err != nil {
		return status.Errorf(codes.Internal, "checking %s: %v", target, err)
	} else if mounted {
		return nil
	}
	f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|unix.O_NOFOLLOW, 0o640)
	if err != nil {
		return status.Errorf(codes.Internal, "creating %s: %v", target, err)
	}
	f.Close()
	if err := unix.Mount(devs[0], target, "", unix.MS_BIND, ""); err != nil {
		return status.Errorf(codes.Internal, "bind-mounting %s at %s: %v", devs[0], target, err)
	}
	return nil
}
