package userns

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestNewAllocatorChecksTheMapping(t *testing.T) {
	const u = UnitLength
	cases := []struct {
		name                   string
		first, length, perPod  uint32
		maxPods                int
		wantErr                string
		wantRanges, wantOffset int
	}{
		{name: "default", first: u, length: 1<<32 - u, perPod: u, maxPods: 110, wantRanges: 65535, wantOffset: 1},
		{name: "subids of the kubelet user", first: 100 * u, length: 200 * u, perPod: u, maxPods: 110, wantRanges: 200, wantOffset: 100},
		{name: "two units per pod", first: 2 * u, length: 400 * u, perPod: 2 * u, maxPods: 110, wantRanges: 200, wantOffset: 1},
		{name: "idsPerPod not a unit multiple", first: u, length: 1000 * u, perPod: u + 1, maxPods: 1, wantErr: "is not a multiple of 65536"},
		{name: "idsPerPod zero", first: u, length: 1000 * u, perPod: 0, maxPods: 1, wantErr: "is not a multiple of 65536"},
		{name: "first not a multiple", first: 100000, length: 1000 * u, perPod: u, maxPods: 1, wantErr: "kubelet user assigned ID 100000 is not a multiple of 65536"},
		{name: "first maps host root", first: 0, length: 1000 * u, perPod: u, maxPods: 1, wantErr: "must be greater or equal to 65536"},
		{name: "length not a multiple", first: u, length: 1000*u + 5, perPod: u, maxPods: 1, wantErr: "length 65536005 is not a multiple of 65536"},
		{name: "too few for maxPods", first: u, length: 100 * u, perPod: u, maxPods: 110, wantErr: "kubelet user assigned IDs are not enough to support 110 pods"},
		{name: "up to the last ID", first: 1 << 31, length: 1 << 31, perPod: u, maxPods: 1, wantRanges: 32768, wantOffset: 32768},
		{name: "beyond 32 bits", first: 1 << 31, length: 1<<31 + u, perPod: u, maxPods: 1, wantErr: "beyond the 32-bit ID space"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, err := NewAllocator(tc.first, tc.length, tc.perPod, tc.maxPods)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(a.used) != tc.wantRanges || a.off != tc.wantOffset {
				t.Errorf("ranges %d offset %d, want %d and %d", len(a.used), a.off, tc.wantRanges, tc.wantOffset)
			}
		})
	}
}

func TestAllocatorAllocateRecordRelease(t *testing.T) {
	const u = UnitLength
	type step struct {
		op      string // allocate, record, release
		pod     types.UID
		start   int    // allocate: where the scan starts
		hostID  uint32 // record: the range; allocate: the wanted result
		length  uint32 // record
		wantErr string
	}
	cases := []struct {
		name  string
		steps []step
		want  map[types.UID]uint32
	}{
		{
			name: "scan starts where asked and skips used ranges",
			steps: []step{
				{op: "allocate", pod: "a", start: 1, hostID: 3 * u},
				{op: "allocate", pod: "b", start: 1, hostID: 4 * u},
				{op: "allocate", pod: "c", start: 0, hostID: 2 * u},
			},
			want: map[types.UID]uint32{"a": 3 * u, "b": 4 * u, "c": 2 * u},
		},
		{
			name: "a pod keeps its range",
			steps: []step{
				{op: "allocate", pod: "a", start: 2, hostID: 4 * u},
				{op: "allocate", pod: "a", start: 0, hostID: 4 * u},
			},
			want: map[types.UID]uint32{"a": 4 * u},
		},
		{
			name: "the scan wraps around, and a full allocator says so",
			steps: []step{
				{op: "allocate", pod: "a", start: 3, hostID: 5 * u},
				{op: "allocate", pod: "b", start: 3, hostID: 2 * u},
				{op: "allocate", pod: "c", start: 7, hostID: 3 * u},
				{op: "allocate", pod: "d", start: 0, hostID: 4 * u},
				{op: "allocate", pod: "e", start: 0, wantErr: "could not find an empty slot"},
			},
			want: map[types.UID]uint32{"a": 5 * u, "b": 2 * u, "c": 3 * u, "d": 4 * u},
		},
		{
			name: "a released range is given again",
			steps: []step{
				{op: "allocate", pod: "a", start: 0, hostID: 2 * u},
				{op: "release", pod: "a"},
				{op: "allocate", pod: "b", start: 0, hostID: 2 * u},
			},
			want: map[types.UID]uint32{"b": 2 * u},
		},
		{
			name: "recorded ranges are never given to another pod",
			steps: []step{
				{op: "record", pod: "a", hostID: 2 * u, length: u},
				{op: "record", pod: "a", hostID: 2 * u, length: u},
				{op: "allocate", pod: "b", start: 0, hostID: 3 * u},
				{op: "record", pod: "c", hostID: 3 * u, length: u, wantErr: `range picked for pod "c" already taken`},
				{op: "record", pod: "a", hostID: 4 * u, length: u, wantErr: `different user namespace range already used by pod "a"`},
				{op: "record", pod: "d", hostID: 4 * u, length: 2 * u, wantErr: "wrong user namespace length 131072"},
				{op: "record", pod: "d", hostID: 4*u + 1, length: u, wantErr: "wrong user namespace offset specified 262145"},
				{op: "record", pod: "d", hostID: 6 * u, length: u, wantErr: "id 393216 is out of range"},
				{op: "record", pod: "d", hostID: u, length: u, wantErr: "id 65536 is out of range"},
			},
			want: map[types.UID]uint32{"a": 2 * u, "b": 3 * u},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Four ranges: host IDs 2u..6u.
			a, err := NewAllocator(2*u, 4*u, u, 4)
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range tc.steps {
				var err error
				switch s.op {
				case "allocate":
					var got uint32
					got, err = a.Allocate(s.pod, s.start)
					if err == nil && got != s.hostID {
						t.Errorf("step %d: allocate %s = %d, want %d", i, s.pod, got, s.hostID)
					}
				case "record":
					err = a.Record(s.pod, s.hostID, s.length)
				case "release":
					if !a.Release(s.pod) {
						t.Errorf("step %d: release %s: had no range", i, s.pod)
					}
				}
				if s.wantErr == "" && err != nil {
					t.Fatalf("step %d (%s %s): %v", i, s.op, s.pod, err)
				}
				if s.wantErr != "" && (err == nil || !strings.Contains(err.Error(), s.wantErr)) {
					t.Fatalf("step %d (%s %s): err = %v, want %q", i, s.op, s.pod, err, s.wantErr)
				}
			}
			got := map[types.UID]uint32{}
			for _, uid := range a.Pods() {
				got[uid], _ = a.Allocated(uid)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("allocations %v, want %v", got, tc.want)
			}
			for uid, v := range tc.want {
				if got[uid] != v {
					t.Errorf("pod %s has %d, want %d", uid, got[uid], v)
				}
			}
		})
	}
}

func TestAllocatorRangesNeverOverlap(t *testing.T) {
	const u = UnitLength
	a, err := NewAllocator(u, 50*u, u, 50)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[uint32]types.UID{}
	for i := 0; i < 50; i++ {
		uid := types.UID(string(rune('A' + i)))
		id, err := a.Allocate(uid, i*7)
		if err != nil {
			t.Fatalf("pod %d: %v", i, err)
		}
		if id < u || id%u != 0 || uint64(id)+u > 51*u {
			t.Fatalf("pod %d got %d, outside the mapping or unaligned", i, id)
		}
		if other, ok := seen[id]; ok {
			t.Fatalf("range %d given to %s and %s", id, other, uid)
		}
		seen[id] = uid
	}
	if _, err := a.Allocate("extra", 0); err == nil {
		t.Fatal("a 51st pod got a range from a 50-range mapping")
	}
}
