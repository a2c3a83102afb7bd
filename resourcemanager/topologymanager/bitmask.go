package topologymanager

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// BitMask is a set of NUMA node IDs (0-63), as upstream's bitmask. The zero
// value is the empty mask, which a hint uses for "no NUMA preference".
type BitMask uint64

// NewBitMask returns the mask of the given NUMA nodes.
func NewBitMask(nodes ...int) (BitMask, error) {
	var m BitMask
	for _, n := range nodes {
		if n < 0 || n >= 64 {
			return 0, fmt.Errorf("making a NUMA bitmask: node %d out of range [0, 64)", n)
		}
		m |= 1 << uint(n)
	}
	return m, nil
}

// mustMask is NewBitMask for node IDs already known to be in range.
func mustMask(nodes ...int) BitMask {
	m, err := NewBitMask(nodes...)
	if err != nil {
		panic(err)
	}
	return m
}

// IsEmpty says no node is set.
func (m BitMask) IsEmpty() bool { return m == 0 }

// IsSet says node is in the mask.
func (m BitMask) IsSet(node int) bool { return node >= 0 && node < 64 && m&(1<<uint(node)) != 0 }

// AnySet says any of nodes is in the mask.
func (m BitMask) AnySet(nodes []int) bool {
	for _, n := range nodes {
		if m.IsSet(n) {
			return true
		}
	}
	return false
}

// Count is the number of nodes set.
func (m BitMask) Count() int { return bits.OnesCount64(uint64(m)) }

// Bits are the nodes set, ascending.
func (m BitMask) Bits() []int {
	var out []int
	for i := 0; i < 64; i++ {
		if m.IsSet(i) {
			out = append(out, i)
		}
	}
	return out
}

// IsLessThan compares masks as numbers, as upstream does to break ties:
// the mask with the lower-numbered nodes wins.
func (m BitMask) IsLessThan(o BitMask) bool { return m < o }

// IsNarrowerThan says m has fewer nodes than o, or as many and is less.
func (m BitMask) IsNarrowerThan(o BitMask) bool {
	if m.Count() == o.Count() {
		return m.IsLessThan(o)
	}
	return m.Count() < o.Count()
}

// String is the nodes as a comma-separated list ("0,1").
func (m BitMask) String() string {
	parts := make([]string, 0, m.Count())
	for _, b := range m.Bits() {
		parts = append(parts, strconv.Itoa(b))
	}
	return strings.Join(parts, ",")
}

// And intersects masks with first.
func And(first BitMask, masks ...BitMask) BitMask {
	for _, m := range masks {
		first &= m
	}
	return first
}

// Or unites masks.
func Or(masks ...BitMask) BitMask {
	var out BitMask
	for _, m := range masks {
		out |= m
	}
	return out
}

// IterateBitMasks calls f with every non-empty combination of nodes, the
// single nodes first, then pairs and so on, as upstream iterates.
func IterateBitMasks(nodes []int, f func(BitMask)) {
	var rec func(accum []int, from, size int)
	rec = func(accum []int, from, size int) {
		if len(accum) == size {
			f(mustMask(accum...))
			return
		}
		for i := from; i < len(nodes); i++ {
			rec(append(accum, nodes[i]), i+1, size)
		}
	}
	for size := 1; size <= len(nodes); size++ {
		rec(make([]int, 0, size), 0, size)
	}
}
