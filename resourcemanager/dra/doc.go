// Package dra is nodelet's Dynamic Resource Allocation manager, upstream's
// kubelet DRA manager (GA): DRA drivers register through the plugin
// registration directory (type DRAPlugin, service v1.DRAPlugin of
// k8s.io/kubelet/pkg/apis/dra/v1); for each pod with spec.resourceClaims the
// allocated and reserved ResourceClaims are prepared with
// NodePrepareResources before the sandbox is created, the CDI device IDs the
// drivers return go into the CRI config of the containers naming the claims,
// and the claims are unprepared with NodeUnprepareResources once no pod on
// the node uses them. Prepared claims are kept in <root>/dra_manager_state,
// upstream's checkpoint, so a restart knows what to unprepare.
package dra
