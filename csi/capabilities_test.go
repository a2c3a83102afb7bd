package csi

import (
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
)

func TestNodeCapabilitiesOf(t *testing.T) {
	rpc := func(t csipb.NodeServiceCapability_RPC_Type) *csipb.NodeServiceCapability {
		return &csipb.NodeServiceCapability{Type: &csipb.NodeServiceCapability_Rpc{Rpc: &csipb.NodeServiceCapability_RPC{Type: t}}}
	}
	got := NodeCapabilitiesOf(&csipb.NodeGetCapabilitiesResponse{Capabilities: []*csipb.NodeServiceCapability{
		rpc(csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME), rpc(csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS),
		rpc(csipb.NodeServiceCapability_RPC_EXPAND_VOLUME), rpc(csipb.NodeServiceCapability_RPC_UNKNOWN),
	}})
	want := NodeCapabilities{StageUnstage: true, GetVolumeStats: true, ExpandVolume: true}
	if got != want {
		t.Errorf("NodeCapabilitiesOf = %+v, want %+v", got, want)
	}
	if NodeCapabilitiesOf(nil) != (NodeCapabilities{}) {
		t.Error("a nil answer has capabilities")
	}
}
