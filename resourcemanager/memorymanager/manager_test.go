package memorymanager

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	testclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/resourcemanager/topologymanager"
)

func staticManager(t *testing.T, root string) *Manager {
	t.Helper()
	m, err := New(Config{Policy: PolicyStatic, Static: twoNodes(t), RootDir: root}, testclock.NewFakeClock(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// The memory manager as the topology manager's provider under
// single-numa-node: a container on one node, its cpuset.mems that node, the
// blocks restored after a restart; a pod no node can hold is refused and
// keeps nothing.
func TestManagerUnderTopologyManager(t *testing.T) {
	root := t.TempDir()
	m := staticManager(t, root)
	tm, err := topologymanager.New(topologymanager.Config{Policy: topologymanager.PolicySingleNUMANode, Scope: topologymanager.ScopeContainer,
		Options: topologymanager.Options{MaxAllowableNUMANodes: 8}, NUMA: topologymanager.NUMAInfo{Nodes: []int{0, 1}}}, m)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// 4Gi needs both nodes: a cross-node block single-numa-node refuses.
	if err := tm.Admit(ctx, guaranteed("wide", "4Gi")); !errors.As(err, new(topologymanager.AffinityError)) {
		t.Fatalf("got %v, want a TopologyAffinityError", err)
	}
	big := guaranteed("big", "3Gi")
	if err := tm.Admit(ctx, big); err != nil {
		t.Fatal(err)
	}
	if got := m.MemsFor("big", "app"); got != "1" {
		t.Errorf("cpuset.mems %q, want node 1 (the only one with 3Gi)", got)
	}
	if got := m.MemsFor("big", "other"); got != "" {
		t.Errorf("a container without blocks gets mems %q", got)
	}
	// a fits node 0; b then fits no node and, as upstream, gives no hint
	// at all, so the merge admits it and the allocation refuses it.
	two := podOf("two", nil, ctr("a", "1", "2Gi"), ctr("b", "1", "2Gi"))
	if err := tm.Admit(ctx, two); err == nil || !strings.Contains(err.Error(), "no NUMA nodes with enough memory") {
		t.Fatalf("got %v, want the allocation's refusal", err)
	}

	if got := m.Allocated("two"); len(got) != 0 {
		t.Errorf("a refused pod kept %v", got)
	}

	again := staticManager(t, root)
	if got := again.MemsFor("big", "app"); got != "1" {
		t.Errorf("after a restart cpuset.mems %q, want 1", got)
	}
	again.FreeInactive(ctx, "new", []*v1.Pod{})
	if got := again.MemsFor("big", "app"); got != "" {
		t.Errorf("an inactive pod kept its memory on %q", got)
	}
	if !reflect.DeepEqual(again.state.Machine, twoNodes(t).InitialState().Machine) {
		t.Error("memory not given back")
	}
}

func TestManagerCheckpointRefusals(t *testing.T) {
	root := t.TempDir()
	staticManager(t, root)
	clk := testclock.NewFakeClock(time.Now())
	if _, err := New(Config{Policy: PolicyNone, RootDir: root}, clk); err == nil || !strings.Contains(err.Error(), `configured policy "None" differs from state checkpoint policy "Static"`) {
		t.Errorf("policy switch: got %v", err)
	}
	path := filepath.Join(root, CheckpointFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// The data string is what v1.37 verifies (dataChecksum).
	tampered := strings.Replace(string(b), `\"free\":`, `\"free\":1`, 1)
	if tampered == string(b) {
		t.Fatalf("no free memory in the data of %s", b)
	}
	if err := os.WriteFile(path, []byte(tampered), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Policy: PolicyStatic, Static: twoNodes(t), RootDir: root}, clk); err == nil || !strings.Contains(err.Error(), "corrupted") {
		t.Errorf("tampered checkpoint: got %v", err)
	}
	// Under None a corrupt checkpoint holds nothing: set aside, and the node starts.
	if err := os.WriteFile(path, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Policy: PolicyNone, RootDir: root}, clk); err != nil {
		t.Errorf("policy None with a corrupt checkpoint: %v", err)
	}
}

func TestDiscoverMachine(t *testing.T) {
	root := t.TempDir()
	write := func(rel, content string) {
		p := filepath.Join(root, "sys/devices/system/node", rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("node0/meminfo", "Node 0 MemTotal:        4194304 kB\nNode 0 MemFree:  1 kB\n")
	write("node0/hugepages/hugepages-2048kB/nr_hugepages", "512\n")
	write("node0/hugepages/hugepages-1048576kB/nr_hugepages", "0\n")
	write("node1/meminfo", "Node 1 MemTotal:        2097152 kB\n")
	got, err := DiscoverMachine(root)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]NodeMemory{
		0: {v1.ResourceMemory: 4 * gi, hugepages2Mi: gi, "hugepages-1Gi": 0},
		1: {v1.ResourceMemory: 2 * gi},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("DiscoverMachine = %v, want %v", got, want)
	}
	if _, err := DiscoverMachine(t.TempDir()); err == nil {
		t.Error("a machine without NUMA nodes was read")
	}
}
