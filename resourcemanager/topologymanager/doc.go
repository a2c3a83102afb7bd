// Package topologymanager is the kubelet's topology manager
// (topologyManagerPolicy, topologyManagerScope, topologyManagerPolicyOptions):
// NUMA bitmasks, topology hints, the hint merge of the none, best-effort,
// restricted and single-numa-node policies (with prefer-closest-numa-nodes,
// using the sysfs NUMA distances, and max-allowable-numa-nodes), the container
// and pod scopes, and a thin Manager that admits pods by asking its hint
// providers (the CPU, memory and device managers) for hints, remembering the
// chosen affinity and letting each provider allocate along it.
//
// The merge (Merge) is a pure function over the providers' hints and the
// machine's NUMA nodes; the Manager only locks and calls the providers. A pod
// no policy can place is refused with upstream's TopologyAffinityError
// (AffinityError); what a provider allocated for a refused pod is given back
// through Releaser.
package topologymanager
