// Package cri is nodelet's client for the Container Runtime Interface (CRI v1)
// over a unix socket. The gRPC calls, their timeouts and the answer checks
// are k8s.io/cri-client's (NewRemoteRuntimeServiceBuilder,
// NewRemoteImageServiceBuilder), the client the kubelet and crictl use;
// Client is a thin layer over it that keeps what nodelet adds:
//
//   - the kubelet_runtime_operations_{total,errors_total,duration_seconds}
//     metrics by operation_type (metrics.go), which cri-client does not
//     record (upstream records them in a wrapper of its own in
//     k8s.io/kubernetes, which nodelet does not import);
//   - every error wrapped with what was being done ("stopping container
//     <id>: ..."), keeping the gRPC status reachable for IsNotFound, Code
//     and status.FromError;
//   - the endpoint checks New makes before dialling: only unix sockets, an
//     absolute path, a socket that exists ("is containerd running?"), and an
//     operator's wording for a runtime that does not speak CRI v1 (cri-client
//     checks only that Version answers; Client also refuses a runtime whose
//     RuntimeApiVersion is not v1);
//   - ExecSync's non-zero exit as *ExitError (cri-client's is
//     k8s.io/utils/exec.CodeExitError), and a cut exec call carrying a gRPC
//     DeadlineExceeded status beside cri-client's ErrCommandTimedOut, which
//     replaces the status (the prober and the server look for the code);
//   - StopContainer clamping a negative grace period to 0;
//   - tracing only when a tracer provider is given: Client passes an
//     explicit nil provider to cri-client otherwise, which installs no gRPC
//     stats handler (cri-client's default installs one with a no-op provider).
//
// StartWasCut (startcut.go) and the label keys (labels.go) are nodelet's
// reading of containerd's answers and need no client.
//
// What changed by using cri-client, on purpose (upstream is the reference):
// CheckpointContainer's deadline is the larger of the request timeout and
// options.Timeout (nodelet used options.Timeout alone); a PullImage error
// with gRPC code Unknown comes back as its message only; the image service
// is checked with ImageFsInfo and has a connection of its own even on the
// runtime's socket, as the kubelet's; failed calls are logged by cri-client
// at error level; and GetContainerEvents sends each event without watching
// ctx, so its caller reads the channel until the call returns (pleg's
// Evented does). The gRPC client's OpenTelemetry metrics now go to the
// global meter provider, which nodelet never sets (a no-op).
//
// Cost, measured: go build ./cmd/nodelet (linux/amd64, go1.26.8) grew from
// 103555026 to 103683300 bytes (+125 KiB, +0.12%); cri-client adds
// logreduction, k8s.io/utils/exec and its endpoint parsing to what was linked.
package cri
