package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/internal/atomicfile"
	"github.com/nodelet/nodelet/internal/mountutil"
	"github.com/nodelet/nodelet/test/csidriver/calls"
)

const (
	// ephemeralKey in volume_context marks a CSI ephemeral inline volume (the kubelet sets it).
	ephemeralKey = "csi.storage.k8s.io/ephemeral"
	// defaultCapacity is a volume's size when CreateVolume asks for none.
	defaultCapacity = 1 << 20
)

// volume is one provisioned volume: a directory, its recorded size and the nodes it is
// attached (ControllerPublished) to.
type volume struct {
	ID            string          `json:"id"`
	Name          string          `json:"name"`
	CapacityBytes int64           `json:"capacityBytes"`
	Nodes         map[string]bool `json:"nodes,omitempty"`
	// Block: a block volume, a file of CapacityBytes (blockImage) that the
	// node attaches a loop device to.
	Block bool `json:"block,omitempty"`
}

// driver serves the three CSI services. mu guards vols and serializes the node's mount
// operations (a fixture: simplicity over concurrency).
type driver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer
	csi.UnimplementedNodeServer

	cfg config

	mu        sync.Mutex
	vols      map[string]*volume
	callsFile *os.File
}

func newDriver(cfg config) (*driver, error) {
	d := &driver{cfg: cfg, vols: map[string]*volume{}}
	for _, dir := range []string{d.volumesDir(), d.ephemeralDir()} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("creating %s: %w", dir, err)
		}
	}
	data, err := os.ReadFile(d.statePath())
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("reading state: %w", err)
	default:
		if err := json.Unmarshal(data, &d.vols); err != nil {
			return nil, fmt.Errorf("parsing state %s: %w", d.statePath(), err)
		}
	}
	if cfg.callsFile != "" {
		f, err := os.OpenFile(cfg.callsFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("opening the calls file: %w", err)
		}
		d.callsFile = f
	}
	return d, nil
}

func (d *driver) close() {
	if d.callsFile != nil {
		_ = d.callsFile.Close()
	}
}

func (d *driver) volumesDir() string   { return filepath.Join(d.cfg.dataDir, "volumes") }
func (d *driver) ephemeralDir() string { return filepath.Join(d.cfg.dataDir, "ephemeral") }
func (d *driver) statePath() string    { return filepath.Join(d.cfg.dataDir, "state.json") }

// saveLocked writes the volumes to state.json; callers hold mu.
func (d *driver) saveLocked() error {
	data, err := json.MarshalIndent(d.vols, "", "  ")
	if err != nil {
		return status.Errorf(codes.Internal, "encoding state: %v", err)
	}
	if err := atomicfile.WriteFile(d.statePath(), data, 0o644); err != nil {
		return status.Errorf(codes.Internal, "writing state: %v", err)
	}
	return nil
}

// logCall is the gRPC interceptor that logs every CSI call and appends it to the calls file.
func (d *driver) logCall(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	c := calls.Call{Time: time.Now().UTC(), Method: info.FullMethod[strings.LastIndex(info.FullMethod, "/")+1:]}
	if r, ok := req.(interface{ GetVolumeId() string }); ok {
		c.VolumeID = r.GetVolumeId()
	}
	if r, ok := req.(interface{ GetName() string }); ok {
		c.Name = r.GetName()
	}
	if r, ok := req.(interface{ GetNodeId() string }); ok {
		c.NodeID = r.GetNodeId()
	}
	if r, ok := req.(interface{ GetStagingTargetPath() string }); ok {
		c.StagingPath = r.GetStagingTargetPath()
	}
	if r, ok := req.(interface{ GetTargetPath() string }); ok {
		c.TargetPath = r.GetTargetPath()
	}
	if r, ok := req.(interface{ GetVolumePath() string }); ok {
		c.VolumePath = r.GetVolumePath()
	}
	if r, ok := req.(interface{ GetCapacityRange() *csi.CapacityRange }); ok {
		c.RequiredBytes = r.GetCapacityRange().GetRequiredBytes()
	}
	if r, ok := req.(interface{ GetReadonly() bool }); ok {
		c.ReadOnly = r.GetReadonly()
	}
	if r, ok := req.(interface{ GetVolumeContext() map[string]string }); ok {
		c.VolumeContext = r.GetVolumeContext()
	}
	if err != nil {
		c.Error = err.Error()
	}
	klog.InfoS("CSI call", "method", c.Method, "volumeID", c.VolumeID, "stagingPath", c.StagingPath, "targetPath", c.TargetPath, "err", err)
	if d.callsFile != nil {
		line, jerr := json.Marshal(c)
		if jerr == nil {
			d.mu.Lock()
			_, jerr = d.callsFile.Write(append(line, '\n'))
			d.mu.Unlock()
		}
		if jerr != nil {
			klog.ErrorS(jerr, "recording a CSI call")
		}
	}
	return resp, err
}

// ---------------------------------------------------------------- Identity

func (d *driver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: DriverName, VendorVersion: "test"}, nil
}

func (d *driver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{{
		Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_CONTROLLER_SERVICE}},
	}}}, nil
}

func (d *driver) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{}, nil
}

// ---------------------------------------------------------------- Controller

// volumeIDRE is what a volume name may be to serve as its id (and directory name) as is.
var volumeIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// volumeIDFor derives a volume's id from its name, the same for every retry of CreateVolume.
func volumeIDFor(name string) string {
	if volumeIDRE.MatchString(name) {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return "h-" + hex.EncodeToString(sum[:16])
}

// checkCapabilities refuses what the driver cannot do: no access type, or
// mount and block together. block: the capabilities ask for a block volume.
func checkCapabilities(caps []*csi.VolumeCapability) (block bool, err error) {
	if len(caps) == 0 {
		return false, status.Error(codes.InvalidArgument, "volume_capabilities missing")
	}
	var mount bool
	for _, c := range caps {
		switch {
		case c.GetMount() != nil:
			mount = true
		case c.GetBlock() != nil:
			block = true
		default:
			return false, status.Error(codes.InvalidArgument, "volume capability without an access type")
		}
	}
	if mount && block {
		return false, status.Error(codes.InvalidArgument, "mount and block access types in one request")
	}
	return block, nil
}

// checkAccessType refuses a capability whose access type is not the volume's.
func checkAccessType(v *volume, c *csi.VolumeCapability) error {
	block, err := checkCapabilities([]*csi.VolumeCapability{c})
	if err != nil {
		return err
	}
	if block != v.Block {
		return status.Errorf(codes.InvalidArgument, "volume %s is a block volume: %v, but the capability asks block: %v", v.ID, v.Block, block)
	}
	return nil
}

func (d *driver) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name missing")
	}
	block, err := checkCapabilities(req.GetVolumeCapabilities())
	if err != nil {
		return nil, err
	}
	if req.GetVolumeContentSource() != nil {
		return nil, status.Error(codes.InvalidArgument, "volume content sources are not supported")
	}
	capacity := req.GetCapacityRange().GetRequiredBytes()
	if capacity == 0 {
		capacity = defaultCapacity
	}
	if limit := req.GetCapacityRange().GetLimitBytes(); limit > 0 && capacity > limit {
		return nil, status.Errorf(codes.OutOfRange, "required %d bytes exceeds the limit %d", capacity, limit)
	}
	id := volumeIDFor(req.GetName())
	d.mu.Lock()
	defer d.mu.Unlock()
	if v, ok := d.vols[id]; ok {
		if v.Name != req.GetName() || v.Block != block || v.CapacityBytes < req.GetCapacityRange().GetRequiredBytes() ||
			(req.GetCapacityRange().GetLimitBytes() > 0 && v.CapacityBytes > req.GetCapacityRange().GetLimitBytes()) {
			return nil, status.Errorf(codes.AlreadyExists, "volume %s exists with %d bytes, incompatible with the request", id, v.CapacityBytes)
		}
		return &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: id, CapacityBytes: v.CapacityBytes}}, nil
	}
	if block {
		if err := d.createBlockImage(id, capacity); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(filepath.Join(d.volumesDir(), id), 0o777); err != nil {
		return nil, status.Errorf(codes.Internal, "creating the volume's directory: %v", err)
	}
	d.vols[id] = &volume{ID: id, Name: req.GetName(), CapacityBytes: capacity, Block: block}
	if err := d.saveLocked(); err != nil {
		return nil, err
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: id, CapacityBytes: capacity}}, nil
}

func (d *driver) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id missing")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v, ok := d.vols[id]
	if !ok {
		return &csi.DeleteVolumeResponse{}, nil
	}
	if v.Block {
		if err := d.removeBlockImage(id); err != nil {
			return nil, err
		}
	} else if kept, err := mountutil.RemoveAll(filepath.Join(d.volumesDir(), id)); err != nil || len(kept) > 0 {
		return nil, status.Errorf(codes.Internal, "removing volume %s: %v (still mounted: %v)", id, err, kept)
	}
	delete(d.vols, id)
	if err := d.saveLocked(); err != nil {
		return nil, err
	}
	return &csi.DeleteVolumeResponse{}, nil
}

func (d *driver) ControllerPublishVolume(_ context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	if req.GetVolumeId() == "" || req.GetNodeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and node_id are required")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v, ok := d.vols[req.GetVolumeId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", req.GetVolumeId())
	}
	if err := checkAccessType(v, req.GetVolumeCapability()); err != nil {
		return nil, err
	}
	if !v.Nodes[req.GetNodeId()] {
		if v.Nodes == nil {
			v.Nodes = map[string]bool{}
		}
		v.Nodes[req.GetNodeId()] = true
		if err := d.saveLocked(); err != nil {
			return nil, err
		}
	}
	return &csi.ControllerPublishVolumeResponse{PublishContext: map[string]string{"attached": "yes"}}, nil
}

func (d *driver) ControllerUnpublishVolume(_ context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id missing")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v, ok := d.vols[req.GetVolumeId()]
	if !ok || len(v.Nodes) == 0 {
		return &csi.ControllerUnpublishVolumeResponse{}, nil
	}
	if req.GetNodeId() == "" {
		v.Nodes = nil // no node: unpublish from all
	} else {
		delete(v.Nodes, req.GetNodeId())
	}
	if err := d.saveLocked(); err != nil {
		return nil, err
	}
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}

func (d *driver) ValidateVolumeCapabilities(_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id missing")
	}
	d.mu.Lock()
	v, ok := d.vols[req.GetVolumeId()]
	d.mu.Unlock()
	if !ok {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", req.GetVolumeId())
	}
	if block, err := checkCapabilities(req.GetVolumeCapabilities()); err == nil && block != v.Block {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: fmt.Sprintf("volume %s is a block volume: %v", v.ID, v.Block)}, nil
	} else if err != nil {
		if status.Code(err) == codes.InvalidArgument && len(req.GetVolumeCapabilities()) > 0 {
			return &csi.ValidateVolumeCapabilitiesResponse{Message: status.Convert(err).Message()}, nil
		}
		return nil, err
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext: req.GetVolumeContext(), VolumeCapabilities: req.GetVolumeCapabilities(), Parameters: req.GetParameters(),
	}}, nil
}

func (d *driver) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	var caps []*csi.ControllerServiceCapability
	for _, t := range []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
	} {
		caps = append(caps, &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}}})
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

// ---------------------------------------------------------------- Node

func (d *driver) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: d.cfg.nodeID, MaxVolumesPerNode: d.cfg.maxVolumesPerNode}, nil
}

func (d *driver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	var caps []*csi.NodeServiceCapability
	for _, t := range []csi.NodeServiceCapability_RPC_Type{
		csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		csi.NodeServiceCapability_RPC_EXPAND_VOLUME,
	} {
		caps = append(caps, &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: t}}})
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

// bindMount bind-mounts src at dst (a directory it creates), read-only when asked; a dst
// already mounted is left as it is (the CSI calls are idempotent).
func bindMount(src, dst string, readOnly bool) error {
	if err := os.MkdirAll(dst, 0o750); err != nil {
		return status.Errorf(codes.Internal, "creating %s: %v", dst, err)
	}
	if mounted, err := mountutil.IsMountPoint(dst); err != nil {
		return status.Errorf(codes.Internal, "checking %s: %v", dst, err)
	} else if mounted {
		return nil
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return status.Errorf(codes.Internal, "bind-mounting %s at %s: %v", src, dst, err)
	}
	if readOnly {
		if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			_ = mountutil.Unmount(dst)
			return status.Errorf(codes.Internal, "remounting %s read-only: %v", dst, err)
		}
	}
	return nil
}

// unmountAndRemove unmounts path (if mounted) and removes the then empty directory.
func unmountAndRemove(path string) error {
	if _, err := mountutil.UnmountAndRemoveAll(path); err != nil {
		return status.Errorf(codes.Internal, "unmounting and removing %s: %v", path, err)
	}
	return nil
}

func (d *driver) NodeStageVolume(_ context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	if req.GetVolumeId() == "" || req.GetStagingTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and staging_target_path are required")
	}
	if _, err := checkCapabilities([]*csi.VolumeCapability{req.GetVolumeCapability()}); err != nil {
		return nil, err
	}
	// The attach is checked for real: the node agent must pass the VolumeAttachment's
	// attachment metadata, and the controller must have published the volume to this node.
	if req.GetPublishContext()["attached"] != "yes" {
		return nil, status.Errorf(codes.FailedPrecondition, "publish_context %v lacks attached=yes from ControllerPublishVolume", req.GetPublishContext())
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v, ok := d.vols[req.GetVolumeId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", req.GetVolumeId())
	}
	if !v.Nodes[d.cfg.nodeID] {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is not published to node %s", v.ID, d.cfg.nodeID)
	}
	if err := checkAccessType(v, req.GetVolumeCapability()); err != nil {
		return nil, err
	}
	if v.Block {
		return &csi.NodeStageVolumeResponse{}, d.stageBlock(v)
	}
	if err := bindMount(filepath.Join(d.volumesDir(), v.ID), req.GetStagingTargetPath(), false); err != nil {
		return nil, err
	}
	return &csi.NodeStageVolumeResponse{}, nil
}

func (d *driver) NodeUnstageVolume(_ context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	if req.GetVolumeId() == "" || req.GetStagingTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and staging_target_path are required")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if v, ok := d.vols[req.GetVolumeId()]; ok && v.Block {
		return &csi.NodeUnstageVolumeResponse{}, d.unstageBlock(v)
	}
	if err := unmountAndRemove(req.GetStagingTargetPath()); err != nil {
		return nil, err
	}
	return &csi.NodeUnstageVolumeResponse{}, nil
}

// ephemeralPath is an inline ephemeral volume's directory, or an error for a volume id that
// is not one path element.
func (d *driver) ephemeralPath(id string) (string, error) {
	if id == "" || id == "." || id == ".." || strings.ContainsRune(id, '/') {
		return "", status.Errorf(codes.InvalidArgument, "volume_id %q cannot name a directory", id)
	}
	return filepath.Join(d.ephemeralDir(), id), nil
}

func (d *driver) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	if req.GetVolumeId() == "" || req.GetTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and target_path are required")
	}
	block, err := checkCapabilities([]*csi.VolumeCapability{req.GetVolumeCapability()})
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if block {
		return &csi.NodePublishVolumeResponse{}, d.publishBlock(req)
	}
	var src string
	if req.GetVolumeContext()[ephemeralKey] == "true" {
		p, err := d.ephemeralPath(req.GetVolumeId())
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(p, 0o777); err != nil {
			return nil, status.Errorf(codes.Internal, "creating ephemeral volume %s: %v", p, err)
		}
		src = p
	} else {
		src = req.GetStagingTargetPath()
		if src == "" {
			return nil, status.Error(codes.FailedPrecondition, "staging_target_path missing: the driver stages its volumes")
		}
		if mounted, err := mountutil.IsMountPoint(src); err != nil || !mounted {
			return nil, status.Errorf(codes.FailedPrecondition, "volume %s is not staged at %s (%v)", req.GetVolumeId(), src, err)
		}
	}
	if err := bindMount(src, req.GetTargetPath(), req.GetReadonly()); err != nil {
		return nil, err
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

func (d *driver) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	if req.GetVolumeId() == "" || req.GetTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and target_path are required")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := unmountAndRemove(req.GetTargetPath()); err != nil {
		return nil, err
	}
	// An inline ephemeral volume lives as long as its one publication.
	if p, err := d.ephemeralPath(req.GetVolumeId()); err == nil {
		if _, err := os.Stat(p); err == nil {
			if kept, err := mountutil.RemoveAll(p); err != nil || len(kept) > 0 {
				return nil, status.Errorf(codes.Internal, "removing ephemeral volume %s: %v (still mounted: %v)", p, err, kept)
			}
		}
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

func (d *driver) NodeGetVolumeStats(_ context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	if req.GetVolumeId() == "" || req.GetVolumePath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and volume_path are required")
	}
	var st unix.Statfs_t
	if err := unix.Statfs(req.GetVolumePath(), &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, status.Errorf(codes.NotFound, "volume path %s: %v", req.GetVolumePath(), err)
		}
		return nil, status.Errorf(codes.Internal, "statfs %s: %v", req.GetVolumePath(), err)
	}
	bs := int64(st.Bsize)
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
		{Unit: csi.VolumeUsage_BYTES, Total: int64(st.Blocks) * bs, Available: int64(st.Bavail) * bs, Used: int64(st.Blocks-st.Bfree) * bs},
		{Unit: csi.VolumeUsage_INODES, Total: int64(st.Files), Available: int64(st.Ffree), Used: int64(st.Files - st.Ffree)},
	}}, nil
}

// NodeExpandVolume grows a provisioned volume to required_bytes: a directory has nothing
// to grow, so only its recorded size changes (never shrinks); the calls file keeps the
// size asked for.
func (d *driver) NodeExpandVolume(_ context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	if req.GetVolumeId() == "" || req.GetVolumePath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and volume_path are required")
	}
	required := req.GetCapacityRange().GetRequiredBytes()
	if limit := req.GetCapacityRange().GetLimitBytes(); limit > 0 && required > limit {
		return nil, status.Errorf(codes.OutOfRange, "required %d bytes exceeds the limit %d", required, limit)
	}
	if _, err := os.Stat(req.GetVolumePath()); err != nil {
		return nil, status.Errorf(codes.NotFound, "volume path %s: %v", req.GetVolumePath(), err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v, ok := d.vols[req.GetVolumeId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", req.GetVolumeId())
	}
	if required > v.CapacityBytes {
		v.CapacityBytes = required
		if err := d.saveLocked(); err != nil {
			return nil, err
		}
	}
	return &csi.NodeExpandVolumeResponse{CapacityBytes: v.CapacityBytes}, nil
}
