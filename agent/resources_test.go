package agent

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/config"
	"github.com/nodelet/nodelet/resourcemanager/cpumanager"
	"github.com/nodelet/nodelet/resourcemanager/topologymanager"
)

// numaRoot writes n NUMA nodes (node*/distance: 10 to itself, 20 to the
// others) under a temp root.
func numaRoot(t *testing.T, n int) string {
	t.Helper()
	root := t.TempDir()
	for i := 0; i < n; i++ {
		dist := make([]string, n)
		for j := range dist {
			dist[j] = "20"
			if i == j {
				dist[j] = "10"
			}
		}
		dir := filepath.Join(root, "sys/devices/system/node", "node"+strconv.Itoa(i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "distance"), []byte(strings.Join(dist, " ")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestTopologyManagerFromConfig: topologyManagerPolicy, topologyManagerScope
// and topologyManagerPolicyOptions reach the topology manager (distances
// read for prefer-closest-numa-nodes; more NUMA nodes than
// max-allowable-numa-nodes refused), and a pod the restricted policy cannot
// place is refused with upstream's TopologyAffinityError.
func TestTopologyManagerFromConfig(t *testing.T) {
	kc := &kubeletconfigv1beta1.KubeletConfiguration{
		TopologyManagerPolicy: "single-numa-node", TopologyManagerScope: "pod",
		TopologyManagerPolicyOptions: map[string]string{"prefer-closest-numa-nodes": "true"},
	}
	config.SetDefaults(kc)
	gates, err := config.FeatureGates(kc)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := topologyConfig(kc, gates, numaRoot(t, 2))
	if err != nil {
		t.Fatal(err)
	}
	want := topologymanager.Config{Policy: "single-numa-node", Scope: "pod",
		Options: topologymanager.Options{PreferClosestNUMA: true, MaxAllowableNUMANodes: 8},
		NUMA:    topologymanager.NUMAInfo{Nodes: []int{0, 1}, Distances: map[int][]uint64{0: {10, 20}, 1: {20, 10}}}}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("config %+v, want %+v", cfg, want)
	}

	kc.TopologyManagerPolicyOptions = nil
	cfg, err = topologyConfig(kc, gates, numaRoot(t, 9))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := topologymanager.New(cfg); err == nil || !strings.Contains(err.Error(), "unsupported on machines with more than 8 NUMA Nodes") {
		t.Errorf("9 NUMA nodes: got %v", err)
	}
	kc.TopologyManagerPolicyOptions = map[string]string{"max-allowable-numa-nodes": "9"}
	if cfg, err = topologyConfig(kc, gates, numaRoot(t, 9)); err != nil {
		t.Fatal(err)
	}
	if _, err := topologymanager.New(cfg); err != nil {
		t.Errorf("9 NUMA nodes with max-allowable-numa-nodes 9: %v", err)
	}
	kc.TopologyManagerPolicyOptions = map[string]string{"align-by-socket": "true"}
	if _, err := topologyConfig(kc, gates, numaRoot(t, 1)); err == nil || !strings.Contains(err.Error(), "topologyManagerPolicyOptions") {
		t.Errorf("an unknown option: got %v", err)
	}

	topo, err := cpumanager.DiscoverTopology("/")
	if err != nil || topo.NumCPUs < 2 {
		t.Skipf("admission needs a host with 2 CPUs or more (topology %v, %v)", topo, err)
	}
	cpuKC := &kubeletconfigv1beta1.KubeletConfiguration{CPUManagerPolicy: "static", ReservedSystemCPUs: "0"}
	config.SetDefaults(cpuKC)
	m, err := newCPUManager(cpuKC, t.TempDir(), noCPURuntime{}, func() []*v1.Pod { return nil }, clock.RealClock{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	admit := resourceAdmit(t, m, topologymanager.PolicyRestricted)
	rej := admit(guaranteedPod("all", strconv.Itoa(topo.NumCPUs)))
	if rej == nil || rej.Reason != "TopologyAffinityError" || rej.Message != "Resources cannot be allocated with Topology locality" {
		t.Errorf("rejection %+v, want TopologyAffinityError", rej)
	}
	if rej := admit(guaranteedPod("one", "1")); rej != nil {
		t.Errorf("a 1-CPU pod was refused: %+v", rej)
	}
}
