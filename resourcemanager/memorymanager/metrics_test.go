package memorymanager

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	testclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/resourcemetrics"
	"github.com/nodelet/nodelet/internal/testsupport/resourcetest"
	"github.com/nodelet/nodelet/resourcemanager/topologymanager"
)

// kubelet_memory_manager_pinning_* move as upstream's under the topology
// manager (single-numa-node) on two 4Gi nodes (512Mi reserved on node 0): a pod the merge
// refuses (TopologyAffinityError) never reaches the memory manager; each
// Guaranteed container allocated is a request, one that fits no node an
// error too; a BestEffort container is none.
func TestManagerMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics, err := resourcemetrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Policy: PolicyStatic, Static: twoNodes(t), RootDir: t.TempDir(), Metrics: metrics}, testclock.NewFakeClock(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	tm, err := topologymanager.New(topologymanager.Config{Policy: topologymanager.PolicySingleNUMANode, Scope: topologymanager.ScopeContainer,
		Options: topologymanager.Options{MaxAllowableNUMANodes: 8}, NUMA: topologymanager.NUMAInfo{Nodes: []int{0, 1}}, Metrics: metrics}, m)
	if err != nil {
		t.Fatal(err)
	}
	check := func(step string, requests, errs, admissions, admissionErrs float64) {
		t.Helper()
		got := resourcetest.MetricValues(t, reg)
		want := map[string]float64{
			"kubelet_memory_manager_pinning_requests_total":     requests,
			"kubelet_memory_manager_pinning_errors_total":       errs,
			"kubelet_topology_manager_admission_requests_total": admissions,
			"kubelet_topology_manager_admission_errors_total":   admissionErrs,
		}
		for k := range got {
			if _, ok := want[k]; !ok {
				delete(got, k)
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", step, diff)
		}
	}
	ctx := context.Background()
	_ = tm.Admit(ctx, guaranteed("wide", "4Gi"))
	check("a pod the merge refuses", 0, 0, 1, 1)
	if err := tm.Admit(ctx, guaranteed("big", "3Gi")); err != nil {
		t.Fatal(err)
	}
	check("a Guaranteed container placed", 1, 0, 2, 1)
	if err := tm.Admit(ctx, podOf("two", nil, ctr("a", "1", "2Gi"), ctr("b", "1", "2Gi"))); err == nil {
		t.Fatal("b fits no node but was admitted")
	}
	check("a placed, b refused by the allocation", 3, 1, 3, 2)
	if err := tm.Admit(ctx, podOf("be", nil, v1.Container{Name: "app"})); err != nil {
		t.Fatal(err)
	}
	check("a BestEffort container", 3, 1, 4, 2)
}
