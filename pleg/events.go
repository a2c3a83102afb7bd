package pleg

import (
	"maps"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/cri"
)

// This file holds the evented PLEG's decisions, pure functions of their
// inputs: what one runtime event means for the cache and the event channel,
// and when the event stream is given up for relisting.

// podRef names the pod a runtime event is about.
type podRef struct {
	uid             types.UID
	name, namespace string
}

// eventPodKind says whether a runtime event can be attributed to a pod.
type eventPodKind int

const (
	eventOfPod     eventPodKind = iota // the event names a pod of ours
	eventNotOurs                       // the sandbox lacks nodelet's pod UID label: ignored, as the relist does
	eventNoSandbox                     // no sandbox status: the pod is unknown, a relist finds out
)

// eventPod finds the pod of a runtime event from the sandbox status it
// carries, by the same labels the relist groups by.
func eventPod(ev *runtimeapi.ContainerEventResponse) (podRef, eventPodKind) {
	sb := ev.GetPodSandboxStatus()
	if sb == nil || sb.GetId() == "" {
		return podRef{}, eventNoSandbox
	}
	labels := sb.GetLabels()
	uid := types.UID(labels[cri.LabelPodUID])
	if uid == "" {
		return podRef{}, eventNotOurs
	}
	p := podRef{uid: uid, name: labels[cri.LabelPodName], namespace: labels[cri.LabelPodNamespace]}
	if p.name == "" {
		p.name, p.namespace = sb.GetMetadata().GetName(), sb.GetMetadata().GetNamespace()
	}
	return p, eventOfPod
}

// eventDecision is what one runtime event does.
type eventDecision struct {
	// drop says why the event changes nothing ("" when it does).
	drop string
	// at is the event's time (the runtime's CreatedAt).
	at time.Time
	// status is the pod's new cached status; nil leaves the cache alone
	// because it already holds a status taken after the event.
	status *PodStatus
	// forget: nothing of the pod is left; it leaves the cache and the records.
	forget bool
	// record is the pod's new record (states as of at); nil with forget.
	record *podSnapshot
	// events are the lifecycle events to send, at most one change per ID.
	events []*Event
}

// decideEvent decides what a runtime event about pod means, given the cached
// status (taken at cachedAt) and the pod's record: the state of each of its
// sandboxes and containers last reported on the event channel, known as of
// rec.asOf (rec is nil for a pod the PLEG does not know; listedAt is then the
// last successful listing, which did not show it).
//
// An event no newer than what is known is dropped: the relist or an earlier
// event already reported its change, and sending it would repeat (a
// duplicate) or undo (out of order) it. A newer event sends an event for
// each sandbox or container whose state differs from the record, so a change
// is sent once whether the relist or the stream sees it first. The cache
// takes the event's statuses only if the cached status is older than the
// event: a status from a listing taken after the event already shows it.
func decideEvent(ev *runtimeapi.ContainerEventResponse, pod podRef, cached *PodStatus, cachedAt time.Time, rec *podSnapshot, listedAt time.Time) eventDecision {
	at := time.Unix(0, ev.GetCreatedAt())
	known := listedAt
	if rec != nil {
		known = rec.asOf
	}
	if !at.After(known) {
		return eventDecision{drop: "not newer than the runtime state already known", at: at}
	}
	sb := ev.GetPodSandboxStatus()
	id := ev.GetContainerId()
	deleted := ev.GetContainerEventType() == runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT

	// The states the event shows, in the order events are sent: the sandbox
	// first, then the containers, as the relist does.
	var ids []string
	states := map[string]plegState{}
	see := func(oid string, s plegState) {
		if _, ok := states[oid]; !ok {
			ids = append(ids, oid)
		}
		states[oid] = s
	}
	see(sb.GetId(), sandboxState(sb.GetState()))
	for _, c := range ev.GetContainersStatuses() {
		if c.GetId() != "" {
			see(c.GetId(), containerState(c.GetState()))
		}
	}
	if deleted && id != "" {
		see(id, stateNonExistent)
	}

	next := &podSnapshot{uid: pod.uid, name: pod.name, namespace: pod.namespace, states: map[string]plegState{}, asOf: at}
	if rec != nil {
		next.sandboxes, next.containers = rec.sandboxes, rec.containers
		next.states = maps.Clone(rec.states)
		next.order = slices.Clone(rec.order)
	}
	var evs []*Event
	for _, oid := range ids {
		old, cur := rec.state(oid), states[oid]
		for _, e := range appendEvents(nil, pod.uid, oid, old, cur) {
			if e.Type != ContainerChanged {
				evs = append(evs, e)
			}
		}
		if cur == stateNonExistent {
			delete(next.states, oid)
			next.order = slices.DeleteFunc(next.order, func(x string) bool { return x == oid })
			continue
		}
		if _, ok := next.states[oid]; !ok {
			next.order = append(next.order, oid)
		}
		next.states[oid] = cur
	}
	d := eventDecision{at: at, record: next, events: evs}
	if at.After(cachedAt) {
		d.status = mergeEvent(cached, ev, pod)
		if len(d.status.Sandboxes) == 0 && len(d.status.Containers) == 0 {
			d.forget, d.record = true, nil
		}
	}
	return d
}

// mergeEvent is the pod's status after a runtime event: the cached status
// with the event's sandbox and container statuses in place of the cached
// ones of the same IDs (never a second copy of one container), without the
// object a DELETED event removes. Objects the event does not mention, such
// as the containers of an older sandbox, are kept.
func mergeEvent(cached *PodStatus, ev *runtimeapi.ContainerEventResponse, pod podRef) *PodStatus {
	sb := ev.GetPodSandboxStatus()
	removed := ""
	if ev.GetContainerEventType() == runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT {
		removed = ev.GetContainerId()
	}
	fresh := map[string]bool{}
	for _, c := range ev.GetContainersStatuses() {
		fresh[c.GetId()] = true
	}
	st := &PodStatus{UID: pod.uid, Name: pod.name, Namespace: pod.namespace}
	var oldIPs []string
	if cached != nil {
		oldIPs = cached.IPs
		for _, s := range cached.Sandboxes {
			if s.GetId() != sb.GetId() && s.GetId() != removed {
				st.Sandboxes = append(st.Sandboxes, s)
			}
		}
		for _, c := range cached.Containers {
			if !fresh[c.GetId()] && c.GetId() != removed {
				st.Containers = append(st.Containers, c)
			}
		}
	}
	if sb.GetId() != removed {
		st.Sandboxes = append(st.Sandboxes, sb)
	}
	for _, c := range ev.GetContainersStatuses() {
		if c.GetId() != removed {
			st.Containers = append(st.Containers, c)
		}
	}
	finishStatus(st, oldIPs)
	return st
}

// streamMode is whether the PLEG follows the event stream or relists.
type streamMode int

const (
	// modeEvented: the stream is followed; the relist is the safety net at
	// EventedRelistPeriod.
	modeEvented streamMode = iota
	// modeFallback: the stream failed repeatedly; relisting at
	// DefaultRelistPeriod, the stream retried in the background.
	modeFallback
)

func (m streamMode) String() string {
	if m == modeFallback {
		return "relisting"
	}
	return "evented"
}

// streamState is the event stream's standing across attempts.
type streamState struct {
	mode streamMode
	// failures counts the streams that ended since the last stable one.
	failures int
	// gaveUp: the runtime lacks the stream; it is not tried again.
	gaveUp bool
}

// streamPolicy bounds the retries of the event stream.
type streamPolicy struct {
	// maxFailures is how many streams may end in a row before falling back
	// (upstream's eventedPlegMaxStreamRetries).
	maxFailures int
	// stableAfter: a stream that stayed up this long was working; its end
	// starts the count of failures afresh.
	stableAfter time.Duration
	// backoffBase and backoffMax bound the wait before the next attempt.
	backoffBase, backoffMax time.Duration
}

// connected is the state once a stream is established: the evented PLEG is
// in use again. A stream that then ends at once still counts as a failure
// (see ended), so a flapping stream falls back again.
func (s streamState) connected() streamState {
	s.mode = modeEvented
	return s
}

// ended is the state after a stream ended with err having been up for
// uptime (0 if never established), and how long to wait before the next
// attempt. A runtime that does not implement the stream is not asked again.
func (s streamState) ended(p streamPolicy, err error, uptime time.Duration) (streamState, time.Duration) {
	if status.Code(err) == codes.Unimplemented {
		return streamState{mode: modeFallback, failures: s.failures + 1, gaveUp: true}, 0
	}
	if uptime >= p.stableAfter {
		s.failures = 0
	}
	s.failures++
	if s.failures >= p.maxFailures {
		s.mode = modeFallback
	}
	wait := p.backoffBase
	for i := 1; i < s.failures && wait < p.backoffMax; i++ {
		wait *= 2
	}
	return s, min(wait, p.backoffMax)
}
