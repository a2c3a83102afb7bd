package devicemanager

import (
	"fmt"
	"sort"
)

// Need is what the allocation decision knows of one container's request for
// one device resource: the node's devices and who holds them.
type Need struct {
	Resource string
	// Count is the container's limit for the resource.
	Count int
	// Registered: a plugin advertised the resource (it has an entry, even empty).
	Registered bool
	// Assigned are the devices the container already holds (from the checkpoint).
	Assigned []string
	// Healthy are the resource's healthy devices.
	Healthy []string
	// InUse are the devices held by any container of an active pod.
	InUse []string
	// Reusable are devices this pod's finished init containers held, which
	// upstream hands to the pod's later containers first.
	Reusable []string
}

// Plan is a decision before the plugin's preference is asked for.
type Plan struct {
	// Done: nothing to allocate (already assigned, or none asked for).
	Done bool
	// Chosen are the devices picked from Reusable; they stay in the result.
	Chosen []string
	// Available are the free healthy devices the rest comes from, sorted.
	Available []string
	// Size is how many devices the container gets in total.
	Size int
}

// Decide plans the devices a container gets for one resource, as upstream's
// devicesToAllocate: a container already holding devices must ask for as many
// as before; devices its pod's init containers left are reused first; the rest
// must be free and healthy. The errors carry upstream's wording, which ends up
// in the pod's admission message.
func Decide(n Need) (Plan, error) {
	if len(n.Assigned) > 0 {
		if len(n.Assigned) != n.Count {
			return Plan{}, fmt.Errorf("container changed request for resource %q from %d to %d", n.Resource, len(n.Assigned), n.Count)
		}
		return Plan{Done: true}, nil
	}
	if n.Count == 0 {
		return Plan{Done: true}, nil
	}
	if !n.Registered {
		return Plan{}, fmt.Errorf("can't allocate unregistered device %s", n.Resource)
	}
	p := Plan{Size: n.Count}
	for _, d := range sorted(n.Reusable) {
		if len(p.Chosen) == n.Count {
			break
		}
		p.Chosen = append(p.Chosen, d)
	}
	if len(p.Chosen) == n.Count {
		p.Done = true
		return p, nil
	}
	inUse := setOf(n.InUse)
	for _, d := range sorted(n.Healthy) {
		if !inUse[d] {
			p.Available = append(p.Available, d)
		}
	}
	if need := n.Count - len(p.Chosen); len(p.Available) < need {
		return Plan{}, fmt.Errorf("requested number of devices unavailable for %s. Requested: %d, Available: %d", n.Resource, need, len(p.Available))
	}
	return p, nil
}

// NeedsPreference says whether the plugin gets a say: upstream asks only when
// there is a choice left to make.
func (p Plan) NeedsPreference() bool {
	return !p.Done && len(p.Available) > p.Size-len(p.Chosen)
}

// Complete finishes a plan with the plugin's preferred devices (nil when it
// was not asked): the reused ones, then the preferred ones that are free,
// then the free ones in order, as upstream falls back when a plugin prefers
// too few or unknown devices.
func Complete(p Plan, preferred []string) []string {
	if p.Size == 0 {
		return nil
	}
	out := append([]string(nil), p.Chosen...)
	taken := setOf(out)
	free := setOf(p.Available)
	add := func(ds []string) {
		for _, d := range ds {
			if len(out) == p.Size {
				return
			}
			if free[d] && !taken[d] {
				taken[d] = true
				out = append(out, d)
			}
		}
	}
	add(preferred)
	add(p.Available)
	return out
}

// ContainerKind is how a container's devices pass to the pod's later containers.
type ContainerKind int

const (
	// AppContainer keeps its devices for its life.
	AppContainer ContainerKind = iota
	// InitContainer ends before the next starts: its devices are reusable.
	InitContainer
	// SidecarContainer (a restartable init container) runs beside the app
	// containers and keeps its devices.
	SidecarContainer
)

// NextReusable is the pod's reusable devices of a resource once a container
// of kind got devices, as upstream: an init container's devices become
// reusable, other containers' leave the pool.
func NextReusable(reusable, got []string, kind ContainerKind) []string {
	set := setOf(reusable)
	for _, d := range got {
		if kind == InitContainer {
			set[d] = true
		} else {
			delete(set, d)
		}
	}
	out := make([]string, 0, len(set))
	for d := range set {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

func setOf(ds []string) map[string]bool {
	m := make(map[string]bool, len(ds))
	for _, d := range ds {
		m[d] = true
	}
	return m
}

func sorted(ds []string) []string {
	out := append([]string(nil), ds...)
	sort.Strings(out)
	return out
}
