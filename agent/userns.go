package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/nodelet/nodelet/userns"
)

// usernsCleanupPeriod is how often the ranges of pods whose directory the sync
// loop removed (orphans) are freed; a removed pod's range is freed at once.
const usernsCleanupPeriod = time.Minute

// newUserNamespaces sets up the user namespace manager: the kubelet user's
// subordinate IDs (or the default mapping), userNamespaces.idsPerPod (resolved;
// validated a positive multiple of 65536 below 2^32), maxPods, and the ranges
// of the pods already on disk.
func newUserNamespaces(ctx context.Context, idsPerPod64 int64, maxPods int32, rootDir string, handlers userns.Handlers) (*userns.Manager, error) {
	idsPerPod := uint32(idsPerPod64)
	first, length, err := userns.KubeletMappings(userns.OSHost(), idsPerPod)
	if err != nil {
		return nil, fmt.Errorf("setting up user namespaces: kubelet mappings: %w", err)
	}
	m, err := userns.Open(ctx, userns.Options{
		PodsDir: podsDir(rootDir), First: first, Length: length, IDsPerPod: idsPerPod,
		MaxPods: int(maxPods), Handlers: handlers,
	})
	if err != nil {
		return nil, fmt.Errorf("setting up user namespaces: %w", err)
	}
	return m, nil
}
