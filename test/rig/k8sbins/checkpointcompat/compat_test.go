// Package checkpointcompat checks that the state files nodelet and kubelet
// v1.37.2 share under the root dir are interchangeable, with upstream's own
// checkpoint code (the packages the kubelet reads and writes them with):
//
//   - with -update, it writes golden files with upstream's code into
//     nodelet's <pkg>/testdata/upstream/, which nodelet's unit tests decode
//     and re-encode byte for byte. The issue asked for files "written by the
//     real kubelet on the rig": the kubelet writes these files with exactly
//     this code and these calls, so the bytes are the same; the swap e2e
//     test covers the real kubelet.
//   - always, it reads the files nodelet's unit tests wrote
//     (<pkg>/testdata/nodelet/) the way the kubelet does at start-up, and
//     requires them accepted with the values nodelet's tests encoded.
//
// The values below are the ones in nodelet's compat_test.go files; change
// both together.
//
// Run: cd test/rig/k8sbins && GOFLAGS=-buildvcs=false go test ./checkpointcompat/
package checkpointcompat

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	"k8s.io/utils/cpuset"

	allocstate "k8s.io/kubernetes/pkg/kubelet/allocation/state"
	"k8s.io/kubernetes/pkg/kubelet/checkpointmanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	cpustate "k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/state"
	devcheckpoint "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/checkpoint"
	drastate "k8s.io/kubernetes/pkg/kubelet/cm/dra/state"
	memstate "k8s.io/kubernetes/pkg/kubelet/cm/memorymanager/state"
)

var update = flag.Bool("update", false, "write the golden files of upstream's code into nodelet's testdata/upstream")

// repo is nodelet's root, from test/rig/k8sbins/checkpointcompat.
const repo = "../../../.."

// The files' names, as the kubelet's managers name them.
const (
	cpuFile   = "cpu_manager_state"
	memFile   = "memory_manager_state"
	devFile   = "kubelet_internal_checkpoint"
	draFile   = "dra_manager_state"
	allocFile = "allocated_pods_state"
)

// fromUpstream copies the file upstream's code wrote in dir to nodelet's
// <pkg>/testdata/upstream/<golden> under -update.
func fromUpstream(t *testing.T, dir, name, pkg, golden string) {
	t.Helper()
	if !*update {
		return
	}
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(repo, pkg, "testdata", "upstream", golden)
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// nodeletFile copies nodelet's <pkg>/testdata/nodelet/<golden> into a fresh
// dir as name and returns the dir.
func nodeletFile(t *testing.T, pkg, golden, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, pkg, "testdata", "nodelet", golden))
	if err != nil {
		t.Fatalf("%v (run nodelet's %s tests with -update first)", err, pkg)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

type cpuCase struct {
	golden, policy string
	def            cpuset.CPUSet
	assignments    cpustate.ContainerCPUAssignments
}

var cpuCases = []cpuCase{
	{golden: "cpu_manager_state.none", policy: "none", def: cpuset.New(), assignments: cpustate.ContainerCPUAssignments{}},
	{golden: "cpu_manager_state.static", policy: "static", def: cpuset.New(0, 3, 4, 5, 6, 7), assignments: cpustate.ContainerCPUAssignments{
		"pod-a": {"app": cpuset.New(1, 2)},
		"pod-b": {"init": cpuset.New(8), "main": cpuset.New(9, 10)},
	}},
}

func TestCPUManagerState(t *testing.T) {
	logger := klog.Background()
	for _, tc := range cpuCases {
		t.Run(tc.golden, func(t *testing.T) {
			dir := t.TempDir()
			s, err := cpustate.NewCheckpointState(logger, dir, cpuFile, tc.policy, containermap.NewContainerMap())
			if err != nil {
				t.Fatal(err)
			}
			if !tc.def.IsEmpty() {
				s.SetDefaultCPUSet(tc.def)
			}
			for pod, cs := range tc.assignments {
				for name, set := range cs {
					s.SetCPUSet(pod, name, set)
				}
			}
			fromUpstream(t, dir, cpuFile, "resourcemanager/cpumanager", tc.golden)

			got, err := cpustate.NewCheckpointState(logger, nodeletFile(t, "resourcemanager/cpumanager", tc.golden, cpuFile), cpuFile, tc.policy, containermap.NewContainerMap())
			if err != nil {
				t.Fatalf("upstream refuses nodelet's file: %v", err)
			}
			if !got.GetDefaultCPUSet().Equals(tc.def) {
				t.Errorf("default CPU set %s, want %s", got.GetDefaultCPUSet(), tc.def)
			}
			if diff := cmp.Diff(tc.assignments, got.GetCPUAssignments(), cmp.Comparer(cpuset.CPUSet.Equals)); diff != "" {
				t.Errorf("assignments (-want +got):\n%s", diff)
			}
		})
	}
}

// writeCheckpoint writes cp with upstream's checkpoint manager into dir.
func writeCheckpoint(t *testing.T, dir, name string, cp checkpointmanager.Checkpoint) {
	t.Helper()
	cm, err := checkpointmanager.NewCheckpointManager(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := cm.CreateCheckpoint(name, cp); err != nil {
		t.Fatal(err)
	}
}

// The older formats kubelet v1.37.2 still reads (older kubelets wrote
// them), written by its own code: nodelet must read them too.
func TestCPUManagerOlderFormats(t *testing.T) {
	if !*update {
		t.Skip("writes goldens only (-update)")
	}
	entries := map[string]map[string]string{"pod-a": {"app": "1-2"}}
	dir := t.TempDir()
	writeCheckpoint(t, dir, cpuFile, &cpustate.CPUManagerCheckpointV2{PolicyName: "static", DefaultCPUSet: "0,3-7", Entries: entries})
	fromUpstream(t, dir, cpuFile, "resourcemanager/cpumanager", "cpu_manager_state.v2")
	writeCheckpoint(t, dir, cpuFile, &cpustate.CPUManagerCheckpointV3{PolicyName: "static", DefaultCPUSet: "0,3-7", Entries: entries,
		PodEntries: cpustate.PodCPUAssignments{"pod-c": {CPUSet: cpuset.New(11)}}})
	fromUpstream(t, dir, cpuFile, "resourcemanager/cpumanager", "cpu_manager_state.v3")
}

func TestMemoryManagerOlderFormats(t *testing.T) {
	if !*update {
		t.Skip("writes goldens only (-update)")
	}
	static := memCases()[1]
	dir := t.TempDir()
	writeCheckpoint(t, dir, memFile, &memstate.MemoryManagerCheckpointV1{PolicyName: "Static", MachineState: static.machine, Entries: static.entries})
	fromUpstream(t, dir, memFile, "resourcemanager/memorymanager", "memory_manager_state.v1")
	writeCheckpoint(t, dir, memFile, &memstate.MemoryManagerCheckpointV2{PolicyName: "Static", MachineState: static.machine, Entries: static.entries,
		PodEntries: memstate.PodMemoryAssignments{"pod-c": {MemoryBlocks: []memstate.Block{{NUMAAffinity: []int{1}, Type: v1.ResourceMemory, Size: 1 << 30}}}}})
	fromUpstream(t, dir, memFile, "resourcemanager/memorymanager", "memory_manager_state.v2")
}

type memCase struct {
	golden, policy string
	machine        memstate.NUMANodeMap
	entries        memstate.ContainerMemoryAssignments
}

func memCases() []memCase {
	const gi, mi = 1 << 30, 1 << 20
	table := func(total, reserved uint64) *memstate.MemoryTable {
		return &memstate.MemoryTable{TotalMemSize: total, SystemReserved: reserved, Allocatable: total - reserved, Reserved: 0, Free: total - reserved}
	}
	machine := memstate.NUMANodeMap{
		0: {NumberOfAssignments: 2, Cells: []int{0}, MemoryMap: map[v1.ResourceName]*memstate.MemoryTable{
			v1.ResourceMemory: {TotalMemSize: 8 * gi, SystemReserved: gi, Allocatable: 7 * gi, Reserved: gi, Free: 6 * gi},
			"hugepages-2Mi":   {TotalMemSize: 512 * mi, SystemReserved: 0, Allocatable: 512 * mi, Reserved: 4 * mi, Free: 508 * mi},
		}},
		1: {NumberOfAssignments: 0, Cells: []int{1}, MemoryMap: map[v1.ResourceName]*memstate.MemoryTable{
			v1.ResourceMemory: table(8*gi, 0),
			"hugepages-2Mi":   table(512*mi, 0),
		}},
	}
	entries := memstate.ContainerMemoryAssignments{"pod-a": {"app": {
		{NUMAAffinity: []int{0}, Type: v1.ResourceMemory, Size: gi},
		{NUMAAffinity: []int{0}, Type: "hugepages-2Mi", Size: 4 * mi},
	}}}
	return []memCase{
		{golden: "memory_manager_state.none", policy: "None", machine: memstate.NUMANodeMap{}, entries: memstate.ContainerMemoryAssignments{}},
		{golden: "memory_manager_state.static", policy: "Static", machine: machine, entries: entries},
	}
}

func TestMemoryManagerState(t *testing.T) {
	logger := klog.Background()
	for _, tc := range memCases() {
		t.Run(tc.golden, func(t *testing.T) {
			dir := t.TempDir()
			s, err := memstate.NewCheckpointState(logger, dir, memFile, tc.policy)
			if err != nil {
				t.Fatal(err)
			}
			if len(tc.machine) > 0 {
				s.SetMachineState(tc.machine)
			}
			for pod, cs := range tc.entries {
				for name, blocks := range cs {
					s.SetMemoryBlocks(pod, name, blocks)
				}
			}
			fromUpstream(t, dir, memFile, "resourcemanager/memorymanager", tc.golden)

			got, err := memstate.NewCheckpointState(logger, nodeletFile(t, "resourcemanager/memorymanager", tc.golden, memFile), memFile, tc.policy)
			if err != nil {
				t.Fatalf("upstream refuses nodelet's file: %v", err)
			}
			if diff := cmp.Diff(tc.machine, got.GetMachineState()); diff != "" {
				t.Errorf("machine state (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.entries, got.GetMemoryAssignments()); diff != "" {
				t.Errorf("assignments (-want +got):\n%s", diff)
			}
		})
	}
}

// devAllocResp is a ContainerAllocateResponse with Envs {"DEV": "0"} in
// protobuf (what the device manager stores; its content does not matter here).
var devAllocResp = []byte("\n\b\n\x03DEV\x12\x010")

func devEntries() ([]devcheckpoint.PodDevicesEntry, map[string][]string) {
	return []devcheckpoint.PodDevicesEntry{
			{PodUID: "pod-a", ContainerName: "app", ResourceName: "example.com/dev", DeviceIDs: devcheckpoint.DevicesPerNUMA{-1: {"dev-2"}, 0: {"dev-0"}}, AllocResp: devAllocResp},
			{PodUID: "pod-b", ContainerName: "main", ResourceName: "example.com/dev", DeviceIDs: devcheckpoint.DevicesPerNUMA{1: {"dev-1"}}, AllocResp: devAllocResp},
		}, map[string][]string{
			"example.com/dev":   {"dev-0", "dev-1", "dev-2"},
			"example.com/other": {},
		}
}

func TestDeviceManagerCheckpoint(t *testing.T) {
	entries, registered := devEntries()
	dir := t.TempDir()
	cm, err := checkpointmanager.NewCheckpointManager(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := cm.CreateCheckpoint(devFile, devcheckpoint.New(entries, registered)); err != nil {
		t.Fatal(err)
	}
	fromUpstream(t, dir, devFile, "resourcemanager/devicemanager", devFile)

	// As the device manager's getCheckpoint reads it at start-up.
	cm, err = checkpointmanager.NewCheckpointManager(nodeletFile(t, "resourcemanager/devicemanager", devFile, devFile))
	if err != nil {
		t.Fatal(err)
	}
	cp := devcheckpoint.New(make([]devcheckpoint.PodDevicesEntry, 0), make(map[string][]string))
	if err := cm.GetCheckpoint(devFile, cp); err != nil {
		t.Fatalf("upstream refuses nodelet's file: %v", err)
	}
	gotEntries, gotRegistered := cp.GetData()
	if diff := cmp.Diff(entries, gotEntries); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(registered, gotRegistered); diff != "" {
		t.Errorf("registered devices (-want +got):\n%s", diff)
	}
}

func draClaims() drastate.ClaimInfoStateList {
	share := types.UID("share-1")
	return drastate.ClaimInfoStateList{
		{ClaimUID: "claim-uid-1", ClaimName: "gpu-claim", Namespace: "default", PodUIDs: sets.New("pod-a", "pod-b"),
			DriverState: map[string]drastate.DriverState{"gpu.example.com": {Devices: []drastate.Device{
				{PoolName: "node-1", DeviceName: "gpu-0", RequestNames: []string{"gpu"}, CDIDeviceIDs: []string{"example.com/gpu=gpu-0"}},
				{PoolName: "node-1", DeviceName: "gpu-1", ShareID: &share, RequestNames: []string{"gpu"}, CDIDeviceIDs: []string{"example.com/gpu=gpu-1"}},
			}}}},
		{ClaimUID: "claim-uid-2", ClaimName: "nic", Namespace: "team", PodUIDs: sets.New("pod-c"),
			DriverState: map[string]drastate.DriverState{"nic.example.com": {
				Devices:            []drastate.Device{{PoolName: "pool", DeviceName: "nic-0", RequestNames: []string{"nic"}}},
				SkipNodeOperations: []resourceapi.SkipNodeOperation{resourceapi.SkipNodeOperationNodePrepareResources},
			}}},
	}
}

func TestDRAManagerState(t *testing.T) {
	claims := draClaims()
	dir := t.TempDir()
	c, err := drastate.NewCheckpointer(dir, draFile)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := drastate.NewCheckpoint(claims)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Store(cp); err != nil {
		t.Fatal(err)
	}
	fromUpstream(t, dir, draFile, "resourcemanager/dra", draFile)

	// As the DRA manager's claim info cache reads it at start-up.
	c, err = drastate.NewCheckpointer(nodeletFile(t, "resourcemanager/dra", draFile, draFile), draFile)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.GetOrCreate()
	if err != nil {
		t.Fatalf("upstream refuses nodelet's file: %v", err)
	}
	list, err := got.GetClaimInfoStateList()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(claims, list); diff != "" {
		t.Errorf("claims (-want +got):\n%s", diff)
	}
}

func allocPods() allocstate.PodResourceInfoMap {
	q := resource.MustParse
	limit := q("64Mi")
	return allocstate.PodResourceInfoMap{
		"pod-a": {ContainerResources: map[string]v1.ResourceRequirements{
			"app": {Requests: v1.ResourceList{v1.ResourceCPU: q("500m"), v1.ResourceMemory: q("128Mi")}, Limits: v1.ResourceList{v1.ResourceCPU: q("1"), v1.ResourceMemory: q("256Mi")}},
		}},
		"pod-b": {
			ContainerResources: map[string]v1.ResourceRequirements{
				"main":    {Requests: v1.ResourceList{v1.ResourceCPU: q("250m")}},
				"sidecar": {},
			},
			PodLevelResources:    &v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceCPU: q("2"), v1.ResourceMemory: q("1Gi")}},
			EmptyDirVolumeLimits: map[string]*resource.Quantity{"scratch": &limit},
		},
	}
}

func TestAllocationState(t *testing.T) {
	logger := klog.Background()
	pods := allocPods()
	dir := t.TempDir()
	s, err := allocstate.NewStateCheckpoint(logger, dir, allocFile)
	if err != nil {
		t.Fatal(err)
	}
	for uid, info := range pods {
		if err := s.SetPodResourceInfo(logger, uid, info); err != nil {
			t.Fatal(err)
		}
	}
	fromUpstream(t, dir, allocFile, "allocation", allocFile)

	got, err := allocstate.NewStateCheckpoint(logger, nodeletFile(t, "allocation", allocFile, allocFile), allocFile)
	if err != nil {
		t.Fatalf("upstream refuses nodelet's file: %v", err)
	}
	if diff := cmp.Diff(pods, got.GetPodResourceInfoMap(), cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
		t.Errorf("pods (-want +got):\n%s", diff)
	}
}
