package agent

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nodelet/nodelet/cgroups"
)

func TestCheckCgroupVersion(t *testing.T) {
	tests := []struct {
		mode    cgroups.Mode
		fail    bool
		wantErr bool
	}{
		{cgroups.ModeV2, true, false},
		{cgroups.ModeV2, false, false},
		{cgroups.ModeHybrid, true, true}, // hybrid counts as v1, as upstream
		{cgroups.ModeV1, true, true},
		{cgroups.ModeV1, false, false},
	}
	for _, tt := range tests {
		err := checkCgroupVersion(tt.mode, tt.fail)
		if (err != nil) != tt.wantErr {
			t.Errorf("checkCgroupVersion(%v, %v) = %v, want error %v", tt.mode, tt.fail, err, tt.wantErr)
		}
		if err != nil && (!strings.Contains(err.Error(), "failCgroupV1: false") || !strings.Contains(err.Error(), tt.mode.String())) {
			t.Errorf("error %q does not name the mode and how to allow it", err)
		}
	}
}

func TestRegisterNodeGauges(t *testing.T) {
	for mode, want := range map[cgroups.Mode]string{cgroups.ModeV2: "2", cgroups.ModeHybrid: "1", cgroups.ModeV1: "1"} {
		reg := prometheus.NewRegistry()
		registerNodeGauges(reg, "node-a", mode)
		exp := `
# HELP kubelet_cgroup_version cgroup version on the hosts.
# TYPE kubelet_cgroup_version gauge
kubelet_cgroup_version ` + want + `
# HELP kubelet_node_name The node's name. The count is always 1.
# TYPE kubelet_node_name gauge
kubelet_node_name{node="node-a"} 1
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(exp)); err != nil {
			t.Errorf("%v: %v", mode, err)
		}
	}
}
