// Package resourcestate is what the CPU and memory managers share about their
// checkpointed assignments: the decision at start (Restore.Run) between a
// checkpoint, a fresh state and a refusal, and the list of a pod's assigned
// containers (Containers).
//
// At start a checkpoint is restored; a missing one gives a fresh state; under
// a policy without assignments (none) a corrupt one is set aside; one that
// does not fit the machine or is of another policy stops the start with
// upstream's message (drain the node, delete the file).
package resourcestate

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/internal/atomicfile"
)

// Restore is one manager's start: its checkpoint and how to judge it.
type Restore[S any] struct {
	// What names the manager in messages ("CPU manager").
	What string
	// Path is the checkpoint file.
	Path string
	// Read returns the checkpoint's state, ok=false when there is none.
	Read func() (s S, ok bool, err error)
	// Corrupt is the error Read wraps for a checkpoint that does not decode.
	Corrupt error
	// Assigns: the policy holds assignments (static); nil Validate and
	// Initial otherwise.
	Assigns bool
	// Validate checks a restored state against the machine.
	Validate func(S) error
	// Initial is the state without a checkpoint; Empty that of a policy
	// that assigns nothing.
	Initial, Empty func() S
}

// Run decides the state to start with, as upstream: a checkpoint that does
// not fit the machine (or of another policy) stops the start, the operator
// drains the node and removes the file; under a policy that assigns nothing
// a corrupt checkpoint loses nothing, so it is set aside and the node
// starts. restored says the state came from the checkpoint.
func (r Restore[S]) Run(now time.Time) (s S, restored bool, err error) {
	s, ok, err := r.Read()
	if errors.Is(err, r.Corrupt) && !r.Assigns {
		aside, serr := atomicfile.SetAside(r.Path, now)
		klog.ErrorS(err, "Ignoring a corrupt checkpoint of a policy without assignments", "manager", r.What, "path", r.Path, "setAsideTo", aside, "setAsideErr", serr)
		ok, err = false, nil
	}
	if err == nil && ok && r.Assigns {
		err = r.Validate(s)
	}
	if err != nil {
		var zero S
		return zero, false, fmt.Errorf("could not restore state from checkpoint: %w, please drain this node and delete the %s checkpoint file %q before restarting nodelet", err, r.What, r.Path)
	}
	switch {
	case ok:
		return s, true, nil
	case r.Assigns:
		return r.Initial(), false, nil
	default:
		return r.Empty(), false, nil
	}
}

// Containers are the containers of podUID in assignments (pod UID →
// container name → assignment), sorted.
func Containers[T any](assignments map[string]map[string]T, podUID string) []string {
	out := make([]string, 0, len(assignments[podUID]))
	for name := range assignments[podUID] {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}
