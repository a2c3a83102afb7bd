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

// TestMetricsRegistryHasGoAndProcessCollectors: /metrics serves the Go runtime's
// and the process's series as the kubelet's registry does (component-base registers
// both), which the fault suite's churn test reads to see goroutines, memory and fds
// come back after 1000 pods.
func TestMetricsRegistryHasGoAndProcessCollectors(t *testing.T) {
	reg := newMetricsRegistry("node-a", cgroups.ModeHybrid)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		if m := f.GetMetric(); len(m) == 1 {
			got[f.GetName()] = m[0].GetGauge().GetValue()
		}
	}
	// Non-zero values: the collectors read this process, not a stub.
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes", "process_open_fds", "process_start_time_seconds", "go_memstats_heap_alloc_bytes"} {
		if got[name] <= 0 {
			t.Errorf("%s = %v, want a value > 0 (served: %d families)", name, got[name], len(families))
		}
	}
	// The runtime/metrics series upstream serves with MetricsAll.
	if _, ok := got["go_sched_gomaxprocs_threads"]; !ok {
		t.Error("go_sched_gomaxprocs_threads missing: the Go collector lacks the runtime metrics upstream serves")
	}
	if got["kubelet_node_name"] != 1 {
		t.Errorf("kubelet_node_name = %v, want 1 (the node gauges are in the same registry)", got["kubelet_node_name"])
	}
}
