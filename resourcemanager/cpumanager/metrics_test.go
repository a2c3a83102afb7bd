package cpumanager

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	testclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/resourcemetrics"
	"github.com/nodelet/nodelet/internal/testsupport/resourcetest"
)

// The CPU manager's families move as upstream's on the 2-NUMA, 8-core SMT
// fixture with full-pcpus-only and CPUs 0,8 reserved: a whole-core request
// is a pinning request aligned on physical CPUs and moves 2 CPUs from the
// shared pool to the exclusive count on its NUMA node; an odd request is a
// pinning error (SMTAlignmentError) and a physical_cpu alignment failure; a
// shared-pool container is no pinning request; releasing puts the CPUs back.
func TestManagerMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics, err := resourcemetrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewStaticPolicy(mustTopology(t, fixtureTwoNUMASMT(t)), mustParse(t, "0,8"), Options{FullPCPUsOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Policy: PolicyStatic, Static: p, RootDir: t.TempDir(), Metrics: metrics}, &fakeRuntime{}, nil, nil, testclock.NewFakeClock(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	const (
		requests  = "kubelet_cpu_manager_pinning_requests_total"
		errs      = "kubelet_cpu_manager_pinning_errors_total"
		shared    = "kubelet_cpu_manager_shared_pool_size_millicores"
		exclusive = "kubelet_cpu_manager_exclusive_cpu_allocation_count"
		numa0     = `kubelet_cpu_manager_allocation_per_numa{numa_node="0"}`
		numa1     = `kubelet_cpu_manager_allocation_per_numa{numa_node="1"}`
		aligned   = `kubelet_container_aligned_compute_resources_count{boundary="physical_cpu",scope="container"}`
		uncore    = `kubelet_container_aligned_compute_resources_count{boundary="uncore_cache",scope="container"}`
		failed    = `kubelet_container_aligned_compute_resources_failure_count{boundary="physical_cpu",scope="container"}`
	)
	check := func(step string, want map[string]float64) {
		t.Helper()
		got := resourcetest.MetricValues(t, reg)
		for k := range got {
			if !strings.HasPrefix(k, "kubelet_cpu_manager_") && !strings.HasPrefix(k, "kubelet_container_aligned_") {
				delete(got, k) // the topology and memory managers'
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", step, diff)
		}
	}
	check("at start", map[string]float64{requests: 0, errs: 0, shared: 14000, exclusive: 0, numa0: 0, numa1: 0, aligned: 0, uncore: 0, failed: 0})

	if err := admitPod(m, guaranteed("g", "app", "2")); err != nil {
		t.Fatal(err)
	}
	check("a 2-CPU Guaranteed container", map[string]float64{requests: 1, errs: 0, shared: 12000, exclusive: 2, numa0: 2, numa1: 0, aligned: 1, uncore: 0, failed: 0})

	var smt SMTAlignmentError
	if err := admitPod(m, guaranteed("odd", "app", "3")); !errors.As(err, &smt) {
		t.Fatalf("3 CPUs under full-pcpus-only: %v, want an SMTAlignmentError", err)
	}
	if err := admitPod(m, withUID(pod(nil, container("burst", "500m", "1")), "b")); err != nil {
		t.Fatal(err)
	}
	check("an odd request and a shared-pool container", map[string]float64{requests: 2, errs: 1, shared: 12000, exclusive: 2, numa0: 2, numa1: 0, aligned: 1, uncore: 0, failed: 1})

	m.RemovePod(context.Background(), "g")
	check("the pod removed", map[string]float64{requests: 2, errs: 1, shared: 14000, exclusive: 0, numa0: 0, numa1: 0, aligned: 1, uncore: 0, failed: 1})
}
