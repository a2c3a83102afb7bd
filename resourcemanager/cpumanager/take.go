package cpumanager

import (
	"fmt"
	"slices"

	"k8s.io/utils/cpuset"
)

// takeByTopology picks n CPUs from avail the way upstream's packed
// allocation does: whole first-level units (NUMA nodes when a socket holds
// several, else sockets), then whole second-level units, then whole cores,
// then single threads; fragmented units are used before intact ones so
// larger free units stay whole. With fullCores only wholly free cores are
// taken.
func takeByTopology(t *Topology, avail cpuset.CPUSet, n int, fullCores bool) (cpuset.CPUSet, error) {
	if n > avail.Size() {
		return cpuset.New(), fmt.Errorf("not enough cpus available to satisfy request: requested=%d, available=%d", n, avail.Size())
	}
	if n <= 0 {
		return cpuset.New(), nil
	}
	a := &accumulator{t: t, avail: avail, result: cpuset.New(), left: n}
	levels := []func(CPUInfo) int{socketOf, numaOf}
	if t.NumNUMANodes > t.NumSockets {
		levels = []func(CPUInfo) int{numaOf, socketOf}
	}
	for _, key := range levels {
		a.takeWhole(key)
	}
	a.takeWhole(coreOf)
	if !fullCores {
		for _, cpu := range a.packedOrder() {
			if a.left == 0 {
				break
			}
			a.take(cpuset.New(cpu))
		}
	}
	if a.left != 0 {
		return cpuset.New(), fmt.Errorf("not enough cpus available to satisfy request: requested=%d, available=%d", n, avail.Size())
	}
	return a.result, nil
}

type accumulator struct {
	t      *Topology
	avail  cpuset.CPUSet
	result cpuset.CPUSet
	left   int
}

func (a *accumulator) take(s cpuset.CPUSet) {
	a.result = a.result.Union(s)
	a.avail = a.avail.Difference(s)
	a.left -= s.Size()
}

// takeWhole takes units (by key) whose every CPU is free while they fit,
// those in the sockets and NUMA nodes with the fewest free CPUs first.
func (a *accumulator) takeWhole(key func(CPUInfo) int) {
	ids := a.t.ids(a.avail, key)
	freeAround := func(id int) (socketFree, numaFree int) {
		info := a.t.CPUDetails[a.t.cpusOf(key, id).List()[0]]
		return a.t.cpusOf(socketOf, info.SocketID).Intersection(a.avail).Size(),
			a.t.cpusOf(numaOf, info.NUMANodeID).Intersection(a.avail).Size()
	}
	slices.SortStableFunc(ids, func(x, y int) int {
		sx, nx := freeAround(x)
		sy, ny := freeAround(y)
		if sx != sy {
			return sx - sy
		}
		if nx != ny {
			return nx - ny
		}
		return x - y
	})
	for _, id := range ids {
		unit := a.t.cpusOf(key, id)
		if a.left == 0 {
			return
		}
		if unit.Size() <= a.left && unit.IsSubsetOf(a.avail) {
			a.take(unit)
		}
	}
}

// packedOrder lists the free CPUs socket by socket and core by core, the
// sockets and cores with the fewest free CPUs first, so single threads fill
// partly used cores before breaking whole ones.
func (a *accumulator) packedOrder() []int {
	freeIn := func(key func(CPUInfo) int, id int) int {
		return a.t.cpusOf(key, id).Intersection(a.avail).Size()
	}
	byFree := func(key func(CPUInfo) int) func(x, y int) int {
		return func(x, y int) int {
			if d := freeIn(key, x) - freeIn(key, y); d != 0 {
				return d
			}
			return x - y
		}
	}
	var out []int
	sockets := a.t.ids(a.avail, socketOf)
	slices.SortStableFunc(sockets, byFree(socketOf))
	for _, s := range sockets {
		inSocket := a.avail.Intersection(a.t.cpusOf(socketOf, s))
		cores := a.t.ids(inSocket, coreOf)
		slices.SortStableFunc(cores, byFree(coreOf))
		for _, c := range cores {
			out = append(out, inSocket.Intersection(a.t.cpusOf(coreOf, c)).List()...)
		}
	}
	return out
}

// takeDistributedAcrossNUMA implements distribute-cpus-across-numa: a
// request that fits one NUMA node is packed as usual; a larger one is split
// evenly (in groups of groupSize CPUs) over the fewest NUMA nodes that can
// hold the split, nodes with the most free CPUs first.
func takeDistributedAcrossNUMA(t *Topology, avail cpuset.CPUSet, n, groupSize int, fullCores bool) (cpuset.CPUSet, error) {
	nodes := t.ids(avail, numaOf)
	free := func(node int) cpuset.CPUSet { return avail.Intersection(t.cpusOf(numaOf, node)) }
	for _, node := range nodes {
		if free(node).Size() >= n {
			return takeByTopology(t, avail, n, fullCores)
		}
	}
	slices.SortStableFunc(nodes, func(x, y int) int {
		if d := free(y).Size() - free(x).Size(); d != 0 {
			return d
		}
		return x - y
	})
	if groupSize < 1 {
		groupSize = 1
	}
	for k := 2; k <= len(nodes); k++ {
		chosen := nodes[:k]
		groups := n / groupSize
		shares := make([]int, k)
		for i := range shares {
			shares[i] = (groups / k) * groupSize
			if i < groups%k {
				shares[i] += groupSize
			}
		}
		shares[k-1] += n - groups*groupSize // a remainder below groupSize
		result, ok := cpuset.New(), true
		for i, node := range chosen {
			got, err := takeByTopology(t, free(node), shares[i], fullCores)
			if err != nil {
				ok = false
				break
			}
			result = result.Union(got)
		}
		if ok {
			return result, nil
		}
	}
	return cpuset.New(), fmt.Errorf("not enough cpus available to satisfy request: requested=%d, available=%d", n, avail.Size())
}
