package cri

import (
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestStartWasCut(t *testing.T) {
	const (
		created = runtimeapi.ContainerState_CONTAINER_CREATED
		running = runtimeapi.ContainerState_CONTAINER_RUNNING
		exited  = runtimeapi.ContainerState_CONTAINER_EXITED
		unknown = runtimeapi.ContainerState_CONTAINER_UNKNOWN
	)
	for _, tc := range []struct {
		name      string
		state     runtimeapi.ContainerState
		createdAt int64
		startedAt int64
		reason    string
		message   string
		want      bool
	}{
		{name: "created, never started", state: created, want: true},
		{name: "running", state: running, startedAt: 1},
		{name: "unknown state of a container created and started", state: unknown, createdAt: 1, startedAt: 2, reason: "Unknown"},
		{name: "unknown state, found running by the restarted runtime", state: unknown, createdAt: 1, startedAt: 2},
		{name: "unknown state after an error loading a created container", state: unknown, createdAt: 1},
		{name: "creation's status lost by a restarted runtime", state: unknown, createdAt: 1, reason: "Unknown", want: true},
		{name: "start cancelled by the caller going away", state: exited, reason: "StartError",
			message: "failed to create containerd task: failed to create shim task: context canceled", want: true},
		{name: "shim connection lost with the runtime", state: exited, reason: "StartError",
			message: "failed to start containerd task \"abc\": ttrpc: closed", want: true},
		{name: "start lost by a restarted runtime", state: exited, reason: "Unknown", want: true},
		{name: "no such executable is the container's own failure", state: exited, reason: "StartError",
			message: `failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: exec: "nope": executable file not found in $PATH`},
		{name: "ran and was cancelled later", state: exited, startedAt: 5, reason: "StartError", message: "context canceled"},
		{name: "ran and the runtime lost it", state: exited, startedAt: 5, reason: "Unknown"},
		{name: "exited with an error", state: exited, startedAt: 5, reason: "Error"},
		{name: "never started, other reason", state: exited, reason: "Error", message: "context canceled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &runtimeapi.ContainerStatus{State: tc.state, CreatedAt: tc.createdAt, StartedAt: tc.startedAt, Reason: tc.reason, Message: tc.message}
			if got := StartWasCut(c); got != tc.want {
				t.Errorf("StartWasCut = %v, want %v", got, tc.want)
			}
		})
	}
}
