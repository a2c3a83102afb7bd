// Package pleg is the pod lifecycle event generator: it relists the container
// runtime, keeps a per-pod status cache fresh, and emits lifecycle events.
//
// The generic PLEG relists every second (ListPodSandbox and ListContainers)
// and asks for statuses only for pods whose sandboxes or containers changed,
// whose status failed last time or for which a resize asked, so unchanged pods
// cost no CRI call. It also reports the PLEG's health.
//
// With the EventedPLEG gate the evented PLEG follows CRI GetContainerEvents
// (one stream, with back-off): statuses come from the events, with no per-pod
// status calls, and the relist becomes a 300 s safety net; after 5 failed
// streams it relists every second until a stream is established again. The
// pure decideEvent drops an event no newer than what the relist or an earlier
// event reported, so each change is sent once. While events are followed, the
// sync loop asks no relist after its syncs and kills (syncloop's
// Deps.EventsInUse); in generic mode and in the fallback it does.
package pleg
