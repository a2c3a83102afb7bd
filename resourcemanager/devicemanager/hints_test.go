package devicemanager

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/resourcemanager/topologymanager"
)

func mask(t *testing.T, nodes ...int) topologymanager.BitMask {
	t.Helper()
	m, err := topologymanager.NewBitMask(nodes...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// renderHints writes hints as "{0}* {0,1}" (* preferred).
func renderHints(hs []topologymanager.Hint) string {
	parts := make([]string, 0, len(hs))
	for _, h := range hs {
		s := "{" + h.Affinity.String() + "}"
		if h.Preferred {
			s += "*"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

// Two devices per node of a 2 NUMA node machine, d4 without topology.
var fixtureNUMA = map[string][]int{"d0": {0}, "d1": {0}, "d2": {1}, "d3": {1}, "d4": nil}

func TestDeviceHints(t *testing.T) {
	all := []string{"d0", "d1", "d2", "d3"}
	tests := []struct {
		name                string
		available, reusable []string
		request             int
		want                string
	}{
		{"one device: either node", all, nil, 1, "{0}* {1}* {0,1}"},
		{"three devices need both nodes", all, nil, 3, "{0,1}*"},
		{"one free per node: both, not preferred (one node could hold two)", []string{"d0", "d2"}, nil, 2, "{0,1}"},
		{"a reusable device pins its node", []string{"d0", "d2", "d3"}, []string{"d1"}, 1, "{0}* {0,1}"},
		{"a reusable device without topology pins nothing", []string{"d2"}, []string{"d4"}, 1, "{1}* {0,1}"},
		// As upstream, such a device does not count towards the request either.
		{"nor counts", []string{"d2"}, []string{"d4"}, 2, ""},
		{"not enough anywhere", []string{"d0"}, nil, 2, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := renderHints(DeviceHints([]int{0, 1}, fixtureNUMA, tt.available, tt.reusable, tt.request))
			if got != tt.want {
				t.Errorf("hints %q, want %q", got, tt.want)
			}
		})
	}
}

func TestAlign(t *testing.T) {
	tests := []struct {
		name      string
		plan      Plan
		affinity  []int
		preferred []string
		want      []string
		wantPref  bool
	}{
		{"enough on the node: only its devices are offered", Plan{Available: []string{"d0", "d1", "d2", "d3"}, Size: 1}, []int{1}, []string{"d0"}, []string{"d2"}, true},
		{"plugin prefers among the aligned ones", Plan{Available: []string{"d0", "d1", "d2", "d3"}, Size: 1}, []int{1}, []string{"d3"}, []string{"d3"}, true},
		{"too few on the node: all of them first, then the plugin's", Plan{Available: []string{"d0", "d1", "d2", "d3"}, Size: 3}, []int{1}, []string{"d1"}, []string{"d2", "d3", "d1"}, true},
		{"exactly the node's: no choice left", Plan{Available: []string{"d0", "d1", "d2", "d3"}, Size: 2}, []int{1}, nil, []string{"d2", "d3"}, false},
		{"other nodes' devices before those without topology", Plan{Available: []string{"d0", "d2", "d4"}, Size: 2}, []int{1}, nil, []string{"d2", "d0"}, true},
		{"reused devices stay first", Plan{Chosen: []string{"d1"}, Available: []string{"d0", "d2", "d3"}, Size: 2}, []int{1}, nil, []string{"d1", "d2"}, true},
		{"no affinity: as before", Plan{Available: []string{"d0", "d1", "d2", "d3"}, Size: 1}, nil, nil, []string{"d0"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Align(tt.plan, mask(t, tt.affinity...), fixtureNUMA)
			if p.NeedsPreference() != tt.wantPref {
				t.Errorf("NeedsPreference = %v, want %v", p.NeedsPreference(), tt.wantPref)
			}
			if diff := cmp.Diff(tt.want, Complete(p, tt.preferred)); diff != "" {
				t.Errorf("devices (-want +got):\n%s", diff)
			}
		})
	}
}

func devOn(id string, node int64) *pluginapi.Device {
	d := dev(id, true)
	d.Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: node}}}
	return d
}

// The device manager as a hint provider: hints from the plugin's device
// topology, then an allocation along the chosen affinity; a plugin without
// topology gives no preference.
func TestManagerTopologyHintsAndAlignedAllocation(t *testing.T) {
	dir := shortDir(t)
	m, _ := startManagerOn(t, dir, clocktesting.NewFakeClock(time.Now()), []int{0, 1})
	p := newFakePlugin(t, dir, fakeResource, "fake.sock", devOn("a", 0), devOn("b", 1), devOn("c", 1))
	p.serve()
	defer p.stop()
	if err := p.register(pluginapi.Version); err != nil {
		t.Fatal(err)
	}
	waitCounts(t, m, 3, 3)

	pod := gpuPod("u1", 2)
	c := &pod.Spec.Containers[0]
	if got := renderHints(m.GetTopologyHints(pod, c)[fakeResource]); got != "{1}* {0,1}" {
		t.Errorf("container hints %q, want {1}* {0,1}", got)
	}
	if got := renderHints(m.GetPodTopologyHints(pod)[fakeResource]); got != "{1}* {0,1}" {
		t.Errorf("pod hints %q, want {1}* {0,1}", got)
	}
	one := gpuPod("u0", 1)
	ctx := context.Background()
	if err := m.Allocate(ctx, one, &one.Spec.Containers[0], topologymanager.Hint{Affinity: mask(t, 1), Preferred: true}); err != nil {
		t.Fatal(err)
	}
	if got := m.ContainerDevices(one.UID, "c"); len(got) != 1 || got[0].DeviceIds[0] != "b" || got[0].GetTopology().GetNodes()[0].GetID() != 1 {
		t.Errorf("node 1 affinity gave %v, want device b on node 1", got)
	}
	if got := m.AllocatableDevices(); len(got) != 3 || got[0].DeviceIds[0] != "a" || got[0].GetTopology().GetNodes()[0].GetID() != 0 {
		t.Errorf("allocatable devices %v, want a, b and c with their nodes", got)
	}
	// Node 1 has one device left: two no longer fit there; both nodes are
	// not preferred, as node 1 alone could hold two.
	if got := renderHints(m.GetTopologyHints(pod, c)[fakeResource]); got != "{0,1}" {
		t.Errorf("hints after b was taken %q, want {0,1}", got)
	}
	// Already holding devices: their own hints.
	if got := renderHints(m.GetTopologyHints(one, &one.Spec.Containers[0])[fakeResource]); got != "{1}* {0,1}" {
		t.Errorf("hints of a held device %q, want {1}* {0,1}", got)
	}
	// A resource the container does not ask for, or one without topology, has no preference.
	none := gpuPod("u2", 0)
	if got := m.GetTopologyHints(none, &none.Spec.Containers[0]); len(got) != 0 {
		t.Errorf("hints for no devices: %v", got)
	}
}

func TestByNUMA(t *testing.T) {
	render := func(cds []*podresourcesapi.ContainerDevices) []string {
		var out []string
		for _, cd := range cds {
			s := strings.Join(cd.DeviceIds, ",") + "@"
			for _, n := range cd.GetTopology().GetNodes() {
				s += strconv.FormatInt(n.ID, 10)
			}
			out = append(out, s)
		}
		return out
	}
	numa := map[string][]int{"d0": {0}, "d1": {0}, "d2": {1}, "both": {0, 1}}
	if diff := cmp.Diff([]string{"both,d0,d1@0", "both,d2@1", "x@"}, render(byNUMA("r", []string{"d2", "x", "d1", "d0", "both"}, numa, false))); diff != "" {
		t.Errorf("grouped (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"d0@0", "d1@0", "d2@1", "x@"}, render(byNUMA("r", []string{"d2", "x", "d1", "d0"}, numa, true))); diff != "" {
		t.Errorf("per device (-want +got):\n%s", diff)
	}
}
