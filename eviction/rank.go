package eviction

import (
	"cmp"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/internal/podutil"
)

// Candidate is a ranked pod with the reasoning that placed it there.
type Candidate struct {
	Pod      *v1.Pod
	Stats    *PodStats // nil when the pod has no stats
	Usage    resource.Quantity
	Request  resource.Quantity
	Critical bool
	Why      string
}

func (c Candidate) exceeds() bool      { return c.Stats == nil || c.Usage.Cmp(c.Request) > 0 }
func (c Candidate) overRequest() int64 { return c.Usage.Value() - c.Request.Value() }

func statsByUID(stats Stats) map[string]*PodStats {
	m := map[string]*PodStats{}
	for i := range stats.Pods {
		if p := stats.Pods[i].Pod; p != nil {
			m[string(p.UID)] = &stats.Pods[i]
		}
	}
	return m
}

func candidates(pods []*v1.Pod, stats Stats, usage func(*PodStats) (uint64, bool), req func(*v1.Pod) resource.Quantity, format resource.Format) []Candidate {
	byUID := statsByUID(stats)
	out := make([]Candidate, 0, len(pods))
	for _, p := range pods {
		c := Candidate{Pod: p, Request: req(p), Critical: podutil.IsCriticalPod(p)}
		if ps, ok := byUID[string(p.UID)]; ok {
			if u, ok := usage(ps); ok {
				c.Stats = ps
				c.Usage = *resource.NewQuantity(int64(u), format)
			}
		}
		out = append(out, c)
	}
	return out
}

func cmpBoolFirst(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	}
	return 1
}

// rankBy sorts stably: critical pods last, then by the usage-aware comparator.
func rankBy(cs []Candidate, less func(a, b Candidate) int) {
	slices.SortStableFunc(cs, func(a, b Candidate) int {
		if r := cmpBoolFirst(!a.Critical, !b.Critical); r != 0 {
			return r
		}
		return less(a, b)
	})
}

func usageRequestRank(a, b Candidate) int {
	// Pods without stats first, as upstream.
	if r := cmpBoolFirst(a.Stats == nil, b.Stats == nil); r != 0 {
		return r
	}
	if r := cmpBoolFirst(a.exceeds(), b.exceeds()); r != 0 {
		return r
	}
	if r := cmp.Compare(podutil.Priority(a.Pod), podutil.Priority(b.Pod)); r != 0 {
		return r
	}
	// More usage above request first.
	return cmp.Compare(b.overRequest(), a.overRequest())
}

func describe(c Candidate, what string) string {
	if c.Critical {
		return "critical pod (static, mirror or system priority): never evicted"
	}
	if c.Stats == nil {
		return fmt.Sprintf("no %s stats (ranked first, as upstream); priority %d", what, podutil.Priority(c.Pod))
	}
	rel := "within"
	if c.exceeds() {
		rel = "exceeds"
	}
	over, dir := c.overRequest(), "above"
	if over < 0 {
		over, dir = -over, "below"
	}
	return fmt.Sprintf("%s usage %s %s request %s; priority %d; %s %s request",
		what, c.Usage.String(), rel, c.Request.String(), podutil.Priority(c.Pod), resource.NewQuantity(over, c.Usage.Format).String(), dir)
}

// RankForMemory orders pods for memory pressure: pods whose working set
// exceeds their memory request first, then lower priority, then larger usage
// above request. Critical pods come last and are marked.
func RankForMemory(pods []*v1.Pod, stats Stats) []Candidate {
	cs := candidates(pods, stats, func(ps *PodStats) (uint64, bool) {
		if ps.MemoryWorkingSet == nil {
			return 0, false
		}
		return *ps.MemoryWorkingSet, true
	}, func(p *v1.Pod) resource.Quantity { return podutil.PodRequests(p)[v1.ResourceMemory] }, resource.BinarySI)
	rankBy(cs, usageRequestRank)
	for i := range cs {
		cs[i].Why = describe(cs[i], "memory")
	}
	return cs
}

// fsParts selects which of a pod's disk usage counts toward a signal.
type fsParts struct{ root, logs, volumes bool }

// diskParts follows upstream: without a dedicated imagefs everything is on
// nodefs; with one, nodefs holds logs and volumes and imagefs the writable
// layers; with a split containerfs the writable layers are back on nodefs.
func diskParts(sig Signal, stats Stats) fsParts {
	switch {
	case !stats.HasDedicatedImageFs():
		return fsParts{root: true, logs: true, volumes: true}
	case stats.SplitContainerFs():
		if sig == SignalImageFsAvailable || sig == SignalImageFsInodesFree {
			return fsParts{root: true}
		}
		return fsParts{root: true, logs: true, volumes: true}
	case sig == SignalImageFsAvailable || sig == SignalImageFsInodesFree ||
		sig == SignalContainerFsAvailable || sig == SignalContainerFsInodesFree:
		return fsParts{root: true}
	default:
		return fsParts{logs: true, volumes: true}
	}
}

func diskUsage(ps *PodStats, parts fsParts, inodes bool) (uint64, bool) {
	var total uint64
	found := false
	add := func(v *uint64) {
		if v != nil {
			total += *v
			found = true
		}
	}
	if parts.volumes {
		if inodes {
			add(ps.LocalVolumeInodes)
		} else {
			add(ps.LocalVolumeUsedBytes)
		}
	}
	for _, c := range ps.Containers {
		if parts.root {
			if inodes {
				add(c.RootfsInodes)
			} else {
				add(c.RootfsUsedBytes)
			}
		}
		if parts.logs {
			if inodes {
				add(c.LogsInodes)
			} else {
				add(c.LogsUsedBytes)
			}
		}
	}
	return total, found
}

// RankForDisk orders pods for a disk signal: pods whose disk usage (the
// parts on the signal's filesystem) exceeds their ephemeral-storage request
// first, then lower priority, then larger usage above request. For inode
// signals usage is inodes and there is no request, so every measured pod
// "exceeds". Critical pods come last.
func RankForDisk(sig Signal, pods []*v1.Pod, stats Stats) []Candidate {
	inodes := signalResource(sig) == resourceInodes
	parts := diskParts(sig, stats)
	req := func(p *v1.Pod) resource.Quantity {
		if inodes {
			return resource.Quantity{}
		}
		return podutil.PodRequests(p)[v1.ResourceEphemeralStorage]
	}
	format := resource.BinarySI
	what := "disk"
	if inodes {
		format, what = resource.DecimalSI, "inode"
	}
	cs := candidates(pods, stats, func(ps *PodStats) (uint64, bool) { return diskUsage(ps, parts, inodes) }, req, format)
	rankBy(cs, usageRequestRank)
	for i := range cs {
		cs[i].Why = describe(cs[i], what)
	}
	return cs
}

// RankForPID orders pods for PID pressure: lower priority first, then more
// processes first. Critical pods come last.
func RankForPID(pods []*v1.Pod, stats Stats) []Candidate {
	cs := candidates(pods, stats, func(ps *PodStats) (uint64, bool) {
		if ps.Processes == nil {
			return 0, false
		}
		return *ps.Processes, true
	}, func(*v1.Pod) resource.Quantity { return resource.Quantity{} }, resource.DecimalSI)
	rankBy(cs, func(a, b Candidate) int {
		if r := cmp.Compare(podutil.Priority(a.Pod), podutil.Priority(b.Pod)); r != 0 {
			return r
		}
		return cmp.Compare(b.Usage.Value(), a.Usage.Value())
	})
	for i := range cs {
		c := &cs[i]
		switch {
		case c.Critical:
			c.Why = describe(*c, "pid")
		case c.Stats == nil:
			c.Why = fmt.Sprintf("priority %d; no process count", podutil.Priority(c.Pod))
		default:
			c.Why = fmt.Sprintf("priority %d; %d processes", podutil.Priority(c.Pod), c.Usage.Value())
		}
	}
	return cs
}

// Rank dispatches to the ranking for sig.
func Rank(sig Signal, pods []*v1.Pod, stats Stats) []Candidate {
	switch signalResource(sig) {
	case v1.ResourceMemory:
		return RankForMemory(pods, stats)
	case resourcePIDs:
		return RankForPID(pods, stats)
	default:
		return RankForDisk(sig, pods, stats)
	}
}
