package topologymanager

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodelet/nodelet/internal/resourcemetrics"
	"github.com/nodelet/nodelet/internal/testsupport/resourcetest"
)

// The kubelet_topology_manager_admission_* counters and the NUMA alignment
// counters move as upstream's: every admission is a request (and a duration
// sample); a TopologyAffinityError, or under a policy other than none a
// provider's failure, is an error; only single-numa-node counts alignment,
// per container or once per pod by scope.
func TestAdmitMetrics(t *testing.T) {
	const (
		requests = "kubelet_topology_manager_admission_requests_total"
		errs     = "kubelet_topology_manager_admission_errors_total"
		duration = "kubelet_topology_manager_admission_duration_ms"
		aligned  = "kubelet_container_aligned_compute_resources_count"
		failed   = "kubelet_container_aligned_compute_resources_failure_count"
	)
	series := func(name, scope string) string {
		return name + `{boundary="numa_node",scope="` + scope + `"}`
	}
	// zero is what single-numa-node, restricted or best-effort start with.
	zero := map[string]float64{
		series(aligned, "container"): 0, series(aligned, "pod"): 0,
		series(failed, "container"): 0, series(failed, "pod"): 0,
	}
	with := func(m map[string]float64) map[string]float64 {
		out := map[string]float64{}
		for k, v := range zero {
			out[k] = v
		}
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	tests := []struct {
		name, policy, scope string
		free                map[int]int
		needs               map[string]int // of containers a and b
		want                map[string]float64
	}{
		{"single-numa-node container scope admits: each container aligned", PolicySingleNUMANode, ScopeContainer,
			map[int]int{0: 4, 1: 4}, map[string]int{"a": 3, "b": 3},
			with(map[string]float64{requests: 1, errs: 0, duration: 1, series(aligned, "container"): 2})},
		{"single-numa-node container scope refuses b: TopologyAffinityError", PolicySingleNUMANode, ScopeContainer,
			map[int]int{0: 4, 1: 0}, map[string]int{"a": 3, "b": 3},
			with(map[string]float64{requests: 1, errs: 1, duration: 1, series(aligned, "container"): 1, series(failed, "container"): 1})},
		{"single-numa-node pod scope admits: the pod aligned once", PolicySingleNUMANode, ScopePod,
			map[int]int{0: 4, 1: 8}, map[string]int{"a": 3, "b": 3},
			with(map[string]float64{requests: 1, errs: 0, duration: 1, series(aligned, "pod"): 1})},
		{"single-numa-node pod scope refuses", PolicySingleNUMANode, ScopePod,
			map[int]int{0: 4, 1: 4}, map[string]int{"a": 3, "b": 3},
			with(map[string]float64{requests: 1, errs: 1, duration: 1, series(failed, "pod"): 1})},
		{"restricted refuses: an error, no alignment counted", PolicyRestricted, ScopeContainer,
			map[int]int{0: 1, 1: 1}, map[string]int{"a": 3, "b": 3},
			with(map[string]float64{requests: 1, errs: 1, duration: 1})},
		{"best-effort admits: no alignment counted", PolicyBestEffort, ScopeContainer,
			map[int]int{0: 1, 1: 1}, map[string]int{"a": 3, "b": 3},
			with(map[string]float64{requests: 1, errs: 0, duration: 1})},
		{"none: a request, no alignment series", PolicyNone, ScopeContainer,
			map[int]int{0: 0, 1: 0}, map[string]int{"a": 3, "b": 3},
			map[string]float64{requests: 1, errs: 0, duration: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			metrics, err := resourcemetrics.New(reg)
			if err != nil {
				t.Fatal(err)
			}
			p := &fakeProvider{free: tt.free, needs: tt.needs}
			m, err := New(Config{Policy: tt.policy, Scope: tt.scope, Options: Options{MaxAllowableNUMANodes: DefaultMaxAllowableNUMANodes}, NUMA: twoNodes, Metrics: metrics}, p)
			if err != nil {
				t.Fatal(err)
			}
			_ = m.Admit(context.Background(), testPod("a", "b"))
			got := resourcetest.MetricValues(t, reg)
			for k := range got {
				if _, ok := tt.want[k]; !ok {
					delete(got, k) // the CPU and memory managers' families
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("metrics after one admission (-want +got):\n%s", diff)
			}
		})
	}
}

// A provider's allocation failure is an admission error under a policy
// that aligns, but not under none, as upstream's none scope.
func TestAdmitMetricsProviderFailure(t *testing.T) {
	for policy, wantErrs := range map[string]float64{PolicyNone: 0, PolicyBestEffort: 1} {
		reg := prometheus.NewRegistry()
		metrics, err := resourcemetrics.New(reg)
		if err != nil {
			t.Fatal(err)
		}
		p := &releasingProvider{holds: map[string]bool{}}
		m, err := New(Config{Policy: policy, Scope: ScopeContainer, Options: Options{MaxAllowableNUMANodes: DefaultMaxAllowableNUMANodes}, NUMA: twoNodes, Metrics: metrics}, p)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Admit(context.Background(), testPod("a", "bad")); err == nil {
			t.Fatal("admitted a pod the provider refused")
		}
		got := resourcetest.MetricValues(t, reg)
		if got["kubelet_topology_manager_admission_requests_total"] != 1 || got["kubelet_topology_manager_admission_errors_total"] != wantErrs {
			t.Errorf("policy %s: requests %v errors %v, want 1 and %v", policy,
				got["kubelet_topology_manager_admission_requests_total"], got["kubelet_topology_manager_admission_errors_total"], wantErrs)
		}
	}
}
