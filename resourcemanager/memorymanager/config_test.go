package memorymanager

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	testclock "k8s.io/utils/clock/testing"
)

// sysRoot writes two NUMA nodes of 4Gi each.
func sysRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, n := range []string{"0", "1"} {
		dir := filepath.Join(root, "sys/devices/system/node/node"+n)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "meminfo"), []byte("Node "+n+" MemTotal: 4194304 kB\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestNewFromConfig: memoryManagerPolicy Static with reservedMemory adding up
// to kubeReserved + systemReserved + evictionHard memory places memory per
// NUMA node; a reservedMemory that does not add up, names an absent node or
// reserves nothing is refused naming the field, as upstream.
func TestNewFromConfig(t *testing.T) {
	q := resource.MustParse
	reservation := v1.ResourceList{v1.ResourceMemory: q("612Mi"), v1.ResourceCPU: q("1")}
	clk := testclock.NewFakeClock(time.Now())
	kc := &kubeletconfigv1beta1.KubeletConfiguration{MemoryManagerPolicy: "Static", ReservedMemory: []kubeletconfigv1beta1.MemoryReservation{
		{NumaNode: 0, Limits: v1.ResourceList{v1.ResourceMemory: q("512Mi")}},
		{NumaNode: 1, Limits: v1.ResourceList{v1.ResourceMemory: q("100Mi")}},
	}}
	root := t.TempDir()
	m, err := NewFromConfig(kc, reservation, root, sysRoot(t), clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.state.Machine[1].MemoryMap[v1.ResourceMemory].Allocatable; got != 4*gi-100*mi {
		t.Errorf("node 1 allocatable %d, want 4Gi-100Mi", got)
	}
	if _, err := os.Stat(filepath.Join(root, CheckpointFile)); err != nil {
		t.Errorf("no checkpoint: %v", err)
	}
	for name, reservations := range map[string][]kubeletconfigv1beta1.MemoryReservation{
		`reservedMemory: the total amount "512Mi" of type "memory" is not equal to the value "612Mi"`: kc.ReservedMemory[:1],
		"reservedMemory: the reserved memory configuration references a NUMA node 2":                  {{NumaNode: 2, Limits: v1.ResourceList{v1.ResourceMemory: q("612Mi")}}},
	} {
		bad := kc.DeepCopy()
		bad.ReservedMemory = reservations
		if _, err := NewFromConfig(bad, reservation, t.TempDir(), sysRoot(t), clk, nil); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("got %v, want %q", err, name)
		}
	}
	none := kc.DeepCopy()
	none.ReservedMemory = nil
	if _, err := NewFromConfig(none, v1.ResourceList{}, t.TempDir(), sysRoot(t), clk, nil); err == nil || !strings.Contains(err.Error(), "you should specify the system reserved memory") {
		t.Errorf("no reservation: got %v", err)
	}
	// Policy None: nothing placed, no cpuset.mems.
	m, err = NewFromConfig(&kubeletconfigv1beta1.KubeletConfiguration{MemoryManagerPolicy: "None"}, reservation, t.TempDir(), sysRoot(t), clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	pod := guaranteed("g", "1Gi")
	if hints := m.GetTopologyHints(pod, &pod.Spec.Containers[0]); hints != nil {
		t.Errorf("policy None gave hints %v", hints)
	}
	// And a Static checkpoint stops a start under None.
	if _, err := NewFromConfig(&kubeletconfigv1beta1.KubeletConfiguration{MemoryManagerPolicy: "None"}, reservation, root, sysRoot(t), clk, nil); err == nil {
		t.Error("a Static checkpoint was accepted under policy None")
	}
}
