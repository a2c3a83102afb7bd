package userns

import (
	"errors"
	"fmt"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
)

// KubeletUser is the account whose subordinate IDs (/etc/subuid, /etc/subgid,
// read through getsubids) the upstream kubelet gives to pods.
const KubeletUser = "kubelet"

// Host is how KubeletMappings looks at the machine: the kubelet user, the
// getsubids tool and its output. OSHost is the real one.
type Host struct {
	// UserExists reports whether the account exists.
	UserExists func(name string) (bool, error)
	// LookPath finds an executable (exec.LookPath).
	LookPath func(file string) (string, error)
	// Output runs a command and returns its standard output.
	Output func(name string, args ...string) ([]byte, error)
}

// OSHost looks up users with os/user, finds getsubids in PATH and runs it.
func OSHost() Host {
	return Host{
		UserExists: func(name string) (bool, error) {
			_, err := user.Lookup(name)
			var unknown user.UnknownUserError
			if errors.As(err, &unknown) {
				return false, nil
			}
			return err == nil, err
		},
		LookPath: exec.LookPath,
		Output:   func(name string, args ...string) ([]byte, error) { return exec.Command(name, args...).Output() },
	}
}

// DefaultMapping is the kubelet's mapping when the kubelet user has no
// subordinate IDs: every ID from idsPerPod up (the first range is never
// given, so host ID 0 is never mapped), cut to a multiple of idsPerPod. For
// the default 65536 it is upstream's 65536 and 2^32-65536.
func DefaultMapping(idsPerPod uint32) (first, length uint32) {
	if idsPerPod == 0 {
		return 0, 0
	}
	first = idsPerPod
	return first, uint32((1<<32 - uint64(first)) / uint64(idsPerPod) * uint64(idsPerPod))
}

// KubeletMappings returns the host IDs pods may be given, as the upstream
// kubelet finds them: without a "kubelet" user, or without the getsubids tool,
// the default mapping; otherwise the one range getsubids prints for the user,
// which must be the same for user and group IDs.
func KubeletMappings(h Host, idsPerPod uint32) (first, length uint32, err error) {
	first, length = DefaultMapping(idsPerPod)
	found, err := h.UserExists(KubeletUser)
	if err != nil {
		return 0, 0, fmt.Errorf("looking up user %q: %w", KubeletUser, err)
	}
	if !found {
		return first, length, nil
	}
	cmd, err := h.LookPath("getsubids")
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return first, length, nil
		}
		return 0, 0, fmt.Errorf("looking for getsubids: %w", err)
	}
	uids, err := h.Output(cmd, KubeletUser)
	if err != nil {
		return 0, 0, fmt.Errorf("error retrieving additional ids for user %q: %w", KubeletUser, err)
	}
	gids, err := h.Output(cmd, "-g", KubeletUser)
	if err != nil {
		return 0, 0, fmt.Errorf("error retrieving additional gids for user %q: %w", KubeletUser, err)
	}
	if string(uids) != string(gids) {
		return 0, 0, fmt.Errorf("mismatched subuids and subgids for user %q", KubeletUser)
	}
	return ParseGetSubIDs(string(uids))
}

// ParseGetSubIDs reads getsubids' output, which must be exactly one range:
// "0: kubelet 65536 2147483648" (index, user, first ID, count).
func ParseGetSubIDs(out string) (first, length uint32, err error) {
	lines := strings.Split(strings.Trim(out, "\n"), "\n")
	if len(lines) != 1 {
		return 0, 0, fmt.Errorf("error parsing line %q: it must contain only one line", out)
	}
	parts := strings.Fields(lines[0])
	if len(parts) != 4 {
		return 0, 0, fmt.Errorf("invalid line %q", out)
	}
	f, err := strconv.ParseUint(parts[2], 10, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("error parsing line %q: %w", out, err)
	}
	n, err := strconv.ParseUint(parts[3], 10, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("error parsing line %q: %w", out, err)
	}
	return uint32(f), uint32(n), nil
}
