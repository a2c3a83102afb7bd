// Package dra is nodelet's Dynamic Resource Allocation manager, upstream's
// kubelet DRA manager (GA): DRA drivers register through the plugin
// registration directory (type DRAPlugin, service v1.DRAPlugin of
// k8s.io/kubelet/pkg/apis/dra/v1); for each pod with spec.resourceClaims the
// allocated and reserved ResourceClaims are prepared with NodePrepareResources
// before the sandbox is created, the CDI device IDs the drivers return go into
// the CRI config of the containers naming the claims, and the claims are
// unprepared with NodeUnprepareResources once no pod on the node uses them.
// Prepared claims are kept in <root>/dra_manager_state, upstream's checkpoint
// (CRC-32 checksummed JSON), so a restart knows what to unprepare.
//
// Plugins is the plugin watcher's DRAPlugin handler (pluginmanager): the
// v1.DRAPlugin service is required, there is one connection per endpoint, and
// the latest registration of a driver serves. Manager.PrepareResources
// resolves the pod's claims with
// k8s.io/dynamic-resource-allocation/resourceclaim, reads them from
// resource.k8s.io/v1, checks they are allocated and reserved for the pod, and
// records the pod in the checkpoint before calling each driver; ApplyDevices
// puts the CDI device IDs of the claims a container names into CDIDevices;
// UnprepareResources runs after the containers stopped.
//
// The decisions are pure functions (podClaims, checkClaim, newClaimState,
// containerCDIDevices, decideUnprepare, checkResults); the Manager gathers the
// claims and calls the drivers.
package dra
