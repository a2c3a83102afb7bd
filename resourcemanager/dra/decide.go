package dra

import (
	"errors"
	"fmt"
	"slices"
	"sort"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
)

// podClaim is one of a pod's spec.resourceClaims resolved to its claim.
type podClaim struct {
	name      string // the entry's name in spec.resourceClaims
	claimName string // the ResourceClaim's name
	// mustCheckOwner: the claim came from a template, so it must be owned
	// by the pod (upstream's resourceclaim.IsForPod).
	mustCheckOwner bool
}

// podClaims resolves the pod's spec.resourceClaims to ResourceClaim names:
// resourceClaimName as written, a template's claim from
// status.resourceClaimStatuses. A template claim without a status entry is
// not created yet: the pod waits (the error, upstream's
// resourceclaim.ErrClaimNotFound). An entry whose status names no claim
// needs none and is left out.
func podClaims(pod *v1.Pod) ([]podClaim, error) {
	var out []podClaim
	for i := range pod.Spec.ResourceClaims {
		pc := &pod.Spec.ResourceClaims[i]
		name, check, err := resourceclaim.Name(pod, pc)
		if err != nil {
			return nil, err
		}
		if name == nil {
			continue
		}
		out = append(out, podClaim{name: pc.Name, claimName: *name, mustCheckOwner: check})
	}
	return out, nil
}

// checkClaim decides whether pod may use claim now, in upstream's wording:
// owned by the pod when it came from a template, reserved for the pod, and
// allocated.
func checkClaim(pod *v1.Pod, pc podClaim, claim *resourceapi.ResourceClaim) error {
	if pc.mustCheckOwner {
		if err := resourceclaim.IsForPod(pod, claim, false); err != nil {
			return err
		}
	}
	if !resourceclaim.IsReservedForPod(pod, claim, false) {
		return fmt.Errorf("pod %s (%s) is not allowed to use ResourceClaim %s (%s)", pod.Name, pod.UID, pc.claimName, claim.UID)
	}
	if claim.Status.Allocation == nil {
		return fmt.Errorf("ResourceClaim %s: %w", claim.Name, errors.New("not allocated"))
	}
	return nil
}

// newClaimState is the state of an allocated claim before preparation: its
// drivers, each with the node operations all of its results skip (as
// upstream: a driver is skipped only when every one of its results says so).
func newClaimState(claim *resourceapi.ResourceClaim) ClaimState {
	results := map[string]int{}
	skips := map[string]map[resourceapi.SkipNodeOperation]int{}
	for _, r := range claim.Status.Allocation.Devices.Results {
		results[r.Driver]++
		if skips[r.Driver] == nil {
			skips[r.Driver] = map[resourceapi.SkipNodeOperation]int{}
		}
		if slices.Contains(r.SkipNodeOperations, resourceapi.SkipNodeOperationAll) {
			skips[r.Driver][resourceapi.SkipNodeOperationAll]++
			continue
		}
		for _, op := range r.SkipNodeOperations {
			skips[r.Driver][op]++
		}
	}
	drivers := map[string]DriverState{}
	for d, n := range results {
		var ds DriverState
		for _, op := range []resourceapi.SkipNodeOperation{resourceapi.SkipNodeOperationNodePrepareResources, resourceapi.SkipNodeOperationNodeUnprepareResources} {
			if skips[d][op]+skips[d][resourceapi.SkipNodeOperationAll] == n {
				ds.SkipNodeOperations = append(ds.SkipNodeOperations, op)
			}
		}
		drivers[d] = ds
	}
	return ClaimState{ClaimUID: claim.UID, ClaimName: claim.Name, Namespace: claim.Namespace,
		PodUIDs: map[string]struct{}{}, DriverState: drivers}
}

// driversFor lists the drivers of a claim that op is called on, sorted.
func driversFor(s ClaimState, op resourceapi.SkipNodeOperation) []string {
	var out []string
	for d, ds := range s.DriverState {
		if !ds.skips(op) {
			out = append(out, d)
		}
	}
	sort.Strings(out)
	return out
}

// containerCDIDevices is the CDI device IDs of container c of pod, from
// the prepared claims (looked up by claim name in the pod's namespace): each
// resources.claims entry gives the devices of its request, or all of the
// claim's when it names none; a device without request names serves every
// request (upstream's cdiDevicesAsList). Drivers are taken in name order. A
// claim the container names that is not prepared is an error: the container
// would start without its devices.
func containerCDIDevices(pod *v1.Pod, c *v1.Container, lookup func(claimName string) (ClaimState, bool)) ([]string, error) {
	if len(c.Resources.Claims) == 0 {
		return nil, nil
	}
	var out []string
	for _, rc := range c.Resources.Claims {
		var pc *v1.PodResourceClaim
		for i := range pod.Spec.ResourceClaims {
			if pod.Spec.ResourceClaims[i].Name == rc.Name {
				pc = &pod.Spec.ResourceClaims[i]
				break
			}
		}
		if pc == nil {
			return nil, fmt.Errorf("container %s references resource claim %q, which is not in the pod's spec.resourceClaims", c.Name, rc.Name)
		}
		name, _, err := resourceclaim.Name(pod, pc)
		if err != nil {
			return nil, err
		}
		if name == nil {
			continue
		}
		s, ok := lookup(*name)
		if !ok {
			return nil, fmt.Errorf("internal error: unable to get claim info for ResourceClaim %s in namespace %s", *name, pod.Namespace)
		}
		drivers := make([]string, 0, len(s.DriverState))
		for d := range s.DriverState {
			drivers = append(drivers, d)
		}
		sort.Strings(drivers)
		for _, d := range drivers {
			for _, dev := range s.DriverState[d].Devices {
				if rc.Request == "" || len(dev.RequestNames) == 0 || slices.Contains(dev.RequestNames, rc.Request) {
					out = append(out, dev.CDIDeviceIDs...)
				}
			}
		}
	}
	return out, nil
}

// unprepareDecision is what ending pod's use of its claims does.
type unprepareDecision struct {
	// unprepare are the claims only this pod used: NodeUnprepareResources,
	// then out of the checkpoint.
	unprepare []string
	// detach are the claims other pods still use: the pod leaves them.
	detach []string
}

// decideUnprepare decides, for the claims (by name) of the pod with uid,
// which are unprepared and which only lose the pod. Claims not in the state,
// or not used by this pod, are left alone: a pod that never got its claims
// prepared must not unprepare another pod's.
func decideUnprepare(uid types.UID, claimNames []string, lookup func(claimName string) (ClaimState, bool)) unprepareDecision {
	var d unprepareDecision
	seen := map[string]bool{}
	for _, n := range claimNames {
		if seen[n] {
			continue
		}
		seen[n] = true
		s, ok := lookup(n)
		if !ok {
			continue
		}
		if _, ok := s.PodUIDs[string(uid)]; !ok {
			continue
		}
		if len(s.PodUIDs) > 1 {
			d.detach = append(d.detach, n)
		} else {
			d.unprepare = append(d.unprepare, n)
		}
	}
	return d
}
