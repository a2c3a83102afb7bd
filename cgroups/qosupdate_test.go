package cgroups

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// A new pod's cgroup is created after the QoS cgroups were updated with it counted, as the
// kubelet's syncPod does; an existing pod cgroup does not trigger an update.
func TestQOSUpdaterEnsurePodCgroup(t *testing.T) {
	root := fakeV2(t)
	m := newTestManager(t, root, []string{"pods"})
	ctx := context.Background()
	if err := m.EnsureQOSCgroups(ctx, capacity, allocatable); err != nil {
		t.Fatal(err)
	}
	u := &QOSUpdater{Manager: m}
	a := podWith("a", res("250m", "", "", ""))
	b := podWith("b", res("500m", "1Gi", "1", "2Gi"))
	u.SetActivePods(func() []*v1.Pod { return []*v1.Pod{a} })
	// b is not among the active pods yet: it counts anyway (250m + 500m = 768 shares).
	if err := u.EnsurePodCgroup(ctx, b); err != nil {
		t.Fatal(err)
	}
	checkFiles(t, root, fileWant{"kubepods/burstable/cpu.weight": "80"})
	if !m.PodCgroupExists(b) {
		t.Fatal("pod cgroup of b not created")
	}
	// The pod cgroup exists: no QoS update (which would now count nothing).
	u.SetActivePods(func() []*v1.Pod { return nil })
	if err := u.EnsurePodCgroup(ctx, b); err != nil {
		t.Fatal(err)
	}
	checkFiles(t, root, fileWant{"kubepods/burstable/cpu.weight": "80"})
}

// Without an active-pods source (before the pod loop exists) the new pod alone counts.
func TestQOSUpdaterWithoutActivePods(t *testing.T) {
	root := fakeV1(t)
	m := newTestManager(t, root, []string{"pods"})
	ctx := context.Background()
	if err := m.EnsureQOSCgroups(ctx, capacity, allocatable); err != nil {
		t.Fatal(err)
	}
	u := &QOSUpdater{Manager: m}
	if err := u.EnsurePodCgroup(ctx, podWith("b", res("500m", "1Gi", "1", "2Gi"))); err != nil {
		t.Fatal(err)
	}
	checkFiles(t, root, fileWant{"cpu/kubepods/burstable/cpu.shares": "512"})
}
