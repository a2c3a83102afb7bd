package agent

import (
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nodelet/nodelet/cgroups"
)

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

// kubernetes_build_info carries the version the Node reports, with upstream's
// labels, so dashboards that join on it see a v1.37.2 node.
func TestRegisterBuildInfo(t *testing.T) {
	reg := prometheus.NewRegistry()
	registerBuildInfo(reg)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(families) != 1 || families[0].GetName() != "kubernetes_build_info" || len(families[0].GetMetric()) != 1 {
		t.Fatalf("gathered %v", families)
	}
	m := families[0].GetMetric()[0]
	labels := map[string]string{}
	var names []string
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
		names = append(names, l.GetName())
	}
	if got, want := strings.Join(names, ","), "build_date,compiler,git_commit,git_tree_state,git_version,go_version,major,minor,platform"; got != want {
		t.Errorf("labels %s, want upstream's %s", got, want)
	}
	if labels["git_version"] != "v1.37.2+nodelet" || labels["major"] != "1" || labels["minor"] != "37" || labels["go_version"] != runtime.Version() {
		t.Errorf("labels %v", labels)
	}
	if m.GetGauge().GetValue() != 1 {
		t.Errorf("value %v, want 1", m.GetGauge().GetValue())
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
