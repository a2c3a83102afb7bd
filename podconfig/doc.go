// Package podconfig merges the node's pod sources (the API server, static pod
// files and the static pod URL) into one stream of de-duplicated updates, and
// keeps the API server's mirror pods for static pods in line with those static
// pods.
//
//   - The API server source watches the pods with field selector
//     spec.nodeName.
//   - The file source reads every non-hidden regular file of at most 10 MiB in
//     staticPodPath, each a Pod or a PodList; the directory is watched with
//     fsnotify and re-read every fileCheckFrequency as a backstop.
//   - The HTTP source polls staticPodURL (with staticPodURLHeader) every
//     httpCheckFrequency and keeps the last good set on errors.
//
// A static pod the upstream kubelet left running (a ready sandbox of the same
// name, source, config hash, labels and annotations, its containers the
// manifest's by name and upstream container hash) keeps the kubelet's UID,
// decided by the pure AdoptedStaticPodUID from the runtime's listing at the
// source's first read. It is derived again at every start (nothing is
// persisted), so the pod and its mirror pod are adopted without a restart.
package podconfig
