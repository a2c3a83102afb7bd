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
