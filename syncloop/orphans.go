package syncloop

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/internal/mountutil"
)

// orphanFacts are what decides whether a pod directory under <root>/pods may
// be torn down (volumes unmounted, directory removed).
type orphanFacts struct {
	sourcesReady bool // every pod source delivered its first snapshot
	listed       bool // a relist listed the runtime successfully at least once
	wanted       bool // a source holds the pod, or a worker still handles it
	inListing    bool // the last successful listing has a sandbox or container of the pod
}

// mayCleanOrphan says whether an orphaned pod's directory may go now, and if
// not, why. Until the sources are ready a wanted pod looks orphaned; until
// the runtime was listed once a running pod looks gone (a runtime slow at
// start), so its volumes would be unmounted under its containers. Upstream's
// sync loop likewise waits for the PLEG's first successful relist, and its
// cleanupOrphanedPodDirs keeps the directories of pods the runtime runs.
// A pod in the listing is left to its kill (housekeeping gives it a worker),
// which tears its volumes down once its containers stopped.
func mayCleanOrphan(f orphanFacts) (bool, string) {
	switch {
	case !f.sourcesReady:
		return false, "pod sources not ready"
	case !f.listed:
		return false, "runtime not listed successfully yet"
	case f.wanted:
		return false, "pod wanted"
	case f.inListing:
		return false, "pod has a sandbox or container in the runtime"
	}
	return true, ""
}

// removeOrphanedPodDir removes the directory of a pod nobody wants, never
// crossing a mount point: what nodelet mounted is already gone (the volumes
// were torn down), so anything still mounted belongs to someone else (a CSI
// driver, an earlier kubelet) and keeps the directory, with the reason logged.
func removeOrphanedPodDir(ctx context.Context, podDir string, uid types.UID) {
	logger := klog.FromContext(ctx)
	kept, err := mountutil.RemoveAll(podDir)
	if err != nil {
		logger.Error(err, "Removing orphaned pod directory", "podUID", uid)
	}
	if len(kept) > 0 {
		logger.Error(orphanKeptError(podDir, uid, kept), "Keeping orphaned pod directory", "podUID", uid, "mounted", kept)
	}
}

// orphanKeptError says why an orphaned pod directory stays, in upstream's
// words where upstream has them.
func orphanKeptError(podDir string, uid types.UID, kept []string) error {
	what := "mount points"
	for _, p := range kept {
		rel, err := filepath.Rel(podDir, p)
		if err != nil {
			continue
		}
		switch first, _, _ := strings.Cut(rel, string(filepath.Separator)); first {
		case "volume-subpaths":
			return fmt.Errorf("orphaned pod %q found, but volume subpaths are still present on disk", uid)
		case "volumes":
			what = "volume paths"
		}
	}
	return fmt.Errorf("orphaned pod %q found, but %s are still present on disk", uid, what)
}
