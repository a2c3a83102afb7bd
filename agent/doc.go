// Package agent assembles nodelet's parts from its options and runs them until
// the context ends. Stopping nodelet never stops pods: the next start adopts
// them.
//
// It is the wiring and nothing else. A build phase makes every part fully
// wired before anything runs (the cycles between parts are broken by the state
// built first; see build). A run phase runs each part's blocking Run and stops
// them stage by stage: the pod intake first, then the sync loop and its pod
// workers, then the status manager, then the rest; then it closes the clients
// and connections.
//
// Around the parts it serves /healthz, tells systemd it is ready (sd_notify),
// asks the runtime's health (CRI Status) every 5 s for the node status, reads
// RuntimeClasses with an informer for podruntime, and has hostsetup prepare
// the host before pods run.
package agent
