package csi

import csipb "github.com/container-storage-interface/spec/lib/go/csi"

// NodeCapabilities is what a node plugin's NodeGetCapabilities said, for
// the RPCs nodelet acts on.
type NodeCapabilities struct {
	StageUnstage          bool // STAGE_UNSTAGE_VOLUME: NodeStageVolume before publishing
	VolumeMountGroup      bool // VOLUME_MOUNT_GROUP: the driver applies fsGroup
	SingleNodeMultiWriter bool // SINGLE_NODE_MULTI_WRITER: the single-node access modes told apart
	ExpandVolume          bool // EXPAND_VOLUME: NodeExpandVolume
	GetVolumeStats        bool // GET_VOLUME_STATS: NodeGetVolumeStats
	VolumeCondition       bool // VOLUME_CONDITION: health in NodeGetVolumeStats
}

// NodeCapabilitiesOf reads a NodeGetCapabilities answer.
func NodeCapabilitiesOf(resp *csipb.NodeGetCapabilitiesResponse) NodeCapabilities {
	var c NodeCapabilities
	for _, cp := range resp.GetCapabilities() {
		switch cp.GetRpc().GetType() {
		case csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME:
			c.StageUnstage = true
		case csipb.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP:
			c.VolumeMountGroup = true
		case csipb.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER:
			c.SingleNodeMultiWriter = true
		case csipb.NodeServiceCapability_RPC_EXPAND_VOLUME:
			c.ExpandVolume = true
		case csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS:
			c.GetVolumeStats = true
		case csipb.NodeServiceCapability_RPC_VOLUME_CONDITION:
			c.VolumeCondition = true
		}
	}
	return c
}
