package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/nodelet/nodelet/internal/mountutil"
	"github.com/nodelet/nodelet/test/csidriver/calls"
)

// serve starts the driver's CSI server on a socket in a temp dir and returns clients of it.
func serve(t *testing.T) (*driver, csi.ControllerClient, csi.NodeClient) {
	t.Helper()
	dir := t.TempDir()
	d, err := newDriver(config{endpoint: filepath.Join(dir, "csi.sock"), nodeID: "node-a", dataDir: filepath.Join(dir, "data"), callsFile: filepath.Join(dir, "calls")})
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(d.logCall))
	csi.RegisterControllerServer(srv, d)
	csi.RegisterNodeServer(srv, d)
	lis, err := listenUnix(d.cfg.endpoint)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient("unix://"+d.cfg.endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
		<-done
		d.close()
	})
	return d, csi.NewControllerClient(conn), csi.NewNodeClient(conn)
}

var mountCap = &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}}

func wantCode(t *testing.T, what string, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Errorf("%s: code %v (%v), want %v", what, got, err, want)
	}
}

func TestControllerIsIdempotent(t *testing.T) {
	d, cc, _ := serve(t)
	ctx := context.Background()
	req := &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: []*csi.VolumeCapability{mountCap}, CapacityRange: &csi.CapacityRange{RequiredBytes: 5 << 20}}
	v1, err := cc.CreateVolume(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	v2, err := cc.CreateVolume(ctx, req)
	if err != nil || v2.Volume.VolumeId != v1.Volume.VolumeId || v2.Volume.CapacityBytes != 5<<20 {
		t.Fatalf("second CreateVolume: %v, %v; want the first's volume %v", v2, err, v1)
	}
	_, err = cc.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: []*csi.VolumeCapability{mountCap}, CapacityRange: &csi.CapacityRange{RequiredBytes: 6 << 20}})
	wantCode(t, "CreateVolume of the same name, larger", err, codes.AlreadyExists)
	_, err = cc.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "blk", VolumeCapabilities: []*csi.VolumeCapability{blockCap, mountCap}})
	wantCode(t, "CreateVolume of block and mount at once", err, codes.InvalidArgument)
	_, err = cc.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: []*csi.VolumeCapability{blockCap}, CapacityRange: &csi.CapacityRange{RequiredBytes: 5 << 20}})
	wantCode(t, "CreateVolume of the same name, block", err, codes.AlreadyExists)
	if id := volumeIDFor("a/../b"); id == "a/../b" || filepath.Base(id) != id {
		t.Errorf("volumeIDFor(a/../b) = %q: not one path element", id)
	}

	id := v1.Volume.VolumeId
	_, err = cc.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: "nope", NodeId: "node-a", VolumeCapability: mountCap})
	wantCode(t, "ControllerPublishVolume of a missing volume", err, codes.NotFound)
	for range 2 {
		pub, err := cc.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "node-a", VolumeCapability: mountCap})
		if err != nil || pub.PublishContext["attached"] != "yes" {
			t.Fatalf("ControllerPublishVolume: %v, %v", pub, err)
		}
	}
	if !d.vols[id].Nodes["node-a"] {
		t.Errorf("attachment to node-a not recorded: %+v", d.vols[id])
	}
	// The state survives a restart of the driver.
	d2, err := newDriver(d.cfg)
	if err != nil {
		t.Fatal(err)
	}
	d2.close()
	if v := d2.vols[id]; v == nil || !v.Nodes["node-a"] || v.CapacityBytes != 5<<20 {
		t.Errorf("state after a restart: %+v", v)
	}
	for range 2 {
		if _, err := cc.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "node-a"}); err != nil {
			t.Fatal(err)
		}
	}
	vv, err := cc.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: id, VolumeCapabilities: []*csi.VolumeCapability{{AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}}}})
	if err != nil || vv.Confirmed != nil {
		t.Errorf("ValidateVolumeCapabilities of block: %v, %v; want unconfirmed", vv, err)
	}
	for range 2 {
		if _, err := cc.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(d.volumesDir(), id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("volume dir after DeleteVolume: %v", err)
	}
	cs, err := calls.ReadFile(d.cfg.callsFile)
	if err != nil {
		t.Fatal(err)
	}
	if got := calls.Count(cs, "CreateVolume", ""); got != 2 {
		t.Errorf("%d successful CreateVolume calls recorded, want 2", got)
	}
	if got := calls.Count(cs, "DeleteVolume", id); got != 2 {
		t.Errorf("%d successful DeleteVolume calls on %s recorded, want 2", got, id)
	}
}

func TestNodeStagePublish(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to bind-mount")
	}
	d, cc, nc := serve(t)
	ctx := context.Background()
	root := t.TempDir()
	t.Cleanup(func() { _, _ = mountutil.UnmountAllUnder(root) })
	v, err := cc.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-2", VolumeCapabilities: []*csi.VolumeCapability{mountCap}})
	if err != nil {
		t.Fatal(err)
	}
	id := v.Volume.VolumeId
	staging, target, ro := filepath.Join(root, "globalmount"), filepath.Join(root, "pod", "mount"), filepath.Join(root, "pod2", "mount")
	stage := &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: mountCap, PublishContext: map[string]string{"attached": "yes"}}
	_, err = nc.NodeStageVolume(ctx, stage)
	wantCode(t, "NodeStageVolume before ControllerPublishVolume", err, codes.FailedPrecondition)
	if _, err := cc.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "node-a", VolumeCapability: mountCap}); err != nil {
		t.Fatal(err)
	}
	_, err = nc.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: mountCap})
	wantCode(t, "NodeStageVolume without the publish context", err, codes.FailedPrecondition)
	for range 2 {
		if _, err := nc.NodeStageVolume(ctx, stage); err != nil {
			t.Fatal(err)
		}
	}
	if mps, _ := mountutil.PointsUnder(staging); len(mps) != 1 {
		t.Errorf("mounts at the staging path after two NodeStageVolume: %v, want one", mps)
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := nc.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: mountCap}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := nc.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: ro, VolumeCapability: mountCap, Readonly: true}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(target, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(d.volumesDir(), id, "f")); err != nil || string(b) != "x" {
		t.Errorf("a write through the publish target is not in the volume: %q, %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(ro, "g"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("writing through a read-only publication: %v, want EROFS", err)
	}
	st, err := nc.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target})
	if err != nil || len(st.Usage) != 2 || st.Usage[0].Total <= 0 {
		t.Errorf("NodeGetVolumeStats: %v, %v", st, err)
	}
	_, err = nc.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: filepath.Join(root, "none")})
	wantCode(t, "NodeGetVolumeStats of a missing path", err, codes.NotFound)
	for _, p := range []string{target, ro, target} {
		if _, err := nc.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: p}); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after NodeUnpublishVolume: %v", p, err)
		}
	}
	for range 2 {
		if _, err := nc.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
			t.Fatal(err)
		}
	}
	if mps, _ := mountutil.PointsUnder(root); len(mps) != 0 {
		t.Errorf("mounts left: %v", mps)
	}
	if b, err := os.ReadFile(filepath.Join(d.volumesDir(), id, "f")); err != nil || string(b) != "x" {
		t.Errorf("the volume's data after unstage: %q, %v", b, err)
	}

	// An inline ephemeral volume: a fresh directory, removed with its publication.
	eph := filepath.Join(root, "pod3", "mount")
	ectx := map[string]string{ephemeralKey: "true"}
	if _, err := nc.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "csi-abc", TargetPath: eph, VolumeCapability: mountCap, VolumeContext: ectx}); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "../x", TargetPath: eph + "2", VolumeCapability: mountCap, VolumeContext: ectx}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("ephemeral volume id ../x: %v, want InvalidArgument", err)
	}
	if _, err := nc.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "csi-abc", TargetPath: eph}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d.ephemeralDir(), "csi-abc")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ephemeral volume dir after NodeUnpublishVolume: %v", err)
	}
	cs, err := calls.ReadFile(d.cfg.callsFile)
	if err != nil {
		t.Fatal(err)
	}
	if got := calls.Count(cs, "NodeStageVolume", id); got != 2 {
		t.Errorf("%d successful NodeStageVolume calls recorded, want 2", got)
	}
	var sawTarget bool
	for _, c := range cs {
		sawTarget = sawTarget || (c.Method == "NodePublishVolume" && c.TargetPath == target && c.StagingPath == staging && c.Error == "")
	}
	if !sawTarget {
		t.Errorf("NodePublishVolume's paths not recorded: %+v", cs)
	}
}

func TestNodeExpandVolume(t *testing.T) {
	d, cc, nc := serve(t)
	ctx := context.Background()
	v, err := cc.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-3", VolumeCapabilities: []*csi.VolumeCapability{mountCap}, CapacityRange: &csi.CapacityRange{RequiredBytes: 5 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	id, path := v.Volume.VolumeId, t.TempDir()
	caps, err := nc.NodeGetCapabilities(ctx, &csi.NodeGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var expand bool
	for _, c := range caps.Capabilities {
		expand = expand || c.GetRpc().GetType() == csi.NodeServiceCapability_RPC_EXPAND_VOLUME
	}
	if !expand {
		t.Errorf("NodeGetCapabilities lacks EXPAND_VOLUME: %v", caps)
	}
	for range 2 {
		resp, err := nc.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: id, VolumePath: path, CapacityRange: &csi.CapacityRange{RequiredBytes: 10 << 20}})
		if err != nil || resp.CapacityBytes != 10<<20 {
			t.Fatalf("NodeExpandVolume to 10Mi: %v, %v", resp, err)
		}
	}
	// Never shrinks.
	if resp, err := nc.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: id, VolumePath: path, CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 20}}); err != nil || resp.CapacityBytes != 10<<20 {
		t.Errorf("NodeExpandVolume to 1Mi: %v, %v; want 10Mi kept", resp, err)
	}
	_, err = nc.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: "none", VolumePath: path})
	wantCode(t, "NodeExpandVolume of an unknown volume", err, codes.NotFound)
	_, err = nc.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: id})
	wantCode(t, "NodeExpandVolume without volume_path", err, codes.InvalidArgument)
	cs, err := calls.ReadFile(d.cfg.callsFile)
	if err != nil {
		t.Fatal(err)
	}
	if got := calls.Count(cs, "NodeExpandVolume", id); got != 3 {
		t.Errorf("%d successful NodeExpandVolume calls recorded, want 3", got)
	}
	if cs[2].Method != "NodeExpandVolume" || cs[2].RequiredBytes != 10<<20 || cs[2].VolumePath != path {
		t.Errorf("NodeExpandVolume call recorded as %+v", cs[2])
	}
}
