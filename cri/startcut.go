package cri

import (
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Reasons containerd gives a container that ended without running its process
// (internal/cri/server: errorStartReason, unknownExitReason).
const (
	reasonStartError = "StartError"
	reasonUnknown    = "Unknown"
)

// startCutMarks are what containerd puts in a StartError's message when the
// start was cut off from outside: the caller went away (a nodelet killed or
// restarted mid-call cancels the gRPC request) or the shim connection died with
// the runtime. A start refused for the container's own reasons (no such
// executable, a bad mount) says something else.
var startCutMarks = []string{"context canceled", "ttrpc: closed", "transport is closing"}

// StartWasCut reports whether runtime container c never ran its process because
// its start was cut off, not because of anything in the container: left CREATED
// (the caller stopped between CreateContainer and StartContainer), or EXITED
// without ever starting with containerd's StartError for a cancelled call or its
// Unknown for a start the restarted runtime lost, or UNKNOWN with that reason and no
// start time (the runtime lost the status of its creation). Such an attempt is no restart
// of the container: the agent replaces it and reuses its attempt number, so a
// pod started across a crash of nodelet or the runtime ends with one container
// and restart count 0, as if nothing had happened.
func StartWasCut(c *runtimeapi.ContainerStatus) bool {
	switch c.GetState() {
	case runtimeapi.ContainerState_CONTAINER_CREATED:
		return true
	case runtimeapi.ContainerState_CONTAINER_UNKNOWN:
		// containerd killed inside CreateContainer: restarted, it finds the container
		// without the status its creation writes and reports it UNKNOWN with its
		// Unknown reason and no start time (ContainerStatus fills the creation time
		// from the container's metadata; a task found running would have a start
		// time). Removing it stops it first: containerd force-stops UNKNOWN
		// containers on removal.
		return c.GetStartedAt() == 0 && c.GetReason() == reasonUnknown
	case runtimeapi.ContainerState_CONTAINER_EXITED:
	default:
		return false
	}
	if c.GetStartedAt() != 0 {
		return false // it ran: whatever ended it is the container's own history
	}
	switch c.GetReason() {
	case reasonUnknown:
		return true
	case reasonStartError:
		msg := c.GetMessage()
		for _, m := range startCutMarks {
			if strings.Contains(msg, m) {
				return true
			}
		}
	}
	return false
}
