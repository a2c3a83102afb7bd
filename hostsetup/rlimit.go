package agent

import (
	"context"
	"syscall"

	"k8s.io/klog/v2"
)

// noFileLimiter sets the process's open-file limit; a fake in tests, so they
// do not change the test process's own limit.
type noFileLimiter interface {
	SetNoFile(n uint64) error
}

// processNoFile is the real RLIMIT_NOFILE of this process. syscall.Setrlimit
// (not x/sys) so Go also hands the new limit to the processes it starts.
type processNoFile struct{}

func (processNoFile) SetNoFile(n uint64) error {
	return syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n})
}

// applyMaxOpenFiles sets maxOpenFiles as both the soft and hard RLIMIT_NOFILE,
// as upstream at start. As upstream, a failure (no CAP_SYS_RESOURCE, above
// fs.nr_open) is logged and the start goes on.
func applyMaxOpenFiles(ctx context.Context, maxOpenFiles int64, l noFileLimiter) {
	logger := klog.FromContext(ctx)
	if maxOpenFiles <= 0 {
		return // defaulting makes 0 the upstream 1000000; never set a limit of 0
	}
	if err := l.SetNoFile(uint64(maxOpenFiles)); err != nil {
		logger.Error(err, "Failed to set rlimit on max file handles", "maxOpenFiles", maxOpenFiles)
		return
	}
	logger.V(2).Info("Set the open file limit", "maxOpenFiles", maxOpenFiles)
}
