package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/cgroups"
	"github.com/nodelet/nodelet/internal/testsupport/eventually"
)

func burstablePod(uid, cpu string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: uid, Namespace: "ns", UID: types.UID(uid)},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu)},
		}}}},
	}
}

func TestQOSCgroupsFollowBurstableRequests(t *testing.T) {
	root := t.TempDir()
	for _, h := range []string{"cpu", "memory", "pids"} {
		if err := os.MkdirAll(filepath.Join(root, h), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mgr, err := cgroups.NewManager(cgroups.ManagerOptions{Root: root, Mode: cgroups.ModeV1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := mgr.EnsureQOSCgroups(ctx, v1.ResourceList{}, v1.ResourceList{}); err != nil {
		t.Fatal(err)
	}
	shares := func(qos string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(root, "cpu", "kubepods", qos, "cpu.shares"))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}

	var mu sync.Mutex
	var active []*v1.Pod
	q := &qosCgroups{mgr: mgr, activePods: func() []*v1.Pod {
		mu.Lock()
		defer mu.Unlock()
		return append([]*v1.Pod(nil), active...)
	}}

	// A first Burstable pod: its share is set before its cgroup exists, even though
	// it is not counted as active yet.
	a := burstablePod("a", "500m")
	if err := q.EnsurePodCgroup(ctx, a); err != nil {
		t.Fatal(err)
	}
	if got := shares("burstable"); got != "512" {
		t.Errorf("burstable cpu.shares after pod a = %s, want 512", got)
	}
	if got := shares("besteffort"); got != "2" {
		t.Errorf("besteffort cpu.shares = %s, want 2", got)
	}

	// The periodic update follows the active pods: a second pod joins, then a leaves.
	clk := clocktesting.NewFakeClock(time.Now())
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); q.run(ctx, clk) }()
	defer func() { cancel(); <-done }()

	tick := func(want string) {
		t.Helper()
		eventually.True(t, "the QoS update timer", clk.HasWaiters)
		clk.Step(qosUpdateInterval)
		eventually.True(t, "burstable cpu.shares "+want, func() bool { return shares("burstable") == want })
	}
	mu.Lock()
	active = []*v1.Pod{a, burstablePod("b", "250m")}
	mu.Unlock()
	tick("768")
	mu.Lock()
	active = active[1:]
	mu.Unlock()
	tick("256")
	mu.Lock()
	active = nil
	mu.Unlock()
	tick("2") // no Burstable pod: the minimum
}
