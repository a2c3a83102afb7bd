package agent

import (
	"context"
	"fmt"
	"time"

	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/userns"
)

// usernsCleanupPeriod is how often the ranges of pods whose directory the sync
// loop removed (orphans) are freed; a removed pod's range is freed at once.
const usernsCleanupPeriod = time.Minute

// newUserNamespaces sets up the user namespace manager: the kubelet user's
// subordinate IDs (or the default mapping), userNamespaces.idsPerPod, maxPods,
// and the ranges of the pods already on disk.
func newUserNamespaces(ctx context.Context, kc *kubeletconfigv1beta1.KubeletConfiguration, rootDir string, handlers userns.Handlers) (*userns.Manager, error) {
	idsPerPod := uint32(userns.UnitLength)
	if kc.UserNamespaces != nil {
		// Validated: a positive multiple of 65536 below 2^32.
		idsPerPod = uint32(ptr.Deref(kc.UserNamespaces.IDsPerPod, userns.UnitLength))
	}
	first, length, err := userns.KubeletMappings(userns.OSHost(), idsPerPod)
	if err != nil {
		return nil, fmt.Errorf("setting up user namespaces: kubelet mappings: %w", err)
	}
	m, err := userns.Open(ctx, userns.Options{
		PodsDir: podsDir(rootDir), First: first, Length: length, IDsPerPod: idsPerPod,
		MaxPods: int(kc.MaxPods), Handlers: handlers,
	})
	if err != nil {
		return nil, fmt.Errorf("setting up user namespaces: %w", err)
	}
	return m, nil
}
