// Package hostsetup is what nodelet sets up on the host and on its own process
// before it runs pods, as upstream's kubelet does at start and k3s keeps in
// pkg/agent/syssetup: the swap and cgroup version checks, the kernel tunables
// (protectKernelDefaults), nodelet's OOM score and open-file limit, and two
// things kept in place while nodelet runs: the iptables util chains
// (makeIPTablesUtilChains) and the placement of processes in kubeletCgroups
// and systemCgroups. The agent decides when; this package does the host's side.
package hostsetup
