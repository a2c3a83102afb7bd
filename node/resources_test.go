package node

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/config"
)

const (
	gi = int64(1) << 30
	mi = int64(1) << 20
)

func testMachine() MachineInfo {
	return MachineInfo{
		NumCores:         4,
		MemoryCapacity:   uint64(8 * gi),
		SwapCapacity:     uint64(2 * gi),
		EphemeralStorage: uint64(100 * gi),
		HugePages:        []HugePage{{SizeKiB: 2048, NumPages: 512}, {SizeKiB: 1048576, NumPages: 0}},
		MachineID:        "machine-id",
		SystemUUID:       "system-uuid",
		BootID:           "boot-id",
		KernelVersion:    "6.18.0",
		OSImage:          "Debian GNU/Linux 12 (bookworm)",
	}
}

func q(s string) resource.Quantity { return resource.MustParse(s) }

// A percentage threshold resolves as upstream's: a float32 fraction (0.1 is a
// little above a tenth) times capacity.
const (
	tenPercentOf100Gi = 10737418400 // not 10737418240
	tenPercentOf8Gi   = 858993472   // not 858993459
)

func TestCapacityAndAllocatable(t *testing.T) {
	tests := []struct {
		name            string
		kc              kubeletconfigv1beta1.KubeletConfiguration
		machine         func(*MachineInfo)
		wantCapacity    map[v1.ResourceName]int64 // milli for cpu, plain value otherwise
		wantAllocatable map[v1.ResourceName]int64
	}{
		{
			name: "defaults: maxPods 110, default eviction (100Mi, nodefs 10%), huge pages held back from memory",
			kc:   kubeletconfigv1beta1.KubeletConfiguration{},
			wantCapacity: map[v1.ResourceName]int64{
				v1.ResourceCPU: 4000, v1.ResourceMemory: 8 * gi, v1.ResourceEphemeralStorage: 100 * gi, v1.ResourcePods: 110,
				"hugepages-2Mi": 1 * gi, "hugepages-1Gi": 0,
			},
			wantAllocatable: map[v1.ResourceName]int64{
				v1.ResourceCPU: 4000, v1.ResourceMemory: 8*gi - 100*mi - 1*gi, v1.ResourceEphemeralStorage: 100*gi - tenPercentOf100Gi, v1.ResourcePods: 110,
				"hugepages-2Mi": 1 * gi, "hugepages-1Gi": 0,
			},
		},
		{
			name: "reserved plus eviction quantities and percentages",
			kc: kubeletconfigv1beta1.KubeletConfiguration{
				MaxPods:        50,
				KubeReserved:   map[string]string{"cpu": "500m", "memory": "1Gi", "ephemeral-storage": "1Gi", "pid": "100"},
				SystemReserved: map[string]string{"cpu": "250m", "memory": "512Mi"},
				EvictionHard:   map[string]string{"memory.available": "10%", "nodefs.available": "5Gi", "imagefs.available": "15%"},
			},
			machine: func(m *MachineInfo) { m.HugePages = nil },
			wantCapacity: map[v1.ResourceName]int64{
				v1.ResourceCPU: 4000, v1.ResourceMemory: 8 * gi, v1.ResourceEphemeralStorage: 100 * gi, v1.ResourcePods: 50,
			},
			wantAllocatable: map[v1.ResourceName]int64{
				v1.ResourceCPU:              3250,
				v1.ResourceMemory:           8*gi - gi - 512*mi - tenPercentOf8Gi,
				v1.ResourceEphemeralStorage: 100*gi - gi - 5*gi,
				v1.ResourcePods:             50,
			},
		},
		{
			// node held back all of capacity for 100%; upstream (and eviction) disable the threshold.
			name:    "0% and 100% disable a threshold and reserve nothing",
			kc:      kubeletconfigv1beta1.KubeletConfiguration{MaxPods: 110, EvictionHard: map[string]string{"memory.available": "100%", "nodefs.available": "0%"}},
			machine: func(m *MachineInfo) { m.HugePages = nil },
			wantCapacity: map[v1.ResourceName]int64{
				v1.ResourceCPU: 4000, v1.ResourceMemory: 8 * gi, v1.ResourceEphemeralStorage: 100 * gi, v1.ResourcePods: 110,
			},
			wantAllocatable: map[v1.ResourceName]int64{
				v1.ResourceCPU: 4000, v1.ResourceMemory: 8 * gi, v1.ResourceEphemeralStorage: 100 * gi, v1.ResourcePods: 110,
			},
		},
		{
			name:    "podsPerCore caps pods; empty evictionHard map reserves nothing",
			kc:      kubeletconfigv1beta1.KubeletConfiguration{MaxPods: 110, PodsPerCore: 10, EvictionHard: map[string]string{}},
			machine: func(m *MachineInfo) { m.HugePages = nil },
			wantCapacity: map[v1.ResourceName]int64{
				v1.ResourceCPU: 4000, v1.ResourceMemory: 8 * gi, v1.ResourceEphemeralStorage: 100 * gi, v1.ResourcePods: 40,
			},
			wantAllocatable: map[v1.ResourceName]int64{
				v1.ResourceCPU: 4000, v1.ResourceMemory: 8 * gi, v1.ResourceEphemeralStorage: 100 * gi, v1.ResourcePods: 40,
			},
		},
		{
			name: "podsPerCore above maxPods keeps maxPods; reservations beyond capacity floor at zero",
			kc: kubeletconfigv1beta1.KubeletConfiguration{
				MaxPods: 20, PodsPerCore: 100,
				KubeReserved: map[string]string{"cpu": "8", "memory": "20Gi"},
			},
			machine: func(m *MachineInfo) { m.HugePages = nil },
			wantCapacity: map[v1.ResourceName]int64{
				v1.ResourceCPU: 4000, v1.ResourceMemory: 8 * gi, v1.ResourceEphemeralStorage: 100 * gi, v1.ResourcePods: 20,
			},
			wantAllocatable: map[v1.ResourceName]int64{
				v1.ResourceCPU: 0, v1.ResourceMemory: 0, v1.ResourceEphemeralStorage: 100*gi - tenPercentOf100Gi, v1.ResourcePods: 20,
			},
		},
		{
			name:    "reservedSystemCPUs replaces systemReserved cpu",
			kc:      kubeletconfigv1beta1.KubeletConfiguration{ReservedSystemCPUs: "0-1", SystemReserved: map[string]string{"cpu": "100m"}, EvictionHard: map[string]string{}},
			machine: func(m *MachineInfo) { m.HugePages = nil },
			wantCapacity: map[v1.ResourceName]int64{
				v1.ResourceCPU: 4000, v1.ResourceMemory: 8 * gi, v1.ResourceEphemeralStorage: 100 * gi, v1.ResourcePods: 110,
			},
			wantAllocatable: map[v1.ResourceName]int64{
				v1.ResourceCPU: 2000, v1.ResourceMemory: 8 * gi, v1.ResourceEphemeralStorage: 100 * gi, v1.ResourcePods: 110,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := testMachine()
			if tc.machine != nil {
				tc.machine(&m)
			}
			kc := tc.kc
			c, err := New(nil, nil, Config{NodeName: "n1", Settings: config.Resolve(&kc).Node}, nil, nil, clocktesting.NewFakeClock(testNow), WithMachineInfo(m))
			if err != nil {
				t.Fatal(err)
			}
			checkResources(t, "capacity", c.Capacity(), tc.wantCapacity)
			checkResources(t, "allocatable", c.Allocatable(), tc.wantAllocatable)
		})
	}
}

// The node allocatable reservation (what the memory manager's reservedMemory
// must add up to) is kubeReserved + systemReserved + the hard thresholds.
func TestReservation(t *testing.T) {
	kc := kubeletconfigv1beta1.KubeletConfiguration{
		KubeReserved:   map[string]string{"memory": "1Gi"},
		SystemReserved: map[string]string{"cpu": "250m", "memory": "512Mi"},
		EvictionHard:   map[string]string{"memory.available": "10%"},
	}
	m := testMachine()
	m.HugePages = nil
	c, err := New(nil, nil, Config{NodeName: "n1", Settings: config.Resolve(&kc).Node}, nil, nil, clocktesting.NewFakeClock(testNow), WithMachineInfo(m))
	if err != nil {
		t.Fatal(err)
	}
	checkResources(t, "reservation", c.Reservation(), map[v1.ResourceName]int64{
		v1.ResourceCPU: 250, v1.ResourceMemory: gi + 512*mi + tenPercentOf8Gi,
	})
}

func checkResources(t *testing.T, what string, got v1.ResourceList, want map[v1.ResourceName]int64) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s has %d resources %v, want %d", what, len(got), got, len(want))
	}
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			t.Errorf("%s lacks %s", what, name)
			continue
		}
		v := g.Value()
		if name == v1.ResourceCPU {
			v = g.MilliValue()
		}
		if v != w {
			t.Errorf("%s[%s] = %s (%d), want %d", what, name, g.String(), v, w)
		}
	}
}

func TestNewRejectsBadResourceConfig(t *testing.T) {
	tests := []struct {
		name string
		kc   kubeletconfigv1beta1.KubeletConfiguration
	}{
		{name: "bad kubeReserved", kc: kubeletconfigv1beta1.KubeletConfiguration{KubeReserved: map[string]string{"memory": "lots"}}},
		{name: "negative systemReserved", kc: kubeletconfigv1beta1.KubeletConfiguration{SystemReserved: map[string]string{"cpu": "-1"}}},
		{name: "percent over 100", kc: kubeletconfigv1beta1.KubeletConfiguration{EvictionHard: map[string]string{"memory.available": "150%"}}},
		{name: "bad eviction quantity", kc: kubeletconfigv1beta1.KubeletConfiguration{EvictionHard: map[string]string{"nodefs.available": "x"}}},
		// node trimmed spaces where config and upstream do not.
		{name: "eviction value with spaces", kc: kubeletconfigv1beta1.KubeletConfiguration{EvictionHard: map[string]string{"memory.available": " 100Mi"}}},
		{name: "bad reservedSystemCPUs", kc: kubeletconfigv1beta1.KubeletConfiguration{ReservedSystemCPUs: "2-1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kc := tc.kc
			if _, err := New(nil, nil, Config{NodeName: "n1", Settings: config.Resolve(&kc).Node}, nil, nil, nil, WithMachineInfo(testMachine())); err == nil {
				t.Fatal("New succeeded, want an error")
			}
		})
	}
	if _, err := New(nil, nil, Config{}, nil, nil, nil, WithMachineInfo(testMachine())); err == nil {
		t.Error("New with an empty node name succeeded")
	}
}

func TestHugePageResourceName(t *testing.T) {
	for kib, want := range map[uint64]v1.ResourceName{2048: "hugepages-2Mi", 1048576: "hugepages-1Gi", 64: "hugepages-64Ki"} {
		if got := hugePageResourceName(kib); got != want {
			t.Errorf("hugePageResourceName(%d) = %s, want %s", kib, got, want)
		}
	}
}

func TestReservedAllocatable(t *testing.T) {
	capacity := v1.ResourceList{v1.ResourceCPU: resource.MustParse("4"), v1.ResourceMemory: resource.MustParse("8Gi")}
	got, err := ReservedAllocatable(capacity, map[string]string{"cpu": "500m", "memory": "1Gi"}, map[string]string{"memory": "512Mi"})
	if err != nil {
		t.Fatal(err)
	}
	if cpu := got[v1.ResourceCPU]; cpu.MilliValue() != 3500 {
		t.Errorf("cpu = %s, want 3500m", cpu.String())
	}
	// No eviction threshold is taken off: only the two reservations.
	if mem := got[v1.ResourceMemory]; mem.Value() != (8<<30)-(1<<30)-(512<<20) {
		t.Errorf("memory = %s, want 8Gi-1Gi-512Mi", mem.String())
	}
	if _, err := ReservedAllocatable(capacity, map[string]string{"memory": "lots"}, nil); err == nil {
		t.Error("a bad quantity must be an error")
	}
}

type fakeDevices struct {
	capacity, allocatable v1.ResourceList
	deleted               []string
}

func (f fakeDevices) Capacity() (v1.ResourceList, v1.ResourceList, []string) {
	return f.capacity, f.allocatable, f.deleted
}

// Device plugin resources join capacity, with only their healthy devices
// allocatable; a resource dropped for good is reported at zero.
func TestSetResourcesWithDevices(t *testing.T) {
	c := &Controller{
		capacity:    v1.ResourceList{v1.ResourceCPU: resource.MustParse("4")},
		allocatable: v1.ResourceList{v1.ResourceCPU: resource.MustParse("3")},
		devices: fakeDevices{
			capacity:    v1.ResourceList{"example.com/gpu": resource.MustParse("2")},
			allocatable: v1.ResourceList{"example.com/gpu": resource.MustParse("1")},
			deleted:     []string{"example.com/gone"},
		},
	}
	st := &v1.NodeStatus{Capacity: v1.ResourceList{"example.com/gone": resource.MustParse("3"), "example.com/other": resource.MustParse("5")}}
	c.setResources(st)
	for name, want := range map[v1.ResourceName][2]int64{
		v1.ResourceCPU: {4, 3}, "example.com/gpu": {2, 1}, "example.com/gone": {0, 0}, "example.com/other": {5, 5},
	} {
		gotC, gotA := st.Capacity[name], st.Allocatable[name]
		if gotC.Value() != want[0] || gotA.Value() != want[1] {
			t.Errorf("%s: capacity %s allocatable %s, want %d/%d", name, gotC.String(), gotA.String(), want[0], want[1])
		}
	}
}
