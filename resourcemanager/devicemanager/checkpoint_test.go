package devicemanager

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/checkpoint/checksum"
	"github.com/nodelet/nodelet/resourcemanager/topologymanager"
)

func TestDevicesPerNUMARoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		ids  []string
		numa map[string][]int
		want map[int64][]string
		// back is what reading gives, when not numa itself.
		back map[string][]int
	}{
		{name: "one node each", ids: []string{"a", "b"}, numa: map[string][]int{"a": {0}, "b": {1}},
			want: map[int64][]string{0: {"a"}, 1: {"b"}}},
		{name: "no topology", ids: []string{"a"}, numa: map[string][]int{"a": nil},
			want: map[int64][]string{-1: {"a"}}},
		{name: "a device on two nodes", ids: []string{"a", "b"}, numa: map[string][]int{"a": {0, 1}, "b": nil},
			want: map[int64][]string{-1: {"b"}, 0: {"a"}, 1: {"a"}}},
		{name: "unknown NUMA is written without topology", ids: []string{"a"}, numa: nil,
			want: map[int64][]string{-1: {"a"}}, back: map[string][]int{"a": nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := devicesPerNUMA(tc.ids, tc.numa)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("devicesPerNUMA (-want +got):\n%s", diff)
			}
			ids, numa := fromDevicesPerNUMA(got)
			back := tc.numa
			if tc.back != nil {
				back = tc.back
			}
			if diff := cmp.Diff(tc.ids, ids); diff != "" {
				t.Errorf("ids back (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(back, numa); diff != "" {
				t.Errorf("NUMA back (-want +got):\n%s", diff)
			}
		})
	}
}

// writeOldCheckpoint writes a checkpoint as nodelet wrote it before it kept
// NUMA nodes: DeviceIDs a plain list, and nodelet's former checksum (of the
// data's JSON text).
func writeOldCheckpoint(t *testing.T, dir string, resp *pluginapi.ContainerAllocateResponse) {
	t.Helper()
	blob, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	data := fmt.Sprintf(`{"PodDeviceEntries":[{"PodUID":"u1","ContainerName":"c","ResourceName":%q,"DeviceIDs":["b"],"AllocResp":%q}],"RegisteredDevices":{%q:["a","b"]}}`,
		fakeResource, base64.StdEncoding.EncodeToString(blob), fakeResource)
	file, err := json.Marshal(struct {
		Data     json.RawMessage
		Checksum checksum.Checksum
	}{json.RawMessage(data), checksum.New(data)})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, CheckpointName), file, 0o600); err != nil {
		t.Fatal(err)
	}
}

func topologyOf(cds []*podresourcesapi.ContainerDevices) string {
	var parts []string
	for _, cd := range cds {
		var nodes []string
		for _, n := range cd.GetTopology().GetNodes() {
			nodes = append(nodes, fmt.Sprint(n.GetID()))
		}
		parts = append(parts, fmt.Sprintf("%s@[%s]", strings.Join(cd.DeviceIds, ","), strings.Join(nodes, ",")))
	}
	return strings.Join(parts, " ")
}

// A checkpoint from before NUMA nodes were kept still loads: the assignment
// and its Allocate answer are there, the NUMA nodes unknown until the plugin
// reports them, and the next write stores them.
func TestOldCheckpointWithoutNUMALoads(t *testing.T) {
	dir := shortDir(t)
	writeOldCheckpoint(t, dir, &pluginapi.ContainerAllocateResponse{Envs: map[string]string{"DEV": "b"}})
	clk := clocktesting.NewFakeClock(time.Now())
	m, stop := startManagerOn(t, dir, clk, []int{0, 1})
	if got := topologyOf(m.ContainerDevices("u1", "c")); got != "b@[]" {
		t.Fatalf("ContainerDevices from the old checkpoint = %q, want b without topology", got)
	}
	pod := gpuPod("u1", 1)
	if got := m.GetTopologyHints(pod, &pod.Spec.Containers[0]); len(got) != 0 {
		t.Errorf("hints with the NUMA nodes unknown = %v, want none (no preference)", got)
	}
	p := newFakePlugin(t, dir, fakeResource, "fake.sock", devOn("a", 0), devOn("b", 1))
	p.serve()
	defer p.stop()
	if err := p.register(pluginapi.Version); err != nil {
		t.Fatal(err)
	}
	waitCounts(t, m, 2, 2)
	if got := topologyOf(m.ContainerDevices("u1", "c")); got != "b@[1]" {
		t.Errorf("ContainerDevices once the plugin reported = %q, want b@[1]", got)
	}
	stop()
	cp, err := readCheckpoint(filepath.Join(dir, CheckpointName))
	if err != nil {
		t.Fatal(err)
	}
	if len(cp.PodDeviceEntries) != 1 || !cmp.Equal(cp.PodDeviceEntries[0].NUMA, map[string][]int{"b": {1}}) {
		t.Errorf("checkpoint rewritten with %+v, want b on node 1", cp.PodDeviceEntries)
	}
}

// The devices' NUMA nodes survive a restart: the pod resources API and the
// topology hints of a re-admitted pod have them before the plugin is back,
// and the file has upstream's DevicesPerNUMA shape.
func TestCheckpointKeepsNUMAAcrossRestart(t *testing.T) {
	dir := shortDir(t)
	clk := clocktesting.NewFakeClock(time.Now())
	m, stop := startManagerOn(t, dir, clk, []int{0, 1})
	p := newFakePlugin(t, dir, fakeResource, "fake.sock", devOn("a", 0), devOn("b", 1), dev("c", true))
	p.serve()
	if err := p.register(pluginapi.Version); err != nil {
		t.Fatal(err)
	}
	waitCounts(t, m, 3, 3)
	ctx := context.Background()
	onNode1 := gpuPod("u1", 1)
	if err := m.Allocate(ctx, onNode1, &onNode1.Spec.Containers[0], topologymanager.Hint{Affinity: mask(t, 1), Preferred: true}); err != nil {
		t.Fatal(err)
	}
	two := gpuPod("u2", 2)
	if err := allocatePod(ctx, m, two, []*v1.Pod{onNode1}, true); err != nil {
		t.Fatal(err)
	}
	stop()
	p.stop()

	blob, err := os.ReadFile(filepath.Join(dir, CheckpointName))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(blob), `"DeviceIDs":{"1":["b"]}`) {
		t.Errorf("checkpoint does not have u1's device under NUMA node 1 (upstream's DevicesPerNUMA): %s", blob)
	}

	m2, _ := startManagerOn(t, dir, clk, []int{0, 1})
	if got := topologyOf(m2.ContainerDevices("u1", "c")); got != "b@[1]" {
		t.Errorf("u1's devices after restart = %q, want b@[1]", got)
	}
	if got := topologyOf(m2.ContainerDevices("u2", "c")); got != "a@[0] c@[]" {
		t.Errorf("u2's devices after restart = %q, want a@[0] c@[]", got)
	}
	if got := renderHints(m2.GetTopologyHints(onNode1, &onNode1.Spec.Containers[0])[fakeResource]); got != "{1}* {0,1}" {
		t.Errorf("re-admitted u1's hints before the plugin is back = %q, want {1}* {0,1}", got)
	}
}
